//! `prune`: remove the device code of every target that is neither present
//! (detected) nor kept (`--keep`), wherever it came from. An image build
//! installs everything (`device-all`, `amdrocm`) and then prunes to the GPUs
//! it will run on.
//!
//! Each source of device code is a [`PruneBackend`]: the archives and
//! database files this tool fetched ([`OwnFiles`], through the same
//! recorded-file removal as `gc`), and the device packages of a package
//! manager (`apt`, `dnf`, `pip`). Every backend plans first; nothing is
//! removed until every plan is known ([`prune`] with `apply`), so the user
//! sees everything that goes, and what a package manager would remove
//! along with it, before anything happens.

use serde::Serialize;

use super::{apply_removals, Removal};
use crate::pm::apt::Apt;
use crate::pm::dnf::Dnf;
use crate::pm::native;
use crate::pm::{PmError, SystemPm};
use crate::resolve::Scan;
use rocm_kpack_format::target::TargetId;

/// What every backend plans against.
#[derive(Debug)]
pub struct PruneContext<'a> {
    /// The installed manifests.
    pub scan: &'a Scan,
    /// The targets whose device code stays: those detected plus `--keep`.
    pub keep: &'a [TargetId],
    /// How the `.kpack` directories are locked.
    pub lock: crate::install::LockOptions,
    /// Apply even when a package manager would also remove packages that
    /// are not AMD's meta packages (`--allow-dependents`).
    pub allow_dependents: bool,
}

impl PruneContext<'_> {
    /// The kept targets as one phrase for reasons.
    pub fn keep_label(&self) -> String {
        self.keep
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The device-package targets (AMD's per-target package names,
    /// `rocm_kpack_pkgspec::amd::device_target_of`) of the kept targets.
    pub fn kept_device_targets(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.keep {
            let name = t.to_string();
            if let Some(d) = rocm_kpack_pkgspec::amd::device_target_of(&name) {
                if !out.iter().any(|o| o == d) {
                    out.push(d.to_string());
                }
            }
        }
        out
    }
}

/// What a prune item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PruneKind {
    /// A `.kpack` archive this tool fetched.
    Archive,
    /// A kernel-database file this tool fetched.
    Database,
    /// A device package of a package manager.
    Package,
}

/// One thing to remove.
#[derive(Debug, Clone, Serialize)]
pub struct PruneItem {
    /// What it is.
    pub kind: PruneKind,
    /// The file's path, or the package's name.
    pub name: String,
    /// The targets it carries code for, when known.
    pub targets: Vec<String>,
    /// Bytes freed by removing it (as recorded or as the package database
    /// says).
    pub bytes: u64,
    /// Why it goes.
    pub reason: String,
    /// Hard links to its files that other packages record and that go
    /// with it (pip: `rocm-sdk init`'s links under `_rocm_sdk_devel`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkItem>,
    /// The fetcher's record of a file it installed ([`OwnFiles`]).
    #[serde(skip)]
    pub removal: Option<Removal>,
}

/// A hard link that goes with a [`PruneItem`].
#[derive(Debug, Clone, Serialize)]
pub struct LinkItem {
    /// Its path.
    pub path: String,
    /// The package whose record lists it (its row is dropped).
    pub recorded_by: String,
}

/// One backend's part of the plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BackendPlan {
    /// The backend (`files`, `apt`, `dnf`, `pip`).
    pub backend: String,
    /// What it removes.
    pub items: Vec<PruneItem>,
    /// Packages the package manager would remove as well, because they
    /// depend on an item (AMD's meta packages such as `amdrocm-fft8.2`
    /// depend on every device package).
    pub also_removed: Vec<String>,
    /// Of `also_removed`, those that are not AMD's meta packages (an
    /// application that depends on a device package): applying is refused
    /// unless the user allows it.
    pub dependents: Vec<String>,
    /// The command that applies this part, for package managers.
    pub command: Option<String>,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

impl BackendPlan {
    /// An empty plan of backend `name`.
    pub fn new(name: &str) -> BackendPlan {
        BackendPlan {
            backend: name.to_string(),
            ..BackendPlan::default()
        }
    }

    /// Bytes its items free.
    pub fn bytes(&self) -> u64 {
        self.items.iter().map(|i| i.bytes).sum()
    }
}

/// What a backend did when applied.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Applied {
    /// What was removed (paths, package names).
    pub removed: Vec<String>,
    /// Things left in place, with why.
    pub notes: Vec<String>,
}

/// A source of device code that `prune` can shrink.
pub trait PruneBackend {
    /// Its name in the output (`files`, `apt`, `dnf`, `pip`).
    fn name(&self) -> &'static str;
    /// What it would remove; reads only.
    fn plan(&self, ctx: &PruneContext) -> Result<BackendPlan, PruneError>;
    /// Removes what `plan` (its own earlier answer) lists.
    fn apply(&self, ctx: &PruneContext, plan: &BackendPlan) -> Result<Applied, PruneError>;
}

