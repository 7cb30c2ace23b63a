//! `.kpm` manifests: which archives and kernel-database files a component
//! has, for which architectures, with their sizes and hashes
//! (docs/formats.md section 3).
//!
//! Version 2 adds `database_files`; a manifest without database files is
//! written as version 1, which every earlier reader honours in full, and
//! one with database files as version 2, which an earlier reader refuses
//! (it could not fetch those files). Version 3 adds `prefix_path`, for
//! database files outside the prefix (Debian's MIOpen keeps its databases
//! in `usr/share/miopen/db/`, its library in `usr/lib/<triplet>/`): the
//! prefix's path below an install root, which the database paths are then
//! relative to. It is written only when needed, and a version-2 reader
//! refuses it (it would install those files below the prefix). The legacy schema of some
//! reference-tool versions (`component_name`, `prefix`, `kpack_files` keyed
//! by arch) is read too.

use crate::error::{Error, Result};
use crate::msgpack::{self, present, Bin, Named, Pairs, Str};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::layout::names::NameKind;

/// The newest manifest format version this crate reads and writes.
pub const MANIFEST_VERSION: u64 = 3;

/// The version of manifests whose database paths are below the prefix.
pub const MANIFEST_VERSION_DATABASES: u64 = 2;

/// The version of manifests that list archives only.
pub const MANIFEST_VERSION_ARCHIVES_ONLY: u64 = 1;

/// One kernel-database file listed in a manifest: a data file (Tensile
/// `.co`/`.hsaco`, MIOpen `.kdb`, AOTriton image, ...) the split moved from
/// the generic package to a device package, installed at `path` below the
/// manifest's prefix (the directory holding its `.kpack/` directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseFile {
    /// Install path relative to the prefix, `/`-separated (checked by
    /// [`validate_database_path`]).
    pub path: String,
    /// Family (device tree) the file belongs to.
    pub family: String,
    /// The processors or generic ISA it serves (target ids, `gfx90a:xnack+`,
    /// `gfx11-generic`).
    pub architectures: Vec<String>,
    /// Installed size in bytes.
    pub size: u64,
    /// SHA-256 of the installed bytes.
    pub sha256: [u8; 32],
}

/// One archive listed in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    /// Basename of the archive, in the manifest's own directory.
    pub filename: String,
    /// Family (or single target) the archive covers.
    pub family: String,
    /// The arch keys present in the archive.
    pub architectures: Vec<String>,
    /// Archive size in bytes.
    pub size: u64,
    /// SHA-256 of the archive; `None` only for legacy manifests.
    pub sha256: Option<[u8; 32]>,
    /// Where the archive's transport form is described (optional key
    /// `transport`; readers that do not know it fetch the archive itself).
    pub transport: Option<ArchiveTransport>,
}

/// An archive's `transport` key: its transport form
/// (`crate::archive::transport`) and how the published archive was framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveTransport {
    /// Format 1, which this crate reads.
    Solid {
        /// Bytes of the decoded transport form.
        size: u64,
        /// SHA-256 of the decoded transport form: the store object's name
        /// and what a rebuilt archive is checked against.
        sha256: [u8; 32],
        /// zstd level of the published archive's frames, when known
        /// (`None` for an uncompressed archive): rebuilding at it (with
        /// the same zstd) gives the archive's `sha256`.
        level: Option<i32>,
    },
    /// A format this crate does not read (a newer writer's): the archive is
    /// fetched as it is.
    Unsupported {
        /// The `format` the manifest gives.
        format: u64,
    },
}

/// The `transport` format of [`ArchiveTransport::Solid`].
pub const TRANSPORT_FORMAT_SOLID: u64 = 1;

