//! `rocm-kpack-fetch list`: every installed manifest's archives, whether
//! each is present, and whether rocm-kpack-fetch installed it (else a
//! package did, or it is absent). No hashing: that is `verify`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{load_states, print_json, print_text, print_warnings, scan_config};
use crate::cli::ListArgs;
use crate::progress::human_bytes;
use crate::resolve::RefusedManifest;
use crate::ExitStatus;

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
struct Archive {
    filename: String,
    family: String,
    architectures: Vec<String>,
    size: u64,
    status: Presence,
    installed_at: Option<u64>,
    source: Option<String>,
}

#[derive(Debug, Serialize)]
struct Component {
    component: String,
    manifest: PathBuf,
    archives: Vec<Archive>,
}

/// A recorded archive no manifest in its directory lists.
#[derive(Debug, Serialize)]
struct Orphan {
    filename: String,
    component: String,
    present: bool,
}

#[derive(Debug, Serialize)]
struct Dir {
    kpack_dir: PathBuf,
    components: Vec<Component>,
    orphans: Vec<Orphan>,
}

#[derive(Debug, Serialize)]
struct Output<'a> {
    kpack_dirs: Vec<Dir>,
    refused_manifests: &'a [RefusedManifest],
    warnings: Vec<String>,
}

/// Runs `list`.
pub fn run(args: &ListArgs) -> anyhow::Result<ExitStatus> {
    let scan = scan_config(&args.scan).scan();
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
        let archives = m
            .manifest
            .kpack_files
            .iter()
            .map(|f| {
                let recorded = state.and_then(|s| s.archives.get(&f.filename));
                let exists = m.archive_path(f).is_file();
                Archive {
                    filename: f.filename.clone(),
                    family: f.family.clone(),
                    architectures: f.architectures.clone(),
                    size: f.size,
                    status: match (exists, recorded.is_some()) {
                        (true, true) => Presence::Fetched,
                        (true, false) => Presence::Present,
                        (false, _) => Presence::Absent,
                    },
                    installed_at: recorded.filter(|_| exists).map(|e| e.installed_at),
                    source: recorded.filter(|_| exists).and_then(|e| e.source.clone()),
                }
            })
            .collect();
        if let Some(d) = dirs.get_mut(&m.kpack_dir) {
            d.components.push(Component {
                component: m.manifest.component.clone(),
                manifest: m.path.clone(),
                archives,
            });
        }
    }
    for (dir, state) in &states {
        for (name, entry) in &state.archives {
            let listed = scan
                .manifests
                .iter()
                .filter(|m| &m.kpack_dir == dir)
                .any(|m| m.manifest.kpack_files.iter().any(|f| &f.filename == name));
            if !listed {
                if let Some(d) = dirs.get_mut(dir) {
                    d.orphans.push(Orphan {
                        filename: name.clone(),
                        component: entry.component.clone(),
                        present: dir.join(name).is_file(),
                    });
                }
            }
        }
    }
    let out = Output {
        kpack_dirs: dirs.into_values().collect(),
        refused_manifests: &scan.refused,
        warnings,
    };
    if args.json {
        print_json(&out)?;
        return Ok(ExitStatus::Success);
    }
    print_warnings(&out.warnings);
    let mut text = String::new();
    if out.kpack_dirs.is_empty() {
        text.push_str("no .kpack directories found\n");
    }
    for d in &out.kpack_dirs {
        text.push_str(&format!("{}:\n", d.kpack_dir.display()));
        for c in &d.components {
            let name = c.manifest.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            text.push_str(&format!("  {} ({name}):\n", c.component));
            for a in &c.archives {
                let status = match a.status {
                    Presence::Fetched => "fetched",
                    Presence::Present => "present",
                    Presence::Absent => "absent",
                };
                text.push_str(&format!(
                    "    {status:<8} {}  {}  {}  [{}]\n",
                    a.filename,
                    a.family,
                    human_bytes(a.size),
                    a.architectures.join(", ")
                ));
            }
        }
        for o in &d.orphans {
            text.push_str(&format!(
                "  orphan   {} (component {}, no manifest lists it{}; `gc` removes it)\n",
                o.filename,
                o.component,
                if o.present { "" } else { ", file gone" }
            ));
        }
    }
    for r in out.refused_manifests {
        text.push_str(&format!("refused manifest {}: {}\n", r.path.display(), r.error));
    }
    print_text(&text)?;
    Ok(ExitStatus::Success)
}
