//! `rocm-kpack split-binary FILE --out DIR [--component NAME] [--spec SPEC]
//! [--compression zstd|none] [--level N] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_format::archive::{CompressionScheme, DEFAULT_ZSTD_LEVEL};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split_binary::{
    split_binary, SplitBinaryOptions, SplitBinaryReport, SplitOutcome,
};

/// Archive compression on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// zstd, one frame per code object (`zstd-per-kernel`).
    Zstd,
    /// Stored as is (`none`).
    None,
}

/// Split one fat binary: write the host-only binary to DIR/<file name>,
/// its device code to DIR/.kpack/<component>_<group>.kpack (one archive per
/// device group: GPU families by default) and DIR/.kpack/<component>.kpm.
/// A binary without device code, or one already split, is copied unchanged.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fat binary (executable or shared library). Never modified.
    pub file: PathBuf,
    /// Output directory (created if missing; must not hold the input itself).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Component name: archive prefix and group name [default: the file
    /// name up to its first '.'].
    #[arg(long)]
    pub component: Option<String>,
    /// Package spec (TOML) choosing the device groups [default: GPU families].
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Archive compression.
    #[arg(long, value_enum, default_value_t = Compression::Zstd)]
    pub compression: Compression,
    /// zstd level.
    #[arg(long, default_value_t = DEFAULT_ZSTD_LEVEL)]
    pub level: i32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let spec = match &args.spec {
        Some(p) => Spec::from_file(p)?,
        None => Spec::default_families(),
    };
    let created = !args.out.exists();
    if created {
        std::fs::create_dir_all(&args.out)?;
    }
    let opts = SplitBinaryOptions {
        component: args.component.clone(),
        spec,
        compression: match args.compression {
            Compression::Zstd => CompressionScheme::ZstdPerKernel,
            Compression::None => CompressionScheme::None,
        },
        zstd_level: args.level,
    };
    let report = match split_binary(&args.file, &args.out, &opts) {
        Ok(r) => r,
        Err(e) => {
            if created {
                // Leave nothing behind: the directory is empty on failure.
                let _ = std::fs::remove_dir(&args.out);
            }
            return Err(e.into());
        }
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render(&report)
    };
    super::print_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn render(r: &SplitBinaryReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match r.outcome {
        SplitOutcome::Split => {
            let _ = writeln!(
                out,
                "{}: split {} bundle(s), {} code object(s), {} wrapper(s)\n  host-only: {} ({} -> {} bytes)",
                r.input.display(),
                r.bundles,
                r.code_objects,
                r.wrappers.len(),
                r.output.display(),
                r.input_size,
                r.output_size
            );
            for a in &r.archives {
                let _ = writeln!(
                    out,
                    "  archive: {} ({} entries, {} bytes) arches: {}",
                    a.path.display(),
                    a.entries,
                    a.size,
                    a.architectures.join(" ")
                );
            }
            if let Some(m) = &r.manifest {
                let _ = writeln!(out, "  manifest: {}", m.display());
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
                "{}: no device code (.hip_fatbin); copied unchanged to {}",
                r.input.display(),
                r.output.display()
            );
        }
    }
    out
}
