//! `rocm-kpack split-package FILE --out DIR [--spec SPEC] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_pkgspec::Spec;
use rocm_kpack_package::source_date_epoch;
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};

/// Split a fat .deb, .rpm or .whl into a generic package plus one package
/// per device group.
///
/// The kind is detected from the file's content. The generic package keeps
/// the original name, version and metadata (description, dependencies,
/// maintainer scripts, conffiles; wheel tags and METADATA) and ships
/// host-only binaries with their .kpack/*.kpm manifests; each device
/// package holds one group's .kpack archives and kernel database files.
/// Wheels keep everything inside the package directory (<pkg>/.kpack/),
/// and the generic wheel gains `device-<group>` extras. A package without
/// device code is copied unchanged (with a note). Outputs are
/// deterministic (SOURCE_DATE_EPOCH).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fat package (.deb, .rpm or .whl). Never modified.
    pub file: PathBuf,
    /// Output directory (created if missing; not the input's directory).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Package spec (TOML): device groups, kernel-database rules, naming
    /// [default: the built-in GPU family table].
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Worker threads [default: one per core].
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let spec = match &args.spec {
        Some(p) => Spec::from_file(p)?,
        None => Spec::builtin(),
    };
    let opts = SplitPackageOptions {
        spec,
        jobs: args.jobs,
        source_date_epoch: source_date_epoch()?,
        ..SplitPackageOptions::default()
    };
    let report = split_package(&args.file, &args.out, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    for n in &report.notes {
        eprintln!("note: {n}");
    }
    super::package::print_packages(&report.packages);
    Ok(ExitCode::SUCCESS)
}
