//! Package-manager modes (`install --via apt|dnf|pip`, `--python`): instead
//! of fetching archives, install the device PACKAGES of the installed
//! generic packages for the local targets, so dpkg/rpm/pip own the files.
//!
//! The mapping: installed `.kpm` manifests -> the groups the local targets
//! need ([`crate::resolve::needs`]) -> the package that owns the manifest
//! (dpkg / rpm database, or the Python distribution whose RECORD lists it)
//! -> device package names from pkgspec's naming templates.

pub mod apt;
pub mod dnf;
pub mod native;
pub mod pip;
pub mod pip_install;
pub mod pip_links;
pub mod pip_sizes;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::{NameKind, Naming};
use serde::Serialize;

use crate::resolve::{needs, Scan};

/// Errors of the package-manager modes.
#[derive(Debug, thiserror::Error)]
pub enum PmError {
    /// Called from inside a dpkg/rpm transaction, which holds the lock.
    #[error("refusing to run {tool} from inside a {inside} transaction (its lock is held); the package hook uses file mode (rocm-kpack-fetch install --auto without --via)")]
    InsideTransaction {
        /// The package manager that would be called.
        tool: &'static str,
        /// What is running.
        inside: String,
    },
    /// A tool could not be started.
    #[error("cannot run {tool}: {source}")]
    Spawn {
        /// The program.
        tool: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A tool failed.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// A Python interpreter was refused or could not be asked.
    #[error(transparent)]
    Python(#[from] crate::python::PythonError),
    /// Output of a tool could not be understood.
    #[error("unexpected output from {tool}: {detail}")]
    Output {
        /// The program.
        tool: String,
        /// What was wrong.
        detail: String,
    },
}

/// One device package to install, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DevicePackage {
    /// Package (or `dist[extra]` requirement) name to install.
    pub name: String,
    /// The installed generic package it belongs to.
    pub generic: String,
    /// Manifest component.
    pub component: String,
    /// Device group.
    pub group: String,
    /// Local targets it serves.
    pub targets: Vec<String>,
}

/// What a package-manager mode will do.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PmPlan {
    /// The program (`apt-get`, `dnf`, `python3 -m pip`).
    pub tool: String,
    /// Packages to install, in order, without duplicates.
    pub packages: Vec<DevicePackage>,
    /// Things the user should know (unowned manifests, uncovered targets...).
    pub warnings: Vec<String>,
}

impl PmPlan {
    /// Unique package names in order.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in &self.packages {
            if !out.contains(&p.name) {
                out.push(p.name.clone());
            }
        }
        out
    }

    /// The plan as the one command line a user would type, e.g.
    /// `apt-get install librocrand1-gfx90a`.
    pub fn command_line(&self) -> String {
        format!("{} install {}", self.tool, self.names().join(" "))
    }
}

/// The device groups one installed manifest needs here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeededGroups {
    /// The `.kpm` path.
    pub kpm: PathBuf,
    /// Its component.
    pub component: String,
    /// (group, local targets it serves), in manifest order.
    pub groups: Vec<(String, Vec<String>)>,
}

/// The groups of each installed manifest the local targets need.
/// Uncovered targets become warnings.
pub fn needed_groups(
    scan: &Scan,
    targets: &[TargetId],
    warnings: &mut Vec<String>,
) -> Vec<NeededGroups> {
    let mut out = Vec::new();
    for m in &scan.manifests {
        let groups = manifest_groups(&m.manifest, &m.manifest.component, targets, warnings);
        if !groups.is_empty() {
            out.push(NeededGroups {
                kpm: m.path.clone(),
                component: m.manifest.component.clone(),
                groups,
            });
        }
    }
    out
}