/// What `prune` found and did (its `--json` output).
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    /// The targets kept.
    pub keep: Vec<String>,
    /// Whether anything was removed (`--yes`) or only listed.
    pub applied: bool,
    /// Each backend's plan.
    pub backends: Vec<BackendPlan>,
    /// Bytes freed by every item of every backend.
    pub bytes: u64,
    /// What was removed (empty unless applied).
    pub removed: Vec<String>,
    /// Warnings of the backends and of applying.
    pub warnings: Vec<String>,
}

/// Why `prune` planned or removed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// No target to keep: every target's device code would go.
    #[error("no targets to keep: the device code of every target would go")]
    NothingKept,
    /// The package manager would also remove these packages, which are the
    /// user's (not AMD meta packages), and `--allow-dependents` was not given.
    #[error(
        "not pruning anything: the package manager would also remove {}, which depend{} on a device package and are not AMD meta packages; pass --allow-dependents to remove them too",
        .0.join(", "),
        if .0.len() == 1 { "s" } else { "" }
    )]
    Dependents(Vec<String>),
    /// A package manager failed.
    #[error(transparent)]
    Pm(#[from] PmError),
    /// Removing this tool's own files failed.
    #[error(transparent)]
    Removal(#[from] super::RemovalError),
}

/// Plans every backend (reads only). Refuses an empty `keep`: every
/// target's device code would go.
pub fn plan(backends: &[&dyn PruneBackend], ctx: &PruneContext) -> Result<PruneReport, PruneError> {
    if ctx.keep.is_empty() {
        return Err(PruneError::NothingKept);
    }
    let mut plans = Vec::new();
    for b in backends {
        plans.push(b.plan(ctx)?);
    }
    Ok(PruneReport {
        keep: ctx.keep.iter().map(ToString::to_string).collect(),
        applied: false,
        bytes: plans.iter().map(BackendPlan::bytes).sum(),
        warnings: plans.iter().flat_map(|p| p.warnings.clone()).collect(),
        backends: plans,
        removed: Vec::new(),
    })
}

/// Applies `report` (the [`plan`] of the same `backends`, shown to the
/// user first), backend by backend in order; records what was removed.
pub fn apply(
    backends: &[&dyn PruneBackend],
    ctx: &PruneContext,
    report: &mut PruneReport,
) -> Result<(), PruneError> {
    let dependents: Vec<String> = report
        .backends
        .iter()
        .flat_map(|b| b.dependents.iter().cloned())
        .collect();
    if !(dependents.is_empty() || ctx.allow_dependents) {
        return Err(PruneError::Dependents(dependents));
    }
    report.applied = true;
    for (b, plan) in backends.iter().zip(&report.backends) {
        if plan.items.is_empty() {
            continue;
        }
        let done = b.apply(ctx, plan)?;
        report.removed.extend(done.removed);
        report.warnings.extend(done.notes);
    }
    Ok(())
}

/// The archives and database files this tool fetched and recorded in each
/// `.kpack` directory's state: those no kept target may load, and those
/// whose manifest is gone (what `gc` removes for the kept targets).
#[derive(Debug, Default)]
pub struct OwnFiles;

impl PruneBackend for OwnFiles {
    fn name(&self) -> &'static str {
        "files"
    }

    fn plan(&self, ctx: &PruneContext) -> Result<BackendPlan, PruneError> {
        let mut plan = BackendPlan::new(self.name());
        let removals =
            super::gc::unneeded(ctx.scan, ctx.keep, &ctx.keep_label(), &mut plan.warnings);
        let states = super::load_states(&ctx.scan.kpack_dirs, &mut Vec::new());
        for r in removals {
            let targets = states
                .get(&r.kpack_dir)
                .and_then(|s| match r.kind {
                    crate::plan::ItemKind::Archive => s.archives.get(&r.filename),
                    crate::plan::ItemKind::Database => s.databases.get(&r.filename),
                })
                .map(|e| e.architectures.clone())
                .unwrap_or_default();
            plan.items.push(PruneItem {
                kind: match r.kind {
                    crate::plan::ItemKind::Archive => PruneKind::Archive,
                    crate::plan::ItemKind::Database => PruneKind::Database,
                },
                name: r.path().display().to_string(),
                targets,
                bytes: r.size,
                reason: r.reason.clone(),
                links: Vec::new(),
                removal: Some(r),
            });
        }
        Ok(plan)
    }

    fn apply(&self, ctx: &PruneContext, plan: &BackendPlan) -> Result<Applied, PruneError> {
        let removals: Vec<Removal> = plan
            .items
            .iter()
            .filter_map(|i| i.removal.clone())
            .collect();
        let done = apply_removals(&removals, ctx.scan, ctx.lock)?;
        Ok(Applied {
            removed: done
                .removed
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            notes: done
                .kept
                .iter()
                .map(|k| {
                    format!(
                        "kept {}: {} lists it too",
                        k.path.display(),
                        k.listed_by.display()
                    )
                })
                .collect(),
        })
    }
}

/// A package manager's side of a prune of AMD's native device packages.
trait NativePm: SystemPm {
    fn simulate_remove(&self, packages: &[String]) -> Result<Vec<String>, PmError>;
    /// Keeps `packages` from counting as unused once the meta package
    /// that pulled them in is gone.
    fn keep_installed(&self, packages: &[String]) -> Result<(), PmError>;
    fn remove(&self, packages: &[String]) -> Result<(), PmError>;
    /// The removal command as a user would type it.
    fn remove_command(&self, packages: &[String]) -> String;
}

