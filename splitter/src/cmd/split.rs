//! `rocm-kpack split INPUT --out DIR [--spec SPEC] [--component NAME]
//! [--jobs N] [--batch] [--prefix-dir DIR]... [--compression zstd|none]
//! [--level N] [--dry-run] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_format::archive::{CompressionScheme, DEFAULT_ZSTD_LEVEL};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::artifact::{batch_inputs, is_artifact_dir, plan_artifact, split_artifact, split_batch};
use rocm_kpack_splitter::plan::SplitPlan;
use rocm_kpack_splitter::tree::{plan_tree, split_tree, SplitOptions, SplitReport};

use super::split_binary::Compression;

/// Split an install tree or build artifact directories.
///
/// An install tree (e.g. an /opt/rocm layout) becomes DIR/generic/ (host-only
/// binaries, their .kpack/<component>.kpm manifests, every other file) and
/// DIR/<group>/ per device group (.kpack/<component>_<group>.kpack archives
/// and the group's kernel database files); extracting generic/ and any
/// groups over each other gives a working install for those groups' GPUs.
/// Symlinks stay symlinks (never followed), hard links stay hard links,
/// modes and mtimes are kept.
///
/// An artifact directory (<name>_<component>_<suffix>/ with
/// artifact_manifest.txt) becomes <name>_<component>_generic/ and
/// <name>_<component>_<group>/ under DIR; --batch splits every artifact
/// directory under INPUT.
///
/// Each binary's .kpack/ directory sits at its "kpack root": the deepest
/// --prefix-dir holding it; else a Debian multiarch directory
/// (usr/lib/x86_64-linux-gnu); else the parent of its deepest lib/, lib64/,
/// bin/, sbin/ or libexec/ directory; else its own directory. For artifacts
/// it is the stage prefix.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Install tree, artifact directory, or (with --batch) a directory of
    /// artifact directories. Never modified.
    pub input: PathBuf,
    /// Output directory (created if missing; must not be inside INPUT; the
    /// names written must not exist yet).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Package spec (TOML): device groups, kernel-database rules
    /// [default: the built-in GPU family table].
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Tree: one component name for every binary [default: each file's name
    /// up to its first '.']. Artifact: <name>_<component> [default: from
    /// the directory name].
    #[arg(long)]
    pub component: Option<String>,
    /// Split every artifact directory under INPUT.
    #[arg(long)]
    pub batch: bool,
    /// Tree: a directory (relative to INPUT) that is a kpack root; may be
    /// repeated.
    #[arg(long = "prefix-dir", value_name = "DIR")]
    pub prefix_dirs: Vec<PathBuf>,
    /// Worker threads [default: one per core].
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Archive compression.
    #[arg(long, value_enum, default_value_t = Compression::Zstd)]
    pub compression: Compression,
    /// zstd level.
    #[arg(long, default_value_t = DEFAULT_ZSTD_LEVEL)]
    pub level: i32,
    /// Print what would be done, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report (or plan) as JSON.
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
    let prefix_dirs = args
        .prefix_dirs
        .iter()
        .map(|p| {
            p.to_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("--prefix-dir {}: not valid UTF-8", p.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let opts = SplitOptions {
        spec,
        component: args.component.clone(),
        prefix_dirs,
        compression: match args.compression {
            Compression::Zstd => CompressionScheme::ZstdPerKernel,
            Compression::None => CompressionScheme::None,
        },
        zstd_level: args.level,
        jobs: args.jobs,
    };
    if !args.input.exists() {
        anyhow::bail!("{}: no such file or directory", args.input.display());
    }
    let artifact = !args.batch && is_artifact_dir(&args.input);
    if args.dry_run {
        let plans: Vec<SplitPlan> = if args.batch {
            let (inputs, skipped) = batch_inputs(&args.input)?;
            for s in skipped {
                eprintln!("note: {s}");
            }
            inputs
                .iter()
                .map(|i| plan_artifact(i, &opts))
                .collect::<Result<_, _>>()?
        } else if artifact {
            vec![plan_artifact(&args.input, &opts)?]
        } else {
            vec![plan_tree(&args.input, &opts)?]
        };
        let text = if args.json {
            serde_json::to_string_pretty(&plans)? + "\n"
        } else {
            plans.iter().map(ToString::to_string).collect::<String>()
        };
        super::print_stdout(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = if args.batch {
        split_batch(&args.input, &args.out, &opts)?
    } else if artifact {
        split_artifact(&args.input, &args.out, &opts)?
    } else {
        split_tree(&args.input, &args.out, &opts)?
    };
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

fn render(r: &SplitReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let code_objects: usize = r.binaries.iter().map(|b| b.code_objects).sum();
    let _ = writeln!(
        out,
        "{} -> {}: {} binaries split ({code_objects} code objects), {} archives, {} database files, \
         {} files copied, {} symlinks, {} hard links",
        r.input.display(),
        r.output.display(),
        r.binaries.len(),
        r.archives.len(),
        r.databases.len(),
        r.copied,
        r.symlinks,
        r.hard_links
    );
    for o in &r.outputs {
        let _ = writeln!(out, "  {:<24} {:>6} files {:>14} bytes", o.name, o.files, o.bytes);
    }
    out
}
