//! `--python` (and `--via pip`): installed distributions of one
//! interpreter that declare `Provides-Extra: device-<group>` get the
//! extras the local targets need, installed with `python -m pip`. The
//! distribution's RECORD says which `.kpm` manifests it installed.

use std::path::PathBuf;

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::{NameKind, Naming};
use serde::Deserialize;

use super::{checked, manifest_groups, passthrough, DevicePackage, PmError, PmPlan};

/// Lists distributions with `device-*` extras and the manifests they own.
const LIST_SCRIPT: &str = r#"
import json, os
from importlib import metadata
out = []
for d in metadata.distributions():
    extras = [e for e in (d.metadata.get_all('Provides-Extra') or []) if e.startswith('device-')]
    if not extras:
        continue
    kpms = [os.path.abspath(str(d.locate_file(f))) for f in (d.files or []) if str(f).endswith('.kpm')]
    out.append({'name': d.metadata.get('Name') or '', 'version': d.version or '', 'extras': extras, 'kpms': sorted(kpms)})
out.sort(key=lambda x: x['name'].lower())
print(json.dumps(out))
"#;

/// An installed distribution declaring device extras.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Distribution {
    /// Distribution name as in METADATA.
    pub name: String,
    /// Installed version.
    pub version: String,
    /// Its `device-*` extras.
    pub extras: Vec<String>,
    /// Absolute paths of the `.kpm` manifests its RECORD lists.
    pub kpms: Vec<PathBuf>,
}

/// How pip is driven.
#[derive(Debug, Clone)]
pub struct Pip {
    /// The interpreter (`python3`, a venv's `bin/python`).
    pub python: String,
    /// `--index-url` for pip, if any.
    pub index_url: Option<String>,
    /// Extra arguments after `pip install`.
    pub extra: Vec<String>,
}

impl Pip {
    /// The installed distributions that declare `device-*` extras.
    pub fn distributions(&self) -> Result<Vec<Distribution>, PmError> {
        let mut c = crate::python::command(&self.python);
        c.args(["-c", LIST_SCRIPT]);
        let text = checked(&mut c)?;
        serde_json::from_str(text.trim()).map_err(|e| PmError::Output {
            tool: self.python.clone(),
            detail: e.to_string(),
        })
    }

    /// Builds the plan: one `dist[device-a,device-b]==version` per
    /// distribution whose manifests need device code here.
    pub fn plan(&self, targets: &[TargetId], naming: &Naming) -> Result<PmPlan, PmError> {
        let mut plan = PmPlan {
            tool: format!("{} -m pip", self.python),
            ..PmPlan::default()
        };
        for dist in self.distributions()? {
            let mut wanted: Vec<DevicePackage> = Vec::new();
            for kpm in &dist.kpms {
                let manifest = match Manifest::read(kpm) {
                    Ok(m) => m,
                    Err(e) => {
                        plan.warnings.push(format!("{}: {e}", kpm.display()));
                        continue;
                    }
                };
                for (group, group_targets) in
                    manifest_groups(&manifest, &dist.name, targets, &mut plan.warnings)
                {
                    let extra = naming.render(NameKind::WheelExtra, &dist.name, Some(&group));
                    if !dist.extras.contains(&extra) {
                        plan.warnings.push(format!(
                            "{} does not declare the extra {extra} (for {})",
                            dist.name,
                            group_targets.join(", ")
                        ));
                        continue;
                    }
                    if !wanted.iter().any(|w| w.group == group) {
                        wanted.push(DevicePackage {
                            name: extra,
                            generic: dist.name.clone(),
                            component: manifest.component.clone(),
                            group,
                            targets: group_targets,
                        });
                    }
                }
            }
            if wanted.is_empty() {
                continue;
            }
            let extras: Vec<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
            let requirement = format!("{}[{}]=={}", dist.name, extras.join(","), dist.version);
            for mut w in wanted {
                w.name = requirement.clone();
                plan.packages.push(w);
            }
        }
        Ok(plan)
    }

    /// Runs `python -I -m pip install` for the plan's requirements, from
    /// `/` ([`crate::python::command`]).
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        let mut c = crate::python::command(&self.python);
        c.args(["-m", "pip", "install", "--disable-pip-version-check"]);
        if let Some(url) = &self.index_url {
            c.args(["--index-url", url]);
        }
        c.args(&self.extra).args(plan.names());
        passthrough(&mut c)
    }
}
