//! `rocm-kpack-fetch remove NAME...`: [`ops::remove`] as text or JSON;
//! names that matched nothing are an error, reported after the output.

use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetcher::ops;

use super::{lock_options, print_warnings, scan_config};
use crate::cli::RemoveArgs;

/// Runs `remove`.
pub fn run(args: &RemoveArgs) -> anyhow::Result<ExitStatus> {
    let out = ops::remove::run(&ops::remove::RemoveRequest {
        scan: scan_config(&args.scan)?,
        names: args.names.clone(),
        apply: args.yes,
        lock: lock_options(&args.scan),
    })?;
    if !args.json.enabled {
        print_warnings(&out.warnings);
    }
    args.json.report(&out, || {
        let verb = if out.applied {
            "removed"
        } else {
            "would remove"
        };
        let mut text: String = out
            .removed
            .iter()
            .map(|p| format!("{verb} {}\n", p.display()))
            .collect();
        for k in &out.kept {
            text.push_str(&format!(
                "kept {}: {} lists it too\n",
                k.path.display(),
                k.listed_by.display()
            ));
        }
        if !out.applied && !out.removed.is_empty() {
            text.push_str("(dry run: pass --yes to remove them)\n");
        }
        text
    })?;
    if !out.problems.is_empty() {
        // The report (with --json, the document, which names them) is out:
        // one document on stdout, so the error goes to stderr alone.
        eprintln!("rocm-kpack-fetch: error: {}", out.problems.join("\n"));
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}
