//! The kpack store the fetcher downloads from: every `.kpack` archive
//! found loose in PKG_DIR or inside its debs, rpms and wheels, stored
//! content-addressed at `by-hash/sha256/<hex>`, and `index.json`:
//!
//! ```json
//! { "format_version": 1,
//!   "archives": [ { "component": "librocrand", "group": "gfx90X",
//!                   "targets": ["gfx90a"],
//!                   "arches": ["gfx90a:xnack+", "gfx90a:xnack-"],
//!                   "filename": "librocrand_gfx90a.kpack",
//!                   "version": "5.3.3-4",          // null for loose archives
//!                   "size": 123, "sha256": "<hex>",
//!                   "path": "by-hash/sha256/<hex>",
//!                   "packages": ["librocrand1-gfx90x_5.3.3-4_amd64.deb"] } ] }
//! ```
//!
//! One entry per archive: per processor (`<component>_<processor>.kpack`)
//! or per generic ISA (`<component>_gfx11-generic.kpack`), and trees in the
//! older per-family layout index the same way. `group` is the archive's
//! `gfx_arch_family`: the tree, and so the device package, it ships in (a
//! family, or the generic ISA itself). `arches` are its `gfx_arches`,
//! `targets` the processors it serves: a generic ISA's archive serves every
//! processor of the ISA; one inside a family archive of the older layout
//! only the family's (see [`targets_of`]). Entries are sorted by
//! component, group, filename, version, sha256.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read};
use std::path::Path;

use rocm_kpack_format::layout;
use rocm_kpack_format::archive::Archive;
use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use super::{Inputs, PublishError, PublishOptions};
use crate::digest::HashingWriter;
use crate::deb::{DebReader, MemberInfo};
use crate::container::EntryType;
use crate::device::{is_kpack_archive_path, targets_of};
use crate::rpm::RpmReader;
use crate::wheel::WheelReader;
use crate::PackageError;

/// One `index.json` entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoreEntry {
    /// The archive's component (`group_name`).
    pub component: String,
    /// Its device group (`gfx_arch_family`).
    pub group: String,
    /// Processors it serves.
    pub targets: Vec<String>,
    /// Its arch keys.
    pub arches: Vec<String>,
    /// Its file name in the installed tree.
    pub filename: String,
    /// Version of the package it came from (None when loose).
    pub version: Option<String>,
    /// Size.
    pub size: u64,
    /// sha256 hex.
    pub sha256: String,
    /// Path in the store.
    pub path: String,
    /// Package files that carry it.
    pub packages: Vec<String>,
}

#[derive(Serialize)]
struct Index<'a> {
    format_version: u32,
    archives: &'a [StoreEntry],
}

struct Store<'a> {
    root: &'a Path,
    spec: Spec,
    entries: BTreeMap<(String, String, String, Option<String>, String), StoreEntry>,
}

