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
    // clap prints usage errors itself and exits with 2 (ExitStatus::Usage),
    // except for `trigger`, which a package transaction runs: one line, 0.
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && is_trigger(std::env::args_os().skip(1)) => {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            let _ = rocm_kpack_cli::print_stdout(&format!(
                "rocm-kpack-fetch: trigger: {first}; doing nothing (`rocm-kpack-fetch trigger --help` shows the usage)\n"
            ));
            return ExitCode::SUCCESS;
        }
        Err(e) => e.exit(),
    };
    rocm_kpack_cli::init_tracing(cli.verbosity);
    rocm_kpack_cli::finish("rocm-kpack-fetch", cmd::run(cli.command, cli.verbosity))
}

/// Whether the subcommand of these arguments (after global flags) is
/// `trigger`.
fn is_trigger(mut args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "trigger")
}
