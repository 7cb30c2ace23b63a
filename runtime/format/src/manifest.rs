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
use crate::msgpack::{self, Value};
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
}

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

fn map_of<'v>(v: &'v Value, what: &str) -> Result<Vec<(&'v str, &'v Value)>> {
    v.map_entries().ok_or_else(|| {
        bad(format!(
            "{what} must be a map with distinct str keys, found {}",
            v.type_name()
        ))
    })
}

fn field<'v>(m: &[(&str, &'v Value)], key: &str, what: &str) -> Result<&'v Value> {
    m.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| bad(format!("{what}: missing key {key:?}")))
}

fn str_field(m: &[(&str, &Value)], key: &str, what: &str) -> Result<String> {
    let v = field(m, key, what)?;
    v.as_str().map(str::to_owned).ok_or_else(|| {
        bad(format!(
            "{what}.{key} must be a str, found {}",
            v.type_name()
        ))
    })
}

fn uint_field(m: &[(&str, &Value)], key: &str, what: &str) -> Result<u64> {
    let v = field(m, key, what)?;
    v.as_u64().ok_or_else(|| {
        bad(format!(
            "{what}.{key} must be an unsigned int, found {}",
            v.type_name()
        ))
    })
}

fn str_list(v: &Value, what: &str) -> Result<Vec<String>> {
    let list = v
        .as_array()
        .ok_or_else(|| bad(format!("{what} must be an array, found {}", v.type_name())))?;
    list.iter()
        .map(|item| {
            item.as_str().map(str::to_owned).ok_or_else(|| {
                bad(format!(
                    "{what} element must be a str, found {}",
                    item.type_name()
                ))
            })
        })
        .collect()
}

