//! `rocm-kpack package SPLIT_DIR --out DIR [--name N] [--version V]
//! [--format deb,rpm,wheel] [--spec SPEC] [--control-from DEB]
//! [--metadata TOML] [--compression xz|gzip|zstd|none] [--level N]
//! [--device-compression KIND] [--device-level N] [--json]`.

use std::fmt::Write as _;
use std::path::PathBuf;

use rocm_kpack_cli::{iec_size, ExitStatus, JsonArg, UsageError};
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::{package, Format, PackageOptions};
use rocm_kpack_pkgspec::fields::{self, FieldKind};
use rocm_kpack_splitter::split_package::PlannedPackage;

use crate::cli::{
    check_package_level, parse_package_compression, source_date_epoch, DeviceCompressionArgs,
    OutArg, SpecArg,
};

/// Build packages from a split directory: one generic package (host code,
/// the `.kpm` manifest, everything else) plus one package per device group
/// directory, for each requested format. Metadata comes from, in
/// increasing precedence: --control-from (the original .deb's control
/// fields and control files), --metadata (a TOML file), --name/--version.
/// Timestamps come from SOURCE_DATE_EPOCH (default 2024-01-01).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The split directory: generic/ plus one directory per device group,
    /// each a tree rooted at the install root.
    pub split_dir: PathBuf,
    #[command(flatten)]
    pub out: OutArg,
    /// Package name of the generic package.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Version, copied exactly into every package.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Formats to build (comma-separated: deb, rpm, wheel).
    #[arg(long, value_name = "FORMAT", value_delimiter = ',', default_value = "deb",
          value_parser = parse_format)]
    pub format: Vec<Format>,
    #[command(flatten)]
    pub spec: SpecArg,
    /// The original .deb: its control fields (Depends, Description, ...) and
    /// control files (shlibs, symbols, triggers, scripts) are carried over.
    #[arg(long, value_name = "DEB")]
    pub control_from: Option<PathBuf>,
    /// Metadata TOML: name, version, architecture, maintainer, summary,
    /// description, homepage, license, section, source, and [deb] fields,
    /// [rpm] release/epoch/requires, [wheel] dist/tags/requires_dist
    /// (docs/packaging.md, "Package naming", lists every key).
    #[arg(long, value_name = "TOML")]
    pub metadata: Option<PathBuf>,
    /// Wheel compatibility tag (repeatable) [default: from the tree's
    /// WHEEL, else py3-none-linux_x86_64].
    #[arg(long = "wheel-tag", value_name = "TAG", value_parser = wheel_tag)]
    pub wheel_tag: Vec<String>,
    /// Compression of deb members and rpm payloads (xz, gzip, zstd, none).
    #[arg(long, value_name = "KIND", default_value = "xz", value_parser = parse_package_compression)]
    pub compression: Compression,
    /// Compression level [default: the compressor's].
    #[arg(long, value_name = "N")]
    pub level: Option<u32>,
    #[command(flatten)]
    pub device: DeviceCompressionArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

/// `--format`: deb, rpm or wheel.
fn parse_format(text: &str) -> Result<Format, String> {
    Format::from_name(text.trim())
        .ok_or_else(|| format!("unknown format {text:?} (deb, rpm, wheel)"))
}

/// `--wheel-tag`: a compressed tag triple, `py3-none-linux_x86_64`.
fn wheel_tag(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split('-').collect();
    if parts.len() != 3 {
        return Err(format!(
            "{text:?} is not a wheel tag (python-abi-platform, e.g. py3-none-linux_x86_64)"
        ));
    }
    for part in parts {
        for tag in part.split('.') {
            fields::check(FieldKind::WheelTag, tag).map_err(|e| e.to_string())?;
        }
    }
    Ok(text.to_owned())
}

