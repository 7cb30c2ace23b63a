//! A split directory (`generic/` + one tree per device group) and what the
//! device trees hold: `.kpack` archives, the targets they serve, and which
//! generic-ISA trees a family's package depends on (docs/packaging.md,
//! "Package naming").
//!
//! A device tree is either a family (or any spec group) holding one archive
//! per processor, `<component>_<processor>.kpack`, or a generic ISA
//! (`gfx11-generic/`) holding `<component>_<generic-isa>.kpack`. These are
//! the names a marker's `@GFXARCH@` pattern expands to, so packages ship
//! the archives as they are, without alias symlinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_pkgspec::{
    generic_isas_serving, is_generic_isa, processor_of, processors_served_by, Group, Spec,
};

use crate::tree::{parent_of, Content, Entry, EntryKind, Payload};
use crate::PackageError;

/// One `.kpack` archive of a device tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KpackArchive {
    /// Install path inside the tree (`usr/lib/.../.kpack/x_gfx90X.kpack`).
    pub path: String,
    /// The archive's `group_name` (component).
    pub component: String,
    /// The archive's `gfx_arch_family`.
    pub family: String,
    /// The archive's `gfx_arches` (full target ids).
    pub arches: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the file.
    pub sha256: [u8; 32],
    /// Whether its kernels are compressed (`zstd-per-kernel`).
    pub compressed: bool,
}

/// One device group's tree.
#[derive(Debug, Clone)]
pub struct DeviceGroup {
    /// Group name (the directory name, e.g. `gfx110X-dgpu`).
    pub name: String,
    /// Its files.
    pub payload: Payload,
    /// Its archives, in path order.
    pub archives: Vec<KpackArchive>,
    /// Processors this group's package serves (see [`targets_of`]).
    pub targets: Vec<String>,
    /// Whether the tree is a generic ISA's (`gfx11-generic`), not a family's.
    pub generic_isa: bool,
    /// Generic-ISA trees of the same split directory whose package this
    /// group's package depends on: the generic ISAs the group carries
    /// (its spec group's `generic_isas`), sorted.
    pub requires: Vec<String>,
}

/// A split directory as [`SplitDir::open`] reads it.
#[derive(Debug, Clone)]
pub struct SplitDir {
    /// The directory.
    pub root: PathBuf,
    /// `generic/`.
    pub generic: Payload,
    /// Every other subdirectory, sorted by name.
    pub groups: Vec<DeviceGroup>,
}

/// Whether an install path names a `.kpack` archive (a `*.kpack` file in
/// a `.kpack/` directory).
pub fn is_kpack_archive_path(path: &str) -> bool {
    layout::is_archive_path(path) && layout::is_in_kpack_dir(path)
}

/// Whether an install path names a `.kpm` manifest.
pub fn is_kpm_path(path: &str) -> bool {
    layout::is_manifest_path(path) && layout::is_in_kpack_dir(path)
}

/// Checks a device-group directory name: it becomes part of package
/// names, so letters, digits, `.`, `+`, `-`, `_` only.
pub fn check_group_name(name: &str) -> Result<(), PackageError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err(PackageError::Invalid(format!(
            "device group directory {name:?}: only letters, digits, `.`, `+`, `-`, `_` allowed"
        )))
    }
}

/// Processors a group's archives serve: each arch key's processor
/// (feature flags dropped); a generic ISA (`gfx11-generic`) stands for the
/// processors it serves that belong to the group (by the spec group of that
/// name or, failing that, of the archive's family), or all of them when
/// the spec has no such group or the group lists no processors (a generic
/// ISA's own group). Sorted, unique.
pub fn targets_of(arches: &[String], group: Option<&Group>) -> Vec<String> {
    let group = group.filter(|g| !g.targets.is_empty());
    let mut out = BTreeSet::new();
    for a in arches {
        let p = processor_of(a);
        if is_generic_isa(p) {
            let served = processors_served_by(p);
            for s in served {
                if group.is_none_or(|g| g.targets.iter().any(|t| t == s)) {
                    out.insert((*s).to_string());
                }
            }
        } else {
            out.insert(p.to_string());
        }
    }
    out.into_iter().collect()
}

fn sha256_file(path: &Path) -> Result<[u8; 32], PackageError> {
    let (_, sha) =
        rocm_kpack_fs::sha256_file(path).map_err(|e| PackageError::io(e.action, path, e.source))?;
    Ok(sha)
}

/// Reads a `.kpack` payload entry's header and hash.
pub fn read_archive(entry: &Entry) -> Result<KpackArchive, PackageError> {
    let EntryKind::File {
        content: Content::Path(p),
        size,
    } = &entry.kind
    else {
        return Err(PackageError::Invalid(format!(
            "{}: a .kpack archive must be a regular file",
            entry.path
        )));
    };
    let a = Archive::open(p).map_err(|source| PackageError::Format {
        path: p.clone(),
        source,
    })?;
    Ok(KpackArchive {
        path: entry.path.clone(),
        component: a.group_name().to_string(),
        family: a.gfx_arch_family().to_string(),
        arches: a.gfx_arches().to_vec(),
        size: *size,
        sha256: sha256_file(p)?,
        compressed: a.scheme() != rocm_kpack_format::archive::CompressionScheme::None,
    })
}

