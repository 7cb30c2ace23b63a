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
use crate::plan::{superseded, InstallPlan};
use crate::pm::{apt::Apt, dnf::Dnf, pip::Pip, PmError, PmPlan};
use crate::progress::Reporter;
use crate::resolve::{database_needs, needs, Scan, ScanConfig};
use crate::sources::{package_files, SourceError, Sources};
use crate::state::State;

/// Where the archives come from: `--source`, `--offline`, the sources
/// files below the root and those the installed generic packages ship.
#[derive(Debug, Clone, Default)]
pub struct SourcesRequest {
    /// Source URLs or directories given on the command line, in order.
    pub urls: Vec<String>,
    /// A directory to take every archive from, without a network.
    pub offline: Option<PathBuf>,
    /// Whether `http://` sources are accepted.
    pub allow_http: bool,
}

/// An install of archives, as the command line asked for it.
#[derive(Clone)]
pub struct InstallRequest {
    /// Where the installed manifests are looked for.
    pub scan: ScanConfig,
    /// The targets to install device code for (at least one).
    pub targets: Vec<TargetId>,
    /// Where the archives come from.
    pub sources: SourcesRequest,
    /// Only plan: nothing is locked, fetched or written.
    pub dry_run: bool,
    /// Network, cache, parallelism and locking.
    pub exec: ExecOptions,
    /// Progress of the transfers (closed at the end).
    pub reporter: Arc<dyn Reporter>,
}

impl std::fmt::Debug for InstallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstallRequest")
            .field("scan", &self.scan)
            .field("targets", &self.targets)
            .field("sources", &self.sources)
            .field("dry_run", &self.dry_run)
            .field("exec", &self.exec)
            .finish_non_exhaustive()
    }
}

/// What an install planned and did.
#[derive(Debug)]
pub struct InstallOutcome {
    /// The plan (under the locks, unless a dry run).
    pub plan: InstallPlan,
    /// What happened (empty for a dry run).
    pub report: Report,
    /// The sources' and the plan's warnings, and state resets.
    pub warnings: Vec<String>,
}

