//! Packages and repositories: turn a split directory (`generic/` + one
//! tree per device group) into one generic package plus one package per
//! device group, as debs, rpms and/or wheels, named and related as
//! docs/packaging.md says; read such packages back; and [`publish`] them as
//! apt, yum and pip repositories and a kpack store.
//!
//! Flow: [`device::SplitDir::open`] reads the trees (never following a
//! symlink) and the device archives' headers; [`package`] builds each
//! payload (the trees as they are: archive names are already what a
//! marker's `@GFXARCH@` pattern expands to, so no alias symlinks), renders
//! metadata per format from one [`meta::PackageMeta`], and hands both to
//! the writers ([`deb`], [`rpm`], [`wheel`]), which stream files through
//! the deterministic container writers in [`container`] (one module per
//! format) and the compressors in [`compress`]. Outputs are
//! written to temporary files in the output directory and renamed into
//! place only when every package succeeded.
//!
//! The readers in the same modules serve `publish` and `split-package`:
//! - deb: [`deb::DebReader::open`] (control fields + control files, e.g.
//!   for [`meta::PackageMeta::from_control`]), `for_each_entry` (streamed
//!   data members), `extract` (safe, see [`extract`]);
//! - rpm: [`rpm::RpmReader::open`] (header digests checked), `files`,
//!   `requires`/`provides`/`scripts`/`config_files` (see
//!   [`meta::PackageMeta::from_rpm`]), `for_each_entry` / `extract`
//!   (payload digest checked), `verify_payload`;
//! - wheel: [`wheel::WheelReader::open`] (member names checked, METADATA,
//!   WHEEL, RECORD parsed), `verify_record`, `for_each_file`, `extract`.
//!   An extracted wheel keeps its `.dist-info/` in the generic tree;
//!   [`package`] takes METADATA (adding the device extras), WHEEL's tags and
//!   the other dist-info files from it and regenerates RECORD.

pub mod compress;
pub mod container;
pub mod dates;
pub mod deb;
pub mod device;
pub mod digest;
mod error;
pub mod extract;
pub mod meta;
pub mod progress;

pub mod rpm;
pub mod tree;
pub mod wheel;

use progress::ProgressHandle;
use rocm_kpack_format::layout;
use rocm_kpack_fs::{check_replaceable, PathError, PendingFile};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use rocm_kpack_pkgspec::{NameKind, Spec, Versioning};
use serde::Serialize;

pub use error::PackageError;

use compress::Compression;
use device::{DeviceGroup, SplitDir};
use meta::{add_relation, render_description, wrap, ControlFields, PackageMeta};
use tree::{Entry, EntryKind, Payload};

/// Package naming and relations (docs/packaging.md "Package naming"): names
/// come from the spec's naming templates (`{name}`, `{group}`,
/// `{group_lower}`); the relations' fixed parts live here.
pub mod naming {
    use rocm_kpack_pkgspec::{NameKind, Naming};

    /// What generic packages recommend.
    pub const FETCH_PACKAGE: &str = "rocm-kpack-fetch";

    /// The generic package (or distribution) name of a format.
    pub fn generic(n: &Naming, kind: NameKind, name: &str) -> String {
        n.render(kind, name, None)
    }

    /// A device package (or distribution) name of a format.
    pub fn device(n: &Naming, kind: NameKind, name: &str, group: &str) -> String {
        n.render(kind, name, Some(group))
    }

    /// The generic wheel's extra that pulls in one group (`device-<group>`).
    pub fn wheel_extra(n: &Naming, group: &str) -> String {
        n.render(NameKind::WheelExtra, "", Some(group))
    }

    /// Virtual package every device package of `generic` provides.
    pub fn device_code_provide(generic: &str) -> String {
        format!("{generic}-device-code")
    }

    /// rpm capability naming one target: `rocm-kpack(gfx1100)`.
    pub fn rpm_target_provide(target: &str) -> String {
        format!("rocm-kpack({target})")
    }
}

/// Output package format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Debian package.
    Deb,
    /// RPM package.
    Rpm,
    /// Python wheel.
    Wheel,
}

impl Format {
    /// Parses `deb`, `rpm`, `wheel`/`whl`.
    pub fn from_name(s: &str) -> Option<Format> {
        match s {
            "deb" => Some(Format::Deb),
            "rpm" => Some(Format::Rpm),
            "wheel" | "whl" => Some(Format::Wheel),
            _ => None,
        }
    }
}

/// The timestamp used when SOURCE_DATE_EPOCH is not set (2024-01-01).
pub const DEFAULT_SOURCE_DATE_EPOCH: u64 = 1_704_067_200;

/// SOURCE_DATE_EPOCH from the environment, or the default. A set but
/// malformed value is an error.
pub fn source_date_epoch() -> Result<u64, PackageError> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            PackageError::Invalid(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
        _ => Ok(DEFAULT_SOURCE_DATE_EPOCH),
    }
}

/// How [`package`] packages.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    /// Formats to write.
    pub formats: Vec<Format>,
    /// Metadata of the original package.
    pub meta: PackageMeta,
    /// Device groups (for the targets a generic ISA serves).
    pub spec: Spec,
    /// Timestamp of every entry and the rpm build time.
    pub source_date_epoch: u64,
    /// Compression of deb members and rpm payloads (default xz).
    pub compression: Compression,
    /// Compression level (None = the compressor's default).
    pub level: Option<u32>,
    /// Compression of device packages; None = automatic, from the whole
    /// payload: when it is only `.kpack` archives that are all
    /// zstd-compressed per kernel, recompressing with xz -6 saves about 1%
    /// at about 2 MB/s, so such groups get gzip level 1 (readable by every
    /// dpkg and rpm); groups with uncompressed archives or with anything
    /// else (kernel-database files: uncompressed code objects) get
    /// `compression` at `level`, the release setting (xz -6 by default).
    pub device_compression: Option<Compression>,
    /// Device package compression level (None = the compressor's default).
    pub device_level: Option<u32>,
    /// Replace package files that exist (`--force`); else they are refused.
    pub replace_existing: bool,
    /// Where progress goes (one item per package written).
    pub progress: ProgressHandle,
}

