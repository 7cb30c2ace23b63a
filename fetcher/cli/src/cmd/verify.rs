//! `rocm-kpack-fetch verify`: [`ops::verify`] as text or JSON; exit 4 on
//! problems.

use rocm_kpack_cli::{plural, ExitStatus};
use rocm_kpack_fetcher::ops::{self, verify::Verdict};

use super::{print_warnings, scan_config};
use crate::cli::VerifyArgs;

/// Runs `verify`.
pub fn run(args: &VerifyArgs) -> anyhow::Result<ExitStatus> {
    let config = scan_config(&args.scan)?;
    let scan = config.scan();
    let local = super::local_targets(&args.targets)?;
    let mut warnings = Vec::new();
    let unlisted = rocm_kpack_fetcher::unlisted::check(&scan, &config, &local.ids, &mut warnings);
    let mut out = ops::verify::verify(&scan, unlisted);
    out.warnings.extend(warnings);
    if !args.json.enabled {
        print_warnings(&out.warnings);
    }
    args.json.report(&out, || {
        let mut text = String::new();
        for c in &out.archives {
            let word = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::Rebuilt => "rebuilt",
                Verdict::SizeOnly => "size-ok",
                Verdict::Damaged => "DAMAGED",
                Verdict::Missing => "MISSING",
                Verdict::Unreadable => "UNREADABLE",
            };
            match &c.detail {
                Some(d) => text.push_str(&format!("{word:<10} {}: {d}\n", c.path.display())),
                None => text.push_str(&format!("{word:<10} {}\n", c.path.display())),
            }
        }
        text.push_str(&super::status::unlisted_text(&out.unlisted));
        for r in &out.refused_manifests {
            text.push_str(&format!("REFUSED    {}: {}\n", r.path.display(), r.error));
        }
        text.push_str(&format!(
            "verified {}: {}; {} not installed\n",
            plural(out.archives.len(), "archive", "archives"),
            plural(out.problems, "problem", "problems"),
            plural(out.not_installed, "listed archive", "listed archives"),
        ));
        text
    })?;
    Ok(if out.problems > 0 {
        ExitStatus::Problems
    } else {
        ExitStatus::Success
    })
}
