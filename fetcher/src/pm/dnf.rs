//! `--via dnf`: the rpm database says which package owns each installed
//! manifest; its device packages are named by pkgspec's `rpm_device`
//! template (they also provide `rocm-kpack(<target>)`).

use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::{NameKind, Naming};

use super::{
    check_not_in_transaction, device_packages, needed_groups, output, passthrough, path_in_root,
    PmError, PmPlan,
};
use crate::resolve::Scan;

/// How dnf and rpm are driven.
#[derive(Debug, Clone)]
pub struct Dnf {
    /// The system root (`/` or an `--installroot`).
    pub root: PathBuf,
    /// Extra arguments put before dnf's command (`--repofrompath=...`).
    pub extra: Vec<String>,
}

impl Dnf {
    /// The options that point dnf at the root (none for `/`).
    pub fn root_options(&self) -> Vec<String> {
        if self.root == Path::new("/") {
            return Vec::new();
        }
        vec![
            format!("--installroot={}", self.root.display()),
            "--releasever=1".into(),
        ]
    }

    /// The installed package owning `path`, if any.
    pub fn owner(&self, path: &Path) -> Result<Option<String>, PmError> {
        let mut c = Command::new("rpm");
        c.arg("--root")
            .arg(&self.root)
            .args(["-qf", "--qf", "%{NAME}\n"])
            .arg(path_in_root(&self.root, path));
        let o = output(&mut c)?;
        if !o.status.success() {
            return Ok(None);
        }
        Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string))
    }

    /// Builds the plan for the local targets.
    pub fn plan(
        &self,
        scan: &Scan,
        targets: &[TargetId],
        naming: &Naming,
    ) -> Result<PmPlan, PmError> {
        let mut plan = PmPlan {
            tool: "dnf".into(),
            ..PmPlan::default()
        };
        for super::NeededGroups {
            kpm,
            component,
            groups,
        } in needed_groups(scan, targets, &mut plan.warnings)
        {
            match self.owner(&kpm)? {
                Some(generic) => plan.packages.extend(device_packages(
                    naming,
                    NameKind::RpmDevice,
                    &generic,
                    &component,
                    &groups,
                )),
                None => plan.warnings.push(format!(
                    "no installed rpm owns {} ({component}); use file mode for it",
                    kpm.display()
                )),
            }
        }
        Ok(plan)
    }

    /// Runs `dnf install -y` for the plan's packages.
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        check_not_in_transaction("dnf", &self.root.join("var/lib/rpm/.rpm.lock"))?;
        let mut c = Command::new("dnf");
        c.arg("-y")
            .args(self.root_options())
            .args(&self.extra)
            .arg("install")
            .args(plan.names());
        passthrough(&mut c)
    }
}
