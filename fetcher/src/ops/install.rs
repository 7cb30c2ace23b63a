//! `install`: targets -> installed manifests -> plan -> lock the `.kpack`
//! directories -> re-plan under the locks -> download, verify, install,
//! then remove the archives an upgraded manifest no longer lists
//! ([`install`]); or the plan alone ([`dry_run`]); or the device packages
//! through a package manager ([`PackageManager`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::Naming;

use super::{load_states, remove_recorded};
use crate::execute::{execute, ExecOptions, Report};
use crate::install::DirLock;
use crate::plan::{superseded, InstallPlan};
use crate::pm::{apt::Apt, dnf::Dnf, pip::Pip, PmError, PmPlan};
use crate::progress::Reporter;
use crate::resolve::{database_needs, needs, Scan};
use crate::sources::Sources;
use crate::state::State;

/// The plan for `targets` against the states as they are (read without
/// locks); its warnings are added to `warnings`.
pub fn dry_run(scan: &Scan, targets: &[TargetId], warnings: &mut Vec<String>) -> InstallPlan {
    let states = load_states(&scan.kpack_dirs, warnings);
    let plan = InstallPlan::build(scan, targets, &states);
    warnings.extend(plan.warnings());
    plan
}

/// Installs the archives `targets` need: locks every directory that will
/// be written, in path order (no deadlock between two runs), before judging
/// what is present; plans under the locks; fetches, verifies and installs
/// from `sources`, reporting to `reporter` (closed at the end); then
/// removes the superseded archives of the locked directories (see
/// [`crate::plan::Superseded`]). A directory that cannot be locked fails
/// its archives, not the run. Returns the plan and what happened; warnings
/// (state resets, the plan's) are added to `warnings`.
pub fn install(
    scan: &Scan,
    targets: &[TargetId],
    sources: &Sources,
    options: &ExecOptions,
    reporter: Arc<dyn Reporter>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(InstallPlan, Report)> {
    // Read without the locks only to choose what to lock; judged again below.
    let unlocked = load_states(&scan.kpack_dirs, &mut Vec::new());
    let to_lock: BTreeSet<PathBuf> = scan
        .manifests
        .iter()
        .filter(|m| {
            // Database files are written below the prefix but recorded in
            // this directory's state, under its lock: a manifest whose only
            // device code for these targets is database files is written too.
            !needs(&m.manifest, targets).archives.is_empty()
                || !database_needs(&m.manifest, targets).is_empty()
                || !superseded(scan, m, unlocked.get(&m.kpack_dir)).is_empty()
        })
        .map(|m| m.kpack_dir.clone())
        .collect();
    let mut locks = Vec::new();
    let mut locked: BTreeMap<PathBuf, Result<(), String>> = BTreeMap::new();
    for dir in &to_lock {
        let lock = DirLock::acquire(dir, crate::install::say_waiting);
        match lock {
            Ok(l) => {
                locks.push(l);
                locked.insert(dir.clone(), Ok(()));
            }
            Err(e) => {
                locked.insert(
                    dir.clone(),
                    Err(format!(
                        "cannot lock {}: {e}{}",
                        dir.display(),
                        // The one cause running as root cures.
                        if e.kind() == std::io::ErrorKind::PermissionDenied
                            && e.raw_os_error().is_some()
                        {
                            " (run as root?)"
                        } else {
                            ""
                        }
                    )),
                );
            }
        }
    }
    let mut states = BTreeMap::new();
    for dir in &scan.kpack_dirs {
        let state = if locked.get(dir).is_some_and(Result::is_ok) {
            State::load_or_reset(dir, warnings)?
        } else {
            State::load(dir).unwrap_or_default()
        };
        states.insert(dir.clone(), state);
    }
    let plan = InstallPlan::build(scan, targets, &states);
    warnings.extend(plan.warnings());
    let report = execute(&plan, sources, options, &locked, states, reporter.clone());
    reporter.close();
    let mut report = report?;
    for c in &plan.components {
        if c.superseded.is_empty() || !locked.get(&c.kpack_dir).is_some_and(Result::is_ok) {
            continue;
        }
        let names: Vec<(crate::plan::ItemKind, &str)> = c
            .superseded
            .iter()
            .map(|s| (crate::plan::ItemKind::Archive, s.filename.as_str()))
            .collect();
        // Archives only: no other manifest's claim to weigh.
        let done = remove_recorded(&c.kpack_dir, &names, &crate::plan::Claims::default())?;
        report.removed.extend(done.removed);
    }
    drop(locks);
    Ok((plan, report))
}

/// A package manager that installs device packages instead of archives
/// (then dpkg, rpm or pip own the files).
#[derive(Debug)]
pub enum PackageManager {
    /// apt-get (Debian, Ubuntu).
    Apt(Apt),
    /// dnf (Fedora, RHEL).
    Dnf(Dnf),
    /// pip of an interpreter.
    Pip(Pip),
}

impl PackageManager {
    /// Refuses to go on inside a dpkg/rpm transaction: apt or dnf would
    /// deadlock on the lock it holds (package hooks use file mode). pip
    /// has no such lock.
    pub fn check_not_in_transaction(&self) -> Result<(), PmError> {
        match self {
            PackageManager::Apt(a) => {
                crate::pm::check_not_in_transaction("apt-get", &a.root.join("var/lib/dpkg/lock"))
            }
            PackageManager::Dnf(d) => {
                crate::pm::check_not_in_transaction("dnf", &d.root.join("var/lib/rpm/.rpm.lock"))
            }
            PackageManager::Pip(_) => Ok(()),
        }
    }

    /// The device packages the installed generic packages of `scan` need
    /// for `targets`.
    pub fn plan(
        &self,
        scan: &Scan,
        targets: &[TargetId],
        naming: &Naming,
    ) -> Result<PmPlan, PmError> {
        match self {
            PackageManager::Apt(a) => a.plan(scan, targets, naming),
            PackageManager::Dnf(d) => d.plan(scan, targets, naming),
            PackageManager::Pip(p) => p.plan(targets, naming),
        }
    }

    /// Installs the plan's packages.
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        match self {
            PackageManager::Apt(a) => a.install(plan),
            PackageManager::Dnf(d) => d.install(plan),
            PackageManager::Pip(p) => p.install(plan),
        }
    }
}
