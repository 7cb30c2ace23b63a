//! The engine every split runs on: tree ([`crate::split::tree`]), artifact
//! and batch ([`crate::split::artifact`]) plan their input and hand the plan
//! to a [`Run`]; recombine ([`crate::split::recombine`]) uses its
//! [`Staging`] and finishing steps. The engine imports none of them.
//!
//! A run's phases, in order:
//! 1. [`Run::start`]: check the output, make a [`Staging`] directory inside
//!    it, size the [`Work`] (threads, memory budget).
//! 2. Scan and plan: the caller's ([`crate::split::scan`] ->
//!    [`crate::split::plan`]), inside [`Run::work`]'s pool.
//! 3. [`Run::execute`] = [`execute`] into the staging directory:
//!    [`make_dirs`] -> [`split_binaries`] (rewrite each host binary, stream
//!    its device code into archives, place them and their `.kpm`) ->
//!    [`copy_entries`] -> [`list_databases`] -> [`write_artifact_manifests`]
//!    (artifact layout) -> [`finish_dirs_with`] -> [`tally`].
//! 4. [`Run::commit`]: [`Staging::publish`] renames the finished trees into
//!    place, so a failed run leaves nothing behind.
//!
//! Files are processed in parallel (rayon; `jobs` bounds the threads);
//! output is deterministic.

mod databases;
mod finish;
mod sets;
mod staging;

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use filetime::FileTime;
use rayon::prelude::*;
use rocm_kpack_fs::{copy_error, PathError};
use rocm_kpack_package::progress::ProgressHandle;
use rocm_kpack_pkgspec::{Spec, SpecError};
use serde::Serialize;

use crate::budget::Work;
use crate::split::binary::{ArchiveReport, SplitError};
use crate::split::output::ArchiveOutput;
use crate::split::plan::{Action, Dest, Layout, PlanError, SplitPlan};
use crate::split::scan::ScanError;

pub use databases::list_databases;
pub use finish::{
    archive_report, finish_dirs_with, place, plan_trees, tree_size, write_artifact_manifests,
    write_manifest_txt, MANIFEST_TXT,
};
pub use sets::split_binaries;
pub use staging::{check_not_inside, Staging};

/// Everything that can stop a tree, artifact or recombine run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The input does not exist or is not what was expected.
    #[error("{}: {why}", path.display())]
    Input { path: PathBuf, why: String },
    /// The output location is unusable (inside the input, already there).
    #[error("{}: {why}", path.display())]
    Output { path: PathBuf, why: String },
    /// Scanning the input failed.
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The plan cannot be made (database arch, kpack files in the input).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The spec is invalid or does not cover a target.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Splitting one binary failed.
    #[error("{}", path.display())]
    Binary {
        path: PathBuf,
        #[source]
        source: Box<SplitError>,
    },
    /// A kpack archive or manifest could not be read or written.
    #[error("{}", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: rocm_kpack_format::Error,
    },
    /// A file system operation failed.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
    /// Recombine: shards disagree (generic files, duplicate device code,
    /// missing device code) as the spec's validation switches say to fail.
    #[error("{0}")]
    Conflict(String),
    /// Bad arguments.
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// An I/O error with what was being done and the path.
    pub fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        EngineError::Io(PathError::new(what, path, source))
    }
}

/// Result type of tree operations.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// How to split.
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// Device groups (archives go to [`Spec::placement`]), database rules.
    pub spec: Spec,
    /// Tree: one component for every binary (default: per file name).
    /// Artifact: overrides `<name>_<component>` from the directory name.
    pub component: Option<String>,
    /// Tree: explicit kpack roots (tree-relative); see [`crate::split::plan`].
    pub prefix_dirs: Vec<String>,
    /// How the archives are written. Default: [`ArchiveOutput::release`],
    /// since trees and artifacts are what users download.
    pub output: ArchiveOutput,
    /// Where progress goes (per input file, per code object).
    pub progress: ProgressHandle,
}

impl SplitOptions {
    /// The threads and memory budget of a split with these options.
    pub fn work(&self) -> Result<Work> {
        self.output.work().map_err(EngineError::Invalid)
    }
}

impl Default for SplitOptions {
    fn default() -> Self {
        SplitOptions {
            spec: Spec::builtin(),
            component: None,
            prefix_dirs: Vec::new(),
            output: ArchiveOutput::release(),
            progress: ProgressHandle::default(),
        }
    }
}

