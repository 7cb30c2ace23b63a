//! `rocm-kpack-fetch remove NAME...`: [`ops::remove`] as text or JSON;
//! names that matched nothing are an error, reported after the output.

use rocm_kpack_cli::{print_json, print_stdout, ExitStatus};
use rocm_kpack_fetch::ops;

use super::{print_warnings, scan_config};
use crate::cli::RemoveArgs;

/// Runs `remove`.
pub fn run(args: &RemoveArgs) -> anyhow::Result<ExitStatus> {
    let out = ops::remove::remove(&scan_config(&args.scan).scan(), &args.names)?;
    if args.json.enabled {
        print_json(&out)?;
    } else {
        print_warnings(&out.warnings);
        let text: String = out
            .removed
            .iter()
            .map(|p| format!("removed {}\n", p.display()))
            .collect();
        print_stdout(&text)?;
    }
    if !out.problems.is_empty() {
        anyhow::bail!(out.problems.join("\n"));
    }
    Ok(ExitStatus::Success)
}