/// A decoded `.kpm` manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Component name, equal to the archives' `group_name`.
    pub component: String,
    /// The archives, in manifest order.
    pub kpack_files: Vec<ManifestFile>,
    /// Kernel-database files, in manifest order (empty before version 2).
    pub database_files: Vec<DatabaseFile>,
    /// Version 3: the prefix's path below the install root its database
    /// paths are relative to (`usr/lib/x86_64-linux-gnu`; checked by
    /// [`validate_database_path`]); `None`: they are relative to the prefix.
    /// The fetcher installs only where the prefix really ends in this path.
    pub prefix_path: Option<String>,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::InvalidMetadata(format!("kpm manifest: {}", detail.into()))
}

/// Checks that an archive filename is a plain `*.kpack` basename (see
/// [`crate::layout::names`]): no separators, `..`, encodings, URL schemes
/// or control characters, so joining it to the manifest's directory or to
/// a source URL can never leave that directory.
pub fn validate_filename(name: &str) -> Result<()> {
    check_name(NameKind::ArchiveFile, name, "archive filename")
}

/// Checks a component name the same way (it names the manifest and the
/// sources file a package ships beside it).
pub fn validate_component(name: &str) -> Result<()> {
    check_name(NameKind::Component, name, "component name")
}

/// Checks a database file's install path: a relative member path (no
/// `..`, `.`, empty or absolute components, no control characters) that
/// does not lie in a `.kpack/` directory nor name an archive or manifest,
/// so a manifest can never make the fetcher write outside its prefix or
/// over another component's kpack files.
pub fn validate_database_path(path: &str) -> Result<()> {
    check_name(NameKind::DatabasePath, path, "database path")
}

fn check_name(kind: NameKind, name: &str, field: &str) -> Result<()> {
    crate::layout::names::check(kind, name)
        .map_err(|e| bad(format!("unsafe {field} {}: {}", e.shown, e.reason)))
}

/// A SHA-256 as the manifest stores it: a 32-byte `bin`.
#[derive(Clone, Copy)]
struct Sha256([u8; 32]);

impl Serialize for Sha256 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        Bin(&self.0).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let b = Bin::deserialize(d)?;
        b.0.try_into()
            .map(Sha256)
            .map_err(|_| serde::de::Error::invalid_length(b.0.len(), &"a 32-byte bin"))
    }
}

/// What decides the schema: the version, and (version 1) whether the
/// legacy `component_name` key is there.
#[derive(Deserialize)]
struct Head {
    format_version: u64,
    #[serde(default, deserialize_with = "present")]
    component_name: Option<IgnoredAny>,
}

/// Versions 1 to 3, keys in the order written.
#[derive(Serialize, Deserialize)]
struct Wire<'a> {
    format_version: u64,
    #[serde(borrow)]
    component: Str<'a>,
    #[serde(borrow)]
    kpack_files: Vec<Named<WireArchive<'a>>>,
    #[serde(
        default,
        borrow,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    database_files: Option<Vec<Named<WireDatabase<'a>>>>,
    #[serde(
        default,
        borrow,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    prefix_path: Option<Str<'a>>,
}

/// A `kpack_files` element.
#[derive(Serialize, Deserialize)]
struct WireArchive<'a> {
    #[serde(borrow)]
    filename: Str<'a>,
    #[serde(borrow)]
    family: Str<'a>,
    #[serde(borrow)]
    architectures: Vec<Str<'a>>,
    size: u64,
    sha256: Sha256,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    transport: Option<WireTransport>,
}

/// A `transport` value: a map whose `format` decides the other keys. Read
/// as a generic value first, so a format this reader does not know (with
/// keys it does not know) leaves the rest of the manifest readable.
struct WireTransport(ArchiveTransport);

