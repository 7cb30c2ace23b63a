//! Conventions shared by the two command lines, `rocm-kpack` (the splitter)
//! and `rocm-kpack-fetch`, so that they behave alike:
//!
//! - one exit-code table, [`ExitStatus`] (with [`UsageError`] for exit 2),
//!   shown by each program's `--help`;
//! - argument groups both declare the same way ([`JsonArg`]);
//! - stdout output for which a closed pipe (`| head`) is not a failure
//!   ([`print_stdout`], [`print_json`]);
//! - logging to stderr ([`init_tracing`]) and the end of `main`
//!   ([`finish`]: print an error chain once, pick the exit code);
//! - `completions SHELL` and `man --out DIR` ([`DocsCommand`]), generated
//!   from each program's own `clap::Command`.
//!
//! Argument groups only one program uses live with that program.

mod docs;
mod exit;

use std::io::{self, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;

pub use docs::{completions, man_pages, write_man_pages, CompletionsArgs, DocsCommand, ManArgs};
pub use exit::{ExitStatus, UsageError};

/// `--json`: print the command's result as JSON instead of text.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct JsonArg {
    /// Print JSON (one object, stable field names) instead of text;
    /// messages and progress stay on stderr.
    #[arg(long = "json", id = "json")]
    pub enabled: bool,
}

impl JsonArg {
    /// Prints `value` as JSON, or `text()`, on stdout ([`print_stdout`]).
    pub fn print<T: Serialize + ?Sized>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if self.enabled {
            print_json(value)
        } else {
            print_stdout(&text())
        }
    }
}

/// Writes a command's output to stdout and flushes it. A closed pipe
/// (`| head`) is not a failure of the command, so it is not reported.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing output"))
        }
        _ => Ok(()),
    }
}

/// `println!` through [`print_stdout`]: a closed pipe is not an error (the
/// line is dropped), any other write error is returned, for `?`.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::print_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints `value` as pretty JSON with a final newline ([`print_stdout`]).
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value).context("writing JSON")?;
    print_stdout(&(json + "\n"))
}

/// Logs to stderr without targets, filtered by `RUST_LOG`, else by
/// `verbose` (the count of `-v`): warnings, then info, then debug.
pub fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_target(false)
        .init();
}

/// The end of `main`: a command's status becomes the exit code; an error
/// is printed once on stderr as `PROGRAM: error: ` and its chain of causes,
/// and [`ExitStatus::for_error`] picks its exit code.
pub fn finish(program: &str, result: anyhow::Result<ExitStatus>) -> ExitCode {
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            eprintln!("{program}: error: {err:#}");
            ExitStatus::for_error(&err).into()
        }
    }
}
