//! The work behind each `rocm-kpack-fetch` command, as plain data in and
//! serializable reports out. The command line (the binary's `cmd` modules)
//! only turns arguments into these calls, prints the reports as text or
//! JSON and picks the exit code.
//!
//! [`status`], [`list`] and [`verify`] read; [`remove`] and [`gc`] delete
//! archives this tool installed ([`apply_removals`]); [`doctor`] checks
//! whether device code can be used here; [`install`] locks, plans and
//! executes, or drives a package manager.

pub mod doctor;
pub mod gc;
pub mod install;
pub mod list;
pub mod prune;
pub mod remove;
pub mod status;
pub mod trigger;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::install::LockOptions;
use crate::plan::{Claims, ItemKind};
use crate::resolve::{Scan, ScanConfig};
use crate::state::{State, StateError};
use rocm_kpack_format::layout::KPACK_DIR;

/// The default cache directory: below `root` when it is not `/`, else
/// `/var/cache/rocm-kpack-fetch` for root and the XDG cache for others.
pub fn default_cache_dir(root: &Path) -> PathBuf {
    const NAME: &str = "rocm-kpack-fetch";
    if root != Path::new("/") {
        return root.join("var/cache").join(NAME);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/cache").join(NAME);
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join(NAME);
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join(NAME),
        None => std::env::temp_dir().join(NAME),
    }
}

/// Loads the state of each directory read-only; problems become warnings
/// and an empty state.
pub fn load_states(dirs: &[PathBuf], warnings: &mut Vec<String>) -> BTreeMap<PathBuf, State> {
    dirs.iter()
        .map(|d| {
            let state = State::load(d).unwrap_or_else(|e| {
                warnings.push(e.to_string());
                State::default()
            });
            (d.clone(), state)
        })
        .collect()
}

/// An archive (or database file) rocm-kpack-fetch installed, chosen for
/// removal.
#[derive(Debug, Clone, Serialize)]
pub struct Removal {
    /// Archive or database file.
    pub kind: ItemKind,
    /// Its `.kpack` directory (a database file's: that of the manifest
    /// that listed it).
    pub kpack_dir: PathBuf,
    /// Archive file name; a database file's path below the prefix.
    pub filename: String,
    /// Component recorded for it.
    pub component: String,
    /// Its size as recorded when it was installed (the bytes freed).
    pub size: u64,
    /// Why it goes.
    pub reason: String,
}

impl Removal {
    /// Full path of the file.
    pub fn path(&self) -> PathBuf {
        item_path(self.kind, &self.kpack_dir, &self.filename)
    }
}

/// Where an item recorded in `kpack_dir`'s state lives: an archive in the
/// directory, a database file at its path below the prefix.
pub fn item_path(kind: ItemKind, kpack_dir: &Path, name: &str) -> PathBuf {
    match kind {
        ItemKind::Archive => kpack_dir.join(name),
        ItemKind::Database => {
            crate::resolve::database_path(kpack_dir.parent().unwrap_or(Path::new("/")), name)
        }
    }
}

/// A database file left in place on a removal because another installed
/// manifest lists it too: it is not deleted on behalf of one of them. Its
/// record stays with the `.kpack` directory that installed it, so a later
/// `gc` or trigger removes it once no other manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    /// The file.
    pub path: PathBuf,
    /// The other manifest that lists it (the first in path order).
    pub listed_by: PathBuf,
}

/// What a removal did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// Paths removed (also those already gone).
    pub removed: Vec<PathBuf>,
    /// Database files kept because another manifest lists them.
    pub kept: Vec<Kept>,
}

/// The claims index for deleting `removals`: the manifests of `scan`, and
/// those of every `.kpack` directory at an ancestor of a database file to
/// delete that `scan` did not look at (the trigger scans only the
/// directories a transaction named; a prefix nested in another's reaches
/// the same files).
pub fn claims_for(scan: &Scan, removals: &[Removal]) -> Claims {
    let mut claims = Claims::build(&scan.manifests);
    let mut seen = BTreeSet::new();
    let mut extra = Vec::new();
    for r in removals.iter().filter(|r| r.kind == ItemKind::Database) {
        for dir in r.path().ancestors().skip(1) {
            // Every ancestor of a directory seen was seen too.
            if !seen.insert(dir.to_path_buf()) {
                break;
            }
            let kpack = dir.join(KPACK_DIR);
            if !scan.kpack_dirs.contains(&kpack)
                && std::fs::symlink_metadata(&kpack).is_ok_and(|m| m.is_dir())
            {
                extra.push(kpack);
            }
        }
    }
    if !extra.is_empty() {
        // Only to know who else lists a file: any root will do (a wider
        // one keeps more files, never deletes more).
        let more = ScanConfig {
            root: PathBuf::from("/"),
            prefixes: extra,
            default_prefixes: false,
            python: None,
        }
        .scan();
        claims.add(&more.manifests);
    }
    claims
}

