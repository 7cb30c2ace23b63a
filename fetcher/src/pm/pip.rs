//! `--python` (and `--via pip`): installed distributions of one
//! interpreter that declare `Provides-Extra: device-<group>` get the
//! extras the local targets need, installed with `python -m pip`.
//!
//! Two rules pick the extras:
//! - our split distributions: their RECORD lists `.kpm` manifests, and the
//!   manifests say which device groups the local targets need;
//! - distributions without a `.kpm` (AMD's `rocm`, `torch`, `torchvision`
//!   from its multi-arch releases): one `device-<target>` extra per local
//!   processor, the target as AMD's detector maps it
//!   ([`rocm_kpack_pkgspec::amd::device_target_of`]). Which device
//!   distributions an extra brings is read from the base's
//!   `Requires-Dist: <dist>; extra == "device-<target>"` (the prefix differs
//!   from the base's name: `torch` brings `amd-torch-device-gfx942`), so
//!   `status` can name what is missing and `prune` what no GPU here needs.

use std::path::PathBuf;

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::amd::{device_extra, device_target_of, target_of_extra};
use rocm_kpack_pkgspec::{NameKind, Naming};
use serde::{Deserialize, Serialize};

use super::{checked, manifest_groups, passthrough, DevicePackage, PmError, PmPlan};

/// Lists every installed distribution (PEP 503 name, version, bytes its
/// RECORD lists) and, for those with `device-*` extras, the manifests they
/// own and the distributions each device extra requires. Names and extras
/// are normalized (PEP 503 / PEP 685) here, once.
const LIST_SCRIPT: &str = r#"
import json, os, re
from importlib import metadata
def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()
EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")
NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
out, installed, seen = [], [], set()
for d in metadata.distributions():
    name = d.metadata.get('Name') or ''
    if not name or norm(name) in seen:
        continue
    seen.add(norm(name))
    files = d.files or []
    size = sum(f.size for f in files if isinstance(f.size, int))
    installed.append({'name': norm(name), 'version': d.version or '', 'size': size})
    extras = sorted({norm(e) for e in (d.metadata.get_all('Provides-Extra') or []) if norm(e).startswith('device-')})
    if not extras:
        continue
    requires = []
    for r in d.requires or []:
        req, _, marker = r.partition(';')
        m, n = EXTRA.search(marker), NAME.match(req)
        if m and n and norm(m.group(1)) in extras and norm(n.group(1)) != norm(name):
            requires.append([norm(m.group(1)), norm(n.group(1))])
    kpms = [os.path.abspath(str(d.locate_file(f))) for f in files if str(f).endswith('.kpm')]
    out.append({'name': name, 'version': d.version or '', 'extras': extras, 'kpms': sorted(kpms), 'requires': sorted(requires)})
out.sort(key=lambda x: x['name'].lower())
installed.sort(key=lambda x: x['name'])
print(json.dumps({'distributions': out, 'installed': installed}))
"#;

/// An installed distribution declaring device extras.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Distribution {
    /// Distribution name as in METADATA.
    pub name: String,
    /// Installed version.
    pub version: String,
    /// Its `device-*` extras (PEP 685 normalized).
    pub extras: Vec<String>,
    /// Absolute paths of the `.kpm` manifests its RECORD lists.
    pub kpms: Vec<PathBuf>,
    /// (device extra, PEP 503 name of another distribution it requires).
    #[serde(default)]
    pub requires: Vec<(String, String)>,
}

impl Distribution {
    /// The distributions the extra `extra` requires (the listing leaves
    /// out the distribution itself, which `device-all` may re-enter with
    /// the per-target extras).
    pub fn device_dists(&self, extra: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (e, d) in &self.requires {
            if e == extra && !out.contains(&d.as_str()) {
                out.push(d);
            }
        }
        out
    }
}

/// One installed distribution.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct Installed {
    /// PEP 503 name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Bytes of the files its RECORD lists with a size.
    pub size: u64,
}

/// What the interpreter has installed.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Listing {
    /// Distributions that declare `device-*` extras.
    pub distributions: Vec<Distribution>,
    /// Every installed distribution, by PEP 503 name.
    pub installed: Vec<Installed>,
}

impl Listing {
    /// The installed distribution called `name` (PEP 503 name).
    pub fn get(&self, name: &str) -> Option<&Installed> {
        self.installed.iter().find(|i| i.name == name)
    }
}

/// A name in its PEP 503 / PEP 685 normal form (`Device_GFX942` ->
/// `device-gfx942`), as the listing script writes names and extras.
pub fn normalize_extra(name: &str) -> String {
    name.split(['-', '_', '.'])
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
        .to_lowercase()
}

