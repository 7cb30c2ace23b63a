//! Device code of trees without a `.kpm`: the reference layout AMD's tools
//! write (per-processor archives `<component>_<processor>.kpack`, host
//! binaries whose marker holds a `@GFXARCH@` pattern, no manifest).
//!
//! Nothing lists such a tree's archives, so the only way to tell what the
//! local GPUs need is to ask what the loader would do: the markers of the
//! installed host binaries are read ([`read_elf_marker`]) and, for every
//! setting a process may run each local GPU with
//! ([`select::process_targets`]), the loader's own search
//! ([`Cache::resolve`], with the arch list the preload shim passes,
//! [`select::device_arch_list`]) decides whether an archive is found. What
//! it cannot find is reported with every path it tried and, where a package
//! database or our naming rule can tell, the device package that provides
//! it (docs/packaging.md, "Trees without a `.kpm`").
//!
//! Where host binaries are looked for: in the directories where `.kpack`
//! directories are looked for ([`ScanConfig::bases`]: `/opt/rocm*` and two
//! levels below, `/usr/lib` and one level below, site-packages, each
//! `--prefix`), whether or not one is there (a host package installed
//! without its device package has none), and below the directory holding
//! each `.kpack` directory that has no manifest, up to [`DEPTH`] levels
//! (`lib/`, `lib/x86_64-linux-gnu/`). Hidden directories are skipped and
//! no symlink is followed; only ELF files are read past their first bytes.
//! A binary whose marker names a `.kpm` that exists is left to the
//! manifest checks.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::layout::{self, KPACK_DIR};
use rocm_kpack_format::marker::{read_elf_marker, Marker};
use rocm_kpack_format::target::TargetId;
use rocm_kpack_fs::open_regular;
use rocm_kpack_loader::loader::{config::resolve_search_path, Cache, LoaderConfig};
use rocm_kpack_loader::select::{device_arch_list, process_targets};
use rocm_kpack_loader::Error;
use rocm_kpack_pkgspec::{NameKind, Spec};
use serde::Serialize;

use crate::pm::{apt::Apt, dnf::Dnf};
use crate::resolve::{Scan, ScanConfig};

/// Directory levels below a prefix searched for host binaries.
pub const DEPTH: u32 = 3;
/// Files examined per prefix at most (a prefix is a package's tree, not a
/// whole system): past it the search stops with a warning.
const MAX_FILES: usize = 20_000;

/// A host binary carrying a marker.
#[derive(Debug, Clone)]
pub struct MarkedBinary {
    /// The binary.
    pub path: PathBuf,
    /// Its marker.
    pub marker: Marker,
}

/// An archive the loader finds for a process target.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    /// The target id a process may present (`gfx90a:xnack-`).
    pub target: String,
    /// The archive that decides.
    pub archive: PathBuf,
    /// The arch key loaded from it.
    pub arch: String,
}

/// Who provides a missing archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provider {
    /// Package name.
    pub package: String,
    /// How it is known: `dpkg` / `rpm` (the database lists one of the
    /// missing paths: the package is installed and the file was lost),
    /// `apt-index` (the naming rule's name, known to apt), `naming-rule`.
    pub source: &'static str,
}

/// No archive for a process target.
#[derive(Debug, Clone, Serialize)]
pub struct Missing {
    /// The target id a process may present.
    pub target: String,
    /// Every path the loader tried, in order (most specific name first),
    /// `..` folded away.
    pub searched: Vec<String>,
    /// Why none served, when an archive was found without the arch.
    pub detail: Option<String>,
    /// The device package that provides it, where that can be told.
    pub provided_by: Option<Provider>,
}

impl Missing {
    /// What to do about it, for people.
    pub fn advice(&self) -> String {
        match &self.provided_by {
            Some(p) if p.source == "dpkg" || p.source == "rpm" => {
                format!(
                    "{} owns it but it is gone: reinstall {}",
                    p.package, p.package
                )
            }
            Some(p) if p.source == "apt-index" => format!("install {}", p.package),
            Some(p) => format!(
                "install its device package ({} by our naming rule)",
                p.package
            ),
            None => "install the device package that provides it".to_string(),
        }
    }
}

/// Coverage of one host binary without a manifest.
#[derive(Debug, Clone, Serialize)]
pub struct BinaryCoverage {
    /// The binary.
    pub binary: PathBuf,
    /// Its marker's `kernel_name`.
    pub kernel_name: String,
    /// The marker's search paths.
    pub search_paths: Vec<String>,
    /// The installed package owning the binary, if a database says so.
    pub package: Option<String>,
    /// Every process target of every local GPU finds an archive.
    pub complete: bool,
    /// Archives found.
    pub found: Vec<Found>,
    /// Process targets without one.
    pub missing: Vec<Missing>,
}

