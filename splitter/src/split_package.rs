//! `rocm-kpack split-package`: an existing fat `.deb`, `.rpm` or `.whl`
//! becomes a generic package (same name, version and metadata, host-only
//! binaries) plus one package per device group: one per family, holding
//! that family's per-processor archives, and one per generic ISA the code
//! was built for (docs/packaging.md, input 4 and "Package naming").
//!
//! Flow: detect the kind from the file's first bytes (never its name);
//! open it with the package readers (control data / header digests /
//! wheel RECORD checked); extract the payload into a work directory
//! inside `--out` (the readers refuse `..`, absolute names and escaping
//! symlinks, so nothing lands outside it); split the extracted tree with
//! [`crate::split::tree::split_tree`]; hand the split directory and the original
//! metadata to [`rocm_kpack_package::package`], which writes into `--out`.
//! The archives are release outputs, what users download: they default to
//! [`rocm_kpack_format::archive::RELEASE_ZSTD_LEVEL`], and the split runs on
//! every core.
//! A package with no device code is copied unchanged, with a note.
//! The work directory is removed whatever happens.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::CompressionScheme;
use rocm_kpack_fs::{check_replaceable, PathError};
use rocm_kpack_pkgspec::{DevicePayload, Spec};
use serde::Serialize;

use crate::split::output::ArchiveOutput;
use crate::split::scan::read_head;
use crate::split::tree::{split_tree, SplitOptions, SplitReport, TreeError};
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::progress::ProgressHandle;
use rocm_kpack_package::rpm::RpmReader;
use rocm_kpack_package::wheel::WheelReader;
use rocm_kpack_package::{
    package, BuiltPackage, Format, PackageError, PackageOptions, DEFAULT_SOURCE_DATE_EPOCH,
};

