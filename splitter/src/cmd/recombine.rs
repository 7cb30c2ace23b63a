//! `rocm-kpack recombine SHARD_DIR... --out DIR [--spec SPEC] [--jobs N]
//! [--compression zstd|none] [--level N] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_format::archive::{CompressionScheme, DEFAULT_ZSTD_LEVEL};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::recombine::{recombine, RecombineOptions, RecombineReport};

use super::split_binary::Compression;

/// Merge the split outputs of several builds (shards) into one generic
/// output plus one output per device group of the spec.
///
/// Each SHARD_DIR is what `rocm-kpack split` wrote for one build (generic/ +
/// <group>/, or <name>_<component>_generic/ + <name>_<component>_<group>/
/// artifact directories). The generic output is taken from the first shard;
/// the others must match it byte for byte when the spec's
/// `generic_must_match` is true. Device code is regrouped into the spec's
/// groups and every .kpm manifest is regenerated to list all archives.
/// Duplicate device code and spec targets without device code fail or warn
/// as the spec's `duplicate_device_code` / `missing_device_code` say.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Split outputs of separate builds, in priority order. Never modified.
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Output directory (created if missing; must not be inside a shard).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Package spec (TOML): output groups and validation switches
    /// [default: the built-in GPU family table].
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Worker threads [default: one per core].
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Compression of archives that must be rewritten [default: as the shards].
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
    /// zstd level of rewritten archives.
    #[arg(long, default_value_t = DEFAULT_ZSTD_LEVEL)]
    pub level: i32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let spec = match &args.spec {
        Some(p) => Spec::from_file(p)?,
        None => Spec::builtin(),
    };
    if args.jobs == Some(0) {
        anyhow::bail!("--jobs must be at least 1");
    }
    let opts = RecombineOptions {
        spec,
        compression: args.compression.map(|c| match c {
            Compression::Zstd => CompressionScheme::ZstdPerKernel,
            Compression::None => CompressionScheme::None,
        }),
        zstd_level: args.level,
        jobs: args.jobs,
    };
    let report = recombine(&args.shards, &args.out, &opts)?;
    // Warnings go to stderr once (also in the JSON report).
    for w in &report.warnings {
        eprintln!("rocm-kpack: warning: {w}");
    }
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render(&report)
    };
    super::print_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn render(r: &RecombineReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let copied = r.archives.iter().filter(|a| a.copied_from.is_some()).count();
    let _ = writeln!(
        out,
        "{} shard(s) -> {}: {} outputs, {} archives ({copied} copied unchanged, {} rewritten), {} manifests, {} database files",
        r.shards.len(),
        r.output.display(),
        r.outputs.len(),
        r.archives.len(),
        r.archives.len() - copied,
        r.manifests.len(),
        r.databases.len()
    );
    for a in &r.archives {
        let _ = writeln!(
            out,
            "  {} ({} entries, {} bytes) arches: {}",
            a.archive.path,
            a.archive.entries,
            a.archive.size,
            a.archive.architectures.join(" ")
        );
    }
    out
}
