//! The `rocm-kpack-fetch` binary: parse, set up logging, run, map the result
//! to an exit code. Errors are printed here, once, with their causes.

use std::process::ExitCode;

use clap::Parser;
use rocm_kpack_fetch::{cli::Cli, ExitStatus};

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2.
    let cli = Cli::parse();
    init_tracing();
    match rocm_kpack_fetch::run(cli) {
        Ok(status) => status.into(),
        Err(err) => {
            eprintln!("rocm-kpack-fetch: error: {err:#}");
            ExitStatus::for_error(&err).into()
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings only).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
