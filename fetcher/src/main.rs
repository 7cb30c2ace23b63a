//! The `rocm-kpack-fetch` binary: parse, set up logging, run, map the result
//! to an exit code. Errors are printed here, once, with their causes. The
//! command line (`cli`, `cmd`) is private to this binary; the work is in the
//! `rocm_kpack_fetch` library, the conventions shared with `rocm-kpack` in
//! `rocm_kpack_cli`.

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2 (ExitStatus::Usage).
    let cli = cli::Cli::parse();
    rocm_kpack_cli::init_tracing(cli.verbosity);
    rocm_kpack_cli::finish("rocm-kpack-fetch", cmd::run(cli.command, cli.verbosity))
}
