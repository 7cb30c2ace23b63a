//! `rocm-kpack extract ARCHIVE --binary KEY --target TARGET --out FILE`.

use anyhow::Context as _;
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_format::archive::Archive;
use rocm_kpack_fs::check_replaceable;
use std::path::PathBuf;

/// Write one code object out of a `.kpack` archive. KEY is a TOC binary key
/// such as `lib/librocrand.so.1.1#0` (see `rocm-kpack inspect ARCHIVE`), ARCH a
/// TOC arch key such as `gfx90a:xnack-`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The .kpack archive.
    pub archive: PathBuf,
    /// TOC binary key, `<kernel_name>#<co_index>`.
    #[arg(long, value_name = "KEY")]
    pub binary: String,
    /// GPU target (arch key) exactly as in the archive, e.g. gfx90a:xnack-.
    // `--arch` was its name before `--target` everywhere; kept, hidden.
    #[arg(long = "target", alias = "arch", value_name = "TARGET", value_parser = arch_key)]
    pub target: String,
    /// Where to write the code object (`-` for stdout).
    // `--output` was its name before `--out` everywhere; kept, hidden, for scripts.
    #[arg(short = 'o', long = "out", alias = "output", value_name = "FILE", value_parser = out_file)]
    pub out: PathBuf,
    /// Replace FILE if it exists (otherwise extract refuses).
    #[arg(long)]
    pub force: bool,
}

/// `--target`: a target id the family table knows, kept as written (the
/// archive's key is matched exactly).
fn arch_key(text: &str) -> Result<String, String> {
    rocm_kpack_pkgspec::targets::check_target(text)
        .map(|_| text.to_owned())
        .map_err(|e| e.to_string())
}

/// `--out FILE`: `-`, or a path that is not a directory.
fn out_file(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if text.is_empty() {
        Err("an empty path".into())
    } else if path.is_dir() {
        Err(format!("{text} is a directory; name the file to write"))
    } else {
        Ok(path)
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let archive = Archive::open(&args.archive)?;
    let data = archive
        .kernel(&args.binary, &args.target)
        .with_context(|| {
            format!(
                "{}: binaries: {}; arches: {}",
                args.archive.display(),
                archive.binaries().join(", "),
                archive.gfx_arches().join(", ")
            )
        })?;
    if args.out.as_os_str() == "-" {
        rocm_kpack_cli::write_stdout(&data)?;
    } else {
        check_replaceable(&args.out, args.force)?;
        rocm_kpack_fs::write_atomically(&args.out, &data, None)?;
        if !rocm_kpack_cli::quiet() {
            eprintln!(
                "wrote {} ({} for {}) to {}",
                rocm_kpack_cli::iec_size(data.len() as u64),
                args.binary,
                args.target,
                args.out.display()
            );
        }
    }
    Ok(ExitStatus::Success)
}