/// Host binaries with a marker in the trees of `scan` that have no
/// manifest, and below `config`'s `--prefix` directories. Unreadable
/// binaries and markers become warnings.
pub fn marked_binaries(
    scan: &Scan,
    config: &ScanConfig,
    warnings: &mut Vec<String>,
) -> Vec<MarkedBinary> {
    // (directory, levels below it).
    let mut prefixes = BTreeSet::new();
    for dir in &scan.kpack_dirs {
        if !scan.manifests.iter().any(|m| &m.kpack_dir == dir) {
            if let Some(parent) = dir.parent() {
                prefixes.insert((parent.to_path_buf(), DEPTH));
            }
        }
    }
    for (base, depth) in config.bases() {
        let base = if base.file_name().is_some_and(|n| n == KPACK_DIR) {
            base.parent().map(Path::to_path_buf).unwrap_or(base)
        } else {
            base
        };
        if base.is_dir() {
            prefixes.insert((fs::canonicalize(&base).unwrap_or(base), depth));
        }
    }
    let mut files = Vec::new();
    for (prefix, depth) in &prefixes {
        let before = files.len();
        collect_files(prefix, *depth, &mut files, before + MAX_FILES);
        if files.len() >= before + MAX_FILES {
            warnings.push(format!(
                "{}: stopped looking for host binaries after {MAX_FILES} files; pass --prefix for the package's own tree",
                prefix.display()
            ));
        }
    }
    files.sort();
    files.dedup();
    let mut out = Vec::new();
    for path in files {
        let marker = match open_regular(&path) {
            Err(e) => {
                warnings.push(e.to_string());
                continue;
            }
            Ok(mut file) => match read_elf_marker(&mut file, &path) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    warnings.push(format!("cannot read a marker: {e}"));
                    continue;
                }
            },
        };
        let dir = path.parent().unwrap_or(Path::new("/"));
        let has_manifest = marker
            .kpack_search_paths
            .iter()
            .any(|p| layout::is_manifest_path(p) && resolve_search_path(dir, p).is_file());
        if !has_manifest {
            out.push(MarkedBinary { path, marker });
        }
    }
    out
}

/// Regular files up to `depth` directory levels below `dir`, hidden
/// directories and symlinks skipped, until `files` holds `limit`.
fn collect_files(dir: &Path, depth: u32, files: &mut Vec<PathBuf>, limit: usize) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if files.len() >= limit {
            return;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_file() {
            files.push(entry.path());
        } else if kind.is_dir()
            && depth > 0
            && !entry.file_name().to_string_lossy().starts_with('.')
        {
            collect_files(&entry.path(), depth - 1, files, limit);
        }
    }
}

/// The package database of `root`, if it has one.
pub enum Database {
    /// dpkg's (driven through apt).
    Dpkg(Apt),
    /// rpm's (driven through dnf).
    Rpm(Dnf),
}

impl Database {
    /// The database of `root`: dpkg's when it has one, else rpm's.
    pub fn of(root: &Path) -> Option<Database> {
        if root.join("var/lib/dpkg/status").is_file() {
            return Some(Database::Dpkg(Apt {
                root: root.to_path_buf(),
                extra: Vec::new(),
                native: Default::default(),
            }));
        }
        if root.join("var/lib/rpm").is_dir() || root.join("usr/lib/sysimage/rpm").is_dir() {
            return Some(Database::Rpm(Dnf {
                root: root.to_path_buf(),
                extra: Vec::new(),
                native: Default::default(),
            }));
        }
        None
    }

    /// The installed package owning `path`; a tool that cannot be run
    /// knows nothing.
    fn owner(&self, path: &Path) -> Option<String> {
        match self {
            Database::Dpkg(apt) => apt.owner(path).ok().flatten(),
            Database::Rpm(dnf) => dnf.owner(path).ok().flatten(),
        }
    }

    fn tool(&self) -> &'static str {
        match self {
            Database::Dpkg(_) => "dpkg",
            Database::Rpm(_) => "rpm",
        }
    }

    /// The device package our naming rule gives `generic` for `target`'s
    /// group in `spec`, and whether apt's index knows it.
    fn device_package(&self, spec: &Spec, generic: &str, target: &TargetId) -> Option<Provider> {
        let group = spec
            .group_for(&target.to_string())
            .ok()?
            .first()?
            .name
            .clone();
        let kind = match self {
            Database::Dpkg(_) => NameKind::DebDevice,
            Database::Rpm(_) => NameKind::RpmDevice,
        };
        let package = spec.naming.render(kind, generic, Some(&group));
        let source = match self {
            Database::Dpkg(apt) if matches!(apt.index_gfx(&package), Ok(Some(_))) => "apt-index",
            _ => "naming-rule",
        };
        Some(Provider { package, source })
    }
}