/// Why an install did not run.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The sources could not be loaded (a bad `--source` among them).
    #[error(transparent)]
    Sources(#[from] SourceError),
    /// No source serves any archive to fetch: said once, before any
    /// transfer.
    #[error("{0}")]
    NoSource(String),
    /// A locked directory's state could not be read.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// The plan's execution stopped.
    #[error(transparent)]
    Execute(#[from] crate::execute::ExecuteError),
    /// Removing superseded archives failed.
    #[error(transparent)]
    Removal(#[from] super::RemovalError),
}

/// The one library call behind `install` (archives): scans the installed
/// manifests, loads the sources, says once when no source serves what is
/// to be fetched, then plans ([`dry_run`]) or installs ([`install`]).
pub fn run(req: InstallRequest) -> Result<InstallOutcome, InstallError> {
    let scan = req.scan.scan();
    let sources = Sources::load(
        &req.sources.urls,
        req.sources.offline.as_deref(),
        &req.scan.root,
        &package_files(&scan.manifests),
        req.sources.allow_http,
    )?;
    let mut warnings = sources.warnings.clone();
    if req.dry_run {
        let plan = dry_run(&scan, &req.targets, &mut warnings);
        return Ok(InstallOutcome {
            plan,
            report: Report::default(),
            warnings,
        });
    }
    if let Some(msg) = missing_sources(&scan, &req.targets, &sources)? {
        warnings.push(msg);
    }
    let (plan, report) = install(
        &scan,
        &req.targets,
        &sources,
        &req.exec,
        req.reporter,
        &mut warnings,
    )?;
    Ok(InstallOutcome {
        plan,
        report,
        warnings,
    })
}

/// A missing source is told once, before any transfer: every archive to
/// fetch without one would otherwise fail on its own. An error when no
/// archive to fetch has a source, a warning (returned) when some have.
/// Planned ahead only when some component has no source (rare): the
/// install plans again under its locks.
fn missing_sources(
    scan: &Scan,
    targets: &[TargetId],
    sources: &Sources,
) -> Result<Option<String>, InstallError> {
    let unsourced: Vec<&str> = scan
        .manifests
        .iter()
        .map(|m| m.manifest.component.as_str())
        .filter(|c| !sources.serve(c))
        .collect();
    if unsourced.is_empty() {
        return Ok(None);
    }
    let preview = dry_run(scan, targets, &mut Vec::new());
    let mut missing: Vec<&str> = preview
        .fetches()
        .map(|(c, _)| c.component.as_str())
        .filter(|c| unsourced.contains(c))
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(None);
    }
    let mut msg = format!(
        "no source serves {}: pass --source URL (a kpack store or a directory) or \
         --offline DIR, or add a file to /etc/rocm-kpack/sources.d/",
        missing.join(", ")
    );
    // Say which configured sources were skipped and why: otherwise a store
    // named in sources.d looks ignored.
    if let Some(skipped) = sources.skipped() {
        msg.push_str(&format!("; {skipped}"));
    }
    if preview
        .fetches()
        .all(|(c, _)| missing.contains(&c.component.as_str()))
    {
        return Err(InstallError::NoSource(msg));
    }
    Ok(Some(msg))
}

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
) -> Result<(InstallPlan, Report), InstallError> {
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
    // Lock files this run creates: removed again when the run leaves no
    // state beside them (it installed nothing there).
    let mut fresh = Vec::new();
    for dir in &to_lock {
        let lock_path = dir.join(crate::config::LOCK_FILE);
        if std::fs::symlink_metadata(&lock_path).is_err() {
            fresh.push(lock_path);
        }
        let lock = crate::install::lock_kpack_dir(dir, options.lock);
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
    for lock_path in fresh {
        let stateless = lock_path
            .parent()
            .is_some_and(|dir| std::fs::symlink_metadata(State::path(dir)).is_err());
        let ours = std::fs::symlink_metadata(&lock_path).is_ok_and(|m| m.is_file());
        // Still held: a run waiting for it starts over on a new file.
        if stateless && ours {
            if let Err(e) = std::fs::remove_file(&lock_path) {
                tracing::debug!("{}: {e}", lock_path.display());
            }
        }
    }
    drop(locks);
    // Whatever came of the run, directories whose package is gone keep
    // nothing of ours (state, lock) once they record nothing.
    super::gc::tidy_abandoned(&scan.kpack_dirs, options.lock);
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
            PackageManager::Apt(a) => crate::pm::plan_system(a, scan, targets, naming),
            PackageManager::Dnf(d) => crate::pm::plan_system(d, scan, targets, naming),
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

/// `install --via apt|dnf|pip`: the device packages to ask a package
/// manager for.
#[derive(Debug)]
pub struct PmInstallRequest {
    /// Where to look for installed manifests.
    pub scan: ScanConfig,
    /// The package manager to plan for and drive.
    pub pm: PackageManager,
    /// The targets to install device packages for.
    pub targets: Vec<TargetId>,
    /// How device packages are named.
    pub naming: Naming,
    /// Plan only: run nothing.
    pub dry_run: bool,
}

/// What [`run_package_manager`] planned and did.
#[derive(Debug)]
pub struct PmInstallOutcome {
    /// The device packages (the command line a user would type).
    pub plan: PmPlan,
    /// Refused manifests, then the plan's own warnings.
    pub warnings: Vec<String>,
    /// How many manifests were refused (their packages got no plan).
    pub refused: usize,
    /// Some installed package publishes no device code for a target.
    pub uncovered: bool,
}

/// The one library call behind `install --via`: scans the installed
/// manifests, refuses to run inside a dpkg/rpm transaction (apt or dnf
/// would deadlock on its lock), plans, hands the plan to `announce` (the
/// command prints it before the package manager's own output starts) and,
/// unless this is a dry run or there is nothing to do, runs the package
/// manager. Errors are the caller's type `E`: what `announce` returns, or a
/// [`PmError`] converted.
pub fn run_package_manager<E: From<PmError>>(
    req: PmInstallRequest,
    announce: impl FnOnce(&PmInstallOutcome) -> Result<(), E>,
) -> Result<PmInstallOutcome, E> {
    let scan = req.scan.scan();
    let mut warnings: Vec<String> = scan
        .refused
        .iter()
        .map(|r| format!("refused manifest {}: {}", r.path.display(), r.error))
        .collect();
    if !req.dry_run {
        req.pm.check_not_in_transaction()?;
    }
    let plan = req.pm.plan(&scan, &req.targets, &req.naming)?;
    warnings.extend(plan.warnings.iter().cloned());
    let outcome = PmInstallOutcome {
        uncovered: plan
            .warnings
            .iter()
            .any(|w| w.contains("publishes no device code")),
        refused: scan.refused.len(),
        plan,
        warnings,
    };
    announce(&outcome)?;
    if !outcome.plan.packages.is_empty() && !req.dry_run {
        req.pm.install(&outcome.plan)?;
    }
    Ok(outcome)
}