/// Why a package could not be split.
#[derive(Debug, thiserror::Error)]
pub enum SplitPackageError {
    /// The input is not a .deb, .rpm or .whl.
    #[error("{}: {why}", path.display())]
    Input {
        /// The input.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Reading the input package or writing the output packages failed
    /// (corrupt input, hostile member path, RECORD mismatch, I/O).
    #[error(transparent)]
    Package(#[from] PackageError),
    /// Splitting the extracted payload failed.
    #[error("splitting the payload failed")]
    Tree(#[source] Box<TreeError>),
    /// A file system operation failed.
    #[error(transparent)]
    Io(#[from] PathError),
}

impl From<TreeError> for SplitPackageError {
    fn from(e: TreeError) -> Self {
        SplitPackageError::Tree(Box::new(e))
    }
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SplitPackageError + 'a {
    move |source| SplitPackageError::Io(PathError::new(what, path, source))
}

/// Kind of input package, judged by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageKind {
    /// Debian package (`ar` archive).
    Deb,
    /// RPM package (lead magic `ed ab ee db`).
    Rpm,
    /// Python wheel (zip).
    Wheel,
}

impl PackageKind {
    /// The packaging format written for this kind.
    pub fn format(self) -> Format {
        match self {
            PackageKind::Deb => Format::Deb,
            PackageKind::Rpm => Format::Rpm,
            PackageKind::Wheel => Format::Wheel,
        }
    }
}

/// Detects the kind of `path` from its first bytes.
pub fn detect_kind(path: &Path) -> Result<PackageKind, SplitPackageError> {
    let mut f = File::open(path).map_err(|e| SplitPackageError::Input {
        path: path.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    // Short files are simply not recognized; read what is there.
    let head = read_head(&mut f, 8).map_err(io_err("cannot read", path))?;
    if head.starts_with(b"!<arch>\n") {
        Ok(PackageKind::Deb)
    } else if head.starts_with(&[0xed, 0xab, 0xee, 0xdb]) {
        Ok(PackageKind::Rpm)
    } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        Ok(PackageKind::Wheel)
    } else {
        Err(SplitPackageError::Input {
            path: path.to_path_buf(),
            why: "not a .deb (ar), .rpm or .whl (zip) package".into(),
        })
    }
}

/// How [`split_package`] splits.
#[derive(Debug, Clone)]
pub struct SplitPackageOptions {
    /// Device groups and database rules (also the package naming).
    pub spec: Spec,
    /// How the archives are written (default [`ArchiveOutput::release`]);
    /// `replace_existing` also covers the packages written.
    pub output: ArchiveOutput,
    /// Timestamp of every package entry.
    pub source_date_epoch: u64,
    /// Compression of the generic package (deb members, rpm payload).
    pub package_compression: Compression,
    /// Its level (None: the compressor's default).
    pub package_level: Option<u32>,
    /// Compression of the device packages (None: automatic, see
    /// [`rocm_kpack_package::PackageOptions::device_compression`]).
    pub device_compression: Option<Compression>,
    /// Its level (None: the split's zstd level for zstd payloads, else the
    /// compressor's default).
    pub device_level: Option<u32>,
    /// Where progress goes (split files and code objects, packages).
    pub progress: ProgressHandle,
}

impl Default for SplitPackageOptions {
    fn default() -> Self {
        SplitPackageOptions {
            spec: Spec::builtin(),
            output: ArchiveOutput::release(),
            source_date_epoch: DEFAULT_SOURCE_DATE_EPOCH,
            package_compression: Compression::Xz,
            package_level: None,
            device_compression: None,
            device_level: None,
            progress: ProgressHandle::default(),
        }
    }
}

/// What [`split_package`] did.
#[derive(Debug, Clone, Serialize)]
pub struct SplitPackageReport {
    /// The input package.
    pub input: PathBuf,
    /// Its kind.
    pub kind: PackageKind,
    /// Its name and version.
    pub name: String,
    pub version: String,
    /// True when the input had no device code and was copied unchanged.
    pub passed_through: bool,
    /// Packages written (the copy, when passed through).
    pub packages: Vec<BuiltPackage>,
    /// The payload split (binaries, archives, databases moved).
    pub split: Option<SplitReport>,
    /// Remarks for the user (e.g. why the package was passed through).
    pub notes: Vec<String>,
}

/// An opened input package and the metadata it carries.
enum Opened {
    Deb(DebReader),
    Rpm(Box<RpmReader>),
    Wheel(Box<WheelReader>),
}

impl Opened {
    fn open(path: &Path, kind: PackageKind) -> Result<Opened, PackageError> {
        Ok(match kind {
            PackageKind::Deb => Opened::Deb(DebReader::open(path)?),
            PackageKind::Rpm => Opened::Rpm(Box::new(RpmReader::open(path)?)),
            PackageKind::Wheel => {
                let w = WheelReader::open(path)?;
                w.verify_record()?;
                Opened::Wheel(Box::new(w))
            }
        })
    }

    fn meta(&self) -> PackageMeta {
        match self {
            Opened::Deb(r) => PackageMeta::from_control(&r.control, r.control_files.clone()),
            Opened::Rpm(r) => PackageMeta::from_rpm(r),
            Opened::Wheel(w) => {
                // Name, version, summary, METADATA and WHEEL come from the
                // extracted .dist-info (package() reads it); the tags from
                // the file name cover a WHEEL without Tag lines.
                let mut m = PackageMeta {
                    name: w.name().to_string(),
                    version: w.version().to_string(),
                    ..PackageMeta::default()
                };
                if w.wheel.get_all("Tag").next().is_none() {
                    m.wheel.tags = w.tags.clone();
                }
                m
            }
        }
    }

    fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        match self {
            Opened::Deb(r) => r.extract(dest),
            Opened::Rpm(r) => r.extract(dest),
            Opened::Wheel(w) => w.extract(dest),
        }
    }

    /// Top-level package directories of a wheel: their `.kpack/` goes
    /// inside them (`<pkg>/.kpack/`), whatever depth the library has.
    fn prefix_dirs(&self, root: &Path) -> Result<Vec<String>, SplitPackageError> {
        let Opened::Wheel(_) = self else {
            return Ok(Vec::new());
        };
        let mut dirs = Vec::new();
        for item in fs::read_dir(root).map_err(io_err("cannot list", root))? {
            let item = item.map_err(io_err("cannot list", root))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let is_dir = item
                .file_type()
                .map_err(io_err("cannot stat", &item.path()))?
                .is_dir();
            if is_dir && !name.ends_with(".dist-info") && !name.ends_with(".data") {
                dirs.push(name);
            }
        }
        dirs.sort();
        Ok(dirs)
    }
}

/// The scheme of the archives: what was asked for, else per code object,
/// or stored when the spec's device packages are solid (their payload is
/// one long-window zstd stream that compresses across the code objects;
/// compressing each first would leave it nothing to find).
/// Wheels stay per code object: zip compresses each file on its own.
fn archive_scheme(opts: &SplitPackageOptions, kind: PackageKind) -> Option<CompressionScheme> {
    match opts.spec.package.device_payload {
        Some(DevicePayload::Solid) if kind != PackageKind::Wheel => {
            opts.output.compression.or(Some(CompressionScheme::None))
        }
        _ => opts.output.compression,
    }
}

/// Splits the package `input` into `out` (created if missing; must not be
/// the input's own path). See the module docs. On error no package file
/// appears in `out` and nothing is written outside it.
pub fn split_package(
    input: &Path,
    out: &Path,
    opts: &SplitPackageOptions,
) -> Result<SplitPackageReport, SplitPackageError> {
    let kind = detect_kind(input)?;
    let opened = Opened::open(input, kind)?;
    let file_name = input
        .file_name()
        .ok_or_else(|| SplitPackageError::Input {
            path: input.to_path_buf(),
            why: "has no file name".into(),
        })?
        .to_os_string();
    let created_out = fs::symlink_metadata(out).is_err();
    fs::create_dir_all(out).map_err(io_err("cannot create directory", out))?;
    let result = split_into(input, out, &file_name, kind, &opened, opts);
    if result.is_err() && created_out {
        // Only removes it if empty: a failed run leaves no trace.
        let _ = fs::remove_dir(out);
    }
    result
}

fn split_into(
    input: &Path,
    out: &Path,
    file_name: &std::ffi::OsStr,
    kind: PackageKind,
    opened: &Opened,
    opts: &SplitPackageOptions,
) -> Result<SplitPackageReport, SplitPackageError> {
    let meta = opened.meta();
    // Outputs keep the input's name (generic deb/rpm, pass-through), so
    // writing next to the input would replace it.
    let out_c = fs::canonicalize(out).map_err(io_err("cannot read", out))?;
    let in_dir = input
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if fs::canonicalize(in_dir).map_err(io_err("cannot read", in_dir))? == out_c {
        return Err(SplitPackageError::Input {
            path: input.to_path_buf(),
            why: format!(
                "is in the output directory {}; choose another --out",
                out.display()
            ),
        });
    }
    // Work directory inside --out: extraction and split trees never leave it.
    let work = tempfile::Builder::new()
        .prefix(".rocm-kpack-split-package-")
        .tempdir_in(out)
        .map_err(io_err("cannot create a directory in", out))?;
    let root = work.path().join("root");
    fs::create_dir(&root).map_err(io_err("cannot create directory", &root))?;
    tracing::info!(input = %input.display(), ?kind, "extracting");
    opened.extract(&root)?;

    let split_dir = work.path().join("split");
    let split_opts = SplitOptions {
        spec: opts.spec.clone(),
        component: None,
        prefix_dirs: opened.prefix_dirs(&root)?,
        output: ArchiveOutput {
            // A fresh work directory: nothing to replace.
            replace_existing: false,
            compression: archive_scheme(opts, kind),
            ..opts.output
        },
        progress: opts.progress.clone(),
    };
    tracing::info!("splitting the payload");
    let mut split = split_tree(&root, &split_dir, &split_opts)?;
    // The work directory is gone after the run; report the real paths.
    split.input = input.to_path_buf();
    split.output = out.to_path_buf();
    // Free the extracted copy before packaging: large inputs would
    // otherwise sit on disk three times.
    fs::remove_dir_all(&root).map_err(io_err("cannot remove", &root))?;

    let mut report = SplitPackageReport {
        input: input.to_path_buf(),
        kind,
        name: meta.name.clone(),
        version: meta.version.clone(),
        passed_through: false,
        packages: Vec::new(),
        split: None,
        notes: Vec::new(),
    };
    let has_device = split.binaries.iter().any(|b| b.code_objects > 0)
        || !split.archives.is_empty()
        || !split.databases.is_empty();
    if !has_device {
        let dest = out.join(file_name);
        check_replaceable(&dest, opts.output.replace_existing)
            .map_err(|e| io_err(e.action, &dest)(e.source))?;
        // Copied beside the destination, fsynced, renamed (atomic, durable).
        let mut copy = rocm_kpack_fs::PendingFile::create(&dest)?;
        let mut from = fs::File::open(input).map_err(io_err("cannot open", input))?;
        std::io::copy(&mut from, copy.file_mut()).map_err(io_err("cannot copy", input))?;
        let mode = fs::metadata(input)
            .map_err(io_err("cannot stat", input))?
            .permissions();
        copy.set_permissions(mode)?;
        copy.commit()?;
        let size = fs::metadata(&dest)
            .map_err(io_err("cannot stat", &dest))?
            .len();
        report.passed_through = true;
        report.notes.push(format!(
            "{} has no device code (no fat binaries, no kernel databases): copied unchanged",
            input.display()
        ));
        report.packages.push(BuiltPackage {
            format: kind.format(),
            name: meta.name.clone(),
            version: meta.version.clone(),
            group: None,
            targets: Vec::new(),
            path: dest,
            size,
            entries: split.files_in,
            meta: false,
        });
        report.split = Some(split);
        return Ok(report);
    }

    let mut popts = PackageOptions::new(meta);
    popts.formats = vec![kind.format()];
    popts.spec = opts.spec.clone();
    popts.source_date_epoch = opts.source_date_epoch;
    popts.compression = opts.package_compression;
    popts.level = opts.package_level;
    // A zstd device payload (solid, or asked for) is compressed at the
    // split's level (the release level unless --level says otherwise)
    // unless a level is given; other compressors keep their own default.
    popts.device_compression = opts.device_compression;
    popts.device_level = opts.device_level.or(match opts.device_compression {
        None | Some(Compression::Zstd | Compression::ZstdLong) => {
            u32::try_from(opts.output.zstd_level).ok()
        }
        Some(_) => None,
    });
    popts.replace_existing = opts.output.replace_existing;
    popts.progress = opts.progress.clone();
    tracing::info!("packaging");
    let built = package(&split_dir, out, &popts)?;
    report.packages = built.packages;
    report.notes.extend(split.warnings.iter().cloned());
    report.split = Some(split);
    work.close().map_err(io_err("cannot remove", out))?;
    Ok(report)
}