/// The marker with absolute search paths taken below `root` (a loader
/// running inside that root would see them there).
fn rooted(marker: &Marker, root: &Path) -> Marker {
    if root == Path::new("/") {
        return marker.clone();
    }
    let mut m = marker.clone();
    for p in &mut m.kpack_search_paths {
        if Path::new(p.as_str()).is_absolute() {
            *p = root
                .join(p.trim_start_matches('/'))
                .to_string_lossy()
                .into_owned();
        }
    }
    m
}

/// What the loader finds for `binaries` on a machine with `targets`
/// (below `root`, whose package database, if any, names owners), device
/// package names from `spec`.
pub fn coverage(
    binaries: &[MarkedBinary],
    targets: &[TargetId],
    root: &Path,
    spec: &Spec,
) -> Vec<BinaryCoverage> {
    // The environment's ROCM_KPACK_* overrides are for running programs,
    // not for telling what the tree holds.
    let cache = Cache::with_config(LoaderConfig::default());
    let database = Database::of(root);
    let mut out = Vec::new();
    for b in binaries {
        let marker = rooted(&b.marker, root);
        let package = database.as_ref().and_then(|d| d.owner(&b.path));
        let mut cov = BinaryCoverage {
            binary: b.path.clone(),
            kernel_name: b.marker.kernel_name.clone(),
            search_paths: b.marker.kpack_search_paths.clone(),
            package: package.clone(),
            complete: true,
            found: Vec::new(),
            missing: Vec::new(),
        };
        let mut seen = BTreeSet::new();
        for device in targets.iter().flat_map(process_targets) {
            let target = device.to_string();
            if !seen.insert(target.clone()) {
                continue;
            }
            let (searched, detail) =
                match cache.resolve(&marker, &b.path, 0, &device_arch_list(&device)) {
                    Ok(r) => {
                        cov.found.push(Found {
                            target,
                            archive: fold_dot_dot(&r.archive_path),
                            arch: r.arch,
                        });
                        continue;
                    }
                    Err(Error::ArchiveNotFound { .. }) => {
                        (candidates(&marker, &b.path, &device), None)
                    }
                    Err(e) => (candidates(&marker, &b.path, &device), Some(e.to_string())),
                };
            let lost_by = database.as_ref().and_then(|d| {
                let owner = searched.iter().find_map(|p| d.owner(Path::new(p)))?;
                Some(Provider {
                    package: owner,
                    source: d.tool(),
                })
            });
            let provided_by = lost_by.or_else(|| {
                let d = database.as_ref()?;
                d.device_package(spec, package.as_deref()?, &device)
            });
            cov.complete = false;
            cov.missing.push(Missing {
                target,
                searched,
                detail,
                provided_by,
            });
        }
        out.push(cov);
    }
    out
}

/// [`marked_binaries`] of `scan` and `config` and their [`coverage`] for
/// `targets` with the built-in spec's naming; none without targets.
pub fn check(
    scan: &Scan,
    config: &ScanConfig,
    targets: &[TargetId],
    warnings: &mut Vec<String>,
) -> Vec<BinaryCoverage> {
    if targets.is_empty() {
        return Vec::new();
    }
    let binaries = marked_binaries(scan, config, warnings);
    coverage(&binaries, targets, &config.root, &Spec::builtin())
}

/// The archive paths the loader tries for `device` through the marker's
/// `@GFXARCH@` patterns, in its order, `..` folded away (for people and for
/// package databases, which know each file by one path).
fn candidates(marker: &Marker, binary: &Path, device: &TargetId) -> Vec<String> {
    let dir = binary.parent().unwrap_or(Path::new("/"));
    let mut out: Vec<String> = Vec::new();
    for arch in device_arch_list(device) {
        for variant in rocm_kpack_loader::select::compatible_variants(&arch) {
            for pattern in marker
                .kpack_search_paths
                .iter()
                .filter(|p| layout::is_archive_pattern(p))
            {
                let path = fold_dot_dot(&resolve_search_path(
                    dir,
                    &layout::expand_pattern(pattern, &variant),
                ));
                let path = path.to_string_lossy().into_owned();
                if !out.contains(&path) {
                    out.push(path);
                }
            }
        }
    }
    out
}

/// `a/b/../c` as `a/c`: lexically, as the paths are shown, not opened.
fn fold_dot_dot(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