impl Serialize for WireTransport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap};
        let ArchiveTransport::Solid {
            size,
            sha256,
            level,
        } = &self.0
        else {
            return Err(S::Error::custom(
                "cannot write a transport of an unknown format",
            ));
        };
        let mut m = s.serialize_map(Some(3 + usize::from(level.is_some())))?;
        m.serialize_entry("format", &TRANSPORT_FORMAT_SOLID)?;
        m.serialize_entry("size", size)?;
        m.serialize_entry("sha256", &Sha256(*sha256))?;
        if let Some(level) = level {
            m.serialize_entry("level", level)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for WireTransport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = msgpack::Value::deserialize(d)?;
        let map = value
            .as_map()
            .ok_or_else(|| D::Error::custom("transport must be a map"))?;
        let get = |key: &str| {
            map.iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v)
        };
        let format = get("format")
            .and_then(msgpack::Value::as_u64)
            .ok_or_else(|| D::Error::custom("transport.format must be an unsigned integer"))?;
        if format != TRANSPORT_FORMAT_SOLID {
            return Ok(WireTransport(ArchiveTransport::Unsupported { format }));
        }
        let size = get("size")
            .and_then(msgpack::Value::as_u64)
            .ok_or_else(|| D::Error::custom("transport.size must be an unsigned integer"))?;
        let sha256 = get("sha256")
            .and_then(msgpack::Value::as_slice)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| D::Error::custom("transport.sha256 must be a 32-byte bin"))?;
        let level = match get("level") {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .and_then(|l| i32::try_from(l).ok())
                    .ok_or_else(|| D::Error::custom("transport.level must be an integer"))?,
            ),
        };
        Ok(WireTransport(ArchiveTransport::Solid {
            size,
            sha256,
            level,
        }))
    }
}

/// A `database_files` element.
#[derive(Serialize, Deserialize)]
struct WireDatabase<'a> {
    #[serde(borrow)]
    path: Str<'a>,
    #[serde(borrow)]
    family: Str<'a>,
    #[serde(borrow)]
    architectures: Vec<Str<'a>>,
    size: u64,
    sha256: Sha256,
}

/// The legacy schema: `kpack_files` keyed by arch.
#[derive(Deserialize)]
struct WireLegacy<'a> {
    #[serde(borrow)]
    component_name: Str<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    #[allow(dead_code)] // only its type is checked
    prefix: Option<Str<'a>>,
    #[serde(borrow)]
    kpack_files: Pairs<Str<'a>, Named<WireLegacyFile<'a>>>,
}

#[derive(Deserialize)]
struct WireLegacyFile<'a> {
    #[serde(borrow)]
    file: Str<'a>,
    size: u64,
    #[serde(default, deserialize_with = "present")]
    #[allow(dead_code)] // only its type is checked
    kernel_count: Option<u64>,
}

