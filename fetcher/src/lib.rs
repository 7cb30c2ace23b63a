//! `rocm-kpack-fetch`: detect the local AMD GPUs and fetch, verify and
//! install the device code they need. The binary (`main.rs`) only parses
//! arguments, sets up logging and turns [`run`]'s result into an exit code;
//! each subcommand lives in its own module, thin over the library crates.

pub mod cli;
pub mod detect;
mod exit;

pub use exit::{ExitStatus, UsageError};

/// Runs one parsed command line. `Ok` carries the exit status of a command
/// that completed (it may still be "no GPU"); `Err` is printed once by the
/// caller, and [`ExitStatus::for_error`] picks its exit code.
pub fn run(cli: cli::Cli) -> anyhow::Result<ExitStatus> {
    match cli.command {
        cli::Command::Detect(args) => detect::run(&args),
    }
}
