//! `rocm-kpack split-package FILE --out DIR [--spec SPEC | --target T,...] [--jobs N]
//! [--memory SIZE] [--compression zstd|none] [--level N] [--device-compression C]
//! [--device-level N] [--dry-run] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{plural, ExitStatus, JsonArg};
use rocm_kpack_splitter::split_package::{plan_split_package, split_package, SplitPackageOptions};

use crate::cli::{
    source_date_epoch, ArchiveCompressionArgs, DeviceCompressionArgs, JobsArg, OutArg,
    SpecOrTargetsArg,
};

/// Split a fat .deb, .rpm or .whl into a generic package plus one package
/// per device group (by default one per GPU target).
///
/// The kind is detected from the file's content. The generic package keeps
/// the original name, version and metadata (description, dependencies,
/// maintainer scripts, conffiles; wheel tags and METADATA) and ships
/// host-only binaries with their .kpack/*.kpm manifests. Each device
/// group's package holds one .kpack archive per processor of the group
/// (named as the loader's @GFXARCH@ pattern expands, no symlinks) and the
/// group's kernel database files; code built for a generic ISA
/// (gfx11-generic) gets a package of its own, which the packages of the
/// groups carrying that ISA depend on. Wheels keep everything inside the
/// package directory (<pkg>/.kpack/), and the generic wheel gains
/// `device-<group>` extras. A package without device code is copied
/// unchanged (with a note). Archives are written at the release level on
/// every core; outputs are deterministic (SOURCE_DATE_EPOCH).
///
/// --dry-run prints the packages a run would write, and writes nothing in
/// --out: it splits and packages uncompressed in a temporary directory,
/// so the names are exactly those of a real run (the sizes are not).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fat package (.deb, .rpm or .whl). Never modified.
    pub file: PathBuf,
    #[command(flatten)]
    pub out: OutArg,
    #[command(flatten)]
    pub spec: SpecOrTargetsArg,
    #[command(flatten)]
    pub jobs: JobsArg,
    #[command(flatten)]
    pub compression: ArchiveCompressionArgs,
    #[command(flatten)]
    pub device: DeviceCompressionArgs,
    /// Print the packages that would be written, write nothing in --out.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let (device_compression, device_level) = args.device.resolve()?;
    let progress = super::progress::CommandProgress::new();
    let opts = SplitPackageOptions {
        device_compression,
        device_level,
        spec: args.spec.load()?,
        output: args.compression.output(&args.jobs, &args.out),
        source_date_epoch: source_date_epoch()?,
        progress: progress.handle(),
        ..SplitPackageOptions::default()
    };
    if args.dry_run {
        drop(progress);
        let plan = plan_split_package(&args.file, &args.out.dir, &opts)
            .map_err(|e| args.spec.explain(e.into()))?;
        for n in &plan.notes {
            rocm_kpack_cli::note(n);
        }
        args.json.document(&plan, || {
            format!(
                "{} ({} {}) would become {} in {}:\n{}",
                plan.input.display(),
                plan.name,
                plan.version,
                plural(plan.packages.len(), "package", "packages"),
                plan.output.display(),
                super::package::render_planned(&plan.packages)
            )
        })?;
        return Ok(ExitStatus::Success);
    }
    let report = split_package(&args.file, &args.out.dir, &opts);
    let summary = progress.finish();
    let report = report.map_err(|e| args.spec.explain(e.into()))?;
    if !args.json.enabled {
        for n in &report.notes {
            rocm_kpack_cli::note(n);
        }
    }
    args.json.report(&report, || {
        super::package::render_packages(&report.packages) + &summary
    })?;
    Ok(ExitStatus::Success)
}
