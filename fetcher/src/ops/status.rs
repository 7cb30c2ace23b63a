//! `status`: for the local targets, is every installed manifest covered?
//! Plus partial downloads waiting in the cache.

use std::path::PathBuf;

use serde::Serialize;

use super::load_states;
use crate::detect::LocalTargets;
use crate::download::Cache;
use crate::plan::{Action, InstallPlan};
use crate::resolve::{RefusedManifest, Scan};
use crate::unlisted::BinaryCoverage;

/// Coverage of one installed manifest.
#[derive(Debug, Serialize)]
pub struct Component {
    /// Manifest component.
    pub component: String,
    /// The manifest file.
    pub manifest: PathBuf,
    /// Every needed archive and database file is present and verified.
    pub complete: bool,
    /// Archives and database files the local targets need.
    pub needed: usize,
    /// Of those, database files.
    pub databases_needed: usize,
    /// Of those, present.
    pub present: usize,
    /// File names of the needed archives, and install paths (below the
    /// prefix) of the needed database files, not present.
    pub missing: Vec<String>,
    /// Their total size.
    pub bytes_missing: u64,
    /// The needed ones present, named as `missing` names them, each with
    /// why it is needed (which local target may load which of its keys).
    pub found: Vec<Found>,
    /// Local targets the component publishes no device code for.
    pub no_device_code: Vec<String>,
}

/// A needed archive or database file that is present.
#[derive(Debug, Serialize)]
pub struct Found {
    /// Its file name (an archive) or install path below the prefix.
    pub name: String,
    /// Why it is needed: "gfx90a may load gfx90a, gfx90a:xnack+".
    pub reason: String,
}

/// A partial download kept for resuming.
#[derive(Debug, Serialize)]
pub struct Partial {
    /// The `.part` file.
    pub path: PathBuf,
    /// Bytes so far.
    pub bytes: u64,
}

/// What `status` found (its `--json` output).
#[derive(Debug, Serialize)]
pub struct StatusReport {
    /// The local targets.
    pub targets: Vec<String>,
    /// Coverage per installed manifest.
    pub components: Vec<Component>,
    /// Host binaries of trees without a `.kpm`: what the loader finds
    /// for every local target ([`crate::unlisted`]).
    pub unlisted: Vec<BinaryCoverage>,
    /// Manifests that could not be read.
    pub refused_manifests: Vec<RefusedManifest>,
    /// Archives (and database files) this tool installed that no manifest
    /// lists any more and that are still there: `gc` removes them.
    pub orphans: Vec<super::list::Orphan>,
    /// AMD's native device packages (no `.kpm`): missing for a local
    /// target, installed for none (filled in by the caller,
    /// [`crate::pm::native::coverage_in`]).
    pub native: crate::pm::native::NativeCoverage,
    /// Partial downloads in the cache.
    pub partial_downloads: Vec<Partial>,
    /// Device distributions of pip-installed bases without a `.kpm`
    /// (AMD's wheels): missing for a local target, installed for none.
    pub pip_device_packages: crate::pm::pip::NativeStatus,
    /// Detection warnings and unreadable state files.
    pub warnings: Vec<String>,
}

/// Coverage of the manifests of `scan` for `local`'s targets, and the
/// partial downloads in `cache`; `unlisted` is the coverage of the host
/// binaries without a manifest ([`crate::unlisted::check`]).
pub fn status(
    local: &LocalTargets,
    scan: &Scan,
    cache: &Cache,
    unlisted: Vec<BinaryCoverage>,
) -> StatusReport {
    let mut warnings = local.detection.warnings.clone();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let plan = InstallPlan::build(scan, &local.ids, &states);
    let orphans = states
        .iter()
        .flat_map(|(dir, state)| super::list::orphans(scan, dir, state))
        .filter(|o| o.present)
        .collect();
    let components = plan
        .components
        .iter()
        .map(|c| {
            let missing: Vec<_> = c.items().filter(|a| a.action != Action::Present).collect();
            let needed = c.archives.len() + c.databases.len();
            Component {
                component: c.component.clone(),
                manifest: c.manifest.clone(),
                complete: missing.is_empty(),
                needed,
                databases_needed: c.databases.len(),
                present: needed - missing.len(),
                missing: missing.iter().map(|a| a.filename.clone()).collect(),
                bytes_missing: missing.iter().map(|a| a.size).sum(),
                found: c
                    .items()
                    .filter(|a| a.action == Action::Present)
                    .map(|a| Found {
                        name: a.filename.clone(),
                        reason: a.reason(),
                    })
                    .collect(),
                no_device_code: c.no_device_code.clone(),
            }
        })
        .collect();
    let partial_downloads = cache
        .partials()
        .unwrap_or_default()
        .into_iter()
        .map(|(path, bytes)| Partial { path, bytes })
        .collect();
    StatusReport {
        targets: local.detection.targets.clone(),
        components,
        unlisted,
        refused_manifests: scan.refused.clone(),
        orphans,
        native: Default::default(),
        partial_downloads,
        pip_device_packages: Default::default(),
        warnings,
    }
}