/// The device targets (as in `device-<target>` extras) of the local
/// targets, each with the local targets it serves, in order.
pub fn device_targets(targets: &[TargetId]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in targets {
        let Some(dt) = device_target_of(t.processor()) else {
            continue;
        };
        let local = t.to_string();
        match out.iter_mut().find(|(d, _)| d == dt) {
            Some((_, ts)) => {
                if !ts.contains(&local) {
                    ts.push(local);
                }
            }
            None => out.push((dt.to_string(), vec![local])),
        }
    }
    out
}

/// The extras a distribution without `.kpm` needs for the local targets:
/// `device-<target>` for each (as [`DevicePackage`]s named by the extra).
/// A target the distribution has no extra for becomes a warning that says
/// it publishes no device code for it.
pub fn native_extras(
    dist: &Distribution,
    targets: &[TargetId],
    warnings: &mut Vec<String>,
) -> Vec<DevicePackage> {
    let mut out = Vec::new();
    for (dt, local) in device_targets(targets) {
        let extra = device_extra(&dt);
        if dist.extras.contains(&extra) {
            out.push(DevicePackage {
                name: extra,
                generic: dist.name.clone(),
                component: dist.name.clone(),
                group: dt,
                targets: local,
            });
        } else {
            warnings.push(format!(
                "{} publishes no device code for {} (it declares no extra {extra})",
                dist.name,
                local.join(", ")
            ));
        }
    }
    out
}

/// A device distribution of a base without `.kpm`, judged against the
/// local targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeDevice {
    /// The base distribution (`torch`).
    pub base: String,
    /// The extra (`device-gfx942`).
    pub extra: String,
    /// The device target of the extra.
    pub target: String,
    /// The device distribution (`amd-torch-device-gfx942`, PEP 503 name).
    pub dist: String,
    /// Installed version, if installed.
    pub installed: Option<String>,
    /// Bytes its RECORD lists (0 when not installed).
    pub size: u64,
    /// Local targets it serves (empty: no GPU here needs it).
    pub local: Vec<String>,
}

/// Every device distribution the `device-<target>` extras of the
/// distributions without `.kpm` name, with whether it is installed and
/// which local targets it serves. Bases with `.kpm` keep their own rule.
pub fn native_devices(listing: &Listing, targets: &[TargetId]) -> Vec<NativeDevice> {
    extra_devices(listing, targets, |d| d.kpms.is_empty())
}

/// [`native_devices`] for the bases `include` picks: `prune` takes every
/// base, since our per-target split wheels have the same shape as AMD's
/// (a `device-<target>` extra requiring `<dist>-device-<target>`).
pub fn extra_devices(
    listing: &Listing,
    targets: &[TargetId],
    include: impl Fn(&Distribution) -> bool,
) -> Vec<NativeDevice> {
    let local = device_targets(targets);
    let mut out = Vec::new();
    for dist in listing.distributions.iter().filter(|d| include(d)) {
        for extra in &dist.extras {
            let Some(target) = target_of_extra(extra) else {
                continue;
            };
            let serves = local
                .iter()
                .find(|(dt, _)| dt == target)
                .map(|(_, ts)| ts.clone())
                .unwrap_or_default();
            for dev in dist.device_dists(extra) {
                let installed = listing.get(dev);
                out.push(NativeDevice {
                    base: dist.name.clone(),
                    extra: extra.clone(),
                    target: target.to_string(),
                    dist: dev.to_string(),
                    installed: installed.map(|i| i.version.clone()),
                    size: installed.map_or(0, |i| i.size),
                    local: serves.clone(),
                });
            }
        }
    }
    out
}

