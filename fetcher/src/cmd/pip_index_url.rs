//! `rocm-kpack-fetch pip-index-url --base URL`: the pip index URL that fits
//! this machine's GPUs, so that one command installs a base wheel with its
//! device code:
//!
//! ```sh
//! pip install --index-url "$(rocm-kpack-fetch pip-index-url --base URL)" kpkg
//! ```
//!
//! `rocm-kpack publish --pip` writes, beside the flat index `URL/simple/`,
//! one view per GPU family, `URL/families/<family>/`, in which each base
//! distribution requires its family's device wheels (AMD's ROCm wheels use
//! per-family index URLs the same way). The family of each local target
//! comes from the built-in family table; a machine whose GPUs span two
//! families gets the first family's view, with a warning naming
//! `install --python` for the others.

use clap::Args;
use rocm_kpack_cli::UsageError;
use rocm_kpack_cli::{print_json, print_stdout, ExitStatus, JsonArg};
use rocm_kpack_fetch::client::masked_text;
use rocm_kpack_fetch::detect::no_targets_message;
use rocm_kpack_format::layout;
use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use super::{local_targets, print_warnings};
use crate::cli::TargetArgs;

/// `pip-index-url` options.
#[derive(Debug, Args)]
pub struct PipIndexUrlArgs {
    /// The repository URL `rocm-kpack publish --pip` wrote (the parent of
    /// `simple/` and `families/`).
    /// https:// only (http:// with --allow-http), with a host and no query
    /// or fragment.
    #[arg(long, value_name = "URL")]
    pub base: String,
    /// Accept a plain http:// --base (pip then fetches without TLS; also
    /// ROCM_KPACK_ALLOW_HTTP=1).
    #[arg(long)]
    pub allow_http: bool,
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `--json` output.
#[derive(Debug, Serialize)]
struct Output {
    index_url: String,
    family: String,
    targets: Vec<String>,
    /// Families of other local targets, which this view does not serve.
    other_families: Vec<String>,
}

/// Runs `pip-index-url`: exit 3 without targets.
pub fn run(args: &PipIndexUrlArgs) -> anyhow::Result<ExitStatus> {
    let allow_http =
        args.allow_http || std::env::var(super::trigger::ALLOW_HTTP_ENV).is_ok_and(|v| v == "1");
    let base = check_base(&args.base, allow_http)?;
    let local = local_targets(&args.targets)?;
    if local.ids.is_empty() {
        eprintln!("{}", no_targets_message(&local.detection));
        return Ok(ExitStatus::NoGpu);
    }
    let spec = Spec::default_families();
    let mut families: Vec<String> = Vec::new();
    let mut warnings = local.detection.warnings.clone();
    for t in &local.ids {
        match spec.group_for(&t.to_string()) {
            Ok(groups) => {
                for g in groups.into_iter().take(1) {
                    if !families.contains(&g.name) {
                        families.push(g.name.clone());
                    }
                }
            }
            Err(e) => warnings.push(e.to_string()),
        }
    }
    let Some(family) = families.first().cloned() else {
        anyhow::bail!(
            "no GPU family serves the local targets ({})",
            local.detection.targets.join(", ")
        );
    };
    let other_families: Vec<String> = families.iter().skip(1).cloned().collect();
    if !other_families.is_empty() {
        warnings.push(format!(
            "the GPUs here span families {}; this index brings {family}'s device wheels only (add the others with `rocm-kpack-fetch install --python`)",
            families.join(", ")
        ));
    }
    let index_url = format!("{base}{}", layout::pip::view_path(&family));
    if args.json.enabled {
        print_json(&Output {
            index_url,
            family,
            targets: local.detection.targets.clone(),
            other_families,
        })?;
    } else {
        print_warnings(&warnings);
        print_stdout(&format!("{index_url}\n"))?;
    }
    Ok(ExitStatus::Success)
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
    use super::check_base;

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
