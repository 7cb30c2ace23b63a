//! `list`: every installed manifest's archives, whether each is present,
//! and whether rocm-kpack-fetch installed it (else a package did, or it is
//! absent). No hashing: that is [`super::verify`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{item_path, load_states};
use crate::plan::ItemKind;
use crate::resolve::{RefusedManifest, Scan};
use crate::state::State;

/// Who put an archive there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Presence {
    /// Installed by rocm-kpack-fetch (in its state file).
    Fetched,
    /// Present, not installed by rocm-kpack-fetch (a package owns it).
    Present,
    /// Not there.
    Absent,
}

/// One archive of a manifest.
#[derive(Debug, Serialize)]
pub struct Archive {
    /// Archive file name.
    pub filename: String,
    /// GPU family.
    pub family: String,
    /// Architectures it carries.
    pub architectures: Vec<String>,
    /// Size the manifest gives.
    pub size: u64,
    /// Who put it there.
    pub status: Presence,
    /// When rocm-kpack-fetch installed it (Unix seconds).
    pub installed_at: Option<u64>,
    /// Where rocm-kpack-fetch got it.
    pub source: Option<String>,
}

/// One installed manifest.
#[derive(Debug, Serialize)]
pub struct Component {
    /// Manifest component.
    pub component: String,
    /// The manifest file.
    pub manifest: PathBuf,
    /// Its archives.
    pub archives: Vec<Archive>,
    /// Its kernel-database files (`filename`: the path below the prefix).
    pub databases: Vec<Archive>,
}

/// A recorded archive no manifest in its directory lists.
#[derive(Debug, Serialize)]
pub struct Orphan {
    /// Archive file name.
    pub filename: String,
    /// Component recorded for it.
    pub component: String,
    /// Where it is (or was).
    pub path: PathBuf,
    /// The file is still there.
    pub present: bool,
}

/// The items the state of `dir` records that no manifest of `scan` in
/// `dir` lists (`gc` removes them).
pub fn orphans(scan: &Scan, dir: &Path, state: &State) -> Vec<Orphan> {
    let mut out = Vec::new();
    for (kind, name, entry) in state.items() {
        let listed = scan
            .manifests
            .iter()
            .filter(|m| m.kpack_dir == dir)
            .any(|m| match kind {
                ItemKind::Archive => m.manifest.kpack_files.iter().any(|f| &f.filename == name),
                ItemKind::Database => m.manifest.database_files.iter().any(|f| &f.path == name),
            });
        if !listed {
            let path = item_path(kind, dir, name);
            out.push(Orphan {
                filename: name.clone(),
                component: entry.component.clone(),
                present: path.is_file(),
                path,
            });
        }
    }
    out
}

/// One `.kpack` directory.
#[derive(Debug, Serialize)]
pub struct Dir {
    /// The directory.
    pub kpack_dir: PathBuf,
    /// Its manifests.
    pub components: Vec<Component>,
    /// Recorded archives no manifest lists.
    pub orphans: Vec<Orphan>,
}

/// What `list` found (its `--json` output).
#[derive(Debug, Serialize)]
pub struct ListReport {
    /// Every `.kpack` directory found, in path order.
    pub kpack_dirs: Vec<Dir>,
    /// Manifests that could not be read.
    pub refused_manifests: Vec<RefusedManifest>,
    /// Unreadable state files.
    pub warnings: Vec<String>,
}

/// Lists the archives of every manifest of `scan`.
pub fn list(scan: &Scan) -> ListReport {
    let mut warnings = Vec::new();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut dirs: BTreeMap<PathBuf, Dir> = BTreeMap::new();
    for dir in &scan.kpack_dirs {
        dirs.insert(
            dir.clone(),
            Dir {
                kpack_dir: dir.clone(),
                components: Vec::new(),
                orphans: Vec::new(),
            },
        );
    }
    for m in &scan.manifests {
        let state = states.get(&m.kpack_dir);
        let item =
            |kind: ItemKind, name: &str, family: &str, architectures: &[String], size: u64| {
                let recorded = state.and_then(|s| match kind {
                    ItemKind::Archive => s.archives.get(name),
                    ItemKind::Database => s.databases.get(name),
                });
                let exists = item_path(kind, &m.kpack_dir, name).is_file();
                Archive {
                    filename: name.to_string(),
                    family: family.to_string(),
                    architectures: architectures.to_vec(),
                    size,
                    status: match (exists, recorded.is_some()) {
                        (true, true) => Presence::Fetched,
                        (true, false) => Presence::Present,
                        (false, _) => Presence::Absent,
                    },
                    installed_at: recorded.filter(|_| exists).map(|e| e.installed_at),
                    source: recorded.filter(|_| exists).and_then(|e| e.source.clone()),
                }
            };
        let archives = m
            .manifest
            .kpack_files
            .iter()
            .map(|f| {
                item(
                    ItemKind::Archive,
                    &f.filename,
                    &f.family,
                    &f.architectures,
                    f.size,
                )
            })
            .collect();
        let databases = m
            .manifest
            .database_files
            .iter()
            .map(|f| {
                item(
                    ItemKind::Database,
                    &f.path,
                    &f.family,
                    &f.architectures,
                    f.size,
                )
            })
            .collect();
        if let Some(d) = dirs.get_mut(&m.kpack_dir) {
            d.components.push(Component {
                component: m.manifest.component.clone(),
                manifest: m.path.clone(),
                archives,
                databases,
            });
        }
    }
    for (dir, state) in &states {
        if let Some(d) = dirs.get_mut(dir) {
            d.orphans = orphans(scan, dir, state);
        }
    }
    ListReport {
        kpack_dirs: dirs.into_values().collect(),
        refused_manifests: scan.refused.clone(),
        warnings,
    }
}
