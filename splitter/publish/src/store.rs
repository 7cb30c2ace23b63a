//! The kpack store the fetcher downloads from: every `.kpack` archive
//! found loose in PKG_DIR or inside its debs, rpms and wheels, stored
//! content-addressed at `by-hash/sha256/<hex>`, and `index.json`:
//!
//! ```json
//! { "format_version": 2,
//!   "archives": [ { "component": "librocrand", "group": "gfx90a",
//!                   "targets": ["gfx90a"],
//!                   "arches": ["gfx90a:xnack+", "gfx90a:xnack-"],
//!                   "filename": "librocrand_gfx90a.kpack",
//!                   "version": "5.3.3-4+kpack1",   // null for loose archives
//!                   "size": 123, "sha256": "<hex>", "encoding": "identity",
//!                   "path": "by-hash/sha256/<hex>",
//!                   "packages": ["librocrand1-gfx90a_5.3.3-4+kpack1_amd64.deb"] } ],
//!   "database_files": [ { "component": "librocblas", "family": "gfx90a",
//!                   "architectures": ["gfx90a"],
//!                   "install_path": "rocblas/2.47.0/library/TensileLibrary_gfx90a.co",
//!                   "version": "5.5.1+dfsg-7+kpack1",
//!                   "size": 395981312, "sha256": "<hex of the installed bytes>",
//!                   "encoding": "zstd", "stored_size": 9603211,
//!                   "path": "by-hash/sha256/<hex>.zst",
//!                   "packages": ["librocblas0-gfx90a_5.5.1+dfsg-7+kpack1_amd64.deb"] } ] }
//! ```
//!
//! Database files are the files the packages' `.kpm` manifests list under
//! `database_files` (found at `<prefix>/<path>` in any package of the
//! publish); each must have the size and sha256 its manifest says. They
//! are stored zstd-encoded ([`encode_database`]); a reader refuses an
//! encoding it does not know.
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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read};
use std::path::Path;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{DatabaseFile, Manifest};
use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use crate::{Inputs, PublishError, PublishOptions};
use rocm_kpack_fs::{HashingWriter, PendingFile};
use rocm_kpack_package::container::EntryType;
use rocm_kpack_package::deb::{DebReader, MemberInfo};
use rocm_kpack_package::device::{is_kpack_archive_path, is_kpm_path, targets_of};
use rocm_kpack_package::rpm::RpmReader;
use rocm_kpack_package::wheel::WheelReader;
use rocm_kpack_package::PackageError;

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
    /// How the stored object is encoded: `identity` (archives are
    /// compressed already).
    pub encoding: &'static str,
    /// Path in the store.
    pub path: String,
    /// Package files that carry it.
    pub packages: Vec<String>,
}

/// One `index.json` database-file entry: a kernel-database file stored
/// encoded (`by-hash/sha256/<sha256 of the installed bytes>.zst`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DatabaseEntry {
    /// The component whose manifest lists it.
    pub component: String,
    /// Its family (device tree).
    pub family: String,
    /// The processors or generic ISA it serves.
    pub architectures: Vec<String>,
    /// Install path as the manifest lists it: below the manifest's prefix,
    /// or below the root its `prefix_path` names.
    pub install_path: String,
    /// Version of the package it came from.
    pub version: String,
    /// Installed size.
    pub size: u64,
    /// sha256 hex of the installed bytes.
    pub sha256: String,
    /// How the stored object is encoded (`zstd`).
    pub encoding: &'static str,
    /// Size of the stored (encoded) object: the bytes on the wire.
    pub stored_size: u64,
    /// Path in the store.
    pub path: String,
    /// Package files that carry it.
    pub packages: Vec<String>,
}

#[derive(Serialize)]
struct Index<'a> {
    format_version: u32,
    archives: &'a [StoreEntry],
    database_files: &'a [DatabaseEntry],
}

