//! `remove NAME...`: remove archives this tool installed, chosen by
//! component or by archive file name. Files a package installed are never
//! removed (the package manager owns them).

use std::path::PathBuf;

use serde::Serialize;

use super::{apply_removals, load_states, Kept, Removal};
use crate::install::LockOptions;
use crate::resolve::{Scan, ScanConfig};

/// What `remove` did (its `--json` output).
#[derive(Debug, Serialize)]
pub struct RemoveReport {
    /// Whether the archives were removed (`--yes`) or only listed.
    pub applied: bool,
    /// The archives removed (or, not applied, that would be).
    pub removed: Vec<PathBuf>,
    /// Database files kept because another installed manifest lists them.
    pub kept: Vec<Kept>,
    /// Unreadable state files.
    pub warnings: Vec<String>,
    /// Names that matched nothing this tool installed, with why (the run
    /// fails after printing them).
    pub problems: Vec<String>,
}

/// `remove`, as the command line asked for it.
#[derive(Debug, Clone)]
pub struct RemoveRequest {
    /// Where the installed manifests and `.kpack` directories are looked for.
    pub scan: ScanConfig,
    /// Archive file names or components.
    pub names: Vec<String>,
    /// Remove (`--yes`); else only list.
    pub apply: bool,
    /// How the `.kpack` directories are locked.
    pub lock: LockOptions,
}

/// The one library call behind `remove`: scans, then [`remove`].
pub fn run(req: &RemoveRequest) -> Result<RemoveReport, super::RemovalError> {
    remove(&req.scan.scan(), &req.names, req.apply, req.lock)
}

/// Removes the archives rocm-kpack-fetch installed whose file name or
/// component is one of `names`; without `apply`, only lists them.
pub fn remove(
    scan: &Scan,
    names: &[String],
    apply: bool,
    lock: LockOptions,
) -> Result<RemoveReport, super::RemovalError> {
    let mut warnings = Vec::new();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut chosen = Vec::new();
    let mut problems = Vec::new();
    for name in names {
        let mut matched = false;
        for (dir, state) in &states {
            for (kind, filename, entry) in state.items() {
                if filename == name || &entry.component == name {
                    matched = true;
                    chosen.push(Removal {
                        kind,
                        kpack_dir: dir.clone(),
                        filename: filename.clone(),
                        component: entry.component.clone(),
                        size: entry.size,
                        reason: format!("asked to remove {name}"),
                    });
                }
            }
        }
        if matched {
            continue;
        }
        let is_component = scan.manifests.iter().any(|m| m.manifest.component == *name);
        let present_archive = scan.manifests.iter().any(|m| {
            m.manifest
                .kpack_files
                .iter()
                .any(|f| f.filename == *name && m.archive_path(f).exists())
        });
        problems.push(if present_archive {
            format!("{name}: not installed by rocm-kpack-fetch (a package owns it?); not removing")
        } else if is_component {
            format!("{name}: no archive of this component was installed by rocm-kpack-fetch")
        } else {
            format!(
                "{name}: no archive or component of that name was installed by rocm-kpack-fetch"
            )
        });
    }
    let (removed, kept) = if apply {
        let done = apply_removals(&chosen, scan, lock)?;
        (done.removed, done.kept)
    } else {
        (chosen.iter().map(Removal::path).collect(), Vec::new())
    };
    Ok(RemoveReport {
        applied: apply,
        removed,
        kept,
        warnings,
        problems,
    })
}
