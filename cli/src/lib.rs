//! Conventions shared by the two command lines, `rocm-kpack` (the splitter)
//! and `rocm-kpack-fetch`, so that they behave alike:
//!
//! - one exit-code table, [`ExitStatus`] (with [`UsageError`] for exit 2),
//!   shown by each program's `--help`;
//! - the command line parsed once by [`parse`], which records the
//!   [`Invocation`] (subcommand, `--json`, `--out`, verbosity) the rest
//!   reads;
//! - argument groups both declare the same way ([`JsonArg`], and
//!   [`Verbosity`]: `-v`/`-q` on every subcommand, the cargo way: `-q`
//!   prints nothing but errors and the `--json` document, `-v` adds
//!   detail, `-vv` debug logging);
//! - `--json` documents that start with `"schema"` ([`JSON_SCHEMA`],
//!   docs/cli-json.md), and on failure the error object
//!   ([`ErrorDocument`]: `error`, `exit_code`, `hint`);
//! - stdout output for which a closed pipe (`| head`) is not a failure
//!   ([`print_stdout`], [`print_json`]);
//! - messages on stderr in one style, `PROGRAM: error:`, `PROGRAM:
//!   warning:` (`tracing::warn!`), `PROGRAM: note:` ([`note`]), `PROGRAM:
//!   hint:` ([`Hint`], and advice read from the error, such as the file
//!   system that is full), with [`init_tracing`] and [`finish`] (print an
//!   error chain once, pick the exit code);
//! - help text in one style: the exit codes, then 1 to 3 examples, last
//!   ([`help_footer`]);
//! - `--target` values checked against the family table ([`parse_target`]),
//!   output directories that are not plain files ([`out_dir`]), sizes in
//!   one unit style ([`iec_size`]) and counted nouns ([`plural`]);
//! - `completions SHELL` and `man --out DIR` ([`DocsCommand`]), generated
//!   from each program's own `clap::Command`.
//!
//! Argument groups only one program uses live with that program.

mod docs;
mod exit;
mod help;
mod hint;
mod invocation;
mod json;
mod log;
mod target_arg;
mod units;

use std::io::{self, IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;

pub use docs::{completions, man_pages, write_man_pages, CompletionsArgs, DocsCommand, ManArgs};
pub use exit::{ExitStatus, UsageError};
pub use help::{examples, help_footer};
pub use hint::{hint_for, Hint};
pub use invocation::{invocation, parse, parse_from, Invocation};
pub use json::{json_document, print_json_document, ErrorDocument, JSON_SCHEMA};
pub use log::init_tracing;
pub use target_arg::{existing_dir, out_dir, parse_target};
pub use units::{iec_size, plural};

/// `--json`: print the command's result as a JSON document instead of text.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct JsonArg {
    /// Print one JSON object instead of text (docs/cli-json.md lists its
    /// fields); messages and progress stay on stderr.
    #[arg(long = "json", id = "json")]
    pub enabled: bool,
}

impl JsonArg {
    /// Prints `value` as a JSON document ([`print_json_document`]), or
    /// `text()`, on stdout: for commands whose output is what was asked
    /// for (`inspect`, `spec show`), which `-q` does not silence.
    pub fn document<T: Serialize + ?Sized>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        self.either(|| print_json_document(value), text)
    }

    /// As [`JsonArg::document`], for the report of a command that did
    /// something (split, package, publish): `-q` drops the text, never the
    /// JSON document.
    pub fn report<T: Serialize + ?Sized>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if !self.enabled && quiet() {
            return Ok(());
        }
        self.document(value, text)
    }

    /// Prints `value` as plain JSON ([`print_json`], no `schema`), or
    /// `text()`: the output of a command whose JSON is not a versioned
    /// document yet.
    pub fn print<T: Serialize + ?Sized>(
        self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        self.either(|| print_json(value), text)
    }

    fn either(
        self,
        json: impl FnOnce() -> anyhow::Result<()>,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if self.enabled {
            json()
        } else {
            print_stdout(&text())
        }
    }
}

/// Writes a command's output to stdout and flushes it. A closed pipe
/// (`| head`) is not a failure of the command, so it is not reported.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    write_stdout(text.as_bytes())
}

/// [`print_stdout`] for bytes (a code object written to `-`).
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
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

/// Prints `value` as pretty JSON with a final newline ([`print_stdout`]),
/// as it is: [`print_json_document`] is the `--json` document.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value).context("writing JSON")?;
    print_stdout(&(json + "\n"))
}

