//! One module per subcommand: its `Args` and its `run`.

pub mod demo;
pub mod extract;
pub mod inspect;
pub mod package;
pub mod publish;
pub mod recombine;
pub mod spec;
pub mod split;
pub mod split_binary;
pub mod split_package;
pub mod verify;

use std::process::ExitCode;

use crate::cli::Command;

/// Exit code for a failed command (clap uses 2 for usage errors).
pub const EXIT_FAILURE: u8 = 1;

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Extract(args) => extract::run(args),
        Command::SplitBinary(args) => split_binary::run(args),
        Command::Split(args) => split::run(args),
        Command::Recombine(args) => recombine::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Spec(args) => spec::run(args),
        Command::Package(args) => package::run(args),
        Command::Publish(args) => publish::run(args),
        Command::SplitPackage(args) => split_package::run(args),
        Command::Demo(args) => demo::run(args),
    }
}

/// Writes `bytes` to `dest` atomically (temp file in the same directory,
/// then rename), so no partial file is ever visible.
pub fn write_atomically(dest: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    rocm_kpack_splitter::split_binary::PendingFile::write(dest, bytes, None)?.commit()?;
    Ok(())
}

/// Writes a command's output to stdout. A closed pipe (`| head`) is not a
/// failure of the command, so it is not reported.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
