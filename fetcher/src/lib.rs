//! `rocm-kpack-fetch`: detect the local AMD GPUs and fetch, verify and
//! install the device code they need. The binary (`main.rs`) only parses
//! arguments, sets up logging and turns [`run`]'s result into an exit code;
//! each subcommand lives in [`cmd`] (and `detect`), thin over the library
//! modules, which follow the data flow:
//!
//! [`resolve`] (installed manifests -> needed archives) -> [`plan`] (an
//! [`plan::InstallPlan`], printable) -> [`download`] over [`client`] (stream,
//! hash, resume, retry) -> [`install`] (lock, temp, fsync, rename) and
//! [`state`] (what was installed and why). [`sources`] says where archives
//! come from; [`progress`] reports transfers. [`pm`] is the alternative to
//! all that: install device packages with apt, dnf or pip.

pub mod cli;
pub mod client;
pub mod cmd;
pub mod detect;
pub mod download;
pub mod execute;
mod exit;
pub mod install;
pub mod plan;
pub mod pm;
pub mod progress;
pub mod resolve;
pub mod sources;
pub mod state;

pub use exit::{ExitStatus, UsageError};

/// Runs one parsed command line. `Ok` carries the exit status of a command
/// that completed (it may still be "no GPU" or "problems found"); `Err` is
/// printed once by the caller, and [`ExitStatus::for_error`] picks its exit
/// code.
pub fn run(cli: cli::Cli) -> anyhow::Result<ExitStatus> {
    match cli.command {
        cli::Command::Detect(args) => detect::run(&args),
        cli::Command::Install(args) => cmd::install::run(&args),
        cli::Command::Status(args) => cmd::status::run(&args),
        cli::Command::List(args) => cmd::list::run(&args),
        cli::Command::Verify(args) => cmd::verify::run(&args),
        cli::Command::Remove(args) => cmd::remove::run(&args),
        cli::Command::Gc(args) => cmd::gc::run(&args),
        cli::Command::Doctor(args) => cmd::doctor::run(&args),
    }
}