/// `prune --via pip`: the installed device distributions of every base
/// with `device-<target>` extras (AMD's and our split wheels) that serve no
/// kept target ([`prune_candidates`]),
/// removed with `python -I -m pip uninstall -y`. pip never checks a
/// base's extras (`pip check` ignores them), so the base stays consistent.
impl crate::ops::prune::PruneBackend for Pip {
    fn name(&self) -> &'static str {
        "pip"
    }

    fn plan(
        &self,
        ctx: &crate::ops::prune::PruneContext,
    ) -> anyhow::Result<crate::ops::prune::BackendPlan> {
        use crate::ops::prune::{BackendPlan, PruneItem, PruneKind};
        let listing = self.listing()?;
        let gone = prune_candidates(
            &extra_devices(&listing, ctx.keep, |_| true),
            &ctx.kept_device_targets(),
        );
        let mut plan = BackendPlan::new(self.name());
        for d in &gone {
            plan.items.push(PruneItem {
                kind: PruneKind::Package,
                name: d.dist.clone(),
                targets: vec![d.target.clone()],
                bytes: d.size,
                reason: format!(
                    "{}[{}] serves none of {}",
                    d.base,
                    d.extra,
                    ctx.keep_label()
                ),
                removal: None,
            });
        }
        if !gone.is_empty() {
            let names: Vec<&str> = gone.iter().map(|d| d.dist.as_str()).collect();
            plan.command = Some(format!(
                "{} -m pip uninstall -y {}",
                self.python,
                names.join(" ")
            ));
        }
        Ok(plan)
    }

    fn apply(
        &self,
        _ctx: &crate::ops::prune::PruneContext,
        plan: &crate::ops::prune::BackendPlan,
    ) -> anyhow::Result<crate::ops::prune::Applied> {
        let names: Vec<&str> = plan.items.iter().map(|i| i.name.as_str()).collect();
        let mut c = crate::python::command(&self.python);
        // pip's messages go to stderr: stdout is the report (`--json`).
        c.args([
            "-m",
            "pip",
            "uninstall",
            "--disable-pip-version-check",
            "-y",
        ])
        .args(&names)
        .stdout(std::process::Stdio::from(std::io::stderr()));
        passthrough(&mut c)?;
        Ok(crate::ops::prune::Applied {
            removed: names.iter().map(|n| format!("pip: {n}")).collect(),
            notes: Vec::new(),
        })
    }
}

/// What `status` and `doctor` say about the device distributions of the
/// bases without `.kpm`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NativeStatus {
    /// Device distributions a local target needs and pip has not
    /// installed (the base declares the target's extra).
    pub missing: Vec<NativeDevice>,
    /// Installed device distributions no local target needs.
    pub unneeded: Vec<NativeDevice>,
    /// Local targets a base has no extra for.
    pub warnings: Vec<String>,
}

impl NativeStatus {
    /// The status of `python`'s distributions (`None`: no interpreter is
    /// configured, or it cannot list them, which the manifest scan of the
    /// same interpreter already reports).
    pub fn of_python(python: Option<&str>, targets: &[TargetId]) -> Option<NativeStatus> {
        let pip = Pip {
            python: python?.to_string(),
            index_url: None,
            extra: Vec::new(),
        };
        match pip.listing() {
            Ok(l) => Some(NativeStatus::of(&l, targets)),
            Err(e) => {
                tracing::debug!("pip device distributions: {e}");
                None
            }
        }
    }

    /// From a listing, for the local targets.
    pub fn of(listing: &Listing, targets: &[TargetId]) -> NativeStatus {
        let mut out = NativeStatus::default();
        let devices = native_devices(listing, targets);
        for d in &devices {
            if !d.local.is_empty() && d.installed.is_none() && !out.missing.contains(d) {
                out.missing.push(d.clone());
            }
        }
        out.unneeded = prune_candidates(&devices, &[]);
        for dist in listing.distributions.iter().filter(|d| d.kpms.is_empty()) {
            native_extras(dist, targets, &mut out.warnings);
        }
        out
    }
}