/// `-v/--verbose` (repeatable) and `-q/--quiet`, global: accepted before
/// or after any subcommand. Flatten into the top-level parser; [`parse`]
/// records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args)]
pub struct Verbosity {
    /// More output: -v adds detail, -vv debug messages.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Print nothing but errors (and the --json document).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

impl Verbosity {
    /// The log filter without `RUST_LOG`: errors with `-q`, warnings by
    /// default, info (what is being done) with `-v`, debug with `-vv` or
    /// more.
    pub fn default_filter(self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            (false, 0) => "warn",
            (false, 1) => "info",
            (false, _) => "debug",
        }
    }
}

/// The `Environment:` help paragraph line for `RUST_LOG`, which each
/// program's top-level `--help` shows once (not every `-v` line).
pub const RUST_LOG_HELP: &str =
    "  RUST_LOG                  log filter for stderr, over -v/-q (e.g. debug,\n                            rocm_kpack_splitter=trace)";

/// Whether `-q` was given: progress bars, summaries, notes and warnings
/// stay off.
pub fn quiet() -> bool {
    log::verbosity().quiet
}

/// How many `-v` were given.
pub fn verbose() -> u8 {
    log::verbosity().verbose
}

/// Whether progress bars may be drawn: stderr is a terminal and not `-q`.
pub fn progress_bars() -> bool {
    io::stderr().is_terminal() && !quiet()
}

/// Whether stderr output may carry ANSI colours: stderr is a terminal and
/// `NO_COLOR` is unset or empty (<https://no-color.org>).
pub fn stderr_colors() -> bool {
    io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A warning about the result that even a quiet run must see (a
/// publication its clients will refuse), `PROGRAM: warning: ...` as
/// `tracing::warn!` prints one, but with `-q` too.
pub fn warning(text: &str) {
    eprintln!("{}: warning: {text}", invocation().program);
}

/// A remark for the user on stderr, `PROGRAM: note: ...`; not with `-q`.
pub fn note(text: &str) {
    if !quiet() {
        eprintln!("{}: note: {text}", invocation().program);
    }
}

/// The end of `main`: a command's status becomes the exit code; an error
/// is printed once on stderr as `PROGRAM: error: ` and its chain of causes,
/// then `PROGRAM: hint: ` when there is advice ([`hint_for`]), and with
/// `--json` as the error object on stdout ([`ErrorDocument`]);
/// [`ExitStatus::for_error`] picks its exit code.
pub fn finish(program: &str, result: anyhow::Result<ExitStatus>) -> ExitCode {
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            let status = ExitStatus::for_error(&err);
            let invocation = invocation();
            let line = error_chain(&err);
            let hint = hint_for(&err, invocation.out_option.as_deref());
            eprintln!("{program}: error: {line}");
            if let Some(hint) = &hint {
                eprintln!("{program}: hint: {hint}");
            }
            if invocation.json {
                let doc = ErrorDocument {
                    error: line,
                    exit_code: status.code(),
                    hint,
                };
                if let Ok(text) = json_document(&doc) {
                    let _ = print_stdout(&text);
                }
            }
            status.into()
        }
    }
}

/// An error and its causes on one line, `a: b: c`, each cause once: a
/// cause whose text its parent already shows (an I/O error that both
/// prints and returns its source) is not repeated.
pub fn error_chain(err: &anyhow::Error) -> String {
    join_causes(err.chain())
}

/// [`error_chain`] for any error and its `source()` chain.
pub fn std_error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    join_causes(std::iter::successors(Some(err), |e| e.source()))
}

fn join_causes<'a>(causes: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut line = String::new();
    for cause in causes {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let shown = format!("cannot open /x: {io}");
        let err = anyhow::Error::new(io)
            .context(shown)
            .context("reading input");
        assert_eq!(
            super::error_chain(&err),
            "reading input: cannot open /x: entity not found"
        );
    }

    use super::Verbosity;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        verbosity: Verbosity,
        #[command(subcommand)]
        command: Option<Sub>,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Run,
    }

    fn filter(args: &[&str]) -> &'static str {
        Cli::try_parse_from(args)
            .expect("parse")
            .verbosity
            .default_filter()
    }

    #[test]
    fn verbosity_picks_the_log_level_anywhere_on_the_line() {
        assert_eq!(filter(&["p"]), "warn");
        assert_eq!(filter(&["p", "-q"]), "error");
        assert_eq!(filter(&["p", "run", "--quiet"]), "error");
        assert_eq!(filter(&["p", "-v", "run"]), "info");
        assert_eq!(filter(&["p", "run", "-vv"]), "debug");
        assert_eq!(filter(&["p", "-v", "run", "-vv"]), "debug");
        assert!(Cli::try_parse_from(["p", "-q", "-v"]).is_err());
    }
}
