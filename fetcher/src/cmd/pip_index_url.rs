//! `rocm-kpack-fetch pip-index-url`: retired, hidden from `--help`. It
//! printed a per-family view of the pip index; the index is now one
//! (`BASE/simple/`), as AMD's is, and the `device-<target>` extras choose
//! the device code (docs/packaging.md "pip: one index, extras choose").
//! However it is run, it says so first and exits 2 with nothing on stdout,
//! so a script that embeds `$(rocm-kpack-fetch pip-index-url ...)` stops.

use std::ffi::OsString;

use clap::Args;
use rocm_kpack_cli::{ExitStatus, UsageError};

/// Whatever the old command line was: none of it is read.
#[derive(Debug, Args)]
pub struct PipIndexUrlArgs {
    /// Ignored.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true,
          value_parser = clap::value_parser!(OsString))]
    pub ignored: Vec<OsString>,
}

/// What it says instead of a URL (exit 2).
pub const RETIRED: &str = "pip-index-url is retired: the pip index is one, BASE/simple/, and the \
    `device-<target>` extras choose the device code (as in AMD's wheels). Install with\n  \
    pip install --extra-index-url BASE/simple/ 'PACKAGE[device-<target>]'\n\
    (`rocm-kpack-fetch detect` names this machine's targets), or let rocm-kpack-fetch add \
    them: rocm-kpack-fetch pip install PACKAGE. The per-family URLs printed before \
    (BASE/families/<family>/) keep working.";

/// Runs `pip-index-url`: always the usage error [`RETIRED`].
pub fn run(_: &PipIndexUrlArgs) -> anyhow::Result<ExitStatus> {
    Err(UsageError(RETIRED.to_owned()).into())
}