/// What a system package manager (apt, dnf) answers the one planner
/// ([`plan_system`]); the rest of planning is the same for both.
pub trait SystemPm {
    /// The command the plan runs (`apt-get`, `dnf`).
    fn tool(&self) -> &'static str;
    /// How its device packages are named.
    fn device_kind(&self) -> NameKind;
    /// What owns a manifest, in its words ("installed package", "installed
    /// rpm"), for the warning when nothing does.
    fn owner_noun(&self) -> &'static str;
    /// The installed package owning `path`, if any.
    fn owner(&self, path: &Path) -> Result<Option<String>, PmError>;
    /// Whether the device package `dev` of `generic` goes into the plan;
    /// may add warnings (apt checks its index here). By default every
    /// device package goes: the package manager resolves what its
    /// repositories hold.
    fn admit(
        &self,
        _dev: &DevicePackage,
        _generic: &str,
        _warnings: &mut Vec<String>,
    ) -> Result<bool, PmError> {
        Ok(true)
    }
    /// AMD's native scheme of host and device packages.
    fn native(&self) -> &native::NativeScheme;
    /// The installed packages.
    fn installed(&self) -> Result<Vec<native::Installed>, PmError>;
    /// Which of `names` its repositories offer.
    fn available(&self, names: &[String]) -> Result<Vec<String>, PmError>;
}

/// The plan of a system package manager: for each installed manifest the
/// local targets need, the device packages of the package that owns it
/// (those `pm` admits), then the missing device packages of installed
/// native host packages that `pm`'s repositories offer.
pub fn plan_system(
    pm: &dyn SystemPm,
    scan: &Scan,
    targets: &[TargetId],
    naming: &Naming,
) -> Result<PmPlan, PmError> {
    let mut plan = PmPlan {
        tool: pm.tool().into(),
        ..PmPlan::default()
    };
    for NeededGroups {
        kpm,
        component,
        groups,
    } in needed_groups(scan, targets, &mut plan.warnings)
    {
        let Some(generic) = pm.owner(&kpm)? else {
            plan.warnings.push(format!(
                "no {} owns {} ({component}); use file mode for it",
                pm.owner_noun(),
                kpm.display()
            ));
            continue;
        };
        for dev in device_packages(naming, pm.device_kind(), &generic, &component, &groups) {
            if pm.admit(&dev, &generic, &mut plan.warnings)? {
                plan.packages.push(dev);
            }
        }
    }
    let installed = pm.installed()?;
    let wanted = native::missing_devices(pm.native(), &installed, targets);
    let names: Vec<String> = wanted.iter().map(|d| d.name.clone()).collect();
    let available = pm.available(&names)?;
    for dev in wanted {
        if available.contains(&dev.name) {
            plan.packages.push(dev);
        } else {
            plan.warnings.push(native::unavailable(&dev));
        }
    }
    Ok(plan)
}

/// The device groups (families) of one manifest the local targets need,
/// in manifest order, with the targets each serves: the groups of the
/// needed archives and of the needed kernel-database files (a group may
/// carry only database files). Targets the manifest has no code for
/// become warnings naming `who`.
pub fn manifest_groups(
    manifest: &Manifest,
    who: &str,
    targets: &[TargetId],
    warnings: &mut Vec<String>,
) -> Vec<(String, Vec<String>)> {
    let n = needs(manifest, targets);
    for t in &n.uncovered {
        warnings.push(format!("{who} publishes no device code for {t}"));
    }
    let archives = n
        .archives
        .iter()
        .filter_map(|need| Some((manifest.kpack_files.get(need.index)?.family.as_str(), need)));
    let databases = n.databases.iter().filter_map(|need| {
        Some((
            manifest.database_files.get(need.index)?.family.as_str(),
            need,
        ))
    });
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (family, need) in archives.chain(databases) {
        match groups.iter_mut().find(|(g, _)| g == family) {
            Some((_, ts)) => {
                for t in &need.targets {
                    if !ts.contains(t) {
                        ts.push(t.clone());
                    }
                }
            }
            None => groups.push((family.to_string(), need.targets.clone())),
        }
    }
    groups
}

/// Device package names for one owner and its groups, from a template kind.
pub fn device_packages(
    naming: &Naming,
    kind: NameKind,
    generic: &str,
    component: &str,
    groups: &[(String, Vec<String>)],
) -> Vec<DevicePackage> {
    groups
        .iter()
        .map(|(group, targets)| DevicePackage {
            name: naming.render(kind, generic, Some(group)),
            generic: generic.to_string(),
            component: component.to_string(),
            group: group.clone(),
            targets: targets.clone(),
        })
        .collect()
}