impl PackageOptions {
    /// Options with defaults for everything but the metadata.
    pub fn new(meta: PackageMeta) -> PackageOptions {
        PackageOptions {
            formats: vec![Format::Deb],
            meta,
            spec: Spec::default_families(),
            source_date_epoch: DEFAULT_SOURCE_DATE_EPOCH,
            compression: Compression::Xz,
            level: None,
            device_compression: None,
            device_level: None,
            replace_existing: false,
            progress: ProgressHandle::default(),
        }
    }
}

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
    if resolve_existing(out_dir)?.starts_with(&split_canon) {
        return Err(PackageError::Invalid(format!(
            "output {} is inside the split directory {}",
            out_dir.display(),
            split_dir.display()
        )));
    }
    let split = SplitDir::open(split_dir, &opts.spec)?;
    fs::create_dir_all(out_dir).map_err(|e| PackageError::io("cannot create", out_dir, e))?;
    let mut meta = opts.meta.clone();
    let wheel_info = if opts.formats.contains(&Format::Wheel) {
        Some(WheelSource::from_generic(&split.generic)?)
    } else {
        None
    };
    if let Some(w) = &wheel_info {
        if let Some(m) = &w.metadata {
            if meta.name.is_empty() {
                meta.name = m.get("Name").unwrap_or_default().to_string();
            }
            if meta.version.is_empty() {
                meta.version = m.get("Version").unwrap_or_default().to_string();
            }
            if meta.summary.is_empty() {
                meta.summary = m.get("Summary").unwrap_or_default().to_string();
            }
        }
    }
    meta.validate()?;
    if meta.architecture.is_empty() {
        meta.architecture = "amd64".into();
    }
    // The spec's metadata defaults fill what the input does not say.
    let defaults = &opts.spec.package;
    if meta.maintainer.is_empty() {
        meta.maintainer = defaults
            .maintainer
            .clone()
            .unwrap_or_else(|| meta::DEFAULT_MAINTAINER.into());
    }
    if meta.section.is_none() {
        meta.section = defaults.section.clone();
    }
    if meta.license.is_none() {
        meta.license = defaults.license.clone();
    }
    if meta.homepage.is_none() {
        meta.homepage = defaults.homepage.clone();
    }

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

    opts.progress.begin("package", "packages", 0);
    let mut pending = PendingPackages {
        items: Vec::new(),
        progress: opts.progress.clone(),
    };
    let mut formats = opts.formats.clone();
    formats.sort();
    formats.dedup();
    for format in formats {
        match format {
            Format::Deb => build_debs(&split, &meta, opts, out_dir, &mut pending)?,
            Format::Rpm => build_rpms(&split, &meta, opts, out_dir, &mut pending)?,
            Format::Wheel => {
                let w = wheel_info
                    .as_ref()
                    .ok_or_else(|| PackageError::Invalid("wheel source missing".into()))?;
                build_wheels(&split, &meta, w, opts, out_dir, &mut pending)?
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

/// When the spec names a kpack store (`[fetch] source_url`), the generic
/// package ships `<dir>/<component>.sources.toml` next to each `.kpm`
/// (the per-component sources file rocm-kpack-fetch reads), unless the
/// tree already has one.
fn add_fetch_sources(payload: &mut Payload, spec: &Spec) -> Result<(), PackageError> {
    let Some(url) = &spec.fetch.source_url else {
        return Ok(());
    };
    let kpms: Vec<String> = payload
        .iter()
        .filter(|e| device::is_kpm_path(&e.path) && matches!(e.kind, EntryKind::File { .. }))
        .map(|e| e.path.clone())
        .collect();
    for kpm in kpms {
        let dir = tree::parent_of(&kpm);
        let Some(component) = kpm.rsplit('/').next().and_then(layout::manifest_component) else {
            continue;
        };
        let path = format!(
            "{dir}/{}",
            layout::fetch::component_sources_file_name(component)
        );
        if payload.contains(&path) {
            continue;
        }
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let text = format!(
            "# Where rocm-kpack-fetch finds the device archives of {component}.\n[[source]]\nurl = {}\ncomponents = [{}]\n",
            quote(url),
            quote(component)
        );
        payload.insert(Entry::bytes(&path, 0o644, text.into_bytes()))?;
    }
    Ok(())
}

/// `path` made absolute through its deepest existing ancestor
/// (canonicalized), with the missing components appended.
fn resolve_existing(path: &Path) -> Result<PathBuf, PackageError> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| PackageError::io("cannot read", Path::new("."), e))?
            .join(path)
    };
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = fs::canonicalize(base) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return Ok(out);
        }
        match (base.parent(), base.file_name()) {
            (Some(p), Some(n)) => {
                rest.push(n.to_os_string());
                base = p;
            }
            _ => return Ok(abs),
        }
    }
}

/// The compression of one group's device package (see
/// [`PackageOptions::device_compression`]).
fn device_compression(opts: &PackageOptions, g: &DeviceGroup) -> (Compression, Option<u32>) {
    // The whole payload counts: database files beside the archives are
    // uncompressed code objects, most of the bytes in real libraries.
    let only_compressed_archives = !g.archives.is_empty()
        && g.archives.iter().all(|a| a.compressed)
        && g.payload.iter().all(|e| {
            !matches!(e.kind, crate::tree::EntryKind::File { .. })
                || crate::device::is_kpack_archive_path(&e.path)
        });
    match opts.device_compression {
        Some(c) => (c, opts.device_level),
        None if only_compressed_archives => (Compression::Gzip, Some(1)),
        None => (opts.compression, opts.level),
    }
}

