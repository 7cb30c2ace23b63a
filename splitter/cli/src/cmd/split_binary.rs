//! `rocm-kpack split-binary FILE --out DIR [--component NAME] [--spec SPEC]
//! [--jobs N] [--memory SIZE] [--compression zstd|none] [--level N] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{iec_size, plural, ExitStatus, JsonArg};
use rocm_kpack_splitter::split::binary::{
    split_binary, SplitBinaryOptions, SplitBinaryReport, SplitOutcome,
};

use crate::cli::{ArchiveCompressionArgs, JobsArg, OutArg, SpecArg};

/// Split one fat binary: write the host-only binary to DIR/<file name>,
/// its device code to DIR/.kpack/<component>_<processor>.kpack (one archive
/// per processor, e.g. _gfx90a.kpack for gfx90a:xnack+ and gfx90a:xnack-,
/// and one per generic ISA, e.g. _gfx11-generic.kpack) and
/// DIR/.kpack/<component>.kpm. A binary without device code, or one already
/// split, is copied unchanged.
///
/// Archives are compressed at zstd level 3 unless --level says otherwise:
/// fast, for trying things out. `split` writes release outputs at 19.
#[derive(Debug, clap::Args)]
#[command(mut_arg("level", ArchiveCompressionArgs::fast_level))]
pub struct Args {
    /// The fat binary (executable or shared library). Never modified.
    pub file: PathBuf,
    #[command(flatten)]
    pub out: OutArg,
    /// Component name: archive prefix and group name [default: the file
    /// name up to its first '.'].
    #[arg(long, value_name = "NAME", value_parser = super::split::component_name)]
    pub component: Option<String>,
    #[command(flatten)]
    pub spec: SpecArg,
    #[command(flatten)]
    pub jobs: JobsArg,
    #[command(flatten)]
    pub compression: ArchiveCompressionArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let spec = args.spec.load()?;
    let out = &args.out.dir;
    let created = !out.exists();
    if created {
        std::fs::create_dir_all(out)?;
    }
    let opts = SplitBinaryOptions {
        component: args.component.clone(),
        spec,
        output: args.compression.output(&args.jobs, &args.out),
    };
    let report = match split_binary(&args.file, out, &opts) {
        Ok(r) => r,
        Err(e) => {
            if created {
                // Leave nothing behind: the directory is empty on failure.
                let _ = std::fs::remove_dir(out);
            }
            return Err(e.into());
        }
    };
    args.json.report(&report, || render(&report))?;
    Ok(ExitStatus::Success)
}

fn render(r: &SplitBinaryReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match r.outcome {
        SplitOutcome::Split => {
            let _ = writeln!(
                out,
                "{}: split {}, {}, {}\n  host-only: {} ({} -> {})",
                r.input.display(),
                plural(r.bundles, "bundle", "bundles"),
                plural(r.code_objects, "code object", "code objects"),
                plural(r.wrappers.len(), "wrapper", "wrappers"),
                r.output.display(),
                iec_size(r.input_size),
                iec_size(r.output_size)
            );
            for a in &r.archives {
                let _ = writeln!(
                    out,
                    "  archive: {} ({}, {}) arches: {}",
                    a.path.display(),
                    plural(a.entries, "entry", "entries"),
                    iec_size(a.size),
                    a.architectures.join(" ")
                );
            }
            if let Some(m) = &r.manifest {
                let _ = writeln!(out, "  manifest: {}", m.display());
            }
            if let Some(n) = &r.note {
                let _ = writeln!(out, "  note: {n}");
            }
        }
        SplitOutcome::AlreadySplit => {
            let _ = writeln!(
                out,
                "{}: already split ({}); copied unchanged to {}",
                r.input.display(),
                r.note.as_deref().unwrap_or("marker present"),
                r.output.display()
            );
        }
        SplitOutcome::HostOnly => {
            let _ = writeln!(
                out,
                "{}: no device code (no .hip_fatbin, or .hip_fat in a DLL/EXE); copied unchanged to {}",
                r.input.display(),
                r.output.display()
            );
        }
    }
    out
}
