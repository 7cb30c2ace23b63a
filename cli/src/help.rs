//! The end of every subcommand's `--help`, in one style: the exit codes it
//! can end with, then 1 to 3 examples, last, where a reader looks for
//! them (and `man` shows them as the EXAMPLES section).

use std::fmt::Write as _;

use crate::ExitStatus;

/// An `Examples:` paragraph: each example is what it does, then the
/// command line, indented under it.
pub fn examples(items: &[(&str, &str)]) -> String {
    let mut out = String::from("Examples:");
    for (what, command) in items {
        let _ = write!(out, "\n  {what}\n      {command}");
    }
    out
}

/// A subcommand's help epilogue: [`ExitStatus::summary`] of `statuses`,
/// then [`examples`].
pub fn help_footer(program: &str, statuses: &[ExitStatus], items: &[(&str, &str)]) -> String {
    format!(
        "{}\n\n{}",
        ExitStatus::summary(program, statuses),
        examples(items)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_then_examples() {
        let f = help_footer(
            "p",
            &[ExitStatus::Success],
            &[("Do a thing:", "p thing --out o")],
        );
        assert_eq!(
            f,
            "Exit status:\n  0  success\n  (`p --help` says when each occurs)\n\n\
             Examples:\n  Do a thing:\n      p thing --out o"
        );
    }
}
