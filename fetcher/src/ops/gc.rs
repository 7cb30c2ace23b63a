//! `gc`: archives this tool installed that are no longer needed: no
//! installed manifest lists them any more (the package was removed), or no
//! local target may load them (the GPU was removed).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{apply_removals, load_states, Kept, Removal, Removed};
use crate::detect::LocalTargets;
use crate::install::LockOptions;
use crate::plan::ItemKind;
use crate::resolve::{needs, Scan, ScanConfig};
use rocm_kpack_format::target::TargetId;

/// What `gc` found and did (its `--json` output).
#[derive(Debug, Serialize)]
pub struct GcReport {
    /// The targets archives were kept for.
    pub targets: Vec<String>,
    /// Archives no longer needed.
    pub candidates: Vec<Removal>,
    /// Those removed (none on a dry run).
    pub removed: Vec<PathBuf>,
    /// Database files kept because another installed manifest lists them.
    pub kept: Vec<Kept>,
    /// Only listed, nothing removed.
    pub dry_run: bool,
    /// Detection warnings and unreadable state files.
    pub warnings: Vec<String>,
}

/// Why an orphan goes.
const ORPHAN_REASON: &str = "no installed manifest lists it";

/// The archives rocm-kpack-fetch installed that no manifest of `scan`
/// lists any more: their package was removed (or replaced them). Needs no
/// targets; unreadable state files become warnings.
pub fn orphans(scan: &Scan, warnings: &mut Vec<String>) -> Vec<Removal> {
    let states = load_states(&scan.kpack_dirs, warnings);
    let mut out = Vec::new();
    for (dir, state) in &states {
        for (kind, filename, entry) in state.items() {
            if lister(scan, dir, kind, filename).is_none() {
                out.push(Removal {
                    kind,
                    kpack_dir: dir.clone(),
                    filename: filename.clone(),
                    component: entry.component.clone(),
                    size: entry.size,
                    reason: ORPHAN_REASON.to_string(),
                });
            }
        }
    }
    out
}

/// The manifest of `dir` that lists archive (or database file) `filename`,
/// with its index.
fn lister<'a>(
    scan: &'a Scan,
    dir: &Path,
    kind: ItemKind,
    filename: &str,
) -> Option<(&'a crate::resolve::InstalledManifest, usize)> {
    scan.manifests
        .iter()
        .filter(|m| m.kpack_dir == dir)
        .find_map(|m| {
            match kind {
                ItemKind::Archive => m
                    .manifest
                    .kpack_files
                    .iter()
                    .position(|f| f.filename == filename),
                ItemKind::Database => m
                    .manifest
                    .database_files
                    .iter()
                    .position(|f| f.path == filename),
            }
            .map(|i| (m, i))
        })
}

/// Removes the fetcher's own bookkeeping (state and lock file) from each
/// of `dirs` that holds no manifest and whose state file exists and
/// records no archive (first removing, once empty, the directories that
/// state records making), then the directory itself when that leaves it
/// empty: after the package that owned the manifests was removed, nothing
/// of rocm-kpack-fetch stays behind. A directory without a state file was
/// never written by this tool and is left alone. Everything happens under
/// the directory's [`DirLock`](crate::install::DirLock), so after the same
/// permission checks as `gc` (a symlinked or foreign-writable `.kpack` is
/// refused) and never while another run uses it. Returns the directories
/// removed.
pub fn tidy_abandoned(dirs: &[PathBuf], lock: LockOptions) -> Vec<PathBuf> {
    use crate::config::LOCK_FILE;
    let mut removed = Vec::new();
    for dir in dirs {
        // Cheap look first: most directories still hold manifests.
        if !abandoned(dir) {
            continue;
        }
        let held = match crate::install::lock_kpack_dir_quietly(dir, lock) {
            Ok(held) => held,
            Err(e) => {
                tracing::debug!("not tidying {}: {e}", dir.display());
                continue;
            }
        };
        if !abandoned(dir) {
            continue;
        }
        // Directories made for files that are gone but that were not
        // empty then go now, before their record does.
        if let Ok(mut state) = crate::state::State::load(dir) {
            crate::install::remove_all_created_dirs(dir, &mut state.created_dirs);
        }
        for file in [crate::state::State::path(dir), dir.join(LOCK_FILE)] {
            if let Err(e) = std::fs::remove_file(&file) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::debug!("{}: {e}", file.display());
                }
            }
        }
        drop(held);
        // Only an empty directory goes (rmdir never removes contents).
        if std::fs::remove_dir(dir).is_ok() {
            removed.push(dir.clone());
        }
    }
    removed
}

