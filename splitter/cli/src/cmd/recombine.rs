//! `rocm-kpack recombine SHARD_DIR... --out DIR [--spec SPEC] [--jobs N] [--memory SIZE]
//! [--compression zstd|none] [--level N] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{plural, ExitStatus, JsonArg};
use rocm_kpack_splitter::split::recombine::{recombine, RecombineOptions, RecombineReport};

use crate::cli::{ArchiveCompressionArgs, JobsArg, OutArg, SpecArg};

/// Merge the split outputs of several builds (shards) into one generic
/// output plus one output per device tree of the spec.
///
/// Each SHARD_DIR is what `rocm-kpack split` wrote for one build (generic/ +
/// <tree>/, or <name>_<component>_generic/ + <name>_<component>_<tree>/
/// artifact directories). The generic output is taken from the first shard;
/// the others must match it byte for byte when the spec's
/// `generic_must_match` is true. Device code is regrouped into one archive
/// per processor or generic ISA, in its device tree, and every .kpm manifest
/// is regenerated to list all archives: the complete index the fetcher
/// reads. One shard in the old family layout (<component>_<family>.kpack)
/// recombined on its own comes out in the per-processor layout. Rewritten
/// archives are compressed at zstd level 19 unless --level says otherwise.
/// Duplicate device code and spec targets without device code fail or warn
/// as the spec's `duplicate_device_code` / `missing_device_code` say.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Split outputs of separate builds, in priority order. Never modified.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    #[command(flatten)]
    pub out: OutArg,
    #[command(flatten)]
    pub spec: SpecArg,
    #[command(flatten)]
    pub jobs: JobsArg,
    /// Compression of the archives that must be rewritten.
    #[command(flatten)]
    pub compression: ArchiveCompressionArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let spec = args.spec.load()?;
    let opts = RecombineOptions {
        spec,
        output: args.compression.output(&args.jobs, &args.out),
    };
    let report = recombine(&args.shards, &args.out.dir, &opts)?;
    // Warnings go to stderr once (also in the JSON report).
    for w in &report.warnings {
        tracing::warn!("{w}");
    }
    args.json.report(&report, || render(&report))?;
    Ok(ExitStatus::Success)
}

fn render(r: &RecombineReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let copied = r
        .archives
        .iter()
        .filter(|a| a.copied_from.is_some())
        .count();
    let _ = writeln!(
        out,
        "{} -> {}: {}, {} ({copied} copied unchanged, {} rewritten), {}, {}",
        plural(r.shards.len(), "shard", "shards"),
        r.output.display(),
        plural(r.outputs.len(), "output", "outputs"),
        plural(r.archives.len(), "archive", "archives"),
        r.archives.len() - copied,
        plural(r.manifests.len(), "manifest", "manifests"),
        plural(r.databases.len(), "database file", "database files")
    );
    for a in &r.archives {
        let _ = writeln!(
            out,
            "  {} ({}, {}) arches: {}",
            a.archive.path.display(),
            plural(a.archive.entries, "entry", "entries"),
            rocm_kpack_cli::iec_size(a.archive.size),
            a.archive.architectures.join(" ")
        );
    }
    out
}