impl Store<'_> {
    /// Streams one archive into the store and records it.
    fn add(
        &mut self,
        filename: &str,
        version: Option<&str>,
        package: Option<&str>,
        origin: &Path,
        data: &mut dyn Read,
    ) -> Result<(), PublishError> {
        let dir = self.root.join(layout::store::BY_HASH_DIR);
        fs::create_dir_all(&dir).map_err(|e| PublishError::io("cannot create", &dir, e))?;
        let tmp = tempfile::Builder::new()
            .prefix(".incoming-")
            .tempfile_in(&dir)
            .map_err(|e| PublishError::io("cannot create a temporary file in", &dir, e))?;
        let file = tmp
            .reopen()
            .map_err(|e| PublishError::io("cannot open", tmp.path(), e))?;
        let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 20, file), false);
        io::copy(data, &mut w).map_err(|e| {
            PublishError::Package(PackageError::corrupt(origin, format!("{filename}: {e}")))
        })?;
        let (mut buf, sha, _, size) = w.finish();
        io::Write::flush(&mut buf).map_err(|e| PublishError::io("cannot write", tmp.path(), e))?;
        drop(buf);
        let archive = Archive::open(tmp.path()).map_err(|source| {
            PublishError::Package(PackageError::Format {
                path: origin.join(filename),
                source,
            })
        })?;
        let hex = hex::encode(sha);
        let arches = archive.gfx_arches().to_vec();
        let entry = StoreEntry {
            component: archive.group_name().to_string(),
            group: archive.gfx_arch_family().to_string(),
            targets: targets_of(&arches, self.spec.group(archive.gfx_arch_family())),
            arches,
            filename: filename.to_string(),
            version: version.map(str::to_string),
            size,
            sha256: hex.clone(),
            path: layout::store::by_hash_path(&sha),
            packages: Vec::new(),
        };
        drop(archive);
        let dest = dir.join(&hex);
        // An existing file counts only if it still holds these bytes (a
        // crash or a hand edit may have left it short or changed).
        let intact = match rocm_kpack_format::fsutil::sha256_file(&dest) {
            Ok((_, existing)) => existing == sha,
            Err(_) => false,
        };
        if intact && fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file()) {
            drop(tmp);
        } else {
            if dest.exists() {
                tracing::warn!("{} does not hold its hash; replacing it", dest.display());
            }
            tmp.as_file()
                .sync_all()
                .map_err(|e| PublishError::io("cannot write", tmp.path(), e))?;
            tmp.persist(&dest)
                .map_err(|e| PublishError::io("cannot store", &dest, e.error))?;
            rocm_kpack_format::fsutil::sync_dir(&dir)
                .map_err(|e| PublishError::io("cannot sync", &dir, e))?;
        }
        let key = (
            entry.component.clone(),
            entry.group.clone(),
            entry.filename.clone(),
            entry.version.clone(),
            entry.sha256.clone(),
        );
        let slot = self.entries.entry(key).or_insert(entry);
        if let Some(p) = package {
            if !slot.packages.iter().any(|x| x == p) {
                slot.packages.push(p.to_string());
                slot.packages.sort();
            }
        }
        Ok(())
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn file_label(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Writes `by-hash/` and `index.json` into `root`; returns the number of
/// index entries.
pub fn write_store(inputs: &Inputs, root: &Path, _opts: &PublishOptions) -> Result<usize, PublishError> {
    let mut store = Store {
        root,
        spec: Spec::default_families(),
        entries: BTreeMap::new(),
    };
    for deb in &inputs.debs {
        let r = DebReader::open(deb)?;
        let version = r.control.get("Version").map(str::to_string);
        let label = file_label(deb);
        let mut err: Option<PublishError> = None;
        r.for_each_entry(|m: &MemberInfo, data| {
            if m.kind == EntryType::File && is_kpack_archive_path(&m.path) {
                if let Err(e) = store.add(base_name(&m.path), version.as_deref(), Some(&label), deb, data) {
                    err = Some(e);
                    return Err(PackageError::Invalid("store failed".into()));
                }
            }
            Ok(())
        })
        .map_err(|e| err.take().unwrap_or(PublishError::Package(e)))?;
    }
    for rpm in &inputs.rpms {
        let r = RpmReader::open(rpm)?;
        let version = match r.epoch() {
            0 => format!("{}-{}", r.version(), r.release()),
            e => format!("{e}:{}-{}", r.version(), r.release()),
        };
        let label = file_label(rpm);
        let mut err: Option<PublishError> = None;
        r.for_each_entry(|path, mode, _size, data| {
            if mode & 0o170000 == 0o100000 && is_kpack_archive_path(path) {
                if let Err(e) = store.add(base_name(path), Some(&version), Some(&label), rpm, data) {
                    err = Some(e);
                    return Err(PackageError::Invalid("store failed".into()));
                }
            }
            Ok(())
        })
        .map_err(|e| err.take().unwrap_or(PublishError::Package(e)))?;
    }
    for whl in &inputs.wheels {
        let r = WheelReader::open(whl)?;
        let version = r.version().to_string();
        let label = file_label(whl);
        let mut err: Option<PublishError> = None;
        r.for_each_file(|path, _mode, _size, data| {
            if is_kpack_archive_path(path) {
                if let Err(e) = store.add(base_name(path), Some(&version), Some(&label), whl, data) {
                    err = Some(e);
                    return Err(PackageError::Invalid("store failed".into()));
                }
            }
            Ok(())
        })
        .map_err(|e| err.take().unwrap_or(PublishError::Package(e)))?;
    }
    for k in &inputs.kpacks {
        let mut f = File::open(k).map_err(|e| PublishError::io("cannot open", k, e))?;
        let parent = k.parent().unwrap_or(Path::new("."));
        store.add(&file_label(k), None, None, parent, &mut f)?;
    }
    let entries: Vec<StoreEntry> = store.entries.into_values().collect();
    let mut text = serde_json::to_string_pretty(&Index {
        format_version: 1,
        archives: &entries,
    })
    .map_err(|e| PublishError::Invalid(format!("cannot serialize index.json: {e}")))?;
    text.push('\n');
    super::write_file(&root.join("index.json"), text.as_bytes())?;
    Ok(entries.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};

    #[test]
    fn an_existing_by_hash_file_is_kept_only_if_it_holds_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ArchiveWriter::new(io::Cursor::new(Vec::new()), "libx", "gfx90a", CompressionScheme::None, 0).unwrap();
        w.add_kernel("lib/libx.so#0", "gfx90a", vec![7u8; 4096]).unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let hex = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let dest = dir.path().join(layout::store::BY_HASH_DIR).join(&hex);
        let mut store = Store {
            root: dir.path(),
            spec: Spec::default_families(),
            entries: BTreeMap::new(),
        };
        for damage in [&b"truncated"[..], &[]] {
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::write(&dest, damage).unwrap();
            store
                .add("libx_gfx90a.kpack", None, None, Path::new("in"), &mut bytes.as_slice())
                .unwrap();
            assert_eq!(fs::read(&dest).unwrap(), bytes, "a damaged by-hash file is replaced");
        }
        // An intact one is kept as it is (same inode).
        let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&dest).unwrap());
        store
            .add("libx_gfx90a.kpack", None, None, Path::new("in"), &mut bytes.as_slice())
            .unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::ino(&fs::metadata(&dest).unwrap()), ino);
    }
}
