//! `pip-index-url`, retired and hidden: the pip index is one and extras choose
//! (docs/packaging.md). It exits 2 with nothing on stdout, so `$(...)` stops.

/// Whatever the old command line was: none of it is read.
#[derive(Debug, clap::Args)]
pub struct PipIndexUrlArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    ignored: Vec<std::ffi::OsString>,
}

const RETIRED: &str = "pip-index-url is retired: the pip index is one, BASE/simple/, and the \
    `device-<target>` extras choose the device code. Install with\n  pip install --extra-index-url \
    BASE/simple/ 'PACKAGE[device-<target>]'\nor let rocm-kpack-fetch add them: rocm-kpack-fetch \
    pip install PACKAGE. The per-family URLs (BASE/families/<family>/) keep working.";

/// Always the usage error [`RETIRED`] (exit 2).
pub fn run(_: &PipIndexUrlArgs) -> anyhow::Result<rocm_kpack_cli::ExitStatus> {
    Err(rocm_kpack_cli::UsageError(RETIRED.into()).into())
}
