//! `rocm-kpack`: the splitter's command line. A thin dispatcher: parse the
//! arguments, run the command, turn its result into an exit code, and print
//! an error chain once.

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(cli.verbose);
    match cmd::run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("rocm-kpack: error: {err:#}");
            ExitCode::from(cmd::EXIT_FAILURE)
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
