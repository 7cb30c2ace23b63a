//! Exit codes, fixed and documented in `--help` (see [`crate::cli`]).

use std::process::ExitCode;

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: done (for `detect`: at least one target, detected or given).
    Success,
    /// 1: any other error.
    Failure,
    /// 2: bad command line or bad override variable.
    Usage,
    /// 3: no AMD GPU found (driver absent, no KFD topology, no GPU node).
    NoGpu,
    /// 4: the command ran and found problems (`verify`, `doctor`,
    /// `install --strict`).
    Problems,
}

impl ExitStatus {
    /// The numeric process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::NoGpu => 3,
            ExitStatus::Problems => 4,
        }
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
/// environment variable's value, a combination of options); exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
