//! `rocm-kpack-fetch remove NAME...`: remove archives this tool installed,
//! chosen by component or by archive file name. Files a package installed
//! are never removed (the package manager owns them).

use serde::Serialize;

use super::{apply_removals, load_states, print_json, print_text, print_warnings, scan_config, Removal};
use crate::cli::RemoveArgs;
use crate::ExitStatus;

#[derive(Debug, Serialize)]
struct Output {
    removed: Vec<std::path::PathBuf>,
    warnings: Vec<String>,
}

/// Runs `remove`.
pub fn run(args: &RemoveArgs) -> anyhow::Result<ExitStatus> {
    let scan = scan_config(&args.scan).scan();
    let mut warnings = Vec::new();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut chosen = Vec::new();
    let mut problems = Vec::new();
    for name in &args.names {
        let mut matched = false;
        for (dir, state) in &states {
            for (filename, entry) in &state.archives {
                if filename == name || &entry.component == name {
                    matched = true;
                    chosen.push(Removal {
                        kpack_dir: dir.clone(),
                        filename: filename.clone(),
                        component: entry.component.clone(),
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
            format!("{name}: no archive or component of that name was installed by rocm-kpack-fetch")
        });
    }
    let removed = apply_removals(&chosen)?;
    let out = Output { removed, warnings };
    if args.json {
        print_json(&out)?;
    } else {
        print_warnings(&out.warnings);
        let text: String = out
            .removed
            .iter()
            .map(|p| format!("removed {}\n", p.display()))
            .collect();
        print_text(&text)?;
    }
    if !problems.is_empty() {
        anyhow::bail!(problems.join("\n"));
    }
    Ok(ExitStatus::Success)
}
