//! The package build: [`package`] checks the directories, resolves the
//! metadata once ([`plan`]), builds each requested format ([`debs`],
//! [`rpms`], [`wheels`]) into temporary files in the output directory, and
//! renames them into place only when every package succeeded.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use rocm_kpack_fs::{check_replaceable, PathError, PendingFile};
use serde::Serialize;

use crate::device::SplitDir;
use crate::meta::PackageMeta;
use crate::progress::ProgressHandle;
use crate::{Format, PackageError, PackageOptions};
use wheels::WheelSource;

pub use rpms::rpm_evr;

mod debs;
mod plan;
mod rpms;
mod wheels;

/// One package written.
#[derive(Debug, Clone, Serialize)]
pub struct BuiltPackage {
    /// Format.
    pub format: Format,
    /// Package / distribution name.
    pub name: String,
    /// Version as written (rpm: `[E:]V-R`).
    pub version: String,
    /// Device group, None for the generic package.
    pub group: Option<String>,
    /// Targets the package serves (device packages).
    pub targets: Vec<String>,
    /// Output file.
    pub path: PathBuf,
    /// File size.
    pub size: u64,
    /// Entries in the payload (files, symlinks, directories).
    pub entries: usize,
    /// The meta package (the spec's `deb_meta` / `rpm_meta`): no files,
    /// depends on the generic and every device package.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub meta: bool,
    /// A transitional package (the replaced group `group`): no files,
    /// depends on the packages of the groups that now carry its targets.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub transitional: bool,
}

/// What [`package`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct PackageReport {
    /// Every package, generic first per format.
    pub packages: Vec<BuiltPackage>,
}

/// A package written under a temporary name, renamed into place only when
/// every package of the run succeeded.
struct Pending {
    file: PendingFile,
    built: BuiltPackage,
}

fn path_error(e: PathError) -> PackageError {
    PackageError::io(e.action, &e.path, e.source)
}

/// Packages written but not yet committed, and where progress goes.
struct PendingPackages {
    items: Vec<Pending>,
    progress: ProgressHandle,
}

fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What one format's build reads: the split, the resolved metadata, the
/// options and where packages go.
#[derive(Clone, Copy)]
struct Job<'a> {
    split: &'a SplitDir,
    meta: &'a PackageMeta,
    opts: &'a PackageOptions,
    out_dir: &'a Path,
}

/// Writes one package through `write` into a temporary file in `out_dir`
/// and queues it as `file_name`.
fn write_package(
    out_dir: &Path,
    file_name: String,
    mut built: BuiltPackage,
    pending: &mut PendingPackages,
    write: impl FnOnce(BufWriter<&mut File>) -> Result<BufWriter<&mut File>, PackageError>,
) -> Result<(), PackageError> {
    let dest = out_dir.join(&file_name);
    let mut file =
        PendingFile::create_named(&dest, ".rocm-kpack-pkg-", ".tmp").map_err(path_error)?;
    let temp = file.temp_path().to_path_buf();
    pending.progress.item_started(&file_name);
    write(BufWriter::with_capacity(1 << 20, file.file_mut()))?
        .into_inner()
        .map_err(|e| PackageError::io("cannot write", &temp, e.into_error()))?;
    built.size = file
        .file_mut()
        .metadata()
        .map_err(|e| PackageError::io("cannot stat", &temp, e))?
        .len();
    built.path = dest;
    pending.progress.item_done(&file_name_of(&built.path));
    pending.items.push(Pending { file, built });
    Ok(())
}