fn built(
    format: Format,
    name: &str,
    version: &str,
    group: Option<&DeviceGroup>,
    entries: usize,
) -> BuiltPackage {
    BuiltPackage {
        format,
        name: name.to_string(),
        version: version.to_string(),
        group: group.map(|g| g.name.clone()),
        targets: group.map(|g| g.targets.clone()).unwrap_or_default(),
        path: PathBuf::new(),
        size: 0,
        entries,
        meta: false,
    }
}

/// A meta package's [`BuiltPackage`] entry.
fn built_meta(format: Format, name: &str, version: &str, entries: usize) -> BuiltPackage {
    BuiltPackage {
        meta: true,
        ..built(format, name, version, None, entries)
    }
}

fn meta_summary(meta: &PackageMeta) -> String {
    format!(
        "{} - host code and device code for every GPU target",
        meta.name
    )
}

fn meta_description(meta: &PackageMeta, members: &[String]) -> String {
    wrap(
        &format!(
            "This package installs {} with the device code of every GPU target it was \
             built for: {}.",
            meta.name,
            members.join(", ")
        ),
        72,
    )
}

/// The version without its Debian epoch, as in file names.
fn version_for_file(version: &str) -> &str {
    match version.split_once(':') {
        Some((e, rest)) if e.chars().all(|c| c.is_ascii_digit()) => rest,
        _ => version,
    }
}

// ---------------------------------------------------------------- deb

/// The metadata of the split debs: the version with the spec's suffix
/// (pkgspec `version`), and `Source: <name> (<input version>)` when that
/// differs from the binary version, as binNMUs say it, so the source
/// version stays the input's.
fn deb_meta(meta: &PackageMeta, versioning: &Versioning) -> Result<PackageMeta, PackageError> {
    let version = versioning
        .deb(&meta.version)
        .map_err(PackageError::Invalid)?;
    let mut out = meta.clone();
    if version != meta.version {
        let source = meta.source.as_deref().unwrap_or(&meta.name).trim();
        if !source.contains('(') {
            out.source = Some(format!("{source} ({})", meta.version));
        }
    }
    out.version = version;
    Ok(out)
}

fn generic_deb_control(
    meta: &PackageMeta,
    name: &str,
    payload: &Payload,
) -> (ControlFields, Vec<meta::ControlFile>) {
    let mut c = if meta.deb.control.is_empty() {
        let mut c = ControlFields::default();
        c.set("Package", name.to_string());
        if let Some(s) = &meta.source {
            c.set("Source", s.clone());
        }
        c.set("Version", meta.version.clone());
        c.set("Architecture", meta.architecture.clone());
        c.set("Maintainer", meta.maintainer.clone());
        for (k, v) in &meta.deb.fields {
            c.set(k, v.clone());
        }
        if let Some(s) = &meta.section {
            c.set("Section", s.clone());
        }
        c.set(
            "Priority",
            meta.priority.clone().unwrap_or_else(|| "optional".into()),
        );
        if let Some(h) = &meta.homepage {
            c.set("Homepage", h.clone());
        }
        c.set(
            "Description",
            render_description(&meta.summary_or_default(), &meta.description),
        );
        c
    } else {
        let mut c = meta.deb.control.clone();
        c.set("Package", name.to_string());
        if let Some(s) = &meta.source {
            c.set_before("Source", s.clone(), "Version");
        }
        c.set("Version", meta.version.clone());
        c
    };
    c.remove("Installed-Size");
    let rec = add_relation(c.get("Recommends"), naming::FETCH_PACKAGE);
    c.set_before("Recommends", rec, "Section");
    if c.get("Description").is_none() {
        c.set(
            "Description",
            render_description(&meta.summary_or_default(), &meta.description),
        );
    }
    // conffiles may only name files the generic package still ships.
    let files = meta
        .deb
        .control_files
        .iter()
        .filter_map(|f| {
            if f.name != "conffiles" {
                return Some(f.clone());
            }
            let text = String::from_utf8_lossy(&f.data);
            let kept: String = text
                .lines()
                .filter(|l| {
                    let p = l
                        .trim()
                        .trim_start_matches("remove-on-upgrade ")
                        .trim_start_matches('/');
                    !p.is_empty() && payload.contains(p)
                })
                .map(|l| format!("{l}\n"))
                .collect();
            (!kept.is_empty()).then(|| meta::ControlFile {
                name: f.name.clone(),
                mode: f.mode,
                data: kept.into_bytes(),
            })
        })
        .collect();
    (c, files)
}

fn device_summary(meta: &PackageMeta, group: &str) -> String {
    let base = meta.summary_or_default();
    let s = format!("{base} - {group} device code");
    if s.len() <= 80 {
        s
    } else {
        format!("{} - {group} device code", meta.name)
    }
}

fn device_long_description(meta: &PackageMeta, g: &DeviceGroup) -> String {
    let targets = if g.targets.is_empty() {
        "(none recorded)".to_string()
    } else {
        g.targets.join(" ")
    };
    let what = if g.generic_isa {
        format!(
            "built for the AMD generic ISA {}, which serves the targets {targets} \
             that have no code object of their own",
            g.name
        )
    } else {
        format!(
            "for the AMD {} device group, serving the targets {targets}",
            g.name
        )
    };
    wrap(
        &format!(
            "GPU device code (kernel archives) of {} {what}. The host code is in {}; \
             the rocm-kpack runtime loads these archives on demand.",
            meta.name, meta.name
        ),
        72,
    )
}

/// The device packages a group's package depends on besides the generic
/// one: the generic-ISA packages of the ISAs it carries (see
/// [`DeviceGroup::requires`]), named with `kind`'s template.
fn generic_isa_packages(
    opts: &PackageOptions,
    kind: NameKind,
    name: &str,
    g: &DeviceGroup,
) -> Vec<String> {
    g.requires
        .iter()
        .map(|isa| naming::device(&opts.spec.naming, kind, name, isa))
        .collect()
}

