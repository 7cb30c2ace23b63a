//! The exit-code table of both command lines.

use std::fmt::Write as _;
use std::process::ExitCode;

/// How a run of `rocm-kpack` or `rocm-kpack-fetch` ends: one table for both
/// programs, shown by each program's `--help` ([`ExitStatus::table`]).
///
/// The numbers are an interface (scripts, package hooks, the systemd unit's
/// `SuccessExitStatus=3`): a variant is never renumbered and a number is
/// never reused. A new outcome gets the next free number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExitStatus {
    /// 0: the command did what was asked.
    Success = 0,
    /// 1: the command failed (any error that is not a usage error).
    Failure = 1,
    /// 2: the program was invoked wrongly: a bad option or argument (clap's
    /// own exit code for those), or a [`UsageError`] (an environment
    /// variable's value, an option combination clap cannot check).
    Usage = 2,
    /// 3: no AMD GPU found and no targets given, so there is nothing to do
    /// for (`rocm-kpack-fetch` detect, install, status, gc, prune, doctor,
    /// pip, uv).
    NoGpu = 3,
    /// 4: the command ran and found problems (`rocm-kpack verify`,
    /// `rocm-kpack-fetch` verify, status, doctor, install --strict).
    Problems = 4,
}

impl ExitStatus {
    /// Every status, in numeric order.
    pub const ALL: [ExitStatus; 5] = [
        ExitStatus::Success,
        ExitStatus::Failure,
        ExitStatus::Usage,
        ExitStatus::NoGpu,
        ExitStatus::Problems,
    ];

    /// The numeric process exit code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Short name, as in the help table: `success`, `usage error`, ...
    pub const fn name(self) -> &'static str {
        match self {
            ExitStatus::Success => "success",
            ExitStatus::Failure => "error",
            ExitStatus::Usage => "usage error",
            ExitStatus::NoGpu => "no AMD GPU found",
            ExitStatus::Problems => "problems found",
        }
    }

    /// When it happens: the rest of the table row after the name, as lines
    /// wrapped for an 80-column terminal (the first continues the name's
    /// line; the others are indented under it).
    const fn when(self) -> &'static [&'static str] {
        match self {
            ExitStatus::Success => &[
                "; for rocm-kpack-fetch detect: at least one GPU target",
                "(detected, or given by --target or ROCM_KPACK_ARCH_OVERRIDE)",
            ],
            ExitStatus::Failure => &[
                " (unreadable input, I/O failure, an archive that could not be",
                "fetched, verified or installed, ...)",
            ],
            ExitStatus::Usage => &[
                " (bad option or argument; bad --target,",
                "ROCM_KPACK_ARCH_OVERRIDE or HSA_OVERRIDE_GFX_VERSION value; http:// source",
                "without --allow-http)",
            ],
            ExitStatus::NoGpu => &[
                " (amdgpu not loaded, no KFD topology, or no GPU node)",
                "and no --target given: nothing to install for (rocm-kpack-fetch detect,",
                "install, status, gc, prune, doctor, pip, uv)",
            ],
            ExitStatus::Problems => &[
                ": rocm-kpack verify (the tree has problems); rocm-kpack-fetch",
                "verify (damaged or missing archives), status (device code missing, or",
                "archives left behind), doctor (a failed check), install --strict (a",
                "component publishes no device code for a local target, or a manifest was",
                "refused)",
            ],
        }
    }

    /// The whole table, for a program's `--help` epilogue.
    pub fn table() -> String {
        let mut out = String::from("Exit status:\n");
        for status in ExitStatus::ALL {
            let (first, rest) = status.when().split_first().unwrap_or((&"", &[]));
            let _ = writeln!(out, "  {}  {}{first}", status.code(), status.name());
            for line in rest {
                let _ = writeln!(out, "     {line}");
            }
        }
        out.push_str("  (the same numbers for rocm-kpack and rocm-kpack-fetch; they never change)");
        out
    }

    /// The codes one subcommand can end with, by name, pointing at
    /// `PROGRAM --help` for the table.
    pub fn summary(program: &str, statuses: &[ExitStatus]) -> String {
        let mut out = String::from("Exit status:\n");
        for status in statuses {
            let _ = writeln!(out, "  {}  {}", status.code(), status.name());
        }
        let _ = write!(out, "  (`{program} --help` says when each occurs)");
        out
    }

    /// [`ExitStatus::Usage`] when a [`UsageError`] is anywhere in the
    /// chain, else [`ExitStatus::Failure`].
    pub fn for_error(err: &anyhow::Error) -> ExitStatus {
        if err.chain().any(|e| e.is::<UsageError>()) {
            ExitStatus::Usage
        } else {
            ExitStatus::Failure
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// A mistake in how the program was invoked that clap cannot see (an
/// environment variable's value, a combination of options): exit code 2
/// wherever it is in an error's chain.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_fixed() {
        let codes: Vec<u8> = ExitStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4]);
        assert_eq!(
            ExitStatus::NoGpu.code(),
            3,
            "the systemd unit's SuccessExitStatus=3"
        );
    }

    #[test]
    fn usage_is_clap_usage_code() {
        let err = clap::Error::new(clap::error::ErrorKind::UnknownArgument);
        assert_eq!(err.exit_code(), i32::from(ExitStatus::Usage.code()));
    }

    #[test]
    fn the_table_names_the_options_as_they_are_spelled() {
        let table = ExitStatus::table();
        assert!(
            table.contains("--target") && !table.contains("--arch"),
            "{table}"
        );
    }

    #[test]
    fn table_rows_fit_80_columns() {
        let table = ExitStatus::table();
        for status in ExitStatus::ALL {
            let row = format!("  {}  {}", status.code(), status.name());
            assert!(table.contains(&row), "{row:?} in\n{table}");
        }
        for line in table.lines() {
            assert!(line.chars().count() <= 80, "{line:?}");
        }
    }

    #[test]
    fn usage_error_anywhere_in_the_chain() {
        let err = anyhow::Error::new(UsageError("bad".into())).context("while parsing");
        assert_eq!(ExitStatus::for_error(&err), ExitStatus::Usage);
        assert_eq!(
            ExitStatus::for_error(&anyhow::anyhow!("io")),
            ExitStatus::Failure
        );
    }

    #[test]
    fn summary_names_each_code() {
        let s = ExitStatus::summary("p", &[ExitStatus::Success, ExitStatus::NoGpu]);
        assert_eq!(
            s,
            "Exit status:\n  0  success\n  3  no AMD GPU found\n  (`p --help` says when each occurs)"
        );
    }
}