/// One split binary.
#[derive(Debug, Clone, Serialize)]
pub struct BinaryReport {
    /// Path in the generic tree.
    pub path: String,
    pub component: String,
    pub kernel_name: String,
    /// Bundles (= co_index values).
    pub bundles: usize,
    pub code_objects: usize,
    pub input_size: u64,
    pub output_size: u64,
    /// What the split changed beyond the device code (a PE image's
    /// Authenticode signature removed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One output tree.
#[derive(Debug, Clone, Serialize)]
pub struct OutputTree {
    /// Directory name under the output directory.
    pub name: String,
    /// `generic` or the device tree.
    pub dest: Dest,
    /// Regular files in it.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// What a split did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SplitReport {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Output trees, generic first.
    pub outputs: Vec<OutputTree>,
    pub binaries: Vec<BinaryReport>,
    pub archives: Vec<ArchiveReport>,
    /// `.kpm` manifests written (relative to the output directory).
    pub manifests: Vec<String>,
    /// Database files moved to a device tree: (output path, tree, arch).
    pub databases: Vec<(String, String, String)>,
    /// Files copied unchanged (databases included).
    pub copied: usize,
    pub symlinks: usize,
    pub hard_links: usize,
    /// Regular files read.
    pub files_in: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub warnings: Vec<String>,
}

impl SplitReport {
    /// Adds another report's figures (batch mode).
    pub fn absorb(&mut self, other: SplitReport) {
        self.outputs.extend(other.outputs);
        self.binaries.extend(other.binaries);
        self.archives.extend(other.archives);
        self.manifests.extend(other.manifests);
        self.databases.extend(other.databases);
        self.copied += other.copied;
        self.symlinks += other.symlinks;
        self.hard_links += other.hard_links;
        self.files_in += other.files_in;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.warnings.extend(other.warnings);
    }
}

/// One split run: the staging directory its outputs are written into and
/// the threads and memory it may use. Tree, artifact and batch splits are
/// [`Run::start`], a plan per input, [`Run::execute`] per plan, then
/// [`Run::commit`].
#[derive(Debug)]
pub struct Run {
    // Dropped before the staging directory, as the split functions always
    // did: nothing of the pool is still at work when it is removed.
    work: Work,
    staging: Staging,
}

impl Run {
    /// Checks `out` against `inputs` and creates the staging directory in
    /// it ([`Staging::new`]), refuses the output names in `reserved` that
    /// exist already (unless outputs are replaced), and sizes the work.
    pub fn start(
        inputs: &[&Path],
        out: &Path,
        opts: &SplitOptions,
        reserved: &[&str],
    ) -> Result<Run> {
        let staging = Staging::new(inputs, out, opts.output.replace_existing)?;
        for name in reserved {
            staging.check_free(name)?;
        }
        let work = opts.work()?;
        Ok(Run { work, staging })
    }

    /// The threads and memory budget of this run; plan inside its pool.
    pub fn work(&self) -> &Work {
        &self.work
    }

    /// Executes `plan` into the staging directory, once its generic tree's
    /// name is known to be free.
    pub fn execute(&self, plan: &SplitPlan, opts: &SplitOptions) -> Result<SplitReport> {
        self.staging
            .check_free(&plan.layout.dir_name(&Dest::Generic))?;
        execute(plan, self.staging.path(), opts, &self.work)
    }

