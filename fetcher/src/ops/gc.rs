//! `gc`: archives this tool installed that are no longer needed: no
//! installed manifest lists them any more (the package was removed), or no
//! local target may load them (the GPU was removed).

use std::path::PathBuf;

use serde::Serialize;

use super::{apply_removals, load_states, Removal};
use crate::detect::LocalTargets;
use crate::resolve::{needs, Scan};

/// What `gc` found and did (its `--json` output).
#[derive(Debug, Serialize)]
pub struct GcReport {
    /// The targets archives were kept for.
    pub targets: Vec<String>,
    /// Archives no longer needed.
    pub candidates: Vec<Removal>,
    /// Those removed (none on a dry run).
    pub removed: Vec<PathBuf>,
    /// Only listed, nothing removed.
    pub dry_run: bool,
    /// Detection warnings and unreadable state files.
    pub warnings: Vec<String>,
}

/// Finds the archives rocm-kpack-fetch installed that no manifest of
/// `scan` lists or no target of `local` may load, and removes them when
/// `remove`. Refuses when there are no targets: every archive would go.
pub fn gc(local: &LocalTargets, scan: &Scan, remove: bool) -> anyhow::Result<GcReport> {
    anyhow::ensure!(
        !local.ids.is_empty(),
        "no local targets: every archive would be collected"
    );
    let mut warnings = local.detection.warnings.clone();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut candidates = Vec::new();
    for (dir, state) in &states {
        let manifests: Vec<_> = scan
            .manifests
            .iter()
            .filter(|m| &m.kpack_dir == dir)
            .collect();
        for (filename, entry) in &state.archives {
            let lister = manifests.iter().find_map(|m| {
                m.manifest
                    .kpack_files
                    .iter()
                    .position(|f| &f.filename == filename)
                    .map(|i| (m, i))
            });
            let reason = match lister {
                None => "no installed manifest lists it".to_string(),
                Some((m, i)) => {
                    if needs(&m.manifest, &local.ids)
                        .archives
                        .iter()
                        .any(|n| n.index == i)
                    {
                        continue;
                    }
                    format!(
                        "no local target ({}) may load it",
                        local.detection.targets.join(", ")
                    )
                }
            };
            candidates.push(Removal {
                kpack_dir: dir.clone(),
                filename: filename.clone(),
                component: entry.component.clone(),
                reason,
            });
        }
    }
    let removed = if remove {
        apply_removals(&candidates)?
    } else {
        Vec::new()
    };
    Ok(GcReport {
        targets: local.detection.targets.clone(),
        candidates,
        removed,
        dry_run: !remove,
        warnings,
    })
}
