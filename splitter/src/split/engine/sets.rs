//! Phase 3's split of the binaries: every archive set's binaries rewritten
//! host-only into the generic tree while their device code streams into
//! the set's archives, which are then placed in their device trees with the
//! set's `.kpm` in the generic one.

use std::fs::{self, File};
use std::path::Path;

use rocm_kpack_format::layout;

use super::{
    archive_report, mkdirs, parent_of, place, set_mode, set_mtime, BinaryReport, EngineError,
    Result, SplitOptions, SplitReport,
};
use crate::budget::{Permit, Work};
use crate::split::binary::{
    add_bundles, release_pages, split_fat_elf, ArchiveReport, ArchiveSet, CommittedArchives,
    ElfSplit, SplitElf, SplitError,
};
use crate::split::plan::{ArchiveSetPlan, BinaryPlan, Dest, SplitPlan};

struct SetOutput {
    binaries: Vec<BinaryReport>,
    archives: Vec<ArchiveReport>,
    manifests: Vec<String>,
}

/// Splits every archive set of `plan` into `root` (see [`run_sets`]) and
/// adds the binaries, archives and manifests written to `report`, in plan
/// order; the first failed set's error stops the run.
pub fn split_binaries(
    plan: &SplitPlan,
    root: &Path,
    opts: &SplitOptions,
    work: &Work,
    report: &mut SplitReport,
) -> Result<()> {
    for r in run_sets(plan, root, opts, work) {
        let r = r?;
        report.binaries.extend(r.binaries);
        report.archives.extend(r.archives);
        report.manifests.extend(r.manifests);
    }
    Ok(())
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
    .map_err(|e| EngineError::Invalid(e.to_string()))?;
    archive_set.set_memory(work.plan.in_flight, Some(std::sync::Arc::clone(&work.pool)));
    let queue = 2 * work.plan.in_flight as u64;
    let mut permit = work.budget.acquire(0);
    let mut binaries = Vec::with_capacity(set.binaries.len());
    for b in &set.binaries {
        let mut budget = SetBudget {
            permit: &mut permit,
            queue,
        };
        binaries.push(split_binary(
            b,
            set,
            &generic,
            &mut archive_set,
            &mut budget,
            opts,
        )?);
    }
    // The last archives' compression can outlast the last binary: say so.
    opts.progress
        .item_started(&format!("compressing the {} archives", set.component));
    let committed =
        archive_set
            .finish()
            .and_then(|p| p.commit())
            .map_err(|e| EngineError::Binary {
                path: scratch.clone(),
                source: Box::new(e),
            })?;
    let archives = place_archives(plan, set, &committed, root)?;
    let manifests = place_manifests(plan, set, &committed, root)?;
    fs::remove_dir_all(&scratch).map_err(|e| EngineError::io("cannot remove", &scratch, e))?;
    Ok(SetOutput {
        binaries,
        archives,
        manifests,
    })
}

/// A set's permit and the compression queue every resize of it carries.
struct SetBudget<'p, 'b> {
    permit: &'p mut Permit<'b>,
    queue: u64,
}

impl SetBudget<'_, '_> {
    /// Resizes the permit to `bytes` plus the queue. Waiting for more
    /// memory must not leave queued code objects unaccounted: they are
    /// written out first.
    fn resize(
        &mut self,
        bytes: u64,
        archive_set: &mut ArchiveSet<'_>,
        in_file: impl Fn(SplitError) -> EngineError,
    ) -> Result<()> {
        let bytes = self.queue + bytes;
        if bytes > self.permit.bytes() {
            archive_set.drain().map_err(in_file)?;
        }
        self.permit.resize(bytes);
        Ok(())
    }
}

/// Splits one binary of `set` into the generic tree `generic`: the host
/// part is written (or the input copied as is when it has nothing to
/// split), its bundles go to `archive_set`.
fn split_binary(
    b: &BinaryPlan,
    set: &ArchiveSetPlan,
    generic: &Path,
    archive_set: &mut ArchiveSet<'_>,
    budget: &mut SetBudget<'_, '_>,
    opts: &SplitOptions,
) -> Result<BinaryReport> {
    let in_file = |e: SplitError| EngineError::Binary {
        path: b.src.clone(),
        source: Box::new(e),
    };
    budget.resize(2 * b.size, archive_set, in_file)?;
    opts.progress.item_started(&b.out);
    let file = File::open(&b.src).map_err(|e| EngineError::io("cannot open", &b.src, e))?;
    // SAFETY: read-only private mapping of an input we never write.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| EngineError::io("cannot map", &b.src, e))?;
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
            budget.resize(
                split.host.memory() + split.streaming_memory(),
                archive_set,
                in_file,
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
                .map_err(|e| EngineError::io("cannot create", &dst, e))?;
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
                archive_set,
                &b.kernel_name,
                &bundles,
                |bytes| release_pages(&map, bytes),
                || opts.progress.code_objects(1),
            )
            .map_err(in_file)?;
        }
        ElfSplit::AlreadySplit(_) | ElfSplit::HostOnly => {
            fs::write(&dst, &map[..]).map_err(|e| EngineError::io("cannot write", &dst, e))?;
            release_pages(&map, &map);
        }
    }
    set_mode(&dst, b.mode)?;
    set_mtime(&dst, b.mtime)?;
    opts.progress.item_done(&b.out);
    Ok(rep)
}

/// Moves a committed set's archives into their device trees.
fn place_archives(
    plan: &SplitPlan,
    set: &ArchiveSetPlan,
    committed: &CommittedArchives,
    root: &Path,
) -> Result<Vec<ArchiveReport>> {
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
    Ok(archives)
}

/// Copies a committed set's `.kpm` into every manifest directory of the
/// generic tree the set names.
fn place_manifests(
    plan: &SplitPlan,
    set: &ArchiveSetPlan,
    committed: &CommittedArchives,
    root: &Path,
) -> Result<Vec<String>> {
    let mut manifests = Vec::new();
    if let Some(kpm) = &committed.manifest {
        let name = layout::manifest_file_name(&set.component);
        let generic_name = plan.layout.dir_name(&Dest::Generic);
        for dir in &set.manifest_dirs {
            let rel = format!("{generic_name}/{dir}/{name}");
            let to = root.join(&rel);
            mkdirs(parent_of(&to))?;
            fs::copy(kpm, &to).map_err(|e| EngineError::io("cannot write", &to, e))?;
            set_mode(&to, 0o644)?;
            set_mtime(&to, plan.generated_mtime)?;
            manifests.push(rel);
        }
    }
    Ok(manifests)
}