struct Store<'a> {
    root: &'a Path,
    spec: Spec,
    entries: BTreeMap<(String, String, String, Option<String>, String), StoreEntry>,
    /// (component, install path, version, sha256) -> entry.
    databases: BTreeMap<(String, String, String, String), DatabaseEntry>,
    /// zstd level of database objects.
    level: i32,
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
        // Named for its hash once the hash is known.
        let mut tmp = PendingFile::create_named(&dir.join(INCOMING), INCOMING, "")?;
        let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 20, &mut tmp));
        io::copy(data, &mut w).map_err(|e| {
            PublishError::Package(PackageError::corrupt(origin, format!("{filename}: {e}")))
        })?;
        let (buf, sha, size) = w.finish();
        buf.into_inner()
            .map_err(|e| PublishError::io("cannot write", &dir, e.into_error()))?;
        let archive = Archive::open(tmp.temp_path()).map_err(|source| {
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
            targets: targets_of(
                &arches,
                self.spec.group_or_replaced(archive.gfx_arch_family()),
            ),
            arches,
            filename: filename.to_string(),
            version: version.map(str::to_string),
            size,
            sha256: hex.clone(),
            encoding: "identity",
            path: layout::store::by_hash_path(&sha),
            packages: Vec::new(),
        };
        drop(archive);
        let dest = dir.join(&hex);
        // An existing file counts only if it still holds these bytes (a
        // crash or a hand edit may have left it short or changed).
        let intact = match rocm_kpack_fs::sha256_file(&dest) {
            Ok((_, existing)) => existing == sha,
            Err(_) => false,
        };
        if intact && fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file()) {
            drop(tmp);
        } else {
            if dest.exists() {
                tracing::warn!("{} does not hold its hash; replacing it", dest.display());
            }
            tmp.set_dest(dest);
            tmp.commit_as("cannot store")?;
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

impl Store<'_> {
    /// Streams one database file into the store, encoded, after checking
    /// it is the file its manifest lists.
    fn add_database(
        &mut self,
        component: &str,
        db: &DatabaseFile,
        version: &str,
        package: &str,
        origin: &Path,
        data: &mut dyn Read,
    ) -> Result<(), PublishError> {
        let dir = self.root.join(layout::store::BY_HASH_DIR);
        fs::create_dir_all(&dir).map_err(|e| PublishError::io("cannot create", &dir, e))?;
        let dest = self
            .root
            .join(layout::store::database_object_path(&db.sha256));
        let key = (
            component.to_string(),
            db.path.clone(),
            version.to_string(),
            hex::encode(db.sha256),
        );
        let stored_size = match self.databases.get(&key).map(|e| e.stored_size) {
            // Another package of this publish carries the same file.
            Some(size) if decodes_to(&dest, &db.sha256) => {
                io::copy(data, &mut io::sink())
                    .map_err(|e| PublishError::io("cannot read", origin, e))?;
                size
            }
            _ => {
                let mut tmp = PendingFile::create_named(&dest, INCOMING, "")?;
                let (sha, size) = encode_database(
                    data,
                    BufWriter::with_capacity(1 << 20, &mut tmp),
                    self.level,
                    db.size,
                )
                .map_err(|e| {
                    PublishError::Package(PackageError::corrupt(
                        origin,
                        format!("{}: {e}", db.path),
                    ))
                })?;
                if sha != db.sha256 || size != db.size {
                    return Err(PublishError::Invalid(format!(
                        "{package}: {} has {size} bytes with sha256 {}, but the {component} manifest says {} bytes with sha256 {}",
                        db.path,
                        hex::encode(sha),
                        db.size,
                        hex::encode(db.sha256)
                    )));
                }
                let stored = tmp
                    .file_mut()
                    .metadata()
                    .map_err(|e| PublishError::io("cannot read", tmp.temp_path(), e))?
                    .len();
                tmp.commit_as("cannot store")?;
                stored
            }
        };
        let slot = self.databases.entry(key).or_insert_with(|| DatabaseEntry {
            component: component.to_string(),
            family: db.family.clone(),
            architectures: db.architectures.clone(),
            install_path: db.path.clone(),
            version: version.to_string(),
            size: db.size,
            sha256: hex::encode(db.sha256),
            encoding: layout::store::DATABASE_ENCODING,
            stored_size,
            path: layout::store::database_object_path(&db.sha256),
            packages: Vec::new(),
        });
        if !slot.packages.iter().any(|x| x == package) {
            slot.packages.push(package.to_string());
            slot.packages.sort();
        }
        Ok(())
    }
}

