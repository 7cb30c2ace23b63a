//! Split an install tree: every fat binary into a host-only binary plus
//! per-processor archives, kernel databases to their device tree, everything
//! else copied as is (symlinks as symlinks, hard links as hard links, modes
//! and mtimes kept). The output `OUT/generic/` and `OUT/<tree>/` trees
//! (a group's, holding `<component>_<processor>.kpack` for each of its
//! processors, or a generic ISA's, holding `<component>_<generic-isa>.kpack`)
//! occupy disjoint paths and overlay into a working install.
//!
//! Flow: [`crate::split::scan`] -> [`crate::split::plan`] -> [`execute`] into a staging
//! directory inside `OUT` -> [`Staging::publish`] renames the finished trees
//! into place, so a failed run leaves nothing behind. Files are processed in
//! parallel (rayon; `jobs` bounds the threads); output is deterministic.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use filetime::FileTime;
use rayon::prelude::*;
use rocm_kpack_format::layout;
use rocm_kpack_fs::{check_replaceable, copy_error, move_into_place, sync_tree, PathError};
use rocm_kpack_package::progress::ProgressHandle;
use rocm_kpack_pkgspec::{DatabaseClassifier, Spec, SpecError};
use serde::Serialize;

use crate::budget::Work;
use crate::split::binary::{
    add_bundles, release_pages, split_fat_elf, ArchiveReport, ArchiveSet, ElfSplit, SplitElf,
    SplitError,
};
use crate::split::output::ArchiveOutput;
use crate::split::plan::{
    self, Action, ArchiveSetPlan, Dest, KpackMode, Layout, PlanError, Root, SplitPlan,
};
use crate::split::scan::{self, ScanError};

/// Everything that can stop a tree, artifact or recombine run.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
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

impl TreeError {
    /// An I/O error with what was being done and the path.
    pub fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        TreeError::Io(PathError::new(what, path, source))
    }
}

/// Result type of tree operations.
pub type Result<T, E = TreeError> = std::result::Result<T, E>;

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
        self.output.work().map_err(TreeError::Invalid)
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

/// A staging directory inside the output directory; finished trees are
/// renamed into the output directory by [`Staging::publish`]. Dropping it
/// unpublished removes everything, including an output directory it created.
#[derive(Debug)]
pub struct Staging {
    dir: Option<tempfile::TempDir>,
    out: PathBuf,
    created_out: bool,
    replace: bool,
}