fn strings(list: &[Str<'_>]) -> Vec<String> {
    list.iter().map(|s| s.0.to_owned()).collect()
}

impl Manifest {
    /// Parses a v1 or legacy manifest, rejecting hostile filenames.
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        let len = msgpack::measure(bytes, 0)?;
        if len != bytes.len() {
            return Err(Error::Msgpack {
                offset: len as u64,
                detail: format!("{} trailing bytes after the manifest", bytes.len() - len),
            });
        }
        let head = msgpack::deserialize::<Named<Head>>(bytes).map_err(bad)?.0;
        let version = head.format_version;
        if version == 0 || version > MANIFEST_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "kpm manifest",
                found: version,
                supported: "1 to 3; a newer rocm-kpack wrote it, so upgrade rocm-kpack-fetch and the runtime",
            });
        }
        let manifest = if version == 1 && head.component_name.is_some() {
            Self::parse_legacy(msgpack::deserialize::<Named<_>>(bytes).map_err(bad)?.0)?
        } else {
            Self::parse_v1(
                msgpack::deserialize::<Named<_>>(bytes).map_err(bad)?.0,
                version,
            )?
        };
        let mut names: Vec<&str> = manifest
            .kpack_files
            .iter()
            .map(|f| f.filename.as_str())
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w.first() == w.get(1)) {
            return Err(bad(format!(
                "archive {:?} listed twice",
                w.first().copied().unwrap_or_default()
            )));
        }
        for f in &manifest.database_files {
            if crate::layout::database_key(manifest.prefix_path.as_deref(), &f.path).is_none() {
                return Err(bad(format!(
                    "database file {:?} is the prefix {:?}, one of its directories, or more than {} levels above it",
                    f.path,
                    manifest.prefix_path.as_deref().unwrap_or_default(),
                    crate::layout::MAX_DATABASE_UP
                )));
            }
        }
        // Every path once, and none that is a directory of another: each
        // path's proper directories looked up in the set of paths (linear
        // in the total length; after sorting, `a-b` lies between `a` and
        // `a/x`, so comparing neighbours alone misses that pair).
        let mut paths: std::collections::HashSet<&str> =
            std::collections::HashSet::with_capacity(manifest.database_files.len());
        for f in &manifest.database_files {
            if !paths.insert(f.path.as_str()) {
                return Err(bad(format!("database file {:?} listed twice", f.path)));
            }
        }
        for f in &manifest.database_files {
            let dirs = f
                .path
                .match_indices('/')
                .filter_map(|(i, _)| f.path.get(..i));
            if let Some(dir) = dirs.into_iter().find(|d| paths.contains(d)) {
                return Err(bad(format!(
                    "database file {dir:?} is a directory of {:?}",
                    f.path
                )));
            }
        }
        Ok(manifest)
    }

    fn parse_v1(wire: Wire<'_>, version: u64) -> Result<Manifest> {
        let component = wire.component.0.to_owned();
        validate_component(&component)?;
        let mut kpack_files = Vec::with_capacity(wire.kpack_files.len());
        for f in &wire.kpack_files {
            validate_filename(f.filename.0)?;
            kpack_files.push(ManifestFile {
                filename: f.filename.0.to_owned(),
                family: f.family.0.to_owned(),
                architectures: strings(&f.architectures),
                size: f.size,
                sha256: Some(f.sha256.0),
                transport: f.transport.as_ref().map(|t| t.0.clone()),
            });
        }
        let database_files = match wire.database_files {
            None if version >= 2 => return Err(bad("manifest: missing key \"database_files\"")),
            None => Vec::new(),
            Some(_) if version < 2 => {
                return Err(bad("database_files needs format_version 2"));
            }
            Some(list) => {
                let mut out = Vec::with_capacity(list.len());
                for (i, f) in list.iter().enumerate() {
                    validate_database_path(f.path.0)?;
                    if f.architectures.is_empty() {
                        return Err(bad(format!("database_files[{i}].architectures is empty")));
                    }
                    out.push(DatabaseFile {
                        path: f.path.0.to_owned(),
                        family: f.family.0.to_owned(),
                        architectures: strings(&f.architectures),
                        size: f.size,
                        sha256: f.sha256.0,
                    });
                }
                out
            }
        };
        let prefix_path = match wire.prefix_path {
            None if version >= 3 => return Err(bad("manifest: missing key \"prefix_path\"")),
            None => None,
            Some(_) if version < 3 => return Err(bad("prefix_path needs format_version 3")),
            Some(p) => {
                check_name(NameKind::DatabasePath, p.0, "prefix path")?;
                Some(p.0.to_owned())
            }
        };
        Ok(Manifest {
            component,
            kpack_files,
            database_files,
            prefix_path,
        })
    }

    /// Legacy: `kpack_files` maps arch -> {file, size, kernel_count}. Arches
    /// sharing a file merge into one entry (first-appearance order). The
    /// family is taken from a `<component>_<family>.kpack` filename, else
    /// the first arch.
    fn parse_legacy(wire: WireLegacy<'_>) -> Result<Manifest> {
        let component = wire.component_name.0.to_owned();
        validate_component(&component)?;
        let mut kpack_files: Vec<ManifestFile> = Vec::new();
        for (arch, entry) in &wire.kpack_files.0 {
            let (arch, file, size) = (arch.0, entry.file.0, entry.size);
            validate_filename(file)?;
            match kpack_files.iter_mut().find(|f| f.filename == file) {
                Some(existing) => {
                    if existing.size != size {
                        return Err(bad(format!(
                            "{file:?} listed with sizes {} and {size}",
                            existing.size
                        )));
                    }
                    existing.architectures.push(arch.to_owned());
                }
                None => {
                    let family = crate::layout::archive_unit(&component, file)
                        .unwrap_or(arch)
                        .to_owned();
                    kpack_files.push(ManifestFile {
                        filename: file.to_owned(),
                        family,
                        architectures: vec![arch.to_owned()],
                        size,
                        sha256: None,
                        transport: None,
                    });
                }
            }
        }
        Ok(Manifest {
            component,
            kpack_files,
            database_files: Vec::new(),
            prefix_path: None,
        })
    }

    /// Reads and parses the manifest at `path`.
    pub fn read(path: &Path) -> Result<Manifest> {
        // Bounded and never a FIFO: manifests sit in directories that
        // package managers, and sometimes users, write.
        let bytes = rocm_kpack_fs::read_limited(path, crate::layout::MAX_MANIFEST_FILE)
            .map_err(|e| Error::io(path, e.source))?;
        Self::parse(&bytes).map_err(|e| match e {
            Error::InvalidMetadata(m) => Error::InvalidMetadata(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The first listed archive that contains `arch` (an exact arch key).
    pub fn file_for_arch(&self, arch: &str) -> Option<&ManifestFile> {
        self.kpack_files
            .iter()
            .find(|f| f.architectures.iter().any(|a| a == arch))
    }

    /// The format version [`Self::to_msgpack`] writes: 1 while the manifest
    /// lists archives only (every reader honours it), 2 with database files
    /// below the prefix, 3 with a `prefix_path`.
    pub fn format_version(&self) -> u64 {
        if self.prefix_path.is_some() {
            MANIFEST_VERSION
        } else if self.database_files.is_empty() {
            MANIFEST_VERSION_ARCHIVES_ONLY
        } else {
            MANIFEST_VERSION_DATABASES
        }
    }

    /// Encodes as a v1 or v2 manifest ([`Self::format_version`], keys in
    /// schema order). Fails on unsafe names and on entries without a sha256
    /// (legacy data).
    #[cfg(feature = "write_core")]
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        let version = self.format_version();
        validate_component(&self.component)?;
        let mut kpack_files = Vec::with_capacity(self.kpack_files.len());
        for f in &self.kpack_files {
            validate_filename(&f.filename)?;
            let sha = f.sha256.ok_or_else(|| {
                Error::InvalidArgument(format!("{:?} has no sha256; v1 requires one", f.filename))
            })?;
            kpack_files.push(Named(WireArchive {
                filename: Str(&f.filename),
                family: Str(&f.family),
                architectures: str_refs(&f.architectures),
                size: f.size,
                sha256: Sha256(sha),
                transport: f.transport.clone().map(WireTransport),
            }));
        }
        let database_files = if version >= 2 {
            let mut out = Vec::with_capacity(self.database_files.len());
            for f in &self.database_files {
                validate_database_path(&f.path)?;
                out.push(Named(WireDatabase {
                    path: Str(&f.path),
                    family: Str(&f.family),
                    architectures: str_refs(&f.architectures),
                    size: f.size,
                    sha256: Sha256(f.sha256),
                }));
            }
            Some(out)
        } else {
            None
        };
        if let Some(p) = &self.prefix_path {
            validate_database_path(p)?;
        }
        msgpack::encode(&Wire {
            format_version: version,
            component: Str(&self.component),
            kpack_files,
            database_files,
            prefix_path: self.prefix_path.as_deref().map(Str),
        })
    }

    /// The database files serving any of `arches` (exact arch keys).
    pub fn database_files_for<'m>(
        &'m self,
        arch: &'m str,
    ) -> impl Iterator<Item = &'m DatabaseFile> + 'm {
        self.database_files
            .iter()
            .filter(move |f| f.architectures.iter().any(|a| a == arch))
    }
}

#[cfg(feature = "write_core")]
fn str_refs(list: &[String]) -> Vec<Str<'_>> {
    list.iter().map(|s| Str(s)).collect()
}