/// Why removing recorded archives failed.
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    /// A `.kpack` directory's lock could not be taken (held past the wait,
    /// or not ours to take).
    #[error("cannot lock {}", dir.display())]
    Lock {
        /// The `.kpack` directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory's state could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A recorded file could not be deleted.
    #[error(transparent)]
    Delete(#[from] crate::install::DeleteError),
    /// Recorded files that were refused (changed since, symlinks, ...),
    /// one line each; the others were removed.
    #[error("{}", .0.join("\n"))]
    Refused(Vec<String>),
}

/// Removes the archives under each directory's lock, dropping their state
/// records; a database file another manifest of `scan` (or of a `.kpack`
/// directory whose paths reach it, [`claims_for`]) lists is kept. Only
/// archives still recorded when the lock is held are touched.
pub fn apply_removals(
    removals: &[Removal],
    scan: &Scan,
    lock: LockOptions,
) -> Result<Removed, RemovalError> {
    let claims = claims_for(scan, removals);
    let mut by_dir: BTreeMap<&Path, Vec<(ItemKind, &str)>> = BTreeMap::new();
    for r in removals {
        by_dir
            .entry(r.kpack_dir.as_path())
            .or_default()
            .push((r.kind, &r.filename));
    }
    let mut out = Removed::default();
    for (dir, names) in by_dir {
        let _lock =
            crate::install::lock_kpack_dir(dir, lock).map_err(|source| RemovalError::Lock {
                dir: dir.to_path_buf(),
                source,
            })?;
        let done = remove_recorded(dir, &names, &claims)?;
        out.removed.extend(done.removed);
        out.kept.extend(done.kept);
    }
    // A directory whose package is gone and whose last archive went keeps
    // nothing of ours: no state, no lock (and goes itself when empty).
    gc::tidy_abandoned(&scan.kpack_dirs, lock);
    Ok(out)
}

/// Removes the archives `names` of `dir` that its state records, with
/// their records, through [`crate::install::delete_recorded`] (only the
/// regular files the fetcher wrote, unchanged); the caller holds the
/// directory's lock. A database file another manifest than the one that
/// installed it lists (`claims`) is kept, with its record. The state is
/// read from the file, so changes made under the same lock count. Returns
/// the paths removed (also those already gone) and kept; archives refused
/// (changed since, symlinks, ...) keep their records and make the call
/// fail after the others are removed.
pub(crate) fn remove_recorded(
    dir: &Path,
    names: &[(ItemKind, &str)],
    claims: &Claims,
) -> Result<Removed, RemovalError> {
    let mut state = State::load(dir)?;
    let mut out = Removed::default();
    let mut refused = Vec::new();
    for &(kind, name) in names {
        let records = match kind {
            ItemKind::Archive => &mut state.archives,
            ItemKind::Database => &mut state.databases,
        };
        let Some(entry) = records.get(name).cloned() else {
            continue;
        };
        let path = item_path(kind, dir, name);
        if kind == ItemKind::Database {
            let installer = dir.join(&entry.manifest);
            if let Some(other) = claims.other(&path, &installer) {
                tracing::info!(
                    "keeping {}: {} lists it too",
                    path.display(),
                    other.display()
                );
                out.kept.push(Kept {
                    path,
                    listed_by: other.clone(),
                });
                continue;
            }
        }
        let deleted = match kind {
            ItemKind::Archive => crate::install::delete_recorded(dir, name, &entry),
            ItemKind::Database => crate::install::delete_recorded_database(dir, name, &entry),
        };
        match deleted {
            Ok(_) => {
                records.remove(name);
                if kind == ItemKind::Database {
                    crate::install::remove_created_dirs(dir, name, &mut state.created_dirs);
                }
                out.removed.push(path);
            }
            Err(e @ crate::install::DeleteError::Refused { .. }) => refused.push(e.to_string()),
            Err(e) => {
                // Keep the record of a file that is still there.
                state.save(dir)?;
                return Err(e.into());
            }
        }
    }
    state.save(dir)?;
    if !refused.is_empty() {
        return Err(RemovalError::Refused(refused));
    }
    Ok(out)
}
