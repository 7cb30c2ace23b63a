//! One module per subcommand: its `Args` and its `run`.

pub mod demo;
pub mod extract;
pub mod inspect;
pub mod package;
pub mod progress;
pub mod publish;
pub mod recombine;
pub mod repair_phdr;
pub mod spec;
pub mod split;
pub mod split_binary;
pub mod split_package;
pub mod verify;

use rocm_kpack_cli::ExitStatus;

use crate::cli::Command;

/// Runs one subcommand. `Ok` carries the status of a command that
/// completed (`verify` may still have found problems); an `Err` is printed
/// once by `main`.
pub fn run(command: Command) -> anyhow::Result<ExitStatus> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Extract(args) => extract::run(args),
        Command::SplitBinary(args) => split_binary::run(args),
        Command::Split(args) => split::run(args),
        Command::Recombine(args) => recombine::run(args),
        Command::Verify(args) => verify::run(args),
        Command::RepairPhdr(args) => repair_phdr::run(args),
        Command::Spec(args) => spec::run(args),
        Command::Package(args) => package::run(args),
        Command::Publish(args) => publish::run(args),
        Command::SplitPackage(args) => split_package::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Docs(docs) => docs.run(<crate::cli::Cli as clap::CommandFactory>::command()),
    }
}
