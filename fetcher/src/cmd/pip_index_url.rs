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
use rocm_kpack_cli::{print_json, print_stdout, ExitStatus, JsonArg};
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
    #[arg(long, value_name = "URL")]
    pub base: String,
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
        anyhow::bail!("no GPU family serves the local targets ({})", local.detection.targets.join(", "));
    };
    let other_families: Vec<String> = families.iter().skip(1).cloned().collect();
    if !other_families.is_empty() {
        warnings.push(format!(
            "the GPUs here span families {}; this index brings {family}'s device wheels only (add the others with `rocm-kpack-fetch install --python`)",
            families.join(", ")
        ));
    }
    let base = if args.base.ends_with('/') {
        args.base.clone()
    } else {
        format!("{}/", args.base)
    };
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
