//! `rocm-kpack split INPUT --out DIR [--spec SPEC | --target T,...] [--component NAME]
//! [--jobs N] [--memory SIZE] [--batch] [--prefix-dir DIR]... [--compression zstd|none]
//! [--level N] [--dry-run] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{iec_size, plural, ExitStatus, JsonArg};
use rocm_kpack_format::layout::names::{self, NameKind};
use rocm_kpack_splitter::split::engine::{SplitOptions, SplitReport};
use rocm_kpack_splitter::split::plan::SplitPlan;
use rocm_kpack_splitter::split::request::{split, RequestOutcome, SplitInput, SplitRequest};
use serde::Serialize;

use crate::cli::{ArchiveCompressionArgs, JobsArg, OutArg, SpecOrTargetsArg};

/// Split an install tree or build artifact directories.
///
/// An install tree (e.g. an /opt/rocm layout) becomes DIR/generic/ (host-only
/// binaries, their .kpack/<component>.kpm manifests, every other file) and
/// DIR/<group>/ per device group, by default one per GPU target
/// (.kpack/<component>_<processor>.kpack, one
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
    pub spec: SpecOrTargetsArg,
    /// Tree: one component name for every binary [default: each file's name
    /// up to its first '.']. Artifact: <name>_<component> [default: from
    /// the directory name].
    #[arg(long, value_name = "NAME", value_parser = component_name, conflicts_with = "batch")]
    pub component: Option<String>,
    /// Split every artifact directory under INPUT.
    #[arg(long)]
    pub batch: bool,
    /// Tree: a directory (relative to INPUT) that is a kpack root; may be
    /// repeated.
    #[arg(long = "prefix-dir", value_name = "DIR", value_parser = prefix_dir)]
    pub prefix_dirs: Vec<String>,
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

/// `--component NAME`: a component name (it names archives and manifests).
pub(crate) fn component_name(text: &str) -> Result<String, String> {
    names::check(NameKind::Component, text)
        .map(|()| text.to_owned())
        .map_err(|e| e.to_string())
}

/// `--prefix-dir DIR`: a relative path inside the input.
fn prefix_dir(text: &str) -> Result<String, String> {
    let dir = text.trim_end_matches('/');
    names::check(NameKind::MemberPath, dir)
        .map(|()| dir.to_owned())
        .map_err(|e| format!("{e} (a directory relative to INPUT)"))
}

/// `--dry-run --json`: the plan of every input, and the notes.
#[derive(Serialize)]
struct Planned<'a> {
    plans: &'a [SplitPlan],
    notes: &'a [String],
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let progress = super::progress::CommandProgress::new();
    let request = SplitRequest {
        input: SplitInput::detect(&args.input, args.batch)?,
        out: args.out.dir.clone(),
        options: SplitOptions {
            spec: args.spec.load()?,
            component: args.component.clone(),
            prefix_dirs: args.prefix_dirs.clone(),
            output: args.compression.output(&args.jobs, &args.out),
            progress: progress.handle(),
        },
        dry_run: args.dry_run,
    };
    let outcome = split(&request);
    let summary = progress.finish();
    match outcome.map_err(|e| args.spec.explain(e.into()))? {
        RequestOutcome::Planned { plans, notes } => {
            for note in &notes {
                rocm_kpack_cli::note(note);
            }
            args.json.document(
                &Planned {
                    plans: &plans,
                    notes: &notes,
                },
                || plans.iter().map(ToString::to_string).collect(),
            )?;
        }
        RequestOutcome::Split(report) => {
            // Warnings go to stderr once (also in the JSON report).
            for w in &report.warnings {
                tracing::warn!("{w}");
            }
            args.json.report(&report, || render(&report) + &summary)?;
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
        "{} -> {}: {} split ({}), {}, {}, {} copied, {}, {}",
        r.input.display(),
        r.output.display(),
        plural(r.binaries.len(), "binary", "binaries"),
        plural(code_objects, "code object", "code objects"),
        plural(r.archives.len(), "archive", "archives"),
        plural(r.databases.len(), "database file", "database files"),
        plural(r.copied, "file", "files"),
        plural(r.symlinks, "symlink", "symlinks"),
        plural(r.hard_links, "hard link", "hard links"),
    );
    let width = r.outputs.iter().map(|o| o.name.len()).max().unwrap_or(0);
    let files: Vec<String> = r
        .outputs
        .iter()
        .map(|o| plural(o.files, "file", "files"))
        .collect();
    let files_width = files.iter().map(String::len).max().unwrap_or(0);
    for (o, files) in r.outputs.iter().zip(&files) {
        let _ = writeln!(
            out,
            "  {:<width$}  {files:>files_width$}  {:>10}",
            o.name,
            iec_size(o.bytes)
        );
    }
    // -v: each binary split, and what it held.
    if rocm_kpack_cli::verbose() > 0 {
        for b in &r.binaries {
            let _ = writeln!(
                out,
                "  {}: {} in {}, {} -> {}",
                b.path,
                plural(b.code_objects, "code object", "code objects"),
                plural(b.bundles, "bundle", "bundles"),
                iec_size(b.input_size),
                iec_size(b.output_size)
            );
        }
    }
    // What a split changed beyond the device code (a signature removed).
    for b in &r.binaries {
        for note in &b.notes {
            let _ = writeln!(out, "  note: {}: {note}", b.path);
        }
    }
    out
}
