//! Phase 3's database lists: kernel databases moved to a device tree are
//! listed in a `.kpm` of the generic tree, so the fetcher can fetch them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{DatabaseFile, Manifest};

use super::{set_mode, set_mtime, EngineError, Result};
use crate::split::plan::{Action, Dest, PlannedEntry, SplitPlan};

/// A `.kpm` written: (prefix, component, its path).
type Kpm<'p> = (String, &'p str, PathBuf);

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
pub fn list_databases(plan: &SplitPlan, root: &Path) -> Result<Vec<String>> {
    let manifests = manifests_written(plan, root);
    // (out path, family, arch, size, sha256) per manifest index.
    let mut listed: BTreeMap<usize, Vec<(&str, DatabaseFile)>> = BTreeMap::new();
    let mut warnings = Vec::new();
    for e in &plan.entries {
        let (Dest::Group(family), Some(arch)) = (&e.dest, &e.database_arch) else {
            continue;
        };
        if !matches!(e.action, Action::Copy | Action::HardLink { .. }) {
            continue;
        }
        let Some(index) = manifest_for(plan, &manifests, e) else {
            warnings.push(format!(
                "{}: kernel database not below any .kpack manifest's prefix, and no component's name is in its path; it ships in the {family} tree but `rocm-kpack-fetch` cannot fetch it",
                e.out
            ));
            continue;
        };
        let file = root.join(plan.layout.dir_name(&e.dest)).join(&e.out);
        let (size, sha256) = fs::File::open(&file)
            .and_then(rocm_kpack_fs::sha256_reader)
            .map_err(|err| EngineError::io("cannot read back", &file, err))?;
        listed.entry(index).or_default().push((
            e.out.as_str(),
            DatabaseFile {
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
        write_database_list(plan, prefix, path, files, &mut warnings)?;
    }
    Ok(warnings)
}

/// Every `.kpm` the plan's archive sets wrote into the generic tree.
fn manifests_written<'p>(plan: &'p SplitPlan, root: &Path) -> Vec<Kpm<'p>> {
    let generic = root.join(plan.layout.dir_name(&Dest::Generic));
    let mut manifests: Vec<Kpm<'p>> = Vec::new();
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
    manifests
}

/// The index in `manifests` of the `.kpm` that lists the database `e`
/// (see [`list_databases`]), if any.
fn manifest_for(plan: &SplitPlan, manifests: &[Kpm<'_>], e: &PlannedEntry) -> Option<usize> {
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
    candidates
        .iter()
        .find(named)
        .or(candidates.first())
        .copied()
        .or_else(above)
}

/// Rewrites the `.kpm` at `path` (of the set whose prefix is `prefix`)
/// with the database files `files` the fetcher can install; a warning per
/// file it cannot goes to `warnings`.
fn write_database_list(
    plan: &SplitPlan,
    prefix: &str,
    path: &Path,
    files: Vec<(&str, DatabaseFile)>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let format_err = |source| EngineError::Format {
        path: path.to_path_buf(),
        source,
    };
    let mut m = Manifest::read(path).map_err(format_err)?;
    let below = |out: &str| prefix.is_empty() || out.starts_with(&format!("{prefix}/"));
    // Only files the fetcher will install where they go
    // (`check_fetchable`); the others still ship in their device tree.
    let mut files = files;
    files.retain(|(out, f)| {
        let checked = if below(out) {
            let rel = out.get(prefix.len()..).unwrap_or(out);
            rocm_kpack_pkgspec::check_fetchable(None, rel.trim_start_matches('/'), &f.architectures)
        } else {
            rocm_kpack_pkgspec::check_fetchable(Some(prefix), out, &f.architectures)
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
        return Ok(());
    }
    // One root for the whole manifest: the tree's, when any file lies
    // outside the prefix.
    let rooted = files.iter().any(|(out, _)| !below(out));
    m.prefix_path = rooted.then(|| prefix.to_string());
    m.database_files = files
        .into_iter()
        .map(|(out, mut f)| {
            f.path = if rooted {
                out.to_string()
            } else {
                out.strip_prefix(prefix)
                    .map_or(out, |r| r.trim_start_matches('/'))
                    .to_string()
            };
            f
        })
        .collect();
    m.database_files.sort_by(|a, b| a.path.cmp(&b.path));
    let bytes = m.to_msgpack().map_err(format_err)?;
    fs::write(path, bytes).map_err(|err| EngineError::io("cannot write", path, err))?;
    set_mode(path, 0o644)?;
    set_mtime(path, plan.generated_mtime)
}