/// Whether `dir` holds no manifest and a state file (regular, valid) that
/// records no archive.
fn abandoned(dir: &Path) -> bool {
    use rocm_kpack_format::layout::MANIFEST_EXT;
    let has_manifest = std::fs::read_dir(dir).map_or(true, |entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == MANIFEST_EXT))
    });
    let state_exists =
        std::fs::symlink_metadata(crate::state::State::path(dir)).is_ok_and(|m| m.is_file());
    let empty_state = crate::state::State::load(dir).is_ok_and(|s| s.items().next().is_none());
    !has_manifest && state_exists && empty_state
}

/// The archives (and database files) rocm-kpack-fetch installed that no
/// manifest of `scan` lists, or that none of `keep` may load (generic-ISA
/// code a kept target loads stays); `keep_label` names the targets in the
/// reasons. Unreadable state files become warnings. Shared by `gc` (the
/// detected targets) and `prune` (those plus `--keep`).
pub fn unneeded(
    scan: &Scan,
    keep: &[TargetId],
    keep_label: &str,
    warnings: &mut Vec<String>,
) -> Vec<Removal> {
    let states = load_states(&scan.kpack_dirs, warnings);
    let mut candidates = Vec::new();
    for (dir, state) in &states {
        for (kind, filename, entry) in state.items() {
            let reason = match lister(scan, dir, kind, filename) {
                None => ORPHAN_REASON.to_string(),
                Some((m, i)) => {
                    let needed = match kind {
                        ItemKind::Archive => needs(&m.manifest, keep)
                            .archives
                            .iter()
                            .any(|n| n.index == i),
                        ItemKind::Database => m.manifest.database_files.get(i).is_some_and(|f| {
                            keep.iter().any(|t| {
                                f.architectures
                                    .iter()
                                    .any(|a| crate::resolve::arch_serves(t, a))
                            })
                        }),
                    };
                    if needed {
                        continue;
                    }
                    format!("no local target ({keep_label}) may load it")
                }
            };
            candidates.push(Removal {
                kind,
                kpack_dir: dir.clone(),
                filename: filename.clone(),
                component: entry.component.clone(),
                size: entry.size,
                reason,
            });
        }
    }
    candidates
}

/// `gc`, as the command line asked for it.
#[derive(Debug, Clone)]
pub struct GcRequest {
    /// The local targets: archives none of them may load go.
    pub local: LocalTargets,
    /// Where the installed manifests and `.kpack` directories are looked for.
    pub scan: ScanConfig,
    /// Remove (`--yes`); else only list.
    pub apply: bool,
    /// How the `.kpack` directories are locked.
    pub lock: LockOptions,
}

/// Why `gc` collected nothing.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// No local targets: every archive would go.
    #[error("no local targets: every archive would be collected")]
    NoTargets,
    /// Removing the collected archives failed.
    #[error(transparent)]
    Removal(#[from] super::RemovalError),
}

/// The one library call behind `gc`: scans, then [`gc`].
pub fn run(req: &GcRequest) -> Result<GcReport, GcError> {
    gc(&req.local, &req.scan.scan(), req.apply, req.lock)
}

/// Finds the archives rocm-kpack-fetch installed that no manifest of
/// `scan` lists or no target of `local` may load, and removes them when
/// `remove`. Refuses when there are no targets: every archive would go.
pub fn gc(
    local: &LocalTargets,
    scan: &Scan,
    remove: bool,
    lock: LockOptions,
) -> Result<GcReport, GcError> {
    if local.ids.is_empty() {
        return Err(GcError::NoTargets);
    }
    let mut warnings = local.detection.warnings.clone();
    let candidates = unneeded(
        scan,
        &local.ids,
        &local.detection.targets.join(", "),
        &mut warnings,
    );
    let done = if remove {
        apply_removals(&candidates, scan, lock)?
    } else {
        Removed::default()
    };
    Ok(GcReport {
        targets: local.detection.targets.clone(),
        candidates,
        removed: done.removed,
        kept: done.kept,
        dry_run: !remove,
        warnings,
    })
}