/// Whether this process runs inside a dpkg or rpm transaction (a
/// maintainer script, a trigger, an apt `DPkg::Pre/Post-Invoke` hook sees
/// `DPKG_RUNNING_VERSION` only from dpkg itself). Returns what is running.
pub fn inside_transaction() -> Option<String> {
    for var in [
        "DPKG_RUNNING_VERSION",
        "DPKG_MAINTSCRIPT_PACKAGE",
        "DPKG_HOOK_ACTION",
    ] {
        if std::env::var_os(var).is_some() {
            return Some(format!("dpkg ({var} is set)"));
        }
    }
    // rpm scriptlets and file triggers run with the database lock held.
    if std::env::var_os("RPM_INSTALL_PREFIX").is_some() {
        return Some("rpm (RPM_INSTALL_PREFIX is set)".into());
    }
    None
}

/// Whether the lock file at `path` is held by another process (an rpm
/// or dpkg transaction). Unreadable or absent: not held.
pub fn lock_held(path: &Path) -> bool {
    use rustix::fs::{fcntl_lock, FlockOperation};
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return false;
    };
    match fcntl_lock(&f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            let _ = fcntl_lock(&f, FlockOperation::Unlock);
            false
        }
        Err(e) => e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::AGAIN,
    }
}

/// Refuses when inside a transaction of `tool`'s package system.
pub fn check_not_in_transaction(tool: &'static str, lock: &Path) -> Result<(), PmError> {
    if let Some(inside) = inside_transaction() {
        return Err(PmError::InsideTransaction { tool, inside });
    }
    if lock_held(lock) {
        return Err(PmError::InsideTransaction {
            tool,
            inside: format!("package manager ({} is locked)", lock.display()),
        });
    }
    Ok(())
}

/// Runs a command, capturing its output; a failure to start is an error,
/// a non-zero exit is returned for the caller to judge.
pub fn output(cmd: &mut Command) -> Result<Output, PmError> {
    tracing::debug!(?cmd, "running");
    cmd.output().map_err(|source| PmError::Spawn {
        tool: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })
}

/// Runs a command that must succeed; returns stdout.
pub fn checked(cmd: &mut Command) -> Result<String, PmError> {
    let o = output(cmd)?;
    if !o.status.success() {
        return Err(failed(cmd, &o));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Runs a command with stdout/stderr passed through (the user watches the
/// package manager); a non-zero exit is an error.
pub fn passthrough(cmd: &mut Command) -> Result<(), PmError> {
    tracing::debug!(?cmd, "running");
    let status = cmd.status().map_err(|source| PmError::Spawn {
        tool: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(PmError::Failed {
            command: describe(cmd),
            status: status.to_string(),
            stderr: "(see above)".into(),
        })
    }
}

fn failed(cmd: &Command, o: &Output) -> PmError {
    let err = String::from_utf8_lossy(&o.stderr);
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    PmError::Failed {
        command: describe(cmd),
        status: o.status.to_string(),
        stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    }
}

/// A command line for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// `path` (absolute, below `root`) as the package database knows it:
/// absolute from the root's `/`.
pub fn path_in_root(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel),
        Err(_) => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_kpack_format::manifest::{DatabaseFile, ManifestFile};

    /// A group whose device code is only database files (a kernel-database
    /// package) is a device package to install, as one with archives is.
    #[test]
    fn groups_of_database_files_are_needed_too() {
        let m = Manifest {
            component: "lib".into(),
            prefix_path: None,
            kpack_files: vec![ManifestFile {
                filename: "lib_gfx90a.kpack".into(),
                family: "gfx90a".into(),
                architectures: vec!["gfx90a".into()],
                size: 1,
                sha256: None,
                transport: None,
            }],
            database_files: vec![DatabaseFile {
                path: "lib/rocblas/library/TensileLibrary_gfx1100.co".into(),
                family: "gfx1100".into(),
                architectures: vec!["gfx1100".into()],
                size: 1,
                sha256: [0; 32],
            }],
        };
        let target = |s: &str| TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        let mut warnings = Vec::new();
        let groups = manifest_groups(
            &m,
            "lib1",
            &[target("gfx1100"), target("gfx90a")],
            &mut warnings,
        );
        assert_eq!(
            groups,
            [
                ("gfx90a".to_string(), vec!["gfx90a".to_string()]),
                ("gfx1100".to_string(), vec!["gfx1100".to_string()]),
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let groups = manifest_groups(&m, "lib1", &[target("gfx1030")], &mut warnings);
        assert!(groups.is_empty());
        assert_eq!(warnings, ["lib1 publishes no device code for gfx1030"]);
    }
}
