//! The `rocm-kpack-fetch` binary: parse, set up logging, run, map the result
//! to an exit code. Errors are printed here, once, with their causes. The
//! command line (`cli`, `cmd`) and the progress bars (`progress`) are this
//! binary's; the work is in the `rocm_kpack_fetcher` library (typed errors,
//! turned into `anyhow` here), the conventions shared with `rocm-kpack` in
//! `rocm_kpack_cli`.

mod cli;
mod cmd;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // `trigger` is run by a package transaction: a usage error is one line
    // on stdout and exit 0, so it never fails the transaction.
    if is_trigger(std::env::args_os().skip(1)) {
        if let Err(e) = cli::Cli::try_parse() {
            if e.use_stderr() {
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
        }
    }
    // Everything else as `rocm-kpack`: clap's usage errors exit 2 (with the
    // error object on stdout under --json); parse records the invocation
    // (--json, -q) and starts logging.
    let cli: cli::Cli = rocm_kpack_cli::parse();
    rocm_kpack_cli::finish("rocm-kpack-fetch", cmd::run(cli.command))
}

/// Whether the subcommand of these arguments (after global flags) is
/// `trigger`.
fn is_trigger(mut args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "trigger")
}
