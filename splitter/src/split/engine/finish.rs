//! Phase 3's finishing steps, shared with recombine: archives placed,
//! `artifact_manifest.txt` written, directory modes and times restored,
//! output trees measured.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use filetime::FileTime;
use rocm_kpack_pkgspec::Spec;

use super::{mkdirs, parent_of, set_mode, set_mtime, EngineError, Result};
use crate::split::binary::ArchiveReport;
use crate::split::plan::{Dest, SplitPlan};

/// The file listing an artifact's stage prefixes.
pub const MANIFEST_TXT: &str = "artifact_manifest.txt";

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
pub fn write_artifact_manifests(
    plan: &SplitPlan,
    root: &Path,
    trees: &[(String, Dest)],
) -> Result<()> {
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
    let path = dir.join(MANIFEST_TXT);
    let mut text = String::new();
    for p in prefixes {
        text.push_str(p);
        text.push('\n');
    }
    fs::write(&path, text).map_err(|e| EngineError::io("cannot write", &path, e))?;
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
                EngineError::io(
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