/// `--name` and `--version` as each requested format spells them: a
/// value no format may carry is a usage error, before anything is read.
fn check_name_and_version(args: &Args) -> Result<(), UsageError> {
    let usage = |e: rocm_kpack_format::layout::names::NameError| UsageError(e.to_string());
    for format in &args.format {
        let (name_kind, version_kind) = match format {
            Format::Deb => (FieldKind::DebPackage, Some(FieldKind::DebVersion)),
            Format::Rpm => (FieldKind::RpmName, None),
            Format::Wheel => (FieldKind::WheelName, Some(FieldKind::WheelVersion)),
        };
        if let Some(name) = &args.name {
            fields::check(name_kind, name).map_err(usage)?;
        }
        if let (Some(version), Some(kind)) = (&args.version, version_kind) {
            fields::check(kind, version).map_err(usage)?;
        }
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    check_name_and_version(&args)?;
    check_package_level("--level", args.compression, args.level)?;
    let spec = args.spec.load()?;
    let (device_compression, device_level) = args.device.resolve()?;
    let mut meta = match &args.control_from {
        Some(deb) => {
            let r = DebReader::open(deb)?;
            PackageMeta::from_control(&r.control, r.control_files.clone())
        }
        None => PackageMeta::default(),
    };
    if let Some(t) = &args.metadata {
        meta.apply_toml_file(t)?;
    }
    if let Some(n) = &args.name {
        meta.name = n.clone();
    }
    if let Some(v) = &args.version {
        meta.version = v.clone();
    }
    if !args.wheel_tag.is_empty() {
        meta.wheel.tags = args.wheel_tag.clone();
    }
    let progress = super::progress::CommandProgress::new();
    let opts = PackageOptions {
        formats: args.format.clone(),
        meta,
        spec,
        source_date_epoch: source_date_epoch()?,
        compression: args.compression,
        level: args.level,
        device_compression,
        device_level,
        replace_existing: args.out.force,
        progress: progress.handle(),
    };
    let report = package(&args.split_dir, &args.out.dir, &opts);
    let summary = progress.finish();
    let report = report?;
    args.json
        .report(&report, || render_packages(&report.packages) + &summary)?;
    Ok(ExitStatus::Success)
}

/// One line per package, in aligned columns: format, package name, size
/// (when known), file, and what it serves (device packages: the targets;
/// transitional and meta packages say so).
fn render_rows(rows: &[(PlannedPackage, Option<u64>)]) -> String {
    let name_width = rows.iter().map(|(p, _)| p.name.len()).max().unwrap_or(0);
    let sizes: Vec<String> = rows
        .iter()
        .map(|(_, size)| size.map(iec_size).unwrap_or_default())
        .collect();
    let size_width = sizes.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for ((p, _), size) in rows.iter().zip(&sizes) {
        let serves = if p.meta {
            " (meta package: the generic and every device package)".to_owned()
        } else if p.transitional {
            // The line already names the package; the group's own
            // spelling (`gfx90X`) would read as another name for it.
            " (transitional: moves the installs of this former group to the packages that now carry its targets)"
                .to_owned()
        } else if !p.targets.is_empty() {
            format!(" [{}]", p.targets.join(" "))
        } else {
            String::new()
        };
        let format = format!("{:?}", p.format).to_lowercase();
        let size = if size_width == 0 {
            String::new()
        } else {
            format!("{size:>size_width$}  ")
        };
        let _ = writeln!(
            out,
            "{format:<5}  {:<name_width$}  {size}{}{serves}",
            p.name,
            p.path.display()
        );
    }
    out
}

/// [`render_rows`] of the packages a command wrote.
pub fn render_packages(packages: &[rocm_kpack_package::BuiltPackage]) -> String {
    let rows: Vec<(PlannedPackage, Option<u64>)> = packages
        .iter()
        .map(|p| (PlannedPackage::of(p, p.path.clone()), Some(p.size)))
        .collect();
    render_rows(&rows)
}

/// [`render_rows`] of the packages a dry run would write (no sizes).
pub fn render_planned(packages: &[PlannedPackage]) -> String {
    let rows: Vec<(PlannedPackage, Option<u64>)> =
        packages.iter().map(|p| (p.clone(), None)).collect();
    render_rows(&rows)
}