/// The packages of earlier groups (the spec's `replaces`) that `g`'s
/// package takes files over from, named with `kind`'s template: deb
/// `Replaces`/`Breaks`, rpm `Obsoletes` (docs/packaging.md "Upgrades from
/// the previous family table").
fn replaced_packages(
    opts: &PackageOptions,
    kind: NameKind,
    name: &str,
    g: &DeviceGroup,
) -> Vec<String> {
    if g.generic_isa {
        return Vec::new();
    }
    opts.spec
        .replaced_by(&g.name)
        .into_iter()
        .map(|old| naming::device(&opts.spec.naming, kind, name, old))
        .collect()
}

/// The transitional packages to write: each replaced group whose name no
/// current group has, with the device groups of this split that succeed
/// it (none: no package, the split has no code for it).
fn transitions<'a>(
    split: &'a SplitDir,
    opts: &'a PackageOptions,
) -> Vec<(&'a str, Vec<&'a DeviceGroup>)> {
    opts.spec
        .replacements()
        .into_iter()
        .filter(|r| r.transitional && split.groups.iter().all(|g| g.name != r.old))
        .filter_map(|r| {
            let successors: Vec<&DeviceGroup> = split
                .groups
                .iter()
                .filter(|g| r.successors.contains(&g.name.as_str()))
                .collect();
            (!successors.is_empty()).then_some((r.old, successors))
        })
        .collect()
}

fn transitional_summary(meta: &PackageMeta, old: &str) -> String {
    format!("{} - {old} device code (transitional package)", meta.name)
}

fn transitional_description(meta: &PackageMeta, old: &str, successors: &[String]) -> String {
    wrap(
        &format!(
            "This transitional package moves installations of the {old} device code of {} \
             to the packages of the GPU families that now carry it: {}. \
             It can be removed once they are installed.",
            meta.name,
            successors.join(", ")
        ),
        72,
    )
}

/// A transitional package's [`BuiltPackage`] entry: the replaced group,
/// no archives of its own.
fn built_transitional(
    format: Format,
    name: &str,
    version: &str,
    old: &str,
    entries: usize,
) -> BuiltPackage {
    BuiltPackage {
        group: Some(old.to_string()),
        ..built(format, name, version, None, entries)
    }
}

/// The fields every deb of a split but the generic one starts with: name,
/// the input's source, version, architecture and maintainer, and `Depends`
/// on each of `members` at exactly this version.
fn split_deb_control(meta: &PackageMeta, name: &str, members: &[&str]) -> ControlFields {
    let mut c = ControlFields::default();
    c.set("Package", name.to_string());
    c.set(
        "Source",
        meta.source.clone().unwrap_or_else(|| meta.name.clone()),
    );
    c.set("Version", meta.version.clone());
    c.set("Architecture", meta.architecture.clone());
    c.set("Maintainer", meta.maintainer.clone());
    let depends: Vec<String> = members
        .iter()
        .map(|p| format!("{p} (= {})", meta.version))
        .collect();
    c.set("Depends", depends.join(", "));
    c
}

fn device_deb_control(
    meta: &PackageMeta,
    g: &DeviceGroup,
    name: &str,
    generic: &str,
    generic_isas: &[String],
    replaced: &[String],
) -> ControlFields {
    let members: Vec<&str> = std::iter::once(generic)
        .chain(generic_isas.iter().map(String::as_str))
        .collect();
    let mut c = split_deb_control(meta, name, &members);
    c.set("Provides", naming::device_code_provide(generic));
    if !replaced.is_empty() {
        // Files move here from an older family's package: dpkg lets this
        // package overwrite them (Replaces), and apt upgrades or removes
        // the older package first (Breaks).
        let older: Vec<String> = replaced
            .iter()
            .map(|p| format!("{p} (<< {})", meta.version))
            .collect();
        c.set("Replaces", older.join(", "));
        c.set("Breaks", older.join(", "));
    }
    c.set(
        "Section",
        meta.section.clone().unwrap_or_else(|| "libs".into()),
    );
    c.set(
        "Priority",
        meta.priority.clone().unwrap_or_else(|| "optional".into()),
    );
    if let Some(ma) = meta.deb.fields.get("Multi-Arch") {
        c.set("Multi-Arch", ma.clone());
    }
    if let Some(h) = &meta.homepage {
        c.set("Homepage", h.clone());
    }
    if !g.targets.is_empty() {
        c.set("X-Kpack-Gfx", g.targets.join(" "));
    }
    c.set(
        "Description",
        render_description(
            &device_summary(meta, &g.name),
            &device_long_description(meta, g),
        ),
    );
    c
}

