//! `rocm-kpack package SPLIT_DIR --out DIR [--name N] [--version V]
//! [--format deb,rpm,wheel] [--spec SPEC] [--control-from DEB]
//! [--metadata TOML] [--compression xz|gzip|zstd|none] [--level N]
//! [--device-compression KIND] [--device-level N] [--json]`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::{package, source_date_epoch, Format, PackageOptions};

use crate::cli::{DeviceCompressionArgs, OutArg, SpecArg};

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
    #[arg(long)]
    pub name: Option<String>,
    /// Version, copied exactly into every package.
    #[arg(long)]
    pub version: Option<String>,
    /// Formats to build (comma-separated: deb, rpm, wheel).
    #[arg(long, value_delimiter = ',', default_value = "deb")]
    pub format: Vec<String>,
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
    #[arg(long = "wheel-tag")]
    pub wheel_tag: Vec<String>,
    /// Compression of deb members and rpm payloads (xz, gzip, zstd, none).
    #[arg(long, default_value = "xz")]
    pub compression: String,
    /// Compression level [default: the compressor's].
    #[arg(long)]
    pub level: Option<u32>,
    #[command(flatten)]
    pub device: DeviceCompressionArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let spec = args.spec.load()?;
    let mut formats = Vec::new();
    for f in &args.format {
        formats.push(
            Format::from_name(f.trim())
                .with_context(|| format!("unknown format {f:?} (deb, rpm, wheel)"))?,
        );
    }
    let compression = Compression::from_name(&args.compression).with_context(|| {
        format!(
            "unknown compression {:?} (xz, gzip, zstd, none)",
            args.compression
        )
    })?;
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
        formats,
        meta,
        spec,
        source_date_epoch: source_date_epoch()?,
        compression,
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
        .print(&report, || render_packages(&report.packages) + &summary)?;
    Ok(ExitStatus::Success)
}

/// One line per built package: format, group, size, path, targets.
pub fn render_packages(packages: &[rocm_kpack_package::BuiltPackage]) -> String {
    let mut out = String::new();
    for p in packages {
        let group = match (&p.group, p.meta) {
            (Some(g), _) => g.as_str(),
            (None, true) => "meta",
            (None, false) => "generic",
        };
        let targets = if p.targets.is_empty() {
            String::new()
        } else {
            format!(" [{}]", p.targets.join(" "))
        };
        let _ = writeln!(
            out,
            "{:<5} {:<9} {:>12} {}{targets}",
            format!("{:?}", p.format).to_lowercase(),
            group,
            p.size,
            p.path.display()
        );
    }
    out
}
