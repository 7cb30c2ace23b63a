//! `rocm-kpack-fetch pip-index-url --base URL`: retired. It printed a
//! per-family view of the pip index (`URL/families/<family>/`) in which the
//! base wheel required one family's device wheels. The index is now one
//! (`URL/simple/`), as AMD's is, and the `device-<target>` extras choose the
//! device code (docs/packaging.md "pip: one index, extras choose").
//!
//! The command fails (exit 2, nothing on stdout, so a script that embeds
//! `$(rocm-kpack-fetch pip-index-url ...)` stops instead of installing a
//! base wheel without device code) and says what to type instead, with the
//! extras of this machine's GPUs. The views that `publish --pip` wrote stay
//! served for URLs already in use.

use clap::Args;
use rocm_kpack_cli::UsageError;
use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_fetch::client::masked_text;
use rocm_kpack_pkgspec::amd;

use super::local_targets;
use crate::cli::TargetArgs;

/// `pip-index-url` options (kept so old invocations get the message, not
/// a parse error).
#[derive(Debug, Args)]
pub struct PipIndexUrlArgs {
    /// The repository URL `rocm-kpack publish --pip` wrote (the parent of
    /// `simple/`).
    /// https:// only (http:// with --allow-http), with a host and no query
    /// or fragment.
    #[arg(long, value_name = "URL")]
    pub base: String,
    /// Accept a plain http:// --base (also ROCM_KPACK_ALLOW_HTTP=1).
    #[arg(long)]
    pub allow_http: bool,
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Output format (ignored: the command only explains).
    #[command(flatten)]
    pub json: JsonArg,
}

/// Runs `pip-index-url`: always a usage error (exit 2) that names the one
/// index and this machine's `device-<target>` extras.
pub fn run(args: &PipIndexUrlArgs) -> anyhow::Result<ExitStatus> {
    let allow_http =
        args.allow_http || std::env::var(super::trigger::ALLOW_HTTP_ENV).is_ok_and(|v| v == "1");
    let base = check_base(&args.base, allow_http)?;
    // Detection only feeds the message: without GPUs it names no extra.
    let extras: Vec<String> = local_targets(&args.targets)
        .map(|local| {
            let mut e: Vec<String> = local
                .detection
                .targets
                .iter()
                .filter_map(|t| amd::device_target_of(t).map(amd::device_extra))
                .collect();
            e.sort();
            e.dedup();
            e
        })
        .unwrap_or_default();
    Err(UsageError(retired_message(&masked_text(&base), &extras)).into())
}

/// What `pip-index-url` says instead of a URL.
fn retired_message(base: &str, extras: &[String]) -> String {
    let extra = if extras.is_empty() {
        "device-<target>".to_string()
    } else {
        extras.join(",")
    };
    format!(
        "pip-index-url is retired: the pip index is one, {base}simple/, and the \
         `device-<target>` extras choose the device code (as in AMD's wheels). Install with\n  \
         pip install --extra-index-url {base}simple/ 'PACKAGE[{extra}]'\n\
         or let rocm-kpack-fetch add the extras of this machine's GPUs: \
         rocm-kpack-fetch pip install PACKAGE. The per-family URLs printed before \
         (…/families/<family>/) keep working."
    )
}

/// `--base` as a URL pip can use, ending in `/`: `https://` (or `http://`
/// with `--allow-http`), a host, no query or fragment (the view's path is
/// appended), no spaces or control characters. Messages mask credentials.
fn check_base(text: &str, allow_http: bool) -> Result<String, UsageError> {
    let refuse = |why: &str| UsageError(format!("--base {:?}: {why}", masked_text(text)));
    if text.is_empty() {
        return Err(refuse(
            "empty; give the URL `rocm-kpack publish --pip` wrote",
        ));
    }
    // The URL parser drops tabs and newlines silently: refuse them first.
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refuse("contains spaces or control characters"));
    }
    // The parser would read `https:///x` as host `x`.
    if text
        .split_once("://")
        .is_none_or(|(_, rest)| rest.is_empty() || rest.starts_with('/'))
    {
        return Err(refuse("no host (scheme://host/path expected)"));
    }
    let url = reqwest::Url::parse(text).map_err(|e| refuse(&format!("not a URL ({e})")))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => return Err(refuse("plain http:// is refused (pip would fetch without TLS); pass --allow-http to accept it")),
        _ => return Err(refuse("only https:// URLs (http:// with --allow-http)")),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse(
            "has a query or fragment; the family's path is appended to it",
        ));
    }
    if url.scheme() == "http" {
        eprintln!(
            "warning: --base {}: plain http://, pip will fetch without TLS",
            masked_text(text)
        );
    }
    let mut base = url.to_string();
    if !base.ends_with('/') {
        base.push('/');
    }
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::{check_base, retired_message};

    #[test]
    fn the_retired_command_names_the_one_index_and_the_extras() {
        let m = retired_message("https://h.example/kpack/", &["device-gfx1100".into()]);
        assert!(
            m.contains("https://h.example/kpack/simple/")
                && m.contains("'PACKAGE[device-gfx1100]'")
                && m.contains("rocm-kpack-fetch pip install"),
            "{m}"
        );
        assert!(retired_message("https://h/", &[]).contains("PACKAGE[device-<target>]"));
    }

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(
            check_base("https://h.example/kpack", false).expect("ok"),
            "https://h.example/kpack/"
        );
        assert_eq!(
            check_base("http://127.0.0.1:8/", true).expect("ok"),
            "http://127.0.0.1:8/"
        );
        for bad in [
            "",
            "javascript:alert(1)",
            "https://h/?q=1",
            "https://h/#f",
            "https://h/a\nb",
            "https://h/a b",
            "http://h/",
            "file:///tmp/x",
            "https:///x",
            "ftp://h/",
        ] {
            assert!(check_base(bad, false).is_err(), "{bad:?}");
        }
        let err = check_base("http://user:secret@h/", false)
            .expect_err("http")
            .to_string();
        assert!(!err.contains("secret") && err.contains("****"), "{err}");
    }
}
