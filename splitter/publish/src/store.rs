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
//!                   "packages": ["librocrand1-gfx90a_5.3.3-4+kpack1_amd64.deb"],
//!                   "transport": { "path": "by-hash/sha256/<hex>.zst",
//!                                  "size": 353914880, "sha256": "<hex>",
//!                                  "stored_size": 21700000 } } ],
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
//! and, per component and processor whose database files include feature
//! variants of one another (`xnack+`/`xnack-` builds of one file), a
//! database set: all of the processor's files as one stream
//! ([`rocm_kpack_format::database_set`]), one zstd object beside the
//! per-file ones (which older fetchers, and fetchers that need only some
//! of the files, take):
//!
//! ```json
//!   "database_sets": [ { "component": "librocblas", "processor": "gfx90a",
//!                   "version": "5.5.1+dfsg-7+kpack1", "format": 1,
//!                   "size": 436745900, "sha256": "<hex of the decoded stream>",
//!                   "encoding": "zstd", "stored_size": 11304320,
//!                   "path": "by-hash/sha256/<hex>.zst",
//!                   "members": [ { "install_path": "rocblas/2.47.0/library/...",
//!                                  "size": 20971520, "sha256": "<hex>" } ] } ]
//! ```
//!
//! Every archive also gets its transport object
//! ([`rocm_kpack_format::archive::transport`]: its entries, uncompressed, as
//! one zstd frame named by the sha256 of that form), encoded like the
//! database objects; `transport` is absent when two ordinals of the archive
//! hold identical bytes (only foreign writers do that), with a warning.
//!
//! Database files are the files the packages' `.kpm` manifests list under
//! `database_files` (found at `<prefix>/<path>` in any package of the
//! publish); each must have the size and sha256 its manifest says. They
//! are stored zstd-encoded ([`encode_database`]); a reader refuses an
//! encoding it does not know.
//!
//! Encoding at the release level is most of a publish's time, so objects
//! are encoded once every package has been read, in parallel as far as
//! `--jobs` and the memory budget allow ([`encoding_threads`]), each its
//! own frame (the bytes do not depend on the threads), and taken from the
//! cache ([`crate::cache`]) when it holds them.
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
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::{transport, Archive};
use rocm_kpack_format::database_set::{self, SetMember};
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{DatabaseFile, Manifest};
use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use crate::cache::ObjectCache;
use crate::{Inputs, PublishError, PublishOptions};
use rayon::prelude::*;
use rocm_kpack_fs::{HashingWriter, PendingFile};
use rocm_kpack_package::any::{AnyPackage, PackageKind};
use rocm_kpack_package::device::{is_kpack_archive_path, is_kpm_path, targets_of};
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
    /// Its transport object (absent when the archive has none: two of its
    /// ordinals hold identical bytes, which only foreign writers produce).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportEntry>,
}

/// The transport object of an archive (`docs/formats.md`): its entries,
/// uncompressed, as one zstd frame, named by the sha256 of the decoded
/// stream.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TransportEntry {
    /// Path in the store.
    pub path: String,
    /// Size of the decoded stream.
    pub size: u64,
    /// sha256 hex of the decoded stream.
    pub sha256: String,
    /// Size of the stored (encoded) object: the bytes on the wire.
    pub stored_size: u64,
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
    /// Its object: size and sha256 are those of the installed bytes.
    #[serde(flatten)]
    pub object: ZstdObject,
    /// Package files that carry it.
    pub packages: Vec<String>,
}

/// A zstd-encoded object of the store, as `index.json` describes it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ZstdObject {
    /// Size of the decoded bytes.
    pub size: u64,
    /// sha256 hex of the decoded bytes.
    pub sha256: String,
    /// How the stored object is encoded (`zstd`).
    pub encoding: &'static str,
    /// Size of the stored (encoded) object: the bytes on the wire (known
    /// once the object is encoded; write_store fills it in).
    pub stored_size: u64,
    /// Path in the store.
    pub path: String,
}

impl ZstdObject {
    /// The object at `path` decoding to `size` bytes with `sha256`.
    fn new(size: u64, sha256: &[u8; 32], path: String) -> Self {
        ZstdObject {
            size,
            sha256: hex::encode(sha256),
            encoding: layout::store::DATABASE_ENCODING,
            stored_size: 0,
            path,
        }
    }
}

/// One `index.json` database-set entry: a processor's database files of
/// one component as one stream, stored zstd-encoded
/// (`by-hash/sha256/<sha256 of the decoded stream>.zst`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DatabaseSetEntry {
    /// The component whose manifest lists the members.
    pub component: String,
    /// The processor they serve.
    pub processor: String,
    /// Version of the package the members came from.
    pub version: String,
    /// Stream format ([`database_set::FORMAT`]).
    pub format: u32,
    /// Its object: size and sha256 are those of the decoded stream.
    #[serde(flatten)]
    pub object: ZstdObject,
    /// The members, in stream order.
    pub members: Vec<SetMemberEntry>,
}