fn build_debs(
    split: &SplitDir,
    meta: &PackageMeta,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let meta = &deb_meta(meta, &opts.spec.version)?;
    let arch = &meta.architecture;
    let ver = version_for_file(&meta.version);
    let deb_name_ok = |n: &str| {
        n.len() >= 2
            && n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && n.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.')
            })
    };
    let naming_t = &opts.spec.naming;
    let gname = naming::generic(naming_t, NameKind::DebGeneric, &meta.name);
    let mut names = vec![gname.clone()];
    names.extend(
        split
            .groups
            .iter()
            .map(|g| naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name)),
    );
    let meta_name = (!naming_t.deb_meta.is_empty())
        .then(|| naming::generic(naming_t, NameKind::DebMeta, &meta.name));
    if let Some(bad) = names.iter().chain(&meta_name).find(|n| !deb_name_ok(n)) {
        return Err(PackageError::Invalid(format!(
            "{bad:?} is not a valid Debian package name (lowercase letters, digits, `+-.`)"
        )));
    }
    let mut payload = split.generic.clone();
    add_fetch_sources(&mut payload, &opts.spec)?;
    let generic_doc = format!("usr/share/doc/{gname}");
    if gname != meta.name && !payload.contains(&generic_doc) {
        // A template that renames the generic package (amd-native's
        // `amdrocm-fft-host8.2`) moves its doc directory along: Debian
        // wants the copyright file at usr/share/doc/<package>/.
        move_tree(
            &mut payload,
            &format!("usr/share/doc/{}", meta.name),
            &generic_doc,
        )?;
    }
    payload.add_parent_dirs();
    let (control, files) = generic_deb_control(meta, &gname, &payload);
    let built_deb = built(Format::Deb, &gname, &meta.version, None, payload.len());
    let deb_file = DebFile {
        control,
        control_files: &files,
        payload: &payload,
        compression: (opts.compression, opts.level),
    };
    write_deb_pending(
        deb_file,
        format!("{gname}_{ver}_{arch}.deb"),
        built_deb,
        opts,
        out_dir,
        pending,
    )?;
    let has_doc = payload
        .get(&generic_doc)
        .is_some_and(|e| matches!(e.kind, EntryKind::Dir));
    for g in &split.groups {
        let name = naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name);
        let mut payload = g.payload.clone();
        // The device package's doc directory points at the generic one
        // (same source, and it depends on it): copyright and changelog
        // are shipped once.
        let doc = format!("usr/share/doc/{name}");
        if has_doc && !payload.contains(&doc) {
            payload.insert(Entry::symlink(&doc, &gname))?;
        }
        payload.add_parent_dirs();
        let isa_pkgs = generic_isa_packages(opts, NameKind::DebDevice, &meta.name, g);
        let replaced = replaced_packages(opts, NameKind::DebDevice, &meta.name, g);
        let control = device_deb_control(meta, g, &name, &gname, &isa_pkgs, &replaced);
        let built_deb = built(Format::Deb, &name, &meta.version, Some(g), payload.len());
        let deb_file = DebFile {
            control,
            control_files: &[],
            payload: &payload,
            compression: device_compression(opts, g),
        };
        write_deb_pending(
            deb_file,
            format!("{name}_{ver}_{arch}.deb"),
            built_deb,
            opts,
            out_dir,
            pending,
        )?;
    }
    let relay = |name: &str, members: &[String], section: &str, description: String| RelayDeb {
        name: name.to_string(),
        members: members.to_vec(),
        section: section.to_string(),
        description,
        doc_link: has_doc.then(|| gname.clone()),
    };
    for (old, successors) in transitions(split, opts) {
        let name = naming::device(naming_t, NameKind::DebDevice, &meta.name, old);
        if !deb_name_ok(&name) {
            return Err(PackageError::Invalid(format!(
                "{name:?} is not a valid Debian package name (lowercase letters, digits, `+-.`)"
            )));
        }
        let succ: Vec<String> = successors
            .iter()
            .map(|g| naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name))
            .collect();
        let members: Vec<String> = std::iter::once(gname.clone())
            .chain(succ.iter().cloned())
            .collect();
        let description = render_description(
            &transitional_summary(meta, old),
            &transitional_description(meta, old, &succ),
        );
        // Debian's section for transitional packages (policy 2.4).
        let deb = relay(&name, &members, "oldlibs", description);
        let entry = |entries| built_transitional(Format::Deb, &name, &meta.version, old, entries);
        write_relay_deb(&deb, meta, entry, opts, out_dir, pending)?;
    }
    if let Some(name) = meta_name {
        // names: the generic package, then every device package.
        let description = render_description(&meta_summary(meta), &meta_description(meta, &names));
        // Debian's section for packages that only pull in others.
        let deb = relay(&name, &names, "metapackages", description);
        let entry = |entries| built_meta(Format::Deb, &name, &meta.version, entries);
        write_relay_deb(&deb, meta, entry, opts, out_dir, pending)?;
    }
    Ok(())
}

/// Moves the entries at and below `from` to `to` (nothing when `from` is
/// absent).
fn move_tree(payload: &mut Payload, from: &str, to: &str) -> Result<(), PackageError> {
    let below = format!("{from}/");
    let moved: Vec<Entry> = payload
        .iter()
        .filter(|e| e.path == from || e.path.starts_with(&below))
        .cloned()
        .collect();
    for mut e in moved {
        payload.remove(&e.path);
        e.path = format!("{to}{}", e.path.get(from.len()..).unwrap_or_default());
        payload.insert(e)?;
    }
    Ok(())
}

/// A deb with no files of its own (a doc-directory symlink at most) that
/// depends on `members` at exactly the split's version: transitional and
/// meta packages.
struct RelayDeb {
    name: String,
    members: Vec<String>,
    section: String,
    /// The rendered Description field.
    description: String,
    /// The generic package whose doc directory `usr/share/doc/<name>`
    /// links to, when it has one.
    doc_link: Option<String>,
}

fn write_relay_deb(
    deb: &RelayDeb,
    meta: &PackageMeta,
    entry: impl FnOnce(usize) -> BuiltPackage,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let name = &deb.name;
    let mut payload = Payload::new();
    if let Some(generic) = &deb.doc_link {
        payload.insert(Entry::symlink(&format!("usr/share/doc/{name}"), generic))?;
    }
    payload.add_parent_dirs();
    let members: Vec<&str> = deb.members.iter().map(String::as_str).collect();
    let mut c = split_deb_control(meta, name, &members);
    c.set("Section", deb.section.clone());
    c.set("Priority", "optional".to_string());
    if let Some(ma) = meta.deb.fields.get("Multi-Arch") {
        c.set("Multi-Arch", ma.clone());
    }
    c.set("Description", deb.description.clone());
    let built_deb = entry(payload.len());
    let deb_file = DebFile {
        control: c,
        control_files: &[],
        payload: &payload,
        compression: (opts.compression, opts.level),
    };
    let ver = version_for_file(&meta.version);
    write_deb_pending(
        deb_file,
        format!("{name}_{ver}_{}.deb", meta.architecture),
        built_deb,
        opts,
        out_dir,
        pending,
    )
}