/// Whether the encoded object at `path` decodes to bytes with `sha256`.
fn decodes_to(path: &Path, sha256: &[u8; 32]) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(mut dec) = zstd::stream::read::Decoder::new(file) else {
        return false;
    };
    let mut w = HashingWriter::new(io::sink());
    if io::copy(&mut dec, &mut w).is_err() {
        return false;
    }
    let (_, sha, _) = w.finish();
    &sha == sha256
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn file_label(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Calls `f(path, version, package label, package file, data)` for every
/// regular file of every deb, rpm and wheel of `inputs`.
fn for_each_package_file(
    inputs: &Inputs,
    mut f: impl FnMut(&str, &str, &str, &Path, &mut dyn Read) -> Result<(), PublishError>,
) -> Result<(), PublishError> {
    let err: RefCell<Option<PublishError>> = RefCell::new(None);
    let mut call = |path: &str, version: &str, label: &str, origin: &Path, data: &mut dyn Read| {
        f(path, version, label, origin, data).map_err(|e| {
            *err.borrow_mut() = Some(e);
            PackageError::Invalid("store failed".into())
        })
    };
    let failed = |e: PackageError| err.borrow_mut().take().unwrap_or(PublishError::Package(e));
    for deb in &inputs.debs {
        let r = DebReader::open(deb)?;
        let version = r.control.get("Version").unwrap_or_default().to_string();
        let label = file_label(deb);
        r.for_each_entry(|m: &MemberInfo, data| {
            if m.kind == EntryType::File {
                call(&m.path, &version, &label, deb, data)?;
            }
            Ok(())
        })
        .map_err(failed)?;
    }
    for rpm in &inputs.rpms {
        let r = RpmReader::open(rpm)?;
        let version = match r.epoch() {
            0 => format!("{}-{}", r.version(), r.release()),
            e => format!("{e}:{}-{}", r.version(), r.release()),
        };
        let label = file_label(rpm);
        r.for_each_entry(|path, mode, _size, data| {
            if mode & 0o170000 == 0o100000 {
                call(path, &version, &label, rpm, data)?;
            }
            Ok(())
        })
        .map_err(failed)?;
    }
    for whl in &inputs.wheels {
        let r = WheelReader::open(whl)?;
        let version = r.version().to_string();
        let label = file_label(whl);
        r.for_each_file(|path, _mode, _size, data| call(path, &version, &label, whl, data))
            .map_err(failed)?;
    }
    Ok(())
}

/// The largest `.kpm` read (real ones are a few KiB).
const MAX_MANIFEST: u64 = 16 << 20;

/// Prefix of the temporary name of a store object being written.
const INCOMING: &str = ".incoming-";

/// Every database file the packages' manifests list, by its path in the
/// package (`<prefix>/<path>`, the prefix being the directory holding the
/// manifest's `.kpack/`, or below the root a `prefix_path` names), with its
/// component.
fn listed_databases(
    inputs: &Inputs,
) -> Result<BTreeMap<String, (String, DatabaseFile)>, PublishError> {
    let mut out = BTreeMap::new();
    for_each_package_file(inputs, |path, _version, label, origin, data| {
        if !is_kpm_path(path) {
            return Ok(());
        }
        let mut bytes = Vec::new();
        data.take(MAX_MANIFEST + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| {
                PublishError::Package(PackageError::corrupt(origin, format!("{path}: {e}")))
            })?;
        if bytes.len() as u64 > MAX_MANIFEST {
            return Err(PublishError::Invalid(format!(
                "{label}: {path} is larger than {MAX_MANIFEST} bytes"
            )));
        }
        let m = Manifest::parse(&bytes).map_err(|source| {
            PublishError::Package(PackageError::Format {
                path: origin.join(path),
                source,
            })
        })?;
        let prefix = layout::kpack_prefix_of(path);
        for f in m.database_files {
            let full = layout::database_tree_path(prefix, m.prefix_path.as_deref(), &f.path).ok_or_else(|| {
                PublishError::Invalid(format!(
                    "{label}: {path} lies in {prefix:?}, which does not end in its prefix_path {:?}",
                    m.prefix_path.as_deref().unwrap_or_default()
                ))
            })?;
            out.insert(full, (m.component.clone(), f));
        }
        Ok(())
    })?;
    Ok(out)
}

/// Writes `by-hash/` and `index.json` into `root`; returns the number of
/// index entries.
pub fn write_store(
    inputs: &Inputs,
    root: &Path,
    opts: &PublishOptions,
) -> Result<usize, PublishError> {
    let mut store = Store {
        root,
        spec: Spec::default_families(),
        entries: BTreeMap::new(),
        databases: BTreeMap::new(),
        level: opts.store_zstd_level,
    };
    let listed = listed_databases(inputs)?;
    for_each_package_file(inputs, |path, version, label, origin, data| {
        if is_kpack_archive_path(path) {
            store.add(base_name(path), Some(version), Some(label), origin, data)
        } else if let Some((component, db)) = listed.get(path) {
            store.add_database(component, db, version, label, origin, data)
        } else {
            Ok(())
        }
    })?;
    for k in &inputs.kpacks {
        let mut f = File::open(k).map_err(|e| PublishError::io("cannot open", k, e))?;
        let parent = k.parent().unwrap_or(Path::new("."));
        store.add(&file_label(k), None, None, parent, &mut f)?;
    }
    let entries: Vec<StoreEntry> = store.entries.into_values().collect();
    let databases: Vec<DatabaseEntry> = store.databases.into_values().collect();
    let mut text = serde_json::to_string_pretty(&Index {
        format_version: 2,
        archives: &entries,
        database_files: &databases,
    })
    .map_err(|e| PublishError::Invalid(format!("cannot serialize index.json: {e}")))?;
    text.push('\n');
    crate::write_file(&root.join("index.json"), text.as_bytes())?;
    Ok(entries.len() + databases.len())
}

/// Encodes a database file for the store
/// ([`rocm_kpack_format::archive::transport::encode_store_object`], the
/// encoder of every store object). Returns sha256 and size of the decoded
/// bytes.
pub fn encode_database(
    data: &mut dyn Read,
    out: impl io::Write,
    level: i32,
    size: u64,
) -> io::Result<([u8; 32], u64)> {
    rocm_kpack_format::archive::transport::encode_store_object(data, out, level, size)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};

    #[test]
    fn an_existing_by_hash_file_is_kept_only_if_it_holds_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ArchiveWriter::new(
            io::Cursor::new(Vec::new()),
            "libx",
            "gfx90a",
            CompressionScheme::None,
            0,
        )
        .unwrap();
        w.add_kernel("lib/libx.so#0", "gfx90a", vec![7u8; 4096])
            .unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let hex = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let dest = dir.path().join(layout::store::BY_HASH_DIR).join(&hex);
        let mut store = Store {
            root: dir.path(),
            spec: Spec::default_families(),
            entries: BTreeMap::new(),
            databases: BTreeMap::new(),
            level: 3,
        };
        for damage in [&b"truncated"[..], &[]] {
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::write(&dest, damage).unwrap();
            store
                .add(
                    "libx_gfx90a.kpack",
                    None,
                    None,
                    Path::new("in"),
                    &mut bytes.as_slice(),
                )
                .unwrap();
            assert_eq!(
                fs::read(&dest).unwrap(),
                bytes,
                "a damaged by-hash file is replaced"
            );
        }
        // An intact one is kept as it is (same inode).
        let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&dest).unwrap());
        store
            .add(
                "libx_gfx90a.kpack",
                None,
                None,
                Path::new("in"),
                &mut bytes.as_slice(),
            )
            .unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(&dest).unwrap()),
            ino
        );
    }
}
