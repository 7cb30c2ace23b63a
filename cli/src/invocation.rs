//! What this process was asked to do, as far as the shared conventions
//! need to know: the program's name, the subcommand, whether it prints
//! `--json`, whether it has an `--out` option, and the verbosity. Recorded
//! once by [`parse`]; read by [`crate::finish`] (the error object and the
//! hint), the log format and the output helpers.

use std::ffi::OsString;
use std::sync::OnceLock;

use crate::json::ErrorDocument;
use crate::Verbosity;

/// The process's invocation ([`invocation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// The program's name (`rocm-kpack`).
    pub program: String,
    /// The subcommand path (`["spec", "show"]`).
    pub subcommand: Vec<String>,
    /// `--json` was given to the subcommand.
    pub json: bool,
    /// The subcommand's output option (`--out`), when it has one.
    pub out_option: Option<String>,
    /// `-v`/`-q`.
    pub verbosity: Verbosity,
}

static INVOCATION: OnceLock<Invocation> = OnceLock::new();

/// The recorded invocation: what [`parse`] saw, or (for a program that
/// parses its command line itself) the program name from `argv[0]` and
/// the verbosity [`crate::init_tracing`] was given.
pub fn invocation() -> Invocation {
    INVOCATION.get().cloned().unwrap_or_else(|| Invocation {
        program: program_from_argv0(),
        ..Invocation::default()
    })
}

pub(crate) fn record(invocation: Invocation) {
    let _ = INVOCATION.set(invocation);
}

fn program_from_argv0() -> String {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// The `-v`/`-q` argument group's value in `matches` (flattened at the top
/// of the command, global, so any level has it).
fn verbosity_of(matches: &clap::ArgMatches) -> Verbosity {
    Verbosity {
        verbose: matches
            .try_get_one::<u8>("verbose")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(0),
        quiet: matches
            .try_get_one::<bool>("quiet")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false),
    }
}

/// Parses the command line of `C` as `C::parse()` does, and records the
/// [`Invocation`] (then [`crate::init_tracing`] with its verbosity). A
/// usage error exits 2 with clap's message, as always; with `--json` on
/// the line it also prints the error object on stdout.
pub fn parse<C: clap::Parser>() -> C {
    parse_from(std::env::args_os())
}

/// [`parse`] of `args` (the first is the program name).
pub fn parse_from<C: clap::Parser>(args: impl IntoIterator<Item = OsString>) -> C {
    let args: Vec<OsString> = args.into_iter().collect();
    let mut command = crate::docs::with_footers(C::command());
    let program = command.get_name().to_owned();
    command.build();
    let parsed = command
        .clone()
        .try_get_matches_from(&args)
        .and_then(|mut m| {
            let invocation = describe(&command, &m, program.clone());
            C::from_arg_matches_mut(&mut m).map(|c| (c, invocation))
        });
    match parsed {
        Ok((cli, invocation)) => {
            let verbosity = invocation.verbosity;
            record(invocation);
            crate::init_tracing(verbosity);
            cli
        }
        Err(e) => {
            if e.use_stderr() && args.iter().skip(1).any(|a| a == "--json") {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                let doc = ErrorDocument {
                    error: first.trim_start_matches("error: ").to_owned(),
                    exit_code: u8::try_from(e.exit_code()).unwrap_or(2),
                    hint: Some(format!("`{program} --help` shows the usage")),
                };
                if let Ok(text) = crate::json_document(&doc) {
                    let _ = crate::print_stdout(&text);
                }
            }
            e.exit()
        }
    }
}

/// The invocation `matches` of `command` stand for.
fn describe(command: &clap::Command, matches: &clap::ArgMatches, program: String) -> Invocation {
    let mut level = matches;
    let mut cmd = command;
    let mut subcommand = Vec::new();
    let mut json = flag(level, "json");
    while let Some((name, sub)) = level.subcommand() {
        subcommand.push(name.to_owned());
        level = sub;
        json |= flag(level, "json");
        if let Some(c) = cmd.find_subcommand(name) {
            cmd = c;
        }
    }
    let out_option = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some("out"))
        .map(|_| "--out".to_owned());
    Invocation {
        program,
        subcommand,
        json,
        out_option,
        verbosity: verbosity_of(level),
    }
}

fn flag(matches: &clap::ArgMatches, id: &str) -> bool {
    matches
        .try_get_one::<bool>(id)
        .ok()
        .flatten()
        .copied()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    #[command(name = "prog")]
    struct Cli {
        #[command(flatten)]
        verbosity: Verbosity,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Run {
            #[command(flatten)]
            json: crate::JsonArg,
            #[arg(long)]
            out: Option<String>,
        },
    }

    #[test]
    fn the_invocation_names_the_subcommand_json_and_out() {
        let _cli: Cli = parse_from(["prog", "-v", "run", "--json"].map(OsString::from));
        let i = invocation();
        assert_eq!(i.program, "prog");
        assert_eq!(i.subcommand, ["run"]);
        assert!(i.json);
        assert_eq!(i.out_option.as_deref(), Some("--out"));
        assert_eq!(i.verbosity.verbose, 1);
    }
}