/// One deb of a split: what differs between the generic, device and
/// transitional debs (the rest comes from the options).
struct DebFile<'a> {
    control: ControlFields,
    control_files: &'a [meta::ControlFile],
    payload: &'a Payload,
    compression: (Compression, Option<u32>),
}

/// Writes `file` as `out_dir/file_name` (pending until the whole set is
/// written), every entry at SOURCE_DATE_EPOCH.
fn write_deb_pending(
    file: DebFile<'_>,
    file_name: String,
    built: BuiltPackage,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let spec = deb::DebSpec {
        control: file.control,
        control_files: file.control_files,
        payload: file.payload,
        compression: file.compression.0,
        level: file.compression.1,
        mtime: opts.source_date_epoch,
    };
    write_package(out_dir, file_name, built, pending, |w| {
        deb::write_deb(w, &spec)
    })
}

// ---------------------------------------------------------------- rpm

/// rpm (epoch, version, release) of the split packages: the Debian epoch
/// and revision become rpm's unless the metadata sets them; `-` left in
/// the upstream version becomes `_`; the release gets the spec's suffix
/// (pkgspec `version`: `4` -> `4.kpack1`, newer in rpm's ordering).
pub fn rpm_evr(
    meta: &PackageMeta,
    versioning: &Versioning,
) -> Result<(Option<u32>, String, String), PackageError> {
    let (epoch, version, revision) = rpm::split_evr(&meta.version);
    let epoch = meta
        .rpm
        .epoch
        .or_else(|| epoch.and_then(|e| e.parse().ok()));
    let release = meta
        .rpm
        .release
        .clone()
        .or_else(|| revision.map(str::to_string))
        .unwrap_or_else(|| "1".into());
    let release = versioning
        .rpm_release(&release.replace('-', "_"))
        .map_err(PackageError::Invalid)?;
    Ok((epoch, version.replace('-', "_"), release))
}

fn base_rpm_spec(meta: &PackageMeta, opts: &PackageOptions) -> Result<rpm::RpmSpec, PackageError> {
    let (epoch, version, release) = rpm_evr(meta, &opts.spec.version)?;
    let source = meta
        .source
        .as_deref()
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or(&meta.name);
    let requires = meta
        .rpm
        .requires
        .iter()
        .map(|r| rpm::Dep::parse(r).map_err(PackageError::Invalid))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rpm::RpmSpec {
        name: meta.name.clone(),
        epoch,
        source_rpm: format!("{source}-{version}-{release}.src.rpm"),
        version,
        release,
        arch: rpm::rpm_arch(&meta.architecture).to_string(),
        summary: meta.summary_or_default(),
        description: if meta.description.trim().is_empty() {
            meta.summary_or_default()
        } else {
            meta.description.clone()
        },
        license: meta.license.clone().unwrap_or_else(|| "Unknown".into()),
        group: meta
            .rpm
            .group
            .clone()
            .unwrap_or_else(|| "System Environment/Libraries".into()),
        url: meta.homepage.clone(),
        packager: Some(meta.maintainer.clone()),
        provides: meta.rpm.provides.clone(),
        requires,
        conflicts: meta.rpm.conflicts.clone(),
        obsoletes: meta.rpm.obsoletes.clone(),
        recommends: Vec::new(),
        scripts: meta.rpm.scripts.clone(),
        config_files: meta.rpm.config_files.clone(),
        file_triggers: Vec::new(),
        build_time: opts.source_date_epoch,
        changelog: Some((
            meta.maintainer.clone(),
            "- Repackaged by rocm-kpack: host code and GPU device code in separate packages."
                .into(),
        )),
        compression: opts.compression,
        level: opts.level,
    })
}

fn build_rpms(
    split: &SplitDir,
    meta: &PackageMeta,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let naming_t = &opts.spec.naming;
    let mut generic = base_rpm_spec(meta, opts)?;
    generic.name = naming::generic(naming_t, NameKind::RpmGeneric, &meta.name);
    // As the generic deb's Recommends: dnf installs the fetcher with the
    // generic package, and its file trigger fetches the device code.
    generic.recommends = meta.rpm.recommends.clone();
    if !generic
        .recommends
        .iter()
        .any(|d| d.name == naming::FETCH_PACKAGE)
    {
        generic
            .recommends
            .push(rpm::Dep::any(naming::FETCH_PACKAGE));
    }
    let mut payload = split.generic.clone();
    add_fetch_sources(&mut payload, &opts.spec)?;
    payload.add_parent_dirs();
    write_rpm_pending(&generic, &payload, None, out_dir, pending)?;
    for g in &split.groups {
        let mut spec = base_rpm_spec(meta, opts)?;
        spec.name = naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name);
        // The payload holds no CPU code (GPU archives and database files).
        spec.arch = "noarch".into();
        spec.summary = device_summary(meta, &g.name);
        spec.description = device_long_description(meta, g);
        spec.requires = std::iter::once(generic.name.clone())
            .chain(generic_isa_packages(
                opts,
                NameKind::RpmDevice,
                &meta.name,
                g,
            ))
            .map(|p| rpm::Dep::eq(&p, &generic.evr()))
            .collect();
        spec.conflicts.clear();
        // Takes files over from an older family's package: obsoleting its
        // older versions lets rpm replace them in one transaction.
        spec.obsoletes = replaced_packages(opts, NameKind::RpmDevice, &meta.name, g)
            .iter()
            .map(|p| rpm::Dep::lt(p, &generic.evr()))
            .collect();
        spec.scripts.clear();
        spec.config_files.clear();
        (spec.compression, spec.level) = device_compression(opts, g);
        spec.provides = std::iter::once(rpm::Dep::any(&naming::device_code_provide(&generic.name)))
            .chain(
                g.targets
                    .iter()
                    .map(|t| rpm::Dep::any(&naming::rpm_target_provide(t))),
            )
            .collect();
        let mut payload = g.payload.clone();
        payload.add_parent_dirs();
        write_rpm_pending(&spec, &payload, Some(g), out_dir, pending)?;
    }
    for (old, successors) in transitions(split, opts) {
        let succ: Vec<String> = successors
            .iter()
            .map(|g| naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name))
            .collect();
        let members: Vec<String> = std::iter::once(generic.name.clone())
            .chain(succ.iter().cloned())
            .collect();
        let spec = empty_rpm_spec(
            base_rpm_spec(meta, opts)?,
            naming::device(naming_t, NameKind::RpmDevice, &meta.name, old),
            transitional_summary(meta, old),
            transitional_description(meta, old, &succ),
            &members,
            &generic.evr(),
        );
        write_empty_rpm(&spec, out_dir, pending, |n| {
            built_transitional(Format::Rpm, &spec.name, &spec.evr(), old, n)
        })?;
    }
    if !naming_t.rpm_meta.is_empty() {
        let members: Vec<String> = std::iter::once(generic.name.clone())
            .chain(
                split
                    .groups
                    .iter()
                    .map(|g| naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name)),
            )
            .collect();
        let spec = empty_rpm_spec(
            base_rpm_spec(meta, opts)?,
            naming::generic(naming_t, NameKind::RpmMeta, &meta.name),
            meta_summary(meta),
            meta_description(meta, &members),
            &members,
            &generic.evr(),
        );
        write_empty_rpm(&spec, out_dir, pending, |n| {
            built_meta(Format::Rpm, &spec.name, &spec.evr(), n)
        })?;
    }
    Ok(())
}

