//! `rocm-kpack demo`: its arguments; the demo itself is a library
//! (splitter/demo), handed the `rocm-kpack` commands it shows, run in this
//! process.

use std::path::PathBuf;

use rocm_kpack_cli::ExitStatus;

/// Run the whole pipeline on built-in inputs, without a GPU: build a fat
/// .deb and a fat wheel from embedded fat binaries, split each into a
/// generic package plus one device package per GPU target, publish apt/pip/kpack-store
/// repositories and serve them on 127.0.0.1, install the generic package
/// into a throwaway root, let rocm-kpack-fetch add the device code for a
/// simulated GPU (a real machine's KFD sysfs tree), load every code object
/// through the runtime, run a split executable through the preload shim on
/// a stand-in HIP runtime, and report bytes saved and sha256 checks.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which machine to simulate: the KFD sysfs tree of a real machine,
    /// whose GPUs give the targets (a machine, not a `--target`: detection
    /// is part of what the demo shows).
    // `--gpu` was its name; kept, hidden, for scripts.
    #[arg(long, alias = "gpu", value_name = "MACHINE", default_value = "rx7900xtx", value_parser = gpu_names())]
    pub machine: String,
    /// Keep the working directory instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// Work in this directory (created, kept) instead of a temporary one.
    #[arg(long, value_name = "DIR", value_parser = rocm_kpack_cli::out_dir)]
    pub dir: Option<PathBuf>,
    /// Debian 12's librocrand1 5.3.3-4 .deb (`apt-get download
    /// librocrand1=5.3.3-4`) to split as well, a real ROCm library beside
    /// the built-in fixtures.
    #[arg(long, value_name = "DEB")]
    pub librocrand: Option<PathBuf>,
}

fn gpu_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        rocm_kpack_demo::machines()
            .map(|(name, about)| clap::builder::PossibleValue::new(name).help(about)),
    )
}

impl From<Args> for rocm_kpack_demo::Options {
    fn from(args: Args) -> Self {
        rocm_kpack_demo::Options {
            machine: args.machine,
            keep: args.keep,
            dir: args.dir,
            librocrand: args.librocrand,
        }
    }
}

/// Runs the demo; its `rocm-kpack` steps go through [`super::run`].
pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let status = rocm_kpack_demo::run(args.into(), &|argv: &[std::ffi::OsString]| {
        let program = std::ffi::OsString::from("rocm-kpack");
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(
            std::iter::once(&program).chain(argv),
        )?;
        super::run(cli.command).map_err(Into::into)
    })?;
    Ok(status)
}
