//! `rocm-kpack split INPUT --out DIR [--spec SPEC] [--component NAME]
//! [--jobs N] [--memory SIZE] [--batch] [--prefix-dir DIR]... [--compression zstd|none]
//! [--level N] [--dry-run] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_splitter::split::request::{split, SplitInput, SplitOutcome, SplitRequest};
use rocm_kpack_splitter::split::tree::{SplitOptions, SplitReport};

use crate::cli::{ArchiveCompressionArgs, JobsArg, OutArg, SpecArg};

/// Split an install tree or build artifact directories.
///
/// An install tree (e.g. an /opt/rocm layout) becomes DIR/generic/ (host-only
/// binaries, their .kpack/<component>.kpm manifests, every other file) and
/// DIR/<group>/ per device group (.kpack/<component>_<processor>.kpack, one
/// archive per processor of the group, and the group's kernel database
/// files), plus DIR/<generic-isa>/ for code built for a generic ISA
/// (.kpack/<component>_gfx11-generic.kpack); extracting generic/ and any
/// device trees over each other gives a working install for their GPUs.
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
///
/// Archives are compressed at zstd level 19 (the release level) unless
/// --level says otherwise.
///
/// The names written below --out must not exist yet.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Install tree, artifact directory, or (with --batch) a directory of
    /// artifact directories. Never modified.
    pub input: PathBuf,
    #[command(flatten)]
    pub out: OutArg,
    #[command(flatten)]
    pub spec: SpecArg,
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
    #[command(flatten)]
    pub jobs: JobsArg,
    #[command(flatten)]
    pub compression: ArchiveCompressionArgs,
    /// Print what would be done (the plan), write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let prefix_dirs = args
        .prefix_dirs
        .iter()
        .map(|p| {
            p.to_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("--prefix-dir {}: not valid UTF-8", p.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let progress = super::progress::CommandProgress::new();
    let request = SplitRequest {
        input: SplitInput::detect(&args.input, args.batch)?,
        out: args.out.dir.clone(),
        options: SplitOptions {
            spec: args.spec.load()?,
            component: args.component.clone(),
            prefix_dirs,
            output: args.compression.output(&args.jobs, &args.out)?,
            progress: progress.handle(),
        },
        dry_run: args.dry_run,
    };
    let outcome = split(&request);
    let summary = progress.finish();
    match outcome? {
        SplitOutcome::Planned { plans, notes } => {
            for note in notes {
                eprintln!("note: {note}");
            }
            args.json
                .print(&plans, || plans.iter().map(ToString::to_string).collect())?;
        }
        SplitOutcome::Split(report) => {
            // Warnings go to stderr once (also in the JSON report).
            for w in &report.warnings {
                eprintln!("rocm-kpack: warning: {w}");
            }
            args.json.print(&report, || render(&report) + &summary)?;
        }
    }
    Ok(ExitStatus::Success)
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
        let _ = writeln!(
            out,
            "  {:<24} {:>6} files {:>12}",
            o.name,
            o.files,
            rocm_kpack_cli::iec_size(o.bytes)
        );
    }
    // What a split changed beyond the device code (a signature removed).
    for b in &r.binaries {
        for note in &b.notes {
            let _ = writeln!(out, "  note: {}: {note}", b.path);
        }
    }
    out
}