/// Builds every requested package of `split_dir` into `out_dir` (created
/// if missing; must not be inside `split_dir`). Nothing is written outside
/// `out_dir`; on error no package file appears.
pub fn package(
    split_dir: &Path,
    out_dir: &Path,
    opts: &PackageOptions,
) -> Result<PackageReport, PackageError> {
    opts.spec.validate()?;
    let split_canon =
        fs::canonicalize(split_dir).map_err(|e| PackageError::io("cannot read", split_dir, e))?;
    // Checked before creating anything: the output may not exist yet.
    let out_abs = rocm_kpack_fs::resolve_existing(out_dir)
        .map_err(|e| PackageError::io("cannot read", out_dir, e))?;
    if out_abs.starts_with(&split_canon) {
        return Err(PackageError::Invalid(format!(
            "output {} is inside the split directory {}",
            out_dir.display(),
            split_dir.display()
        )));
    }
    let mut split = SplitDir::open(split_dir, &opts.spec)?;
    // The writers report the bytes they compress, so a long package is
    // seen to advance.
    split.generic.set_progress(opts.progress.clone());
    for g in &mut split.groups {
        g.payload.set_progress(opts.progress.clone());
    }
    fs::create_dir_all(out_dir).map_err(|e| PackageError::io("cannot create", out_dir, e))?;
    let wheel_info = if opts.formats.contains(&Format::Wheel) {
        Some(WheelSource::from_generic(&split.generic)?)
    } else {
        None
    };
    let meta = plan::resolve_meta(opts, wheel_info.as_ref())?;
    // `{version}` in the naming templates is this package's (the
    // amd-native profile's `amdrocm-fft-host8.2`).
    let resolved;
    let opts = if opts.spec.naming.uses_version() {
        let mut o = opts.clone();
        o.spec.naming = opts
            .spec
            .naming
            .with_version(&meta.version)
            .map_err(PackageError::Invalid)?;
        resolved = o;
        &resolved
    } else {
        opts
    };

    let mut formats = opts.formats.clone();
    formats.sort();
    formats.dedup();
    opts.progress.begin(
        "package",
        "packages",
        planned_packages(&split, opts, &formats),
    );
    let mut pending = PendingPackages {
        items: Vec::new(),
        progress: opts.progress.clone(),
    };
    let job = Job {
        split: &split,
        meta: &meta,
        opts,
        out_dir,
    };
    for format in formats {
        match format {
            Format::Deb => debs::build_debs(&job, &mut pending)?,
            Format::Rpm => rpms::build_rpms(&job, &mut pending)?,
            Format::Wheel => {
                let w = wheel_info
                    .as_ref()
                    .ok_or_else(|| PackageError::Invalid("wheel source missing".into()))?;
                wheels::build_wheels(&job, w, &mut pending)?
            }
        }
    }
    let pending = pending.items;
    let mut seen = BTreeMap::new();
    for p in &pending {
        if let Some(prev) = seen.insert(p.built.path.clone(), p.built.name.clone()) {
            return Err(PackageError::Invalid(format!(
                "packages {prev} and {} would both be written to {}",
                p.built.name,
                p.built.path.display()
            )));
        }
    }
    // The overwrite rule, for every package before the first is committed.
    for p in &pending {
        check_replaceable(&p.built.path, opts.replace_existing).map_err(path_error)?;
    }
    let mut packages = Vec::new();
    for p in pending {
        use std::os::unix::fs::PermissionsExt;
        // Temporary files are created 0600; packages are world-readable.
        p.file
            .set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(path_error)?;
        p.file.commit().map_err(path_error)?;
        packages.push(p.built);
    }
    Ok(PackageReport { packages })
}

/// How many packages [`package`] writes of `split` in `formats`: for debs
/// and rpms the generic package, one per device group, the transitional
/// packages and the meta package when the naming has one; for wheels the
/// generic and one per device group (earlier groups become extras, not
/// wheels). The progress display's total.
fn planned_packages(split: &SplitDir, opts: &PackageOptions, formats: &[Format]) -> u64 {
    let naming = &opts.spec.naming;
    let groups = split.groups.len();
    let transitional = plan::transitions(split, opts).len();
    formats
        .iter()
        .map(|f| match f {
            Format::Deb => 1 + groups + transitional + usize::from(!naming.deb_meta.is_empty()),
            Format::Rpm => 1 + groups + transitional + usize::from(!naming.rpm_meta.is_empty()),
            Format::Wheel => 1 + groups,
        })
        .sum::<usize>() as u64
}