impl SplitDir {
    /// Reads `root/generic` and every other subdirectory as a device
    /// group; opens each device `.kpack` (header + TOC) and checks every
    /// generic `.kpm` entry whose archive is in a device tree against the
    /// archive's size and sha256.
    pub fn open(root: &Path, spec: &Spec) -> Result<SplitDir, PackageError> {
        let generic_dir = root.join("generic");
        if !generic_dir.is_dir() {
            return Err(PackageError::Invalid(format!(
                "{}: no generic/ directory (expected a split directory: generic/ plus one directory per device group)",
                root.display()
            )));
        }
        let generic = Payload::scan(&generic_dir)?;
        let mut names = Vec::new();
        for item in fs::read_dir(root).map_err(|e| PackageError::io("cannot list", root, e))? {
            let item = item.map_err(|e| PackageError::io("cannot list", root, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let ft = item
                .file_type()
                .map_err(|e| PackageError::io("cannot stat", &item.path(), e))?;
            if name == "generic" || name.starts_with('.') || !ft.is_dir() {
                continue;
            }
            check_group_name(&name)?;
            names.push(name);
        }
        names.sort();
        let mut groups = Vec::new();
        for name in names {
            let payload = Payload::scan(&root.join(&name))?;
            let mut archives = Vec::new();
            for e in payload.iter() {
                if is_kpack_archive_path(&e.path) && matches!(e.kind, EntryKind::File { .. }) {
                    archives.push(read_archive(e)?);
                }
            }
            let spec_group = spec.group_or_replaced(&name).or_else(|| {
                archives
                    .first()
                    .and_then(|a| spec.group_or_replaced(&a.family))
            });
            let generic_isa = is_generic_isa(&name);
            let all_arches: Vec<String> = archives.iter().flat_map(|a| a.arches.clone()).collect();
            let mut targets = targets_of(&all_arches, spec_group);
            // A group holding only database files: the spec (or, for a
            // generic ISA, LLVM's table) says what it serves.
            if targets.is_empty() {
                if generic_isa {
                    targets = targets_of(std::slice::from_ref(&name), None);
                } else if let Some(g) = spec_group {
                    targets = g.targets.clone();
                    targets.sort();
                }
            }
            // The generic ISAs a family carries: its spec group's, or, when
            // the spec does not know the group, those serving its processors.
            let requires = if generic_isa {
                Vec::new()
            } else {
                let carried: BTreeSet<String> = match spec_group {
                    Some(g) => g.generic_isas.iter().cloned().collect(),
                    None => targets
                        .iter()
                        .flat_map(|t| generic_isas_serving(t))
                        .map(str::to_string)
                        .collect(),
                };
                carried.into_iter().collect()
            };
            groups.push(DeviceGroup {
                name,
                payload,
                archives,
                targets,
                generic_isa,
                requires,
            });
        }
        // A family depends on a carried generic ISA only when that ISA's
        // tree (and so its package) exists.
        let present: BTreeSet<String> = groups
            .iter()
            .filter(|g| g.generic_isa)
            .map(|g| g.name.clone())
            .collect();
        for g in &mut groups {
            g.requires.retain(|r| present.contains(r));
        }
        let split = SplitDir {
            root: root.to_path_buf(),
            generic,
            groups,
        };
        split.check_manifests(&generic_dir)?;
        Ok(split)
    }

    fn check_manifests(&self, generic_dir: &Path) -> Result<(), PackageError> {
        let mut archives: BTreeMap<&str, &KpackArchive> = BTreeMap::new();
        for g in &self.groups {
            for a in &g.archives {
                archives.insert(a.path.as_str(), a);
            }
        }
        for e in self.generic.iter() {
            if !is_kpm_path(&e.path) {
                continue;
            }
            let EntryKind::File {
                content: Content::Path(p),
                ..
            } = &e.kind
            else {
                continue;
            };
            let m = Manifest::read(p).map_err(|source| PackageError::Format {
                path: p.clone(),
                source,
            })?;
            let dir = parent_of(&e.path);
            for f in &m.kpack_files {
                let key = format!("{dir}/{}", f.filename);
                let Some(a) = archives.get(key.as_str()) else {
                    continue;
                };
                let hash_ok = f.sha256.is_none_or(|h| h == a.sha256);
                if f.size != a.size || !hash_ok {
                    return Err(PackageError::corrupt(
                        &generic_dir.join(&e.path),
                        format!(
                            "manifest entry {} (size {}) does not match the device tree's archive (size {}, sha256 {})",
                            f.filename,
                            f.size,
                            a.size,
                            hex::encode(a.sha256)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_isa_targets() {
        let spec = Spec::default_families();
        let arches = vec!["gfx1100".to_string(), "gfx11-generic".to_string()];
        assert_eq!(
            targets_of(&arches, spec.group("gfx110X-dgpu")),
            ["gfx1100", "gfx1101", "gfx1102"]
        );
        let arches = vec!["gfx90a:xnack+".to_string(), "gfx90a:xnack-".to_string()];
        assert_eq!(targets_of(&arches, spec.group("gfx90a")), ["gfx90a"]);
        // A generic ISA's own tree serves every processor of the ISA, also
        // under a per-target spec whose group of that name lists none.
        let arches = vec!["gfx11-generic".to_string()];
        let all = [
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ];
        assert_eq!(targets_of(&arches, None), all);
        let per_target = Spec::per_target(&["gfx1100", "gfx11-generic"]).expect("spec");
        assert_eq!(targets_of(&arches, per_target.group("gfx11-generic")), all);
    }

    #[test]
    fn kpack_paths() {
        assert!(is_kpack_archive_path("usr/lib/.kpack/a_gfx90X.kpack"));
        assert!(!is_kpack_archive_path("usr/lib/a_gfx90X.kpack"));
        assert!(is_kpm_path(".kpack/a.kpm"));
    }
}