/// The installed device distributions that serve no local target and no
/// target of `keep` (device targets), through any extra: a distribution
/// that a kept extra also requires stays. One entry per distribution.
pub fn prune_candidates(devices: &[NativeDevice], keep: &[String]) -> Vec<NativeDevice> {
    let kept = |d: &NativeDevice| !d.local.is_empty() || keep.contains(&d.target);
    let mut out: Vec<NativeDevice> = Vec::new();
    for d in devices.iter().filter(|d| d.installed.is_some()) {
        let needed = devices.iter().any(|o| o.dist == d.dist && kept(o));
        if !needed && !out.iter().any(|o| o.dist == d.dist) {
            out.push(d.clone());
        }
    }
    out
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
    /// What the interpreter has installed.
    pub fn listing(&self) -> Result<Listing, PmError> {
        let mut c = crate::python::command(&self.python);
        c.args(["-c", LIST_SCRIPT]);
        let text = checked(&mut c)?;
        serde_json::from_str(text.trim()).map_err(|e| PmError::Output {
            tool: self.python.clone(),
            detail: e.to_string(),
        })
    }

    /// Builds the plan: one `dist[device-a,device-b]==version` per
    /// distribution that needs device code here (its manifests say which
    /// groups; without a manifest, one `device-<target>` per local target).
    pub fn plan(&self, targets: &[TargetId], naming: &Naming) -> Result<PmPlan, PmError> {
        let mut plan = PmPlan {
            tool: format!("{} -m pip", self.python),
            ..PmPlan::default()
        };
        for dist in self.listing()?.distributions {
            let mut wanted: Vec<DevicePackage> = Vec::new();
            if dist.kpms.is_empty() {
                wanted = native_extras(&dist, targets, &mut plan.warnings);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> TargetId {
        TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// AMD's `torch`: per-target extras and `device-all`, each bringing
    /// `amd-torch-device-<t>`; installed with `device-all`.
    fn listing() -> Listing {
        let targets = ["gfx90a", "gfx942", "gfx1100"];
        let mut requires = Vec::new();
        for t in targets {
            requires.push((format!("device-{t}"), format!("amd-torch-device-{t}")));
            requires.push(("device-all".into(), format!("amd-torch-device-{t}")));
        }
        let mut extras: Vec<String> = targets.iter().map(|t| format!("device-{t}")).collect();
        extras.push("device-all".into());
        let mut installed = vec![Installed {
            name: "torch".into(),
            version: "2.9.0".into(),
            size: 10,
        }];
        for (t, size) in [("gfx90a", 100), ("gfx942", 200)] {
            installed.push(Installed {
                name: format!("amd-torch-device-{t}"),
                version: "2.9.0".into(),
                size,
            });
        }
        Listing {
            distributions: vec![Distribution {
                name: "torch".into(),
                version: "2.9.0".into(),
                extras,
                kpms: Vec::new(),
                requires,
            }],
            installed,
        }
    }

    #[test]
    fn a_base_without_kpm_gets_the_device_extra_of_each_local_processor() {
        let l = listing();
        let mut warnings = Vec::new();
        let got = native_extras(
            &l.distributions[0],
            &[target("gfx942:sramecc+:xnack-"), target("gfx1201")],
            &mut warnings,
        );
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|p| (p.name.as_str(), p.group.as_str()))
            .collect();
        assert_eq!(names, [("device-gfx942", "gfx942")]);
        assert_eq!(got[0].targets, ["gfx942:sramecc+:xnack-"]);
        assert_eq!(
            warnings,
            ["torch publishes no device code for gfx1201 (it declares no extra device-gfx1201)"]
        );
    }

    #[test]
    fn status_names_missing_and_unneeded_device_distributions() {
        let l = listing();
        let s = NativeStatus::of(&l, &[target("gfx1100")]);
        let missing: Vec<&str> = s.missing.iter().map(|d| d.dist.as_str()).collect();
        assert_eq!(missing, ["amd-torch-device-gfx1100"]);
        let unneeded: Vec<(&str, u64)> = s
            .unneeded
            .iter()
            .map(|d| (d.dist.as_str(), d.size))
            .collect();
        assert_eq!(
            unneeded,
            [
                ("amd-torch-device-gfx90a", 100),
                ("amd-torch-device-gfx942", 200)
            ]
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn prune_keeps_what_a_local_or_kept_target_needs() {
        let l = listing();
        let devices = native_devices(&l, &[target("gfx942")]);
        let gone: Vec<String> = prune_candidates(&devices, &[])
            .into_iter()
            .map(|d| d.dist)
            .collect();
        assert_eq!(gone, ["amd-torch-device-gfx90a"]);
        assert!(prune_candidates(&devices, &["gfx90a".into()]).is_empty());
    }

    #[test]
    fn prune_takes_the_device_wheels_of_our_split_bases_too() {
        // Our per-target split wheel: a `.kpm` in the base, and a generic-ISA
        // wheel that two target extras share.
        let mut l = listing();
        let base = &mut l.distributions[0];
        base.kpms = vec![PathBuf::from("/venv/lib/x/.kpack/torch.kpm")];
        for t in ["gfx1100", "gfx1101"] {
            base.requires.push((
                format!("device-{t}"),
                "amd-torch-device-gfx11-generic".into(),
            ));
        }
        base.extras.push("device-gfx1101".into());
        l.installed.push(Installed {
            name: "amd-torch-device-gfx11-generic".into(),
            version: "2.9.0".into(),
            size: 50,
        });
        let here = [target("gfx942")];
        assert!(
            native_devices(&l, &here).is_empty(),
            "status keeps the .kpm rule"
        );
        let gone = |keep: &[String]| -> Vec<String> {
            prune_candidates(&extra_devices(&l, &here, |_| true), keep)
                .into_iter()
                .map(|d| d.dist)
                .collect()
        };
        assert_eq!(
            gone(&[]),
            ["amd-torch-device-gfx90a", "amd-torch-device-gfx11-generic"]
        );
        assert_eq!(gone(&["gfx1101".into()]), ["amd-torch-device-gfx90a"]);
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize_extra("Device_GFX942"), "device-gfx942");
        assert_eq!(normalize_extra("amd.torch--device"), "amd-torch-device");
    }
}
