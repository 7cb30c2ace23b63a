//! `rocm-kpack-fetch status`: for the local targets, is every installed
//! manifest covered? Plus partial downloads waiting in the cache.

use std::path::PathBuf;

use serde::Serialize;

use super::{
    default_cache_dir, load_states, local_targets, print_json, print_text, print_warnings,
    scan_config, targets_origin,
};
use crate::cli::StatusArgs;
use crate::download::Cache;
use crate::plan::{Action, InstallPlan};
use crate::progress::human_bytes;
use crate::ExitStatus;

#[derive(Debug, Serialize)]
struct Component {
    component: String,
    manifest: PathBuf,
    complete: bool,
    needed: usize,
    present: usize,
    missing: Vec<String>,
    bytes_missing: u64,
    no_device_code: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Partial {
    path: PathBuf,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct Output {
    targets: Vec<String>,
    components: Vec<Component>,
    refused_manifests: Vec<crate::resolve::RefusedManifest>,
    partial_downloads: Vec<Partial>,
    warnings: Vec<String>,
}

/// Runs `status`.
pub fn run(args: &StatusArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    let scan = scan_config(&args.scan).scan();
    let mut warnings = local.detection.warnings.clone();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let plan = InstallPlan::build(&scan, &local.ids, &states);
    let components = plan
        .components
        .iter()
        .map(|c| {
            let missing: Vec<_> = c.archives.iter().filter(|a| a.action != Action::Present).collect();
            Component {
                component: c.component.clone(),
                manifest: c.manifest.clone(),
                complete: missing.is_empty(),
                needed: c.archives.len(),
                present: c.archives.len() - missing.len(),
                missing: missing.iter().map(|a| a.filename.clone()).collect(),
                bytes_missing: missing.iter().map(|a| a.size).sum(),
                no_device_code: c.no_device_code.clone(),
            }
        })
        .collect();
    let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(|| default_cache_dir(&args.scan.root)));
    let partial_downloads = cache
        .partials()
        .unwrap_or_default()
        .into_iter()
        .map(|(path, bytes)| Partial { path, bytes })
        .collect();
    let out = Output {
        targets: local.detection.targets.clone(),
        components,
        refused_manifests: scan.refused.clone(),
        partial_downloads,
        warnings,
    };
    if args.json {
        print_json(&out)?;
        return Ok(ExitStatus::Success);
    }
    print_warnings(&out.warnings);
    let mut text = String::new();
    if out.targets.is_empty() {
        text.push_str("targets: none (no AMD GPU found; pass --arch LIST to choose)\n");
    } else {
        text.push_str(&format!(
            "targets: {} ({})\n",
            out.targets.join(", "),
            targets_origin(&local.detection)
        ));
    }
    if out.components.is_empty() {
        text.push_str("no installed .kpm manifests found\n");
    }
    for c in &out.components {
        let state = if c.complete {
            format!("complete ({} archive(s) present)", c.present)
        } else {
            format!(
                "{} of {} archive(s) missing ({}): run `rocm-kpack-fetch install --auto`",
                c.missing.len(),
                c.needed,
                human_bytes(c.bytes_missing)
            )
        };
        text.push_str(&format!("{} ({}): {state}\n", c.component, c.manifest.display()));
        for t in &c.no_device_code {
            text.push_str(&format!("  warning: {} publishes no device code for {t}\n", c.component));
        }
    }
    for r in &out.refused_manifests {
        text.push_str(&format!("refused manifest {}: {}\n", r.path.display(), r.error));
    }
    if !out.partial_downloads.is_empty() {
        let bytes: u64 = out.partial_downloads.iter().map(|p| p.bytes).sum();
        text.push_str(&format!(
            "{} partial download(s) ({}) kept in {} for resuming\n",
            out.partial_downloads.len(),
            human_bytes(bytes),
            cache.partial_dir().display()
        ));
    }
    print_text(&text)?;
    Ok(ExitStatus::Success)
}
