//! `rocm-kpack extract ARCHIVE --binary KEY --arch ARCH --out FILE`.

use std::path::PathBuf;
use anyhow::Context as _;
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_format::archive::Archive;

/// Write one code object out of a `.kpack` archive. KEY is a TOC binary key
/// such as `lib/librocrand.so.1.1#0` (see `rocm-kpack inspect ARCHIVE`), ARCH a
/// TOC arch key such as `gfx90a:xnack-`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The .kpack archive.
    pub archive: PathBuf,
    /// TOC binary key, `<kernel_name>#<co_index>`.
    #[arg(long)]
    pub binary: String,
    /// Architecture key exactly as in the archive.
    #[arg(long)]
    pub arch: String,
    /// Where to write the code object (`-` for stdout).
    // `--output` was its name before `--out` everywhere; kept, hidden, for scripts.
    #[arg(short = 'o', long = "out", alias = "output", value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let archive = Archive::open(&args.archive)?;
    let data = archive.kernel(&args.binary, &args.arch).with_context(|| {
        format!(
            "{}: binaries: {}; arches: {}",
            args.archive.display(),
            archive.binaries().join(", "),
            archive.gfx_arches().join(", ")
        )
    })?;
    if args.out.as_os_str() == "-" {
        use std::io::Write as _;
        std::io::stdout().lock().write_all(&data)?;
    } else {
        crate::cmd::write_atomically(&args.out, &data)?;
        eprintln!(
            "wrote {} bytes ({} for {}) to {}",
            data.len(),
            args.binary,
            args.arch,
            args.out.display()
        );
    }
    Ok(ExitStatus::Success)
}