impl Manifest {
    /// Parses a v1 or legacy manifest, rejecting hostile filenames.
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        let value = msgpack::decode(bytes)?;
        let top = map_of(&value, "manifest")?;
        let version = uint_field(&top, "format_version", "manifest")?;
        if version == 0 || version > MANIFEST_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "kpm manifest",
                found: version,
                supported: "1 to 3; a newer rocm-kpack wrote it, so upgrade rocm-kpack-fetch and the runtime",
            });
        }
        let manifest = if version == 1 && top.iter().any(|(k, _)| *k == "component_name") {
            Self::parse_legacy(&top)?
        } else {
            Self::parse_v1(&top, version)?
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
        let mut paths: Vec<&str> = manifest
            .database_files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        paths.sort_unstable();
        if let Some(w) = paths.windows(2).find(|w| w.first() == w.get(1)) {
            return Err(bad(format!(
                "database file {:?} listed twice",
                w.first().copied().unwrap_or_default()
            )));
        }
        // One path may not be both a file and a directory of another.
        if let Some(w) = paths
            .windows(2)
            .find(|w| matches!((w.first(), w.get(1)), (Some(a), Some(b)) if b.starts_with(&format!("{a}/"))))
        {
            return Err(bad(format!(
                "database file {:?} is a directory of {:?}",
                w.first().copied().unwrap_or_default(),
                w.get(1).copied().unwrap_or_default()
            )));
        }
        Ok(manifest)
    }

    fn parse_v1(top: &[(&str, &Value)], version: u64) -> Result<Manifest> {
        let component = str_field(top, "component", "manifest")?;
        validate_component(&component)?;
        let files_v = field(top, "kpack_files", "manifest")?;
        let files = files_v.as_array().ok_or_else(|| {
            bad(format!(
                "kpack_files must be an array, found {}",
                files_v.type_name()
            ))
        })?;
        let mut kpack_files = Vec::with_capacity(files.len());
        for (i, f) in files.iter().enumerate() {
            let what = format!("kpack_files[{i}]");
            let m = map_of(f, &what)?;
            let filename = str_field(&m, "filename", &what)?;
            validate_filename(&filename)?;
            let sha256 = sha256_field(&m, &what)?;
            kpack_files.push(ManifestFile {
                filename,
                family: str_field(&m, "family", &what)?,
                architectures: str_list(
                    field(&m, "architectures", &what)?,
                    &format!("{what}.architectures"),
                )?,
                size: uint_field(&m, "size", &what)?,
                sha256: Some(sha256),
            });
        }
        let database_files = match top.iter().find(|(k, _)| *k == "database_files") {
            None if version >= 2 => return Err(bad("manifest: missing key \"database_files\"")),
            None => Vec::new(),
            Some(_) if version < 2 => {
                return Err(bad("database_files needs format_version 2"));
            }
            Some((_, v)) => parse_database_files(v)?,
        };
        let prefix_path = match top.iter().find(|(k, _)| *k == "prefix_path") {
            None if version >= 3 => return Err(bad("manifest: missing key \"prefix_path\"")),
            None => None,
            Some(_) if version < 3 => return Err(bad("prefix_path needs format_version 3")),
            Some((_, v)) => {
                let p = v.as_str().ok_or_else(|| {
                    bad(format!(
                        "prefix_path must be a str, found {}",
                        v.type_name()
                    ))
                })?;
                check_name(NameKind::DatabasePath, p, "prefix path")?;
                Some(p.to_string())
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
    fn parse_legacy(top: &[(&str, &Value)]) -> Result<Manifest> {
        let component = str_field(top, "component_name", "manifest")?;
        validate_component(&component)?;
        if let Some((_, prefix)) = top.iter().find(|(k, _)| *k == "prefix") {
            if prefix.as_str().is_none() {
                return Err(bad(format!(
                    "prefix must be a str, found {}",
                    prefix.type_name()
                )));
            }
        }
        let files = map_of(field(top, "kpack_files", "manifest")?, "kpack_files")?;
        let mut kpack_files: Vec<ManifestFile> = Vec::new();
        for (arch, entry) in files {
            let what = format!("kpack_files[{arch:?}]");
            let m = map_of(entry, &what)?;
            let file = str_field(&m, "file", &what)?;
            validate_filename(&file)?;
            let size = uint_field(&m, "size", &what)?;
            if m.iter().any(|(k, _)| *k == "kernel_count") {
                uint_field(&m, "kernel_count", &what)?;
            }
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
                    let family = crate::layout::archive_unit(&component, &file)
                        .unwrap_or(arch)
                        .to_owned();
                    kpack_files.push(ManifestFile {
                        filename: file,
                        family,
                        architectures: vec![arch.to_owned()],
                        size,
                        sha256: None,
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
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        let mut b = Vec::new();
        let version = self.format_version();
        msgpack::write_map_len(
            &mut b,
            match version {
                1 => 3,
                2 => 4,
                _ => 5,
            },
        )?;
        msgpack::write_str(&mut b, "format_version")?;
        msgpack::write_uint(&mut b, version)?;
        msgpack::write_str(&mut b, "component")?;
        validate_component(&self.component)?;
        msgpack::write_str(&mut b, &self.component)?;
        msgpack::write_str(&mut b, "kpack_files")?;
        msgpack::write_array_len(&mut b, self.kpack_files.len())?;
        for f in &self.kpack_files {
            validate_filename(&f.filename)?;
            let sha = f.sha256.ok_or_else(|| {
                Error::InvalidArgument(format!("{:?} has no sha256; v1 requires one", f.filename))
            })?;
            write_entry(
                &mut b,
                ("filename", &f.filename),
                &f.family,
                &f.architectures,
                f.size,
                &sha,
            )?;
        }
        if version >= 2 {
            msgpack::write_str(&mut b, "database_files")?;
            msgpack::write_array_len(&mut b, self.database_files.len())?;
            for f in &self.database_files {
                validate_database_path(&f.path)?;
                write_entry(
                    &mut b,
                    ("path", &f.path),
                    &f.family,
                    &f.architectures,
                    f.size,
                    &f.sha256,
                )?;
            }
        }
        if let Some(p) = &self.prefix_path {
            validate_database_path(p)?;
            msgpack::write_str(&mut b, "prefix_path")?;
            msgpack::write_str(&mut b, p)?;
        }
        Ok(b)
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

/// One `kpack_files` or `database_files` element: its name key and value,
/// then family, architectures, size, sha256 (schema order).
fn write_entry(
    b: &mut Vec<u8>,
    (key, name): (&str, &str),
    family: &str,
    architectures: &[String],
    size: u64,
    sha256: &[u8; 32],
) -> Result<()> {
    msgpack::write_map_len(b, 5)?;
    msgpack::write_str(b, key)?;
    msgpack::write_str(b, name)?;
    msgpack::write_str(b, "family")?;
    msgpack::write_str(b, family)?;
    msgpack::write_str(b, "architectures")?;
    msgpack::write_str_array(b, architectures)?;
    msgpack::write_str(b, "size")?;
    msgpack::write_uint(b, size)?;
    msgpack::write_str(b, "sha256")?;
    msgpack::write_bin(b, sha256)?;
    Ok(())
}

fn sha256_field(m: &[(&str, &Value)], what: &str) -> Result<[u8; 32]> {
    field(m, "sha256", what)?
        .as_bin()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad(format!("{what}.sha256 must be a 32-byte bin")))
}

fn parse_database_files(v: &Value) -> Result<Vec<DatabaseFile>> {
    let list = v.as_array().ok_or_else(|| {
        bad(format!(
            "database_files must be an array, found {}",
            v.type_name()
        ))
    })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, f) in list.iter().enumerate() {
        let what = format!("database_files[{i}]");
        let m = map_of(f, &what)?;
        let path = str_field(&m, "path", &what)?;
        validate_database_path(&path)?;
        let architectures = str_list(
            field(&m, "architectures", &what)?,
            &format!("{what}.architectures"),
        )?;
        if architectures.is_empty() {
            return Err(bad(format!("{what}.architectures is empty")));
        }
        out.push(DatabaseFile {
            path,
            family: str_field(&m, "family", &what)?,
            architectures,
            size: uint_field(&m, "size", &what)?,
            sha256: sha256_field(&m, &what)?,
        });
    }
    Ok(out)
}
