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
pub mod remove;
pub mod status;
pub mod verify;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::plan::ItemKind;
use crate::state::State;

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

/// Removes the archives under each directory's lock, dropping their state
/// records. Only archives still recorded when the lock is held are touched.
/// Returns the paths removed.
pub fn apply_removals(removals: &[Removal]) -> anyhow::Result<Vec<PathBuf>> {
    let mut by_dir: BTreeMap<&Path, Vec<(ItemKind, &str)>> = BTreeMap::new();
    for r in removals {
        by_dir
            .entry(r.kpack_dir.as_path())
            .or_default()
            .push((r.kind, &r.filename));
    }
    let mut removed = Vec::new();
    for (dir, names) in by_dir {
        let _lock = crate::install::DirLock::acquire(dir, crate::install::say_waiting)
            .with_context(|| format!("cannot lock {}", dir.display()))?;
        removed.extend(remove_recorded(dir, &names)?);
    }
    Ok(removed)
}

/// Removes the archives `names` of `dir` that its state records, with
/// their records, through [`crate::install::delete_recorded`] (only the
/// regular files the fetcher wrote, unchanged); the caller holds the
/// directory's lock. The state is read from the file, so changes made
/// under the same lock count. Returns the paths removed (also those
/// already gone); archives refused (changed since, symlinks, ...) keep
/// their records and make the call fail after the others are removed.
pub(crate) fn remove_recorded(
    dir: &Path,
    names: &[(ItemKind, &str)],
) -> anyhow::Result<Vec<PathBuf>> {
    let mut state = State::load(dir)?;
    let mut removed = Vec::new();
    let mut refused = Vec::new();
    for &(kind, name) in names {
        let records = match kind {
            ItemKind::Archive => &mut state.archives,
            ItemKind::Database => &mut state.databases,
        };
        let Some(entry) = records.get(name).cloned() else {
            continue;
        };
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
                removed.push(item_path(kind, dir, name));
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
        anyhow::bail!(refused.join("\n"));
    }
    Ok(removed)
}