impl Staging {
    /// Checks `out` is usable for input `input` (not inside it), creates it
    /// if missing, and a staging directory in it.
    /// With `replace`, outputs that exist are replaced
    /// ([`move_into_place`]); without, they are refused before anything is
    /// written.
    pub fn new(input_paths: &[&Path], out: &Path, replace: bool) -> Result<Staging> {
        for input in input_paths {
            check_not_inside(input, out)?;
        }
        let created_out = !out.exists();
        fs::create_dir_all(out).map_err(|e| TreeError::io("cannot create directory", out, e))?;
        if !out.is_dir() {
            return Err(TreeError::Output {
                path: out.to_path_buf(),
                why: "exists and is not a directory".into(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix(".rocm-kpack-staging-")
            .tempdir_in(out)
            .map_err(|e| TreeError::io("cannot create a directory in", out, e))?;
        Ok(Staging {
            dir: Some(dir),
            out: out.to_path_buf(),
            created_out,
            replace,
        })
    }

    /// The staging directory.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(self.out.as_path(), |d| d.path())
    }

    /// Fails if `out/name` already exists, unless outputs are replaced.
    pub fn check_free(&self, name: &str) -> Result<()> {
        check_replaceable(&self.out.join(name), self.replace).map_err(TreeError::from)
    }

    /// Moves every child of the staging directory into the output
    /// directory (all names are checked first).
    pub fn publish(mut self) -> Result<Vec<String>> {
        let staging = self.path().to_path_buf();
        let mut names = Vec::new();
        for item in fs::read_dir(&staging).map_err(|e| TreeError::io("cannot list", &staging, e))? {
            let item = item.map_err(|e| TreeError::io("cannot list", &staging, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                names.push(name);
            }
        }
        names.sort();
        for n in &names {
            self.check_free(n)?;
        }
        // Everything written (host binaries, archives, copies) reaches the
        // disk before any of it becomes visible under its final name.
        for n in &names {
            sync_tree(&staging.join(n))?;
        }
        for n in &names {
            move_into_place(&staging.join(n), &self.out.join(n), self.replace)?;
        }
        self.created_out = false;
        Ok(names)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
        if self.created_out {
            let _ = fs::remove_dir(&self.out);
        }
    }
}

/// `out` must not be `input` or inside it (judged on canonical paths; `out`
/// may not exist yet).
pub fn check_not_inside(input: &Path, out: &Path) -> Result<()> {
    let input_c = fs::canonicalize(input).map_err(|e| TreeError::Input {
        path: input.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    // Canonicalize the longest existing ancestor of `out`.
    let abs = if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| TreeError::io("cannot determine", Path::new("current directory"), e))?
            .join(out)
    };
    let mut existing = abs.as_path();
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let canon = loop {
        match fs::canonicalize(existing) {
            Ok(c) => break c,
            Err(_) => {
                if let Some(name) = existing.file_name() {
                    rest.push(name);
                }
                match existing.parent() {
                    Some(p) => existing = p,
                    None => break PathBuf::from("/"),
                }
            }
        }
    };
    let mut full = canon;
    for r in rest.iter().rev() {
        full.push(r);
    }
    if full.starts_with(&input_c) {
        return Err(TreeError::Output {
            path: out.to_path_buf(),
            why: format!(
                "is inside the input {}; choose an output outside it",
                input.display()
            ),
        });
    }
    Ok(())
}

/// Splits the install tree `input` into `out/generic/` and `out/<tree>/`
/// (see the module docs). `out` is created if missing and must not hold
/// those names yet.
pub fn split_tree(input: &Path, out: &Path, opts: &SplitOptions) -> Result<SplitReport> {
    let meta = fs::metadata(input).map_err(|e| TreeError::Input {
        path: input.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    if !meta.is_dir() {
        return Err(TreeError::Input {
            path: input.to_path_buf(),
            why: "is not a directory (use `rocm-kpack split-binary` for one file)".into(),
        });
    }
    opts.spec.validate()?;
    let staging = Staging::new(&[input], out, opts.output.replace_existing)?;
    staging.check_free("generic")?;
    let work = opts.work()?;
    let plan = work.install(|| plan_tree(input, opts))?;
    let mut report = execute(&plan, staging.path(), opts, &work)?;
    staging.publish()?;
    report.input = input.to_path_buf();
    report.output = out.to_path_buf();
    Ok(report)
}

/// The plan for splitting the install tree `input` (nothing is written).
pub fn plan_tree(input: &Path, opts: &SplitOptions) -> Result<SplitPlan> {
    let classifier = DatabaseClassifier::new(&opts.spec)?;
    let scan = scan::scan(input, &classifier)?;
    Ok(plan::plan(
        &[Root {
            prefix: String::new(),
            scan: &scan,
        }],
        Layout::Tree,
        &KpackMode::Tree {
            component: opts.component.clone(),
            prefix_dirs: opts
                .prefix_dirs
                .iter()
                .map(|p| p.trim_matches('/').to_string())
                .collect(),
        },
        &opts.spec,
    )?)
}

fn set_mtime(path: &Path, t: FileTime) -> Result<()> {
    filetime::set_file_mtime(path, t).map_err(|e| TreeError::io("cannot set the time of", path, e))
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| TreeError::io("cannot set permissions of", path, e))
}

fn mkdirs(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|e| TreeError::io("cannot create directory", path, e))
}

fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
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
    let tree_dir = |dest: &Dest| root.join(plan.layout.dir_name(dest));
    let generic = tree_dir(&Dest::Generic);
    mkdirs(&generic)?;
    for e in &plan.entries {
        if e.action == Action::Mkdir {
            mkdirs(&tree_dir(&e.dest).join(&e.out))?;
        }
    }

    let copy_count = plan
        .entries
        .iter()
        .filter(|e| matches!(e.action, Action::Copy | Action::Symlink { .. }))
        .count();
    let binary_count: usize = plan.archive_sets.iter().map(|s| s.binaries.len()).sum();
    opts.progress
        .begin("split", "files", (copy_count + binary_count) as u64);
    let mut report = SplitReport::default();
    for r in run_sets(plan, root, opts, work) {
        let r = r?;
        report.binaries.extend(r.binaries);
        report.archives.extend(r.archives);
        report.manifests.extend(r.manifests);
    }

    // Copies and symlinks in parallel; hard links after their targets.
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
                            .map_err(|err| TreeError::Io(copy_error(&e.src, &dst, err)))?;
                        set_mode(&dst, e.mode)?;
                        set_mtime(&dst, e.mtime)
                    }
                    Action::Symlink { target } => {
                        std::os::unix::fs::symlink(target, &dst)
                            .map_err(|err| TreeError::io("cannot create symlink", &dst, err))?;
                        filetime::set_symlink_file_times(&dst, e.mtime, e.mtime)
                            .map_err(|err| TreeError::io("cannot set the time of", &dst, err))
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
                .map_err(|err| TreeError::io("cannot hard-link", &dst, err))?;
        }
    }

    report.warnings.extend(list_databases(plan, root)?);

    let trees = plan_trees(plan, root, &opts.spec);
    if let Layout::Artifact { .. } = plan.layout {
        write_artifact_manifests(plan, root, &trees)?;
    }
    let tree_paths: Vec<PathBuf> = trees.iter().map(|(n, _)| root.join(n)).collect();
    finish_dirs_with(&tree_paths, &plan.dirs, plan.generated_mtime)?;

    // Figures.
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
    Ok(report)
}

struct SetOutput {
    binaries: Vec<BinaryReport>,
    archives: Vec<ArchiveReport>,
    manifests: Vec<String>,
}

/// Runs every archive set of `plan`, as many at a time as there are worker
/// threads and the memory budget admits (each binary takes a permit: see
/// [`run_set`]). Results are in plan order, whatever ran when. Lanes are
/// plain threads, not pool workers: they block on permits and on their
/// writers' jobs, which the pool runs.
fn run_sets(
    plan: &SplitPlan,
    root: &Path,
    opts: &SplitOptions,
    work: &Work,
) -> Vec<Result<SetOutput>> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let sets = &plan.archive_sets;
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<SetOutput>>>> =
        Mutex::new((0..sets.len()).map(|_| None).collect());
    let lanes = work.plan.threads.min(sets.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..lanes {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(set) = sets.get(i) else { break };
                if failed.load(Ordering::SeqCst) {
                    break;
                }
                let r = run_set(plan, set, i, root, opts, work);
                if r.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                if let Some(slot) = results
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_mut(i)
                {
                    *slot = Some(r);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Sets after a failure never ran: the first error explains the run.
    results.into_iter().map_while(|r| r).collect()
}

/// Splits one archive set's binaries and places its archives and manifest.
/// Each binary holds a permit for what it costs while it is split: at
/// first its file size twice (the input pages the rewrite reads and the
/// host-only copy it makes), then exactly its host-only bytes and the
/// memory its bundles stream in; the set's compression queue is in every
/// permit.
fn run_set(
    plan: &SplitPlan,
    set: &ArchiveSetPlan,
    index: usize,
    root: &Path,
    opts: &SplitOptions,
    work: &Work,
) -> Result<SetOutput> {
    let scratch = root.join(format!(".set-{index}"));
    mkdirs(&scratch)?;
    let generic = root.join(plan.layout.dir_name(&Dest::Generic));
    let mut archive_set = ArchiveSet::new(
        &scratch,
        &set.component,
        &opts.spec,
        opts.output.scheme(),
        opts.output.zstd_level,
    )
    .map_err(|e| TreeError::Invalid(e.to_string()))?;
    archive_set.set_memory(work.plan.in_flight, Some(std::sync::Arc::clone(&work.pool)));
    let queue = 2 * work.plan.in_flight as u64;
    let mut permit = work.budget.acquire(0);
    let mut binaries = Vec::with_capacity(set.binaries.len());
    for b in &set.binaries {
        let in_file = |e: SplitError| TreeError::Binary {
            path: b.src.clone(),
            source: Box::new(e),
        };
        // Waiting for more memory must not leave queued code objects
        // unaccounted: write them out first.
        let mut resize = |bytes: u64, archive_set: &mut ArchiveSet<'_>| -> Result<()> {
            if bytes > permit.bytes() {
                archive_set.drain().map_err(in_file)?;
            }
            permit.resize(bytes);
            Ok(())
        };
        resize(queue + 2 * b.size, &mut archive_set)?;
        opts.progress.item_started(&b.out);
        let file = File::open(&b.src).map_err(|e| TreeError::io("cannot open", &b.src, e))?;
        // SAFETY: read-only private mapping of an input we never write.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| TreeError::io("cannot map", &b.src, e))?;
        let dst = generic.join(&b.out);
        mkdirs(parent_of(&dst))?;
        let mut rep = BinaryReport {
            path: b.out.clone(),
            component: set.component.clone(),
            kernel_name: b.kernel_name.clone(),
            bundles: 0,
            code_objects: 0,
            input_size: b.size,
            output_size: b.size,
            notes: Vec::new(),
        };
        match split_fat_elf(&map, &b.kernel_name, b.search_paths.clone()).map_err(in_file)? {
            ElfSplit::Split(split) => {
                release_pages(&map, &map);
                resize(
                    queue + split.host.memory() + split.streaming_memory(),
                    &mut archive_set,
                )?;
                let SplitElf {
                    host,
                    bundles,
                    notes,
                    ..
                } = split;
                // The host part first: its pages of the input are read
                // once, and a rewrite that fails verification stops the
                // split before any device code is compressed.
                // Read back for the verification: read and write.
                let mut out = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&dst)
                    .map_err(|e| TreeError::io("cannot create", &dst, e))?;
                host.write_into(&mut out, &dst).map_err(in_file)?;
                drop(out);
                release_pages(&map, &map);
                rep.output_size = host.len();
                rep.notes = notes;
                archive_set
                    .check_targets(bundles.iter().flat_map(|bu| bu.targets().map(|(t, _)| t)))
                    .map_err(in_file)?;
                rep.bundles = bundles.len();
                rep.code_objects = add_bundles(
                    &mut archive_set,
                    &b.kernel_name,
                    &bundles,
                    |bytes| release_pages(&map, bytes),
                    || opts.progress.code_objects(1),
                )
                .map_err(in_file)?;
            }
            ElfSplit::AlreadySplit(_) | ElfSplit::HostOnly => {
                fs::write(&dst, &map[..]).map_err(|e| TreeError::io("cannot write", &dst, e))?;
                release_pages(&map, &map);
            }
        }
        set_mode(&dst, b.mode)?;
        set_mtime(&dst, b.mtime)?;
        opts.progress.item_done(&b.out);
        binaries.push(rep);
    }
    // The last archives' compression can outlast the last binary: say so.
    opts.progress
        .item_started(&format!("compressing the {} archives", set.component));
    let committed =
        archive_set
            .finish()
            .and_then(|p| p.commit())
            .map_err(|e| TreeError::Binary {
                path: scratch.clone(),
                source: Box::new(e),
            })?;
    let mut archives = Vec::new();
    for a in &committed.archives {
        let file_name = a
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tree = plan.layout.dir_name(&Dest::Group(a.group.clone()));
        let rel = format!("{tree}/{}/{file_name}", set.archive_dir);
        let to = root.join(&rel);
        place(&a.path, &to, plan.generated_mtime)?;
        archives.push(archive_report(a, rel));
    }
    let mut manifests = Vec::new();
    if let Some(kpm) = &committed.manifest {
        let name = layout::manifest_file_name(&set.component);
        let generic_name = plan.layout.dir_name(&Dest::Generic);
        for dir in &set.manifest_dirs {
            let rel = format!("{generic_name}/{dir}/{name}");
            let to = root.join(&rel);
            mkdirs(parent_of(&to))?;
            fs::copy(kpm, &to).map_err(|e| TreeError::io("cannot write", &to, e))?;
            set_mode(&to, 0o644)?;
            set_mtime(&to, plan.generated_mtime)?;
            manifests.push(rel);
        }
    }
    fs::remove_dir_all(&scratch).map_err(|e| TreeError::io("cannot remove", &scratch, e))?;
    Ok(SetOutput {
        binaries,
        archives,
        manifests,
    })
}

/// Lists every kernel-database file the plan moved to a device tree in the
/// `.kpm` of the archive set whose prefix (the directory holding its
/// `.kpack/`) is the deepest one above the file, so the fetcher can fetch
/// it (docs/formats.md section 3). Where several components share that
/// prefix, the one whose name (without `lib`) is a component of the file's
/// path takes it, else the first. A file below no prefix (Debian's MIOpen
/// databases in `usr/share/miopen/db/`, its library in `usr/lib/<triplet>/`)
/// goes to the manifest so named, or to the only component there is: that
/// manifest then declares its prefix's path in the tree (`prefix_path`,
/// format version 3) and lists every database path from the tree's root.
/// Returns a warning per database file no manifest covers (it still ships
/// in its device tree).
fn list_databases(plan: &SplitPlan, root: &Path) -> Result<Vec<String>> {
    let generic = root.join(plan.layout.dir_name(&Dest::Generic));
    // (prefix, component, manifest path) of every manifest written.
    let mut manifests: Vec<(String, &str, PathBuf)> = Vec::new();
    for set in &plan.archive_sets {
        for d in &set.manifest_dirs {
            let path = generic
                .join(d)
                .join(layout::manifest_file_name(&set.component));
            if path.is_file() {
                let prefix = d.rsplit_once('/').map_or("", |(p, _)| p).to_string();
                manifests.push((prefix, set.component.as_str(), path));
            }
        }
    }
    // (out path, family, arch, size, sha256) per manifest index.
    let mut listed: BTreeMap<usize, Vec<(&str, rocm_kpack_format::manifest::DatabaseFile)>> =
        BTreeMap::new();
    let mut warnings = Vec::new();
    for e in &plan.entries {
        let (Dest::Group(family), Some(arch)) = (&e.dest, &e.database_arch) else {
            continue;
        };
        if !matches!(e.action, Action::Copy | Action::HardLink { .. }) {
            continue;
        }
        let under = |p: &str| p.is_empty() || e.out.starts_with(&format!("{p}/"));
        let deepest = manifests
            .iter()
            .filter(|(p, _, _)| under(p))
            .map(|(p, _, _)| p.len())
            .max();
        let candidates: Vec<usize> = (0..manifests.len())
            .filter(|&i| {
                manifests
                    .get(i)
                    .is_some_and(|(p, _, _)| under(p) && Some(p.len()) == deepest)
            })
            .collect();
        let named = |i: &&usize| {
            manifests.get(**i).is_some_and(|(_, c, _)| {
                let stem = c.strip_prefix("lib").unwrap_or(c).to_ascii_lowercase();
                e.out
                    .split('/')
                    .any(|part| part.to_ascii_lowercase() == stem)
            })
        };
        // Above every prefix: only in a package tree (an artifact's
        // prefixes are its install roots), and only to a component the
        // path names or the only one there is.
        let above = || {
            if !plan.prefixes.is_empty() {
                return None;
            }
            let all: Vec<usize> = (0..manifests.len()).collect();
            let mut components: Vec<&str> = manifests.iter().map(|(_, c, _)| *c).collect();
            components.sort_unstable();
            components.dedup();
            all.iter()
                .find(named)
                .or(all.first().filter(|_| components.len() == 1))
                .copied()
        };
        let Some(index) = candidates
            .iter()
            .find(named)
            .or(candidates.first())
            .copied()
            .or_else(above)
        else {
            warnings.push(format!(
                "{}: kernel database not below any .kpack manifest's prefix, and no component's name is in its path; it ships in the {family} tree but `rocm-kpack-fetch` cannot fetch it",
                e.out
            ));
            continue;
        };
        let file = root.join(plan.layout.dir_name(&e.dest)).join(&e.out);
        let (size, sha256) = fs::File::open(&file)
            .and_then(rocm_kpack_fs::sha256_reader)
            .map_err(|err| TreeError::io("cannot read back", &file, err))?;
        listed.entry(index).or_default().push((
            e.out.as_str(),
            rocm_kpack_format::manifest::DatabaseFile {
                path: String::new(),
                family: family.clone(),
                architectures: vec![arch.clone()],
                size,
                sha256,
            },
        ));
    }
    for (index, files) in listed {
        let Some((prefix, _, path)) = manifests.get(index) else {
            continue;
        };
        let format_err = |source| TreeError::Format {
            path: path.clone(),
            source,
        };
        let mut m = rocm_kpack_format::manifest::Manifest::read(path).map_err(format_err)?;
        let below = |out: &str| prefix.is_empty() || out.starts_with(&format!("{prefix}/"));
        // Only files the fetcher will install where they go
        // (`check_fetchable`); the others still ship in their device tree.
        let mut files = files;
        files.retain(|(out, f)| {
            let checked = if below(out) {
                let rel = out.get(prefix.len()..).unwrap_or(out);
                rocm_kpack_pkgspec::check_fetchable(None, rel.trim_start_matches('/'), &f.architectures)
            } else {
                rocm_kpack_pkgspec::check_fetchable(Some(prefix.as_str()), out, &f.architectures)
            };
            checked
                .map_err(|e| {
                    warnings.push(format!(
                        "{out}: kernel database not listed in {}: {e}; it ships in the {} tree but `rocm-kpack-fetch` cannot fetch it",
                        path.display(),
                        f.family
                    ));
                })
                .is_ok()
        });
        if files.is_empty() {
            continue;
        }
        // One root for the whole manifest: the tree's, when any file lies
        // outside the prefix.
        let rooted = files.iter().any(|(out, _)| !below(out));
        m.prefix_path = rooted.then(|| prefix.clone());
        m.database_files = files
            .into_iter()
            .map(|(out, mut f)| {
                f.path = if rooted {
                    out.to_string()
                } else {
                    out.strip_prefix(prefix.as_str())
                        .map_or(out, |r| r.trim_start_matches('/'))
                        .to_string()
                };
                f
            })
            .collect();
        m.database_files.sort_by(|a, b| a.path.cmp(&b.path));
        let bytes = m.to_msgpack().map_err(format_err)?;
        fs::write(path, bytes).map_err(|err| TreeError::io("cannot write", path, err))?;
        set_mode(path, 0o644)?;
        set_mtime(path, plan.generated_mtime)?;
    }
    Ok(warnings)
}

/// Moves a finished archive into its tree (mode 0644, generated mtime).
pub fn place(from: &Path, to: &Path, mtime: FileTime) -> Result<()> {
    mkdirs(parent_of(to))?;
    // Durable before it is visible under its final name.
    rocm_kpack_fs::rename_durably(from, to)?;
    set_mode(to, 0o644)?;
    set_mtime(to, mtime)
}

/// Report entry for one committed archive, now at `rel`.
pub fn archive_report(a: &ArchiveReport, rel: String) -> ArchiveReport {
    ArchiveReport {
        path: rel.into(),
        ..a.clone()
    }
}

/// The output trees of `plan` that exist under `root`: generic first, then
/// the spec's device trees in order ([`Spec::trees`]).
pub fn plan_trees(plan: &SplitPlan, root: &Path, spec: &Spec) -> Vec<(String, Dest)> {
    std::iter::once(Dest::Generic)
        .chain(spec.trees().into_iter().map(Dest::Group))
        .map(|d| (plan.layout.dir_name(&d), d))
        .filter(|(n, _)| root.join(n).is_dir())
        .collect()
}

/// `artifact_manifest.txt` of every artifact output: the generic one lists
/// every stage prefix, a device one the prefixes it holds content under.
fn write_artifact_manifests(plan: &SplitPlan, root: &Path, trees: &[(String, Dest)]) -> Result<()> {
    for (name, dest) in trees {
        let dir = root.join(name);
        let prefixes: Vec<&str> = plan
            .prefixes
            .iter()
            .map(String::as_str)
            .filter(|p| *dest == Dest::Generic || dir.join(p).exists())
            .collect();
        write_manifest_txt(&dir, &prefixes, plan.generated_mtime)?;
    }
    Ok(())
}

/// Writes `artifact_manifest.txt` into `dir` (one prefix per line).
pub fn write_manifest_txt(dir: &Path, prefixes: &[&str], mtime: FileTime) -> Result<()> {
    let path = dir.join(crate::split::artifact::MANIFEST_TXT);
    let mut text = String::new();
    for p in prefixes {
        text.push_str(p);
        text.push('\n');
    }
    fs::write(&path, text).map_err(|e| TreeError::io("cannot write", &path, e))?;
    set_mode(&path, 0o644)?;
    set_mtime(&path, mtime)
}

/// Gives every directory of the trees `trees` the input directory's mode
/// and mtime from `dirs` (tree-relative paths; others, generated ones: 0755
/// and `generated`), deepest first so that read-only modes do not get in
/// the way.
pub fn finish_dirs_with(
    trees: &[PathBuf],
    dirs: &BTreeMap<String, (u32, FileTime)>,
    generated: FileTime,
) -> Result<()> {
    for tree in trees {
        for d in walkdir::WalkDir::new(tree)
            .contents_first(true)
            .follow_links(false)
        {
            let d = d.map_err(|e| {
                let p = e.path().unwrap_or(tree).to_path_buf();
                TreeError::io(
                    "cannot list",
                    &p,
                    e.into_io_error()
                        .unwrap_or_else(|| io::Error::other("walk")),
                )
            })?;
            if !d.file_type().is_dir() {
                continue;
            }
            let rel = d
                .path()
                .strip_prefix(tree)
                .ok()
                .and_then(|r| r.to_str())
                .unwrap_or_default();
            let (mode, mtime) = if rel.is_empty() {
                (0o755, generated)
            } else {
                dirs.get(rel).copied().unwrap_or((0o755, generated))
            };
            set_mode(d.path(), mode | 0o700)?;
            set_mtime(d.path(), mtime)?;
            if mode & 0o700 != 0o700 {
                set_mode(d.path(), mode)?;
            }
        }
    }
    Ok(())
}

/// Regular files and their bytes under `dir` (symlinks not followed).
pub fn tree_size(dir: &Path) -> (usize, u64) {
    let mut files = 0;
    let mut bytes = 0;
    for e in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
    {
        if e.file_type().is_file() {
            files += 1;
            bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    (files, bytes)
}
