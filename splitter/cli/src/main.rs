//! `rocm-kpack`: the splitter's command line. A thin dispatcher: parse the
//! arguments, run the command, turn its result into an exit code, and print
//! an error chain once (conventions shared with `rocm-kpack-fetch` come from
//! `rocm_kpack_cli`).

mod cli;
mod cmd;

use std::process::ExitCode;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2 (ExitStatus::Usage);
    // parse also records the invocation (--json, -q) and starts logging.
    let cli: cli::Cli = rocm_kpack_cli::parse();
    rocm_kpack_cli::finish("rocm-kpack", cmd::run(cli.command))
}
