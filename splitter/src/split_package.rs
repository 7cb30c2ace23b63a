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

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::CompressionScheme;
use rocm_kpack_fs::{check_replaceable, PathError};
use rocm_kpack_pkgspec::{DevicePayload, Spec};
use serde::Serialize;

use crate::split::engine::{EngineError, SplitOptions, SplitReport};
use crate::split::output::ArchiveOutput;
use crate::split::tree::split_tree;
use rocm_kpack_package::any::AnyPackage;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::progress::ProgressHandle;
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
    Tree(#[source] Box<EngineError>),
    /// A file system operation failed.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
}

impl From<EngineError> for SplitPackageError {
    fn from(e: EngineError) -> Self {
        SplitPackageError::Tree(Box::new(e))
    }
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SplitPackageError + 'a {
    move |source| SplitPackageError::Io(PathError::new(what, path, source))
}

pub use rocm_kpack_package::any::PackageKind;

/// Detects the kind of `path` from its first bytes.
pub fn detect_kind(path: &Path) -> Result<PackageKind, SplitPackageError> {
    PackageKind::detect(path).map_err(|e| match e {
        PackageError::Corrupt { path, detail } => SplitPackageError::Input { path, why: detail },
        other => SplitPackageError::Package(other),
    })
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

/// The metadata an input package carries, for the generic package.
fn meta_of(opened: &AnyPackage) -> PackageMeta {
    match opened {
        AnyPackage::Deb(r) => PackageMeta::from_control(&r.control, r.control_files.clone()),
        AnyPackage::Rpm(r) => PackageMeta::from_rpm(r),
        AnyPackage::Wheel(w) => {
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

/// Opens the input: a wheel's RECORD is checked before anything is split.
fn open_input(path: &Path, kind: PackageKind) -> Result<AnyPackage, PackageError> {
    let opened = AnyPackage::open_as(path, kind)?;
    if let AnyPackage::Wheel(w) = &opened {
        w.verify_record()?;
    }
    Ok(opened)
}

/// Top-level package directories of a wheel: their `.kpack/` goes
/// inside them (`<pkg>/.kpack/`), whatever depth the library has.
fn prefix_dirs(opened: &AnyPackage, root: &Path) -> Result<Vec<String>, SplitPackageError> {
    let AnyPackage::Wheel(_) = opened else {
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
    let opened = open_input(input, kind)?;
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

/// Outputs keep the input's name (generic deb/rpm, pass-through), so
/// writing next to the input would replace it: `out` may not be the
/// input's directory (`out` need not exist yet).
fn check_not_beside_input(input: &Path, out: &Path) -> Result<(), SplitPackageError> {
    let out_c = rocm_kpack_fs::resolve_existing(out).map_err(io_err("cannot read", out))?;
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
    Ok(())
}

/// One package a split would write ([`plan_split_package`]).
#[derive(Debug, Clone, Serialize)]
pub struct PlannedPackage {
    /// Format.
    pub format: Format,
    /// Package / distribution name.
    pub name: String,
    /// Version as it would be written.
    pub version: String,
    /// Device group (None for the generic and meta packages).
    pub group: Option<String>,
    /// Targets the package serves (device packages).
    pub targets: Vec<String>,
    /// Where it would be written.
    pub path: PathBuf,
    /// The meta package.
    pub meta: bool,
    /// A transitional package.
    pub transitional: bool,
}

impl PlannedPackage {
    /// The package `built` describes, to be written at `path`.
    pub fn of(built: &BuiltPackage, path: PathBuf) -> PlannedPackage {
        PlannedPackage {
            format: built.format,
            name: built.name.clone(),
            version: built.version.clone(),
            group: built.group.clone(),
            targets: built.targets.clone(),
            path,
            meta: built.meta,
            transitional: built.transitional,
        }
    }
}

/// What a [`split_package`] with the same input, output and options would
/// write (`split-package --dry-run`).
#[derive(Debug, Clone, Serialize)]
pub struct SplitPackagePlan {
    /// The input package.
    pub input: PathBuf,
    /// The output directory it would write into.
    pub output: PathBuf,
    /// Its kind.
    pub kind: PackageKind,
    /// Its name and version.
    pub name: String,
    pub version: String,
    /// True when the input has no device code and would be copied.
    pub passed_through: bool,
    /// The packages, in the order a run writes them.
    pub packages: Vec<PlannedPackage>,
    /// Remarks: a package that exists in the output (refused without
    /// `--force`), the split's warnings.
    pub notes: Vec<String>,
}

/// What [`split_package`] would write into `out`, writing nothing there:
/// the input is split and packaged without compression in a temporary
/// directory (removed), so the packages are exactly a run's, at a
/// fraction of its time; their sizes are not kept, being those of the
/// uncompressed stand-ins.
pub fn plan_split_package(
    input: &Path,
    out: &Path,
    opts: &SplitPackageOptions,
) -> Result<SplitPackagePlan, SplitPackageError> {
    check_not_beside_input(input, out)?;
    let scratch = tempfile::Builder::new()
        .prefix("rocm-kpack-dry-run-")
        .tempdir()
        .map_err(io_err(
            "cannot create a directory in",
            &std::env::temp_dir(),
        ))?;
    let quick = SplitPackageOptions {
        output: ArchiveOutput {
            compression: Some(CompressionScheme::None),
            replace_existing: false,
            ..opts.output
        },
        package_compression: Compression::None,
        package_level: None,
        device_compression: Some(Compression::None),
        device_level: None,
        ..opts.clone()
    };
    let report = split_package(input, &scratch.path().join("out"), &quick)?;
    let mut notes = report.notes;
    let packages: Vec<PlannedPackage> = report
        .packages
        .iter()
        .map(|p| PlannedPackage::of(p, out.join(p.path.file_name().unwrap_or_default())))
        .collect();
    if !opts.output.replace_existing {
        for p in &packages {
            if fs::symlink_metadata(&p.path).is_ok() {
                notes.push(format!(
                    "{} exists: a run refuses to replace it without --force",
                    p.path.display()
                ));
            }
        }
    }
    Ok(SplitPackagePlan {
        input: input.to_path_buf(),
        output: out.to_path_buf(),
        kind: report.kind,
        name: report.name,
        version: report.version,
        passed_through: report.passed_through,
        packages,
        notes,
    })
}

fn split_into(
    input: &Path,
    out: &Path,
    file_name: &std::ffi::OsStr,
    kind: PackageKind,
    opened: &AnyPackage,
    opts: &SplitPackageOptions,
) -> Result<SplitPackageReport, SplitPackageError> {
    let meta = meta_of(opened);
    check_not_beside_input(input, out)?;
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
        prefix_dirs: prefix_dirs(opened, &root)?,
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
        std::io::copy(&mut from, copy.file_mut())
            .map_err(|e| SplitPackageError::Io(rocm_kpack_fs::copy_error(input, &dest, e)))?;
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
            transitional: false,
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