/// Writes a file-less rpm (transitional or meta) made by [`empty_rpm_spec`];
/// `entry` describes it from its payload's entry count.
fn write_empty_rpm(
    spec: &rpm::RpmSpec,
    out_dir: &Path,
    pending: &mut PendingPackages,
    entry: impl FnOnce(usize) -> BuiltPackage,
) -> Result<(), PackageError> {
    let payload = Payload::new();
    write_package(
        out_dir,
        spec.file_name(),
        entry(payload.len()),
        pending,
        |w| rpm::write_rpm(w, spec, &payload, out_dir),
    )
}

/// A file-less noarch rpm named `name` that requires each of `members` at
/// exactly `evr` (transitional and meta packages), from the split's base
/// spec without its provides, conflicts, obsoletes, scripts or config files.
fn empty_rpm_spec(
    mut spec: rpm::RpmSpec,
    name: String,
    summary: String,
    description: String,
    members: &[String],
    evr: &str,
) -> rpm::RpmSpec {
    spec.name = name;
    spec.arch = "noarch".into();
    spec.summary = summary;
    spec.description = description;
    spec.requires = members.iter().map(|p| rpm::Dep::eq(p, evr)).collect();
    spec.provides.clear();
    spec.conflicts.clear();
    spec.obsoletes.clear();
    spec.scripts.clear();
    spec.config_files.clear();
    spec
}

fn write_rpm_pending(
    spec: &rpm::RpmSpec,
    payload: &Payload,
    group: Option<&DeviceGroup>,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    write_package(
        out_dir,
        spec.file_name(),
        built(Format::Rpm, &spec.name, &spec.evr(), group, payload.len()),
        pending,
        |w| rpm::write_rpm(w, spec, payload, out_dir),
    )
}

// ---------------------------------------------------------------- wheel

/// What the generic tree says about the wheel it came from.
#[derive(Debug, Clone, Default)]
struct WheelSource {
    /// `*.dist-info` directory in the generic tree.
    dist_info: Option<String>,
    /// Its METADATA.
    metadata: Option<wheel::CoreMetadata>,
    /// Its WHEEL.
    wheel: Option<wheel::CoreMetadata>,
    /// Its other files (kept), by name relative to the dist-info dir.
    extra: BTreeMap<String, Vec<u8>>,
}

/// dist-info files that describe an installation, not a wheel.
const INSTALL_ONLY: [&str; 4] = ["RECORD", "INSTALLER", "REQUESTED", "direct_url.json"];

impl WheelSource {
    fn from_generic(payload: &Payload) -> Result<WheelSource, PackageError> {
        let dist_infos: Vec<&str> = payload
            .iter()
            .filter(|e| !e.path.contains('/') && e.path.ends_with(".dist-info"))
            .map(|e| e.path.as_str())
            .collect();
        let dir = match dist_infos.as_slice() {
            [] => return Ok(WheelSource::default()),
            [one] => (*one).to_string(),
            _ => {
                return Err(PackageError::Invalid(format!(
                    "generic tree holds several .dist-info directories: {}",
                    dist_infos.join(", ")
                )))
            }
        };
        let prefix = format!("{dir}/");
        let mut src = WheelSource {
            dist_info: Some(dir.clone()),
            ..Default::default()
        };
        for e in payload.iter() {
            let Some(rel) = e.path.strip_prefix(&prefix) else {
                continue;
            };
            if !matches!(e.kind, EntryKind::File { .. }) {
                continue;
            }
            if e.size() > 64 << 20 {
                return Err(PackageError::Invalid(format!(
                    "{}: too large for metadata",
                    e.path
                )));
            }
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e.open()?, &mut data).map_err(|er| {
                PackageError::io("cannot read", Path::new(&e.source_display()), er)
            })?;
            let text = || String::from_utf8_lossy(&data).into_owned();
            match rel {
                "METADATA" => src.metadata = Some(wheel::CoreMetadata::parse(&text())),
                "WHEEL" => src.wheel = Some(wheel::CoreMetadata::parse(&text())),
                r if INSTALL_ONLY.contains(&r) => {}
                r => {
                    src.extra.insert(r.to_string(), data);
                }
            }
        }
        Ok(src)
    }
}