    /// Publishes the finished trees and says where they came from and went.
    pub fn commit(self, mut report: SplitReport, input: &Path, out: &Path) -> Result<SplitReport> {
        self.staging.publish()?;
        report.input = input.to_path_buf();
        report.output = out.to_path_buf();
        Ok(report)
    }
}

/// Executes `plan` into `root` (a staging directory): one directory per
/// output tree, named by the plan's layout. Returns what was written
/// (paths relative to `root`). Call it outside `work`'s pool: archive sets
/// run on threads of their own that wait for memory permits.
pub fn execute(
    plan: &SplitPlan,
    root: &Path,
    opts: &SplitOptions,
    work: &Work,
) -> Result<SplitReport> {
    make_dirs(plan, root)?;
    begin_progress(plan, opts);
    let mut report = SplitReport::default();
    split_binaries(plan, root, opts, work, &mut report)?;
    copy_entries(plan, root, opts, work)?;
    report.warnings.extend(list_databases(plan, root)?);
    let trees = plan_trees(plan, root, &opts.spec);
    if let Layout::Artifact { .. } = plan.layout {
        write_artifact_manifests(plan, root, &trees)?;
    }
    let tree_paths: Vec<PathBuf> = trees.iter().map(|(n, _)| root.join(n)).collect();
    finish_dirs_with(&tree_paths, &plan.dirs, plan.generated_mtime)?;
    tally(plan, root, trees, &mut report);
    Ok(report)
}

/// The generic tree and every directory the plan makes.
pub fn make_dirs(plan: &SplitPlan, root: &Path) -> Result<()> {
    mkdirs(&root.join(plan.layout.dir_name(&Dest::Generic)))?;
    for e in &plan.entries {
        if e.action == Action::Mkdir {
            mkdirs(&root.join(plan.layout.dir_name(&e.dest)).join(&e.out))?;
        }
    }
    Ok(())
}

/// One progress item per copy, symlink and binary.
fn begin_progress(plan: &SplitPlan, opts: &SplitOptions) {
    let copy_count = plan
        .entries
        .iter()
        .filter(|e| matches!(e.action, Action::Copy | Action::Symlink { .. }))
        .count();
    let binary_count: usize = plan.archive_sets.iter().map(|s| s.binaries.len()).sum();
    opts.progress
        .begin("split", "files", (copy_count + binary_count) as u64);
}

/// Copies and symlinks in parallel; hard links after their targets.
pub fn copy_entries(plan: &SplitPlan, root: &Path, opts: &SplitOptions, work: &Work) -> Result<()> {
    let tree_dir = |dest: &Dest| root.join(plan.layout.dir_name(dest));
    let copies: Vec<Result<()>> = work.install(|| {
        plan.entries
            .par_iter()
            .filter(|e| matches!(e.action, Action::Copy | Action::Symlink { .. }))
            .map(|e| {
                let dst = tree_dir(&e.dest).join(&e.out);
                mkdirs(parent_of(&dst))?;
                match &e.action {
                    Action::Copy => {
                        fs::copy(&e.src, &dst)
                            .map_err(|err| EngineError::Io(copy_error(&e.src, &dst, err)))?;
                        set_mode(&dst, e.mode)?;
                        set_mtime(&dst, e.mtime)
                    }
                    Action::Symlink { target } => {
                        std::os::unix::fs::symlink(target, &dst)
                            .map_err(|err| EngineError::io("cannot create symlink", &dst, err))?;
                        filetime::set_symlink_file_times(&dst, e.mtime, e.mtime)
                            .map_err(|err| EngineError::io("cannot set the time of", &dst, err))
                    }
                    _ => Ok(()),
                }?;
                opts.progress.item_done(&e.out);
                Ok(())
            })
            .collect()
    });
    copies.into_iter().collect::<Result<Vec<()>>>()?;
    for e in &plan.entries {
        if let Action::HardLink { to } = &e.action {
            let base = tree_dir(&e.dest);
            let dst = base.join(&e.out);
            mkdirs(parent_of(&dst))?;
            fs::hard_link(base.join(to), &dst)
                .map_err(|err| EngineError::io("cannot hard-link", &dst, err))?;
        }
    }
    Ok(())
}

/// The report's figures: what the plan copied and linked, what was read,
/// and the output trees `trees` as written.
pub fn tally(plan: &SplitPlan, root: &Path, trees: Vec<(String, Dest)>, report: &mut SplitReport) {
    for e in &plan.entries {
        match &e.action {
            Action::Copy => {
                report.copied += 1;
                report.files_in += 1;
                report.bytes_in += e.size;
                if let (Dest::Group(g), Some(arch)) = (&e.dest, &e.database_arch) {
                    report
                        .databases
                        .push((e.out.clone(), g.clone(), arch.clone()));
                }
            }
            Action::Symlink { .. } => report.symlinks += 1,
            Action::HardLink { .. } => report.hard_links += 1,
            Action::Mkdir => {}
        }
    }
    for set in &plan.archive_sets {
        report.files_in += set.binaries.len();
        report.bytes_in += set.binaries.iter().map(|b| b.size).sum::<u64>();
    }
    report.warnings.extend(plan.warnings.iter().cloned());
    report.outputs = trees
        .into_iter()
        .map(|(name, dest)| {
            let (files, bytes) = tree_size(&root.join(&name));
            OutputTree {
                name,
                dest,
                files,
                bytes,
            }
        })
        .collect();
    report.bytes_out = report.outputs.iter().map(|o| o.bytes).sum();
}

pub(crate) fn set_mtime(path: &Path, t: FileTime) -> Result<()> {
    filetime::set_file_mtime(path, t)
        .map_err(|e| EngineError::io("cannot set the time of", path, e))
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| EngineError::io("cannot set permissions of", path, e))
}

pub(crate) fn mkdirs(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|e| EngineError::io("cannot create directory", path, e))
}

pub(crate) fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}