/// One member of a [`DatabaseSetEntry`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SetMemberEntry {
    /// Install path as the manifest lists it.
    pub install_path: String,
    /// Installed size.
    pub size: u64,
    /// sha256 hex of the installed bytes.
    pub sha256: String,
}

/// A set to write once its members' bytes are all at hand.
#[derive(Debug, Clone)]
struct PlannedSet {
    component: String,
    processor: String,
    members: Vec<SetMember>,
}

#[derive(Serialize)]
struct Index<'a> {
    format_version: u32,
    archives: &'a [StoreEntry],
    database_files: &'a [DatabaseEntry],
    database_sets: &'a [DatabaseSetEntry],
}

struct Store<'a> {
    root: &'a Path,
    spec: Spec,
    entries: BTreeMap<(String, String, String, Option<String>, String), StoreEntry>,
    /// (component, install path, version, sha256) -> entry.
    databases: BTreeMap<(String, String, String, String), DatabaseEntry>,
    /// zstd level of database objects.
    level: i32,
    /// Encoded objects kept between runs.
    cache: Option<ObjectCache>,
    /// Objects waiting to be encoded, by the sha256 of their bytes.
    pending: BTreeMap<[u8; 32], Pending>,
    /// Objects in the store, by the sha256 of their decoded bytes, with
    /// their stored size.
    stored: BTreeMap<[u8; 32], u64>,
    /// Where pending objects' bytes wait (removed with the store).
    scratch: tempfile::TempDir,
    /// Transport objects by the sha256 of their archive.
    transports: BTreeMap<[u8; 32], Option<TransportEntry>>,
    /// Database files that are members of a set, by sha256: where their
    /// bytes wait until the sets are written, and their version.
    members: BTreeMap<[u8; 32], Option<(PathBuf, String)>>,
    /// Sets written.
    sets: Vec<DatabaseSetEntry>,
    /// Objects encoded, and copied from the cache.
    encoded: usize,
    from_cache: usize,
}