fn build_wheels(
    split: &SplitDir,
    meta: &PackageMeta,
    src: &WheelSource,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let base = meta.wheel.dist.clone().unwrap_or_else(|| {
        src.metadata
            .as_ref()
            .and_then(|m| m.get("Name"))
            .unwrap_or(&meta.name)
            .to_string()
    });
    let naming_t = &opts.spec.naming;
    let dist = naming::generic(naming_t, NameKind::WheelGeneric, &base);
    let version = opts
        .spec
        .version
        .wheel(&meta.version)
        .map_err(PackageError::Invalid)?;
    let tags: Vec<String> = if !meta.wheel.tags.is_empty() {
        meta.wheel.tags.clone()
    } else if let Some(w) = &src.wheel {
        w.get_all("Tag").map(str::to_string).collect()
    } else {
        vec!["py3-none-linux_x86_64".to_string()]
    };
    if tags.is_empty() {
        return Err(PackageError::Invalid(
            "the tree's WHEEL has no Tag lines; pass wheel tags in the metadata".into(),
        ));
    }
    let requires_python = meta.wheel.requires_python.clone().or_else(|| {
        src.metadata
            .as_ref()
            .and_then(|m| m.get("Requires-Python"))
            .map(str::to_string)
    });
    // Generic wheel.
    let mut payload = Payload::new();
    let skip_prefix = src.dist_info.as_ref().map(|d| format!("{d}/"));
    for e in split.generic.iter() {
        if let Some(d) = &src.dist_info {
            if e.path == *d {
                continue;
            }
        }
        if skip_prefix
            .as_ref()
            .is_some_and(|p| e.path.starts_with(p.as_str()))
        {
            continue;
        }
        payload.replace(e.clone());
    }
    add_fetch_sources(&mut payload, &opts.spec)?;
    let mut md = src.metadata.clone().unwrap_or_else(|| {
        let mut m = wheel::CoreMetadata::default();
        m.push("Metadata-Version", "2.1");
        m.push("Name", &dist);
        m.push("Version", &version);
        m.push("Summary", &meta.summary_or_default());
        if let Some(h) = &meta.homepage {
            m.push("Home-page", h);
        }
        if let Some(l) = &meta.license {
            m.push("License", l);
        }
        if let Some(rp) = &requires_python {
            m.push("Requires-Python", rp);
        }
        for r in &meta.wheel.requires_dist {
            m.push("Requires-Dist", r);
        }
        if !meta.description.is_empty() {
            m.body = format!("{}\n", meta.description);
        }
        m
    });
    md.set("Name", &dist);
    md.set("Version", &version);
    let devices: Vec<(String, String)> = split
        .groups
        .iter()
        .map(|g| {
            (
                naming::wheel_extra(naming_t, &g.name),
                naming::device(naming_t, NameKind::WheelDevice, &base, &g.name),
            )
        })
        .collect();
    wheel::add_device_extras(&mut md, &version, &devices);
    // An older family's extra (`device-gfx90x`) keeps working: it asks for
    // the device wheels of the families that now carry its processors.
    let older: Vec<(String, Vec<String>)> = transitions(split, opts)
        .into_iter()
        .map(|(old, successors)| {
            (
                naming::wheel_extra(naming_t, old),
                successors
                    .iter()
                    .map(|g| naming::device(naming_t, NameKind::WheelDevice, &base, &g.name))
                    .collect(),
            )
        })
        .collect();
    wheel::add_transitional_extras(&mut md, &version, &older);
    let mut files = src.extra.clone();
    files.insert("METADATA".into(), md.render().into_bytes());
    files.insert(
        "WHEEL".into(),
        wheel::wheel_file(&tags, src.wheel.as_ref()).into_bytes(),
    );
    let dist_info = wheel::dist_info_dir(&dist, &version);
    write_wheel_pending(
        &dist, &version, &tags, dist_info, files, &payload, None, opts, out_dir, pending,
    )?;
    for g in &split.groups {
        let dev = naming::device(naming_t, NameKind::WheelDevice, &base, &g.name);
        let mut m = wheel::CoreMetadata::default();
        m.push("Metadata-Version", "2.1");
        m.push("Name", &dev);
        m.push("Version", &version);
        m.push("Summary", &device_summary(meta, &g.name));
        if let Some(rp) = &requires_python {
            m.push("Requires-Python", rp);
        }
        m.push("Requires-Dist", &format!("{dist}=={version}"));
        for isa in generic_isa_packages(opts, NameKind::WheelDevice, &base, g) {
            m.push("Requires-Dist", &format!("{isa}=={version}"));
        }
        m.body = format!("{}\n", device_long_description(meta, g));
        let mut files = BTreeMap::new();
        files.insert("METADATA".to_string(), m.render().into_bytes());
        files.insert(
            "WHEEL".to_string(),
            wheel::wheel_file(&tags, None).into_bytes(),
        );
        write_wheel_pending(
            &dev,
            &version,
            &tags,
            wheel::dist_info_dir(&dev, &version),
            files,
            &g.payload,
            Some(g),
            opts,
            out_dir,
            pending,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_wheel_pending(
    dist: &str,
    version: &str,
    tags: &[String],
    dist_info: String,
    files: BTreeMap<String, Vec<u8>>,
    payload: &Payload,
    group: Option<&DeviceGroup>,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let spec = wheel::WheelSpec {
        dist_info,
        dist_info_files: files,
        payload,
        mtime: opts.source_date_epoch,
    };
    write_package(
        out_dir,
        wheel::wheel_file_name(dist, version, tags)?,
        built(Format::Wheel, dist, version, group, payload.len()),
        pending,
        |w| wheel::write_wheel(w, &spec),
    )
}