impl NativePm for Apt {
    fn simulate_remove(&self, packages: &[String]) -> Result<Vec<String>, PmError> {
        Apt::simulate_remove(self, packages)
    }
    fn keep_installed(&self, packages: &[String]) -> Result<(), PmError> {
        self.mark_manual(packages)
    }
    fn remove(&self, packages: &[String]) -> Result<(), PmError> {
        Apt::remove(self, packages)
    }
    fn remove_command(&self, packages: &[String]) -> String {
        format!("apt-get remove {}", packages.join(" "))
    }
}

impl NativePm for Dnf {
    fn simulate_remove(&self, packages: &[String]) -> Result<Vec<String>, PmError> {
        Dnf::simulate_remove(self, packages)
    }
    fn keep_installed(&self, packages: &[String]) -> Result<(), PmError> {
        self.mark_user_installed(packages)
    }
    fn remove(&self, packages: &[String]) -> Result<(), PmError> {
        Dnf::remove(self, packages)
    }
    fn remove_command(&self, packages: &[String]) -> String {
        format!("dnf remove {}", packages.join(" "))
    }
}

/// The device packages of the installed host packages whose target is
/// not kept, and what the package manager would remove with them.
fn native_plan(
    pm: &dyn NativePm,
    name: &str,
    ctx: &PruneContext,
) -> Result<BackendPlan, PruneError> {
    let mut plan = BackendPlan::new(name);
    let installed = pm.installed()?;
    let keep = ctx.kept_device_targets();
    for d in native::unkept_devices(pm.native(), &installed, &keep) {
        plan.items.push(PruneItem {
            kind: PruneKind::Package,
            reason: format!(
                "device package of {} for {}, which no kept target ({}) is",
                d.host,
                d.target,
                ctx.keep_label()
            ),
            name: d.package.name,
            targets: vec![d.target],
            bytes: d.package.bytes,
            links: Vec::new(),
            removal: None,
        });
    }
    if plan.items.is_empty() {
        return Ok(plan);
    }
    let names: Vec<String> = plan.items.iter().map(|i| i.name.clone()).collect();
    plan.also_removed = pm
        .simulate_remove(&names)?
        .into_iter()
        .filter(|n| !names.contains(n))
        .collect();
    // AMD's meta package (`amdrocm-fft8.2`) depends on every device
    // package and is expected to go; anything else is the user's software.
    let hosts = native::hosts(pm.native(), &installed);
    plan.dependents = plan
        .also_removed
        .iter()
        .filter(|n| {
            !hosts.iter().any(|h| {
                **n == format!("{}{}", h.base, h.version)
                    || pm.native().device_target(h, n).is_some()
            })
        })
        .cloned()
        .collect();
    if !plan.dependents.is_empty() {
        plan.warnings.push(format!(
            "{} would also remove {}, which {} not AMD meta packages (--yes refuses unless --allow-dependents)",
            name,
            plan.dependents.join(", "),
            if plan.dependents.len() == 1 { "is" } else { "are" }
        ));
    }
    plan.command = Some(pm.remove_command(&names));
    Ok(plan)
}

/// Removes the plan's packages (and, as shown, what depends on them),
/// first marking the rest of each host's packages as wanted.
fn native_apply(pm: &dyn NativePm, plan: &BackendPlan) -> Result<Applied, PruneError> {
    let names: Vec<String> = plan.items.iter().map(|i| i.name.clone()).collect();
    let installed = pm.installed()?;
    let hosts = native::hosts(pm.native(), &installed);
    let stays: Vec<String> = installed
        .iter()
        .filter(|p| !names.contains(&p.name) && !plan.also_removed.contains(&p.name))
        .filter(|p| {
            hosts
                .iter()
                .any(|h| h.name == p.name || pm.native().device_target(h, &p.name).is_some())
        })
        .map(|p| p.name.clone())
        .collect();
    pm.keep_installed(&stays)?;
    pm.remove(&names)?;
    let mut removed = names;
    removed.extend(plan.also_removed.iter().cloned());
    Ok(Applied {
        removed,
        notes: Vec::new(),
    })
}

impl PruneBackend for Apt {
    fn name(&self) -> &'static str {
        "apt"
    }

    fn plan(&self, ctx: &PruneContext) -> Result<BackendPlan, PruneError> {
        native_plan(self, self.name(), ctx)
    }

    fn apply(&self, _ctx: &PruneContext, plan: &BackendPlan) -> Result<Applied, PruneError> {
        native_apply(self, plan)
    }
}

impl PruneBackend for Dnf {
    fn name(&self) -> &'static str {
        "dnf"
    }

    fn plan(&self, ctx: &PruneContext) -> Result<BackendPlan, PruneError> {
        native_plan(self, self.name(), ctx)
    }

    fn apply(&self, _ctx: &PruneContext, plan: &BackendPlan) -> Result<Applied, PruneError> {
        native_apply(self, plan)
    }
}