impl<'a> Store<'a> {
    fn new(root: &'a Path, level: i32, cache: Option<ObjectCache>) -> Result<Self, PublishError> {
        // In the staging directory's parent: every entry of the staging
        // directory becomes part of the repository.
        let parent = rocm_kpack_fs::parent_dir(root);
        let scratch = tempfile::Builder::new()
            .prefix(".publish-scratch-")
            .tempdir_in(parent)
            .map_err(|e| PublishError::io("cannot create a directory in", parent, e))?;
        Ok(Store {
            root,
            spec: Spec::default_families(),
            entries: BTreeMap::new(),
            databases: BTreeMap::new(),
            level,
            cache,
            pending: BTreeMap::new(),
            stored: BTreeMap::new(),
            scratch,
            transports: BTreeMap::new(),
            members: BTreeMap::new(),
            sets: Vec::new(),
            encoded: 0,
            from_cache: 0,
        })
    }
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
            transport: None,
        };
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
            commit_object(tmp)?;
        }
        let mut entry = entry;
        entry.transport = self.add_transport(sha, &archive, &origin.join(filename))?;
        drop(archive);
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
    /// Checks that one database file is the file its manifest lists and
    /// records it; its object is copied from the cache when there, else
    /// its bytes wait in the scratch directory for [`Store::encode_pending`].
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
        let path = layout::store::database_object_path(&db.sha256);
        let reused = self.reuse(&db.sha256, &path)?;
        let check = |sha: [u8; 32], size: u64| {
            if sha != db.sha256 || size != db.size {
                return Err(PublishError::Invalid(format!(
                    "{package}: {} has {size} bytes with sha256 {}, but the {component} manifest says {} bytes with sha256 {}",
                    db.path,
                    hex::encode(sha),
                    db.size,
                    hex::encode(db.sha256)
                )));
            }
            Ok(())
        };
        let read_err = |e: io::Error| {
            PublishError::Package(PackageError::corrupt(origin, format!("{}: {e}", db.path)))
        };
        // A set member's bytes are kept until the sets are written, even
        // when its own object needs no encoding.
        let member = self.members.get(&db.sha256).map(Option::is_none);
        if reused && member != Some(true) {
            // Stored already (another package of this publish carries the
            // same file, or the cache had it): only checked.
            let (size, sha) = rocm_kpack_fs::sha256_reader(data).map_err(read_err)?;
            check(sha, size)?;
        } else {
            let name = match reused {
                true => format!("{}.member", hex::encode(db.sha256)),
                false => hex::encode(db.sha256),
            };
            let spill = self.scratch.path().join(name);
            let file =
                File::create(&spill).map_err(|e| PublishError::io("cannot create", &spill, e))?;
            let mut w = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
            io::copy(data, &mut w).map_err(read_err)?;
            let (buf, sha, size) = w.finish();
            buf.into_inner()
                .map_err(|e| PublishError::io("cannot write", &spill, e.into_error()))?;
            check(sha, size)?;
            if member.is_some() {
                self.members
                    .insert(db.sha256, Some((spill.clone(), version.to_string())));
            }
            if !reused {
                self.pending.insert(
                    db.sha256,
                    Pending {
                        path: path.clone(),
                        size,
                        spill,
                    },
                );
            }
        }
        let key = (
            component.to_string(),
            db.path.clone(),
            version.to_string(),
            hex::encode(db.sha256),
        );
        let slot = self.databases.entry(key).or_insert_with(|| DatabaseEntry {
            component: component.to_string(),
            family: db.family.clone(),
            architectures: db.architectures.clone(),
            install_path: db.path.clone(),
            version: version.to_string(),
            object: ZstdObject::new(db.size, &db.sha256, path),
            packages: Vec::new(),
        });
        if !slot.packages.iter().any(|x| x == package) {
            slot.packages.push(package.to_string());
            slot.packages.sort();
        }
        Ok(())
    }

    /// Marks the members of `planned` sets, whose bytes [`Store::add_database`]
    /// then keeps for [`Store::add_sets`].
    fn expect_set_members(&mut self, planned: &[PlannedSet]) {
        for m in planned.iter().flat_map(|set| &set.members) {
            self.members.insert(m.sha256, None);
        }
    }

    /// Writes the decoded stream of every planned set whose members were
    /// all read, and queues its object (copied from the cache when there).
    /// Before [`Store::encode_pending`], which removes the members' bytes.
    fn add_sets(&mut self, planned: &[PlannedSet]) -> Result<(), PublishError> {
        for (n, set) in planned.iter().enumerate() {
            let mut files = Vec::with_capacity(set.members.len());
            let mut version = None;
            for m in &set.members {
                match self.members.get(&m.sha256) {
                    Some(Some((spill, v))) => {
                        files.push((m.clone(), spill.clone()));
                        version.get_or_insert_with(|| v.clone());
                    }
                    _ => break,
                }
            }
            let Some(version) = version.filter(|_| files.len() == set.members.len()) else {
                tracing::warn!(
                    "{}: not every database file of {} is in this publish; no set",
                    set.component,
                    set.processor
                );
                continue;
            };
            let spill = self.scratch.path().join(format!("set-{n}"));
            let file =
                File::create(&spill).map_err(|e| PublishError::io("cannot create", &spill, e))?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            let summary = database_set::write_set_from_files(&files, &mut w).map_err(|e| {
                PublishError::Invalid(format!(
                    "{}: the database set of {}: {e}",
                    set.component, set.processor
                ))
            })?;
            w.into_inner()
                .map_err(|e| PublishError::io("cannot write", &spill, e.into_error()))?;
            let path = layout::store::database_set_object_path(&summary.sha256);
            self.queue(summary.sha256, &path, summary.size, spill)?;
            self.sets.push(DatabaseSetEntry {
                component: set.component.clone(),
                processor: set.processor.clone(),
                version,
                format: database_set::FORMAT,
                object: ZstdObject::new(summary.size, &summary.sha256, path),
                members: summary
                    .members
                    .iter()
                    .map(|m| SetMemberEntry {
                        install_path: m.path.clone(),
                        size: m.size,
                        sha256: hex::encode(m.sha256),
                    })
                    .collect(),
            });
        }
        Ok(())
    }

    /// Queues the transport object of `archive` (whose sha256 is
    /// `archive_sha`); None when it has none.
    fn add_transport(
        &mut self,
        archive_sha: [u8; 32],
        archive: &Archive,
        origin: &Path,
    ) -> Result<Option<TransportEntry>, PublishError> {
        if let Some(t) = self.transports.get(&archive_sha) {
            return Ok(t.clone());
        }
        let spill = self
            .scratch
            .path()
            .join(format!("{}.transport", hex::encode(archive_sha)));
        let file =
            File::create(&spill).map_err(|e| PublishError::io("cannot create", &spill, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let summary = transport::write_transport(archive, &mut w).map_err(|source| {
            PublishError::Package(PackageError::Format {
                path: origin.to_path_buf(),
                source,
            })
        })?;
        w.into_inner()
            .map_err(|e| PublishError::io("cannot write", &spill, e.into_error()))?;
        let t = if summary.blobs != archive.blob_count() {
            tracing::warn!(
                "{}: {} of its code objects hold the bytes of another; no transport object",
                origin.display(),
                archive.blob_count() - summary.blobs
            );
            drop(fs::remove_file(&spill));
            None
        } else {
            let path = layout::store::transport_object_path(&summary.sha256);
            self.queue(summary.sha256, &path, summary.size, spill)?;
            Some(TransportEntry {
                path,
                size: summary.size,
                sha256: hex::encode(summary.sha256),
                // Known once the object is encoded (write_store fills it in).
                stored_size: 0,
            })
        };
        self.transports.insert(archive_sha, t.clone());
        Ok(t)
    }

    /// Queues the object at `path` whose decoded bytes (`size`, `sha256`)
    /// wait at `spill`, unless it needs no encoding ([`Store::reuse`]):
    /// then `spill` is removed.
    fn queue(
        &mut self,
        sha256: [u8; 32],
        path: &str,
        size: u64,
        spill: PathBuf,
    ) -> Result<(), PublishError> {
        if self.reuse(&sha256, path)? {
            drop(fs::remove_file(&spill));
        } else {
            let path = path.to_string();
            self.pending.insert(sha256, Pending { path, size, spill });
        }
        Ok(())
    }

    /// Whether the object decoding to `sha256` needs no encoding: stored or
    /// queued already, or copied from the cache to `path` now.
    fn reuse(&mut self, sha256: &[u8; 32], path: &str) -> Result<bool, PublishError> {
        if self.stored.contains_key(sha256) || self.pending.contains_key(sha256) {
            return Ok(true);
        }
        let Some(cache) = &self.cache else {
            return Ok(false);
        };
        match cache.copy_to(sha256, &self.root.join(path))? {
            Some(stored) => {
                self.from_cache += 1;
                self.stored.insert(*sha256, stored);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Encodes every pending object into the store, in parallel as far as
    /// `jobs` and the memory budget allow (largest first, so a large one
    /// does not start last), each into the cache too. Each object is its
    /// own single-threaded frame: the bytes do not depend on the order or
    /// the number of threads.
    fn encode_pending(&mut self, jobs: usize, memory: u64) -> Result<(), PublishError> {
        let pending = std::mem::take(&mut self.pending);
        let largest = pending.values().map(|p| p.size).max().unwrap_or(0);
        let threads = encoding_threads(jobs, memory, largest);
        tracing::info!(
            objects = pending.len(),
            threads,
            "encoding store objects at zstd level {}",
            self.level
        );
        let mut order: Vec<(&[u8; 32], &Pending)> = pending.iter().collect();
        order.sort_by(|a, b| b.1.size.cmp(&a.1.size).then(a.0.cmp(b.0)));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| PublishError::Invalid(format!("cannot start {threads} threads: {e}")))?;
        let (root, level, cache) = (self.root, self.level, self.cache.as_ref());
        let done: Vec<Result<([u8; 32], u64), PublishError>> = pool.install(|| {
            order
                .par_iter()
                .with_max_len(1)
                .map(|(sha, p)| encode_object(root, sha, p, level, cache).map(|n| (**sha, n)))
                .collect()
        });
        for r in done {
            let (sha, stored) = r?;
            self.stored.insert(sha, stored);
            self.encoded += 1;
        }
        Ok(())
    }
}

/// The stored size of the object whose decoded bytes have sha256 `hex`.
fn stored_size(
    stored: &BTreeMap<[u8; 32], u64>,
    hex: &str,
    path: &str,
) -> Result<u64, PublishError> {
    let sha = hex::decode(hex)
        .ok()
        .and_then(|v| <[u8; 32]>::try_from(v).ok());
    sha.and_then(|s| stored.get(&s).copied())
        .ok_or_else(|| PublishError::Invalid(format!("{path}: no stored object")))
}

/// Bytes waiting to be encoded into the store.
struct Pending {
    /// Path of the object in the store.
    path: String,
    /// Decoded size.
    size: u64,
    /// The decoded bytes (checked against their sha256 when written).
    spill: PathBuf,
}

/// Encodes one pending object into the store (and the cache); returns its
/// stored size.
fn encode_object(
    root: &Path,
    sha256: &[u8; 32],
    p: &Pending,
    level: i32,
    cache: Option<&ObjectCache>,
) -> Result<u64, PublishError> {
    let dest = root.join(&p.path);
    let mut src = File::open(&p.spill).map_err(|e| PublishError::io("cannot open", &p.spill, e))?;
    let mut tmp = PendingFile::create_named(&dest, INCOMING, "")?;
    let (sha, size) = encode_database(
        &mut src,
        BufWriter::with_capacity(1 << 20, &mut tmp),
        level,
        p.size,
    )
    .map_err(|e| PublishError::io("cannot encode", &p.spill, e))?;
    if &sha != sha256 || size != p.size {
        return Err(PublishError::Invalid(format!(
            "{} changed while publishing",
            p.spill.display()
        )));
    }
    let stored = tmp
        .file_mut()
        .metadata()
        .map_err(|e| PublishError::io("cannot read", tmp.temp_path(), e))?
        .len();
    let dest = commit_object(tmp)?;
    // Its disk space is needed no longer.
    drop(fs::remove_file(&p.spill));
    if let Some(c) = cache {
        c.insert(sha256, &dest);
    }
    Ok(stored)
}

/// How many objects are encoded at once: `jobs`, fewer when that many
/// encoders of the largest object would exceed `memory` (at least one: an
/// object larger than the budget is still encoded, alone).
pub fn encoding_threads(jobs: usize, memory: u64, largest: u64) -> usize {
    let each = encoder_memory(largest);
    let fit = usize::try_from(memory / each).unwrap_or(usize::MAX);
    jobs.min(fit).max(1)
}

/// Memory one store encoder takes for an object of `size` bytes: zstd
/// sizes its window (at most 2^[`transport::WINDOW_LOG`]) and its tables to
/// the pledged size, and at level 19 the whole context is about 3.4 times
/// the window (measured with `/usr/bin/time -v zstd -19 --long=27 -T1`:
/// 425 MB peak RSS for the 396 MB TensileLibrary_gfx90a.co of Debian's
/// librocblas0, 109 MB for a 20 MB Kernels.so-000-gfx908.hsaco).
pub fn encoder_memory(size: u64) -> u64 {
    let window = size
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
        .min(1 << transport::WINDOW_LOG);
    window / 2 * 7 + (4 << 20)
}

/// Whether the encoded object at `path` decodes to bytes with `sha256`.
pub(crate) fn decodes_to(path: &Path, sha256: &[u8; 32]) -> bool {
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
    let kinds = [
        (PackageKind::Deb, &inputs.debs),
        (PackageKind::Rpm, &inputs.rpms),
        (PackageKind::Wheel, &inputs.wheels),
    ];
    for (kind, paths) in kinds {
        for path in paths {
            let r = AnyPackage::open_as(path, kind)?;
            let version = r.version();
            let label = file_label(path);
            r.for_each_file(|member, _size, data| call(member, &version, &label, path, data))
                .map_err(failed)?;
        }
    }
    Ok(())
}

/// The largest `.kpm` read (real ones are a few KiB).
const MAX_MANIFEST: u64 = 16 << 20;

/// Makes a store object visible: readable by the web server that serves
/// the store (temporary files are created private).
pub(crate) fn commit_object(tmp: PendingFile) -> Result<PathBuf, PublishError> {
    tmp.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    Ok(tmp.commit_as("cannot store")?)
}

/// Prefix of the temporary name of a store object being written.
pub(crate) const INCOMING: &str = ".incoming-";

/// Every database file the packages' manifests list, by its path in the
/// package (`<prefix>/<path>`, the prefix being the directory holding the
/// manifest's `.kpack/`, or below the root a `prefix_path` names), with its
/// component.
/// Also returns the sets to write: per manifest, [`database_set::sets_of`]
/// its database files.
fn listed_databases(inputs: &Inputs) -> Result<(Listed, Vec<PlannedSet>), PublishError> {
    let mut out = BTreeMap::new();
    let mut sets = Vec::new();
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
        for (processor, indices) in database_set::sets_of(&m.database_files) {
            sets.push(PlannedSet {
                component: m.component.clone(),
                processor,
                members: indices
                    .iter()
                    .filter_map(|&i| m.database_files.get(i))
                    .map(SetMember::from)
                    .collect(),
            });
        }
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
    Ok((out, sets))
}

/// Database files by their path in the package, with their component.
type Listed = BTreeMap<String, (String, DatabaseFile)>;

/// What [`write_store`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreWritten {
    /// `index.json` entries.
    pub entries: usize,
    /// Objects encoded.
    pub encoded: usize,
    /// Objects copied from the cache.
    pub from_cache: usize,
}

/// Writes `by-hash/` and `index.json` into `root`. Database files wait,
/// decoded, in a scratch directory beside `root` (so a publish needs disk
/// for their decoded bytes once) until every package is read, and are
/// then encoded in parallel.
pub fn write_store(
    inputs: &Inputs,
    root: &Path,
    opts: &PublishOptions,
) -> Result<StoreWritten, PublishError> {
    let cache = match &opts.cache {
        Some(dir) => Some(ObjectCache::open(
            dir,
            opts.store_zstd_level,
            transport::WINDOW_LOG,
        )?),
        None => None,
    };
    let mut store = Store::new(root, opts.store_zstd_level, cache)?;
    let (listed, planned) = listed_databases(inputs)?;
    store.expect_set_members(&planned);
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
    store.add_sets(&planned)?;
    store.encode_pending(opts.jobs, opts.memory)?;
    let mut entries: Vec<StoreEntry> = store.entries.into_values().collect();
    for t in entries.iter_mut().filter_map(|e| e.transport.as_mut()) {
        t.stored_size = stored_size(&store.stored, &t.sha256, &t.path)?;
    }
    let mut databases: Vec<DatabaseEntry> = store.databases.into_values().collect();
    let mut sets = std::mem::take(&mut store.sets);
    let objects = databases.iter_mut().map(|d| &mut d.object);
    for o in objects.chain(sets.iter_mut().map(|t| &mut t.object)) {
        o.stored_size = stored_size(&store.stored, &o.sha256, &o.path)?;
    }
    sets.sort_by(|a, b| {
        (&a.component, &a.processor, &a.version, &a.object.sha256).cmp(&(
            &b.component,
            &b.processor,
            &b.version,
            &b.object.sha256,
        ))
    });
    sets.dedup();
    let mut text = serde_json::to_string_pretty(&Index {
        format_version: 2,
        archives: &entries,
        database_files: &databases,
        database_sets: &sets,
    })
    .map_err(|e| PublishError::Invalid(format!("cannot serialize index.json: {e}")))?;
    text.push('\n');
    crate::write_file(&root.join("index.json"), text.as_bytes())?;
    Ok(StoreWritten {
        entries: entries.len() + databases.len() + sets.len(),
        encoded: store.encoded,
        from_cache: store.from_cache,
    })
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

    /// An archive of `libx` for gfx90a holding `kernels` (binary, arch, bytes).
    fn archive(scheme: CompressionScheme, kernels: &[(&str, &str, Vec<u8>)]) -> Vec<u8> {
        let mut w =
            ArchiveWriter::new(io::Cursor::new(Vec::new()), "libx", "gfx90a", scheme, 3).unwrap();
        for (binary, arch, bytes) in kernels {
            w.add_kernel(binary, arch, bytes.clone()).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn an_existing_by_hash_file_is_kept_only_if_it_holds_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = archive(
            CompressionScheme::None,
            &[("lib/libx.so#0", "gfx90a", vec![7u8; 4096])],
        );
        let hex = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let dest = dir
            .path()
            .join("stage")
            .join(layout::store::BY_HASH_DIR)
            .join(&hex);
        let root = dir.path().join("stage");
        let mut store = Store::new(&root, 3, None).unwrap();
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

    /// Database files of `n` sizes, compressible but distinct.
    fn databases(n: usize) -> Vec<(DatabaseFile, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let mut x = i as u32 + 1;
                let bytes: Vec<u8> = (0..(20_000 + i * 37_000))
                    .map(|j| {
                        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        if j % 7 == 0 {
                            (x >> 24) as u8
                        } else {
                            (j % 251) as u8
                        }
                    })
                    .collect();
                let db = DatabaseFile {
                    path: format!("lib/db/file{i}.co"),
                    family: "gfx90a".into(),
                    architectures: vec!["gfx90a".into()],
                    size: bytes.len() as u64,
                    sha256: <sha2::Sha256 as sha2::Digest>::digest(&bytes).into(),
                };
                (db, bytes)
            })
            .collect()
    }

    /// Publishes `dbs` into `<dir>/<name>` (level 3) on `jobs` threads;
    /// returns the store root and what was written.
    fn publish_databases(
        dir: &Path,
        name: &str,
        dbs: &[(DatabaseFile, Vec<u8>)],
        jobs: usize,
        cache: Option<&Path>,
    ) -> (PathBuf, usize, usize, BTreeMap<[u8; 32], u64>) {
        let root = dir.join(name);
        let cache = cache.map(|c| ObjectCache::open(c, 3, transport::WINDOW_LOG).unwrap());
        let mut store = Store::new(&root, 3, cache).unwrap();
        for (db, bytes) in dbs {
            store
                .add_database(
                    "libx",
                    db,
                    "1.0",
                    "libx-gfx90a.deb",
                    Path::new("in"),
                    &mut bytes.as_slice(),
                )
                .unwrap();
        }
        store.encode_pending(jobs, 1 << 30).unwrap();
        (root.clone(), store.encoded, store.from_cache, store.stored)
    }

    fn object(root: &Path, db: &DatabaseFile) -> Vec<u8> {
        fs::read(root.join(layout::store::database_object_path(&db.sha256))).unwrap()
    }

    #[test]
    fn parallel_encoding_writes_the_bytes_serial_encoding_writes() {
        let dir = tempfile::tempdir().unwrap();
        let dbs = databases(6);
        let (serial, n, _, sizes1) = publish_databases(dir.path(), "serial", &dbs, 1, None);
        let (parallel, m, _, sizes4) = publish_databases(dir.path(), "parallel", &dbs, 4, None);
        assert_eq!((n, m), (6, 6));
        assert_eq!(sizes1, sizes4);
        for (db, bytes) in &dbs {
            let obj = object(&serial, db);
            assert_eq!(obj, object(&parallel, db), "{}", db.path);
            assert_eq!(sizes1[&db.sha256], obj.len() as u64);
            assert_eq!(&zstd::decode_all(obj.as_slice()).unwrap(), bytes);
        }
        // The scratch copies are gone with the stores.
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with(".publish-scratch-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn the_memory_budget_limits_the_encoders() {
        let big = 1u64 << 30;
        assert_eq!(encoder_memory(big), encoder_memory(1 << 27));
        assert!(encoder_memory(1 << 27) > 400 << 20);
        assert!(encoder_memory(1 << 20) < 8 << 20);
        assert_eq!(encoding_threads(8, 1 << 30, big), 2);
        assert_eq!(encoding_threads(8, 100 << 20, big), 1, "one runs, alone");
        assert_eq!(encoding_threads(8, 1 << 30, 1 << 20), 8);
        assert_eq!(encoding_threads(1, 1 << 30, 1 << 20), 1);
    }

    #[test]
    fn a_cached_object_is_copied_not_encoded_and_a_damaged_one_is_encoded_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let dbs = databases(4);
        let (first, encoded, cached, _) =
            publish_databases(dir.path(), "first", &dbs, 2, Some(&cache_dir));
        assert_eq!((encoded, cached), (4, 0));
        let cache = ObjectCache::open(&cache_dir, 3, transport::WINDOW_LOG).unwrap();
        let stamp = |db: &DatabaseFile| {
            let m = fs::symlink_metadata(cache.entry_path(&db.sha256)).unwrap();
            (
                std::os::unix::fs::MetadataExt::ino(&m),
                m.modified().unwrap(),
            )
        };
        let before: Vec<_> = dbs.iter().map(|(db, _)| stamp(db)).collect();
        for (db, _) in &dbs {
            assert_eq!(
                fs::read(cache.entry_path(&db.sha256)).unwrap(),
                object(&first, db)
            );
        }

        let (second, encoded, cached, _) =
            publish_databases(dir.path(), "second", &dbs, 2, Some(&cache_dir));
        assert_eq!((encoded, cached), (0, 4), "every object from the cache");
        for (db, _) in &dbs {
            let path = second.join(layout::store::database_object_path(&db.sha256));
            let mode = fs::metadata(&path).unwrap().permissions();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
                0o644
            );
        }
        let after: Vec<_> = dbs.iter().map(|(db, _)| stamp(db)).collect();
        assert_eq!(before, after, "cache entries untouched");
        for (db, _) in &dbs {
            assert_eq!(object(&second, db), object(&first, db));
        }

        // Damage: a flipped byte past the frame header, a truncation, a
        // symlink to an intact object, a directory.
        let entry = |i: usize| cache.entry_path(&dbs[i].0.sha256);
        let mut flipped = fs::read(entry(0)).unwrap();
        let at = flipped.len() / 2;
        flipped[at] ^= 0x40;
        fs::write(entry(0), &flipped).unwrap();
        let whole = fs::read(entry(1)).unwrap();
        fs::write(entry(1), &whole[..whole.len() - 9]).unwrap();
        let elsewhere = dir.path().join("elsewhere.zst");
        fs::rename(entry(2), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, entry(2)).unwrap();
        fs::remove_file(entry(3)).unwrap();
        fs::create_dir(entry(3)).unwrap();
        let (third, encoded, cached, _) =
            publish_databases(dir.path(), "third", &dbs, 2, Some(&cache_dir));
        assert_eq!((encoded, cached), (4, 0), "damaged entries encoded again");
        for (db, _) in &dbs {
            assert_eq!(object(&third, db), object(&first, db), "{}", db.path);
        }
        for (i, (db, _)) in dbs.iter().enumerate().take(3) {
            assert_eq!(fs::read(entry(i)).unwrap(), object(&first, db), "repaired");
            assert!(fs::symlink_metadata(entry(i)).unwrap().is_file());
        }
        // A directory in the way is left alone (and costs an encode each
        // run), the store is still right.
        assert!(entry(3).is_dir());
    }

    #[test]
    fn every_archive_gets_a_transport_object_that_decodes_to_its_transport() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = archive(
            CompressionScheme::ZstdPerKernel,
            &[
                ("lib/libx.so#0", "gfx90a:xnack-", vec![7u8; 40_000]),
                ("lib/libx.so#0", "gfx90a:xnack+", vec![9u8; 30_000]),
                ("lib/liby.so#0", "gfx90a:xnack-", vec![7u8; 40_000]),
            ],
        );
        let archive = Archive::from_bytes(bytes.clone()).unwrap();
        let mut expected = Vec::new();
        let summary = transport::write_transport(&archive, &mut expected).unwrap();

        let root = dir.path().join("stage");
        let mut store = Store::new(&root, 3, None).unwrap();
        for package in ["a.deb", "b.deb"] {
            store
                .add(
                    "libx_gfx90a.kpack",
                    Some("1.0"),
                    Some(package),
                    Path::new("in"),
                    &mut bytes.as_slice(),
                )
                .unwrap();
        }
        store.encode_pending(2, 1 << 30).unwrap();
        assert_eq!(store.encoded, 1, "one object for the archive both carry");
        let t = store.transports.values().next().unwrap().clone().unwrap();
        assert_eq!(
            t.path,
            layout::store::transport_object_path(&summary.sha256)
        );
        assert_eq!(t.sha256, hex::encode(summary.sha256));
        assert_eq!(t.size, summary.size);
        let obj = fs::read(root.join(&t.path)).unwrap();
        assert_eq!(store.stored[&summary.sha256], obj.len() as u64);
        // What the web server serves must be readable by it.
        let archive_sha: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
        for served in [t.path.clone(), layout::store::by_hash_path(&archive_sha)] {
            let mode = fs::metadata(root.join(&served)).unwrap().permissions();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
                0o644,
                "{served}"
            );
        }
        assert_eq!(zstd::decode_all(obj.as_slice()).unwrap(), expected);
        // The store encoder's frame, as for database files.
        let mut again = Vec::new();
        transport::encode_store_object(&mut expected.as_slice(), &mut again, 3, summary.size)
            .unwrap();
        assert_eq!(obj, again);
    }

    #[test]
    fn a_set_is_written_only_where_a_processor_has_feature_variants() {
        let file = |path: &str, arch: &str, seed: u8| {
            let bytes: Vec<u8> = (0..30_000u32)
                .map(|i| (i % 251) as u8 ^ if i % 40 == 0 { seed } else { 0 })
                .collect();
            let db = DatabaseFile {
                path: path.into(),
                family: "gfx90X".into(),
                architectures: vec![arch.into()],
                size: bytes.len() as u64,
                sha256: <sha2::Sha256 as sha2::Digest>::digest(&bytes).into(),
            };
            (db, bytes)
        };
        let files = vec![
            file("lib/TensileLibrary_gfx90a.co", "gfx90a", 1),
            file("lib/Kernels-gfx90a-xnack+.hsaco", "gfx90a:xnack+", 2),
            file("lib/Kernels-gfx90a-xnack-.hsaco", "gfx90a:xnack-", 3),
            file("lib/Kernels-gfx1100.hsaco", "gfx1100", 4),
            file("lib/TensileLibrary_gfx1100.co", "gfx1100", 5),
        ];
        let dbs: Vec<DatabaseFile> = files.iter().map(|(d, _)| d.clone()).collect();
        let planned: Vec<PlannedSet> = database_set::sets_of(&dbs)
            .into_iter()
            .map(|(processor, indices)| PlannedSet {
                component: "libx".into(),
                processor,
                members: indices.iter().map(|&i| SetMember::from(&dbs[i])).collect(),
            })
            .collect();
        assert_eq!(planned.len(), 1, "gfx1100 has no variants: no set");

        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        for (run, encoded, cached) in [("first", 6, 0), ("second", 0, 6)] {
            let root = dir.path().join(run);
            let cache = ObjectCache::open(&cache_dir, 3, transport::WINDOW_LOG).unwrap();
            let mut store = Store::new(&root, 3, Some(cache)).unwrap();
            store.expect_set_members(&planned);
            for (db, bytes) in &files {
                store
                    .add_database(
                        "libx",
                        db,
                        "1.0",
                        "x.deb",
                        Path::new("in"),
                        &mut bytes.as_slice(),
                    )
                    .unwrap();
            }
            store.add_sets(&planned).unwrap();
            store.encode_pending(2, 1 << 30).unwrap();
            // Five files and one set, encoded once and then taken from the
            // cache (the members' bytes are still kept to write the set).
            assert_eq!(
                (store.encoded, store.from_cache),
                (encoded, cached),
                "{run}"
            );
            assert_eq!(store.sets.len(), 1);
            let set = &store.sets[0];
            assert_eq!(set.processor, "gfx90a");
            let paths: Vec<&str> = set
                .members
                .iter()
                .map(|m| m.install_path.as_str())
                .collect();
            assert_eq!(
                paths,
                [
                    "lib/Kernels-gfx90a-xnack+.hsaco",
                    "lib/Kernels-gfx90a-xnack-.hsaco",
                    "lib/TensileLibrary_gfx90a.co"
                ]
            );
            let obj = fs::read(root.join(&set.object.path)).unwrap();
            let decoded = zstd::decode_all(obj.as_slice()).unwrap();
            assert_eq!(decoded.len() as u64, set.object.size);
            assert_eq!(
                hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&decoded)),
                set.object.sha256
            );
            let mut got = Vec::new();
            database_set::read_set(&mut decoded.as_slice(), &mut |m, data| {
                let mut b = Vec::new();
                data.read_to_end(&mut b)?;
                got.push((m.path.clone(), b));
                Ok(())
            })
            .unwrap();
            for (path, bytes) in got {
                let (_, want) = files.iter().find(|(d, _)| d.path == path).unwrap();
                assert_eq!(&bytes, want, "{path}");
            }
            // The per-file objects stay.
            for (db, _) in &files {
                assert!(root
                    .join(layout::store::database_object_path(&db.sha256))
                    .is_file());
            }
        }
    }
}
