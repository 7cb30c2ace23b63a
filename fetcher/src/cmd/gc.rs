//! `rocm-kpack-fetch gc`: archives this tool installed that are no longer
//! needed: no installed manifest lists them any more (the package was
//! removed), or no local target may load them (the GPU was removed). Lists
//! them; removes them only with `--yes`.

use serde::Serialize;

use super::{
    apply_removals, load_states, local_targets, no_targets_message, print_json, print_text,
    print_warnings, scan_config, Removal,
};
use crate::cli::GcArgs;
use crate::resolve::needs;
use crate::ExitStatus;

#[derive(Debug, Serialize)]
struct Output {
    targets: Vec<String>,
    candidates: Vec<Removal>,
    removed: Vec<std::path::PathBuf>,
    dry_run: bool,
    warnings: Vec<String>,
}

/// Runs `gc`.
pub fn run(args: &GcArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    if local.ids.is_empty() {
        eprintln!("{}", no_targets_message(&local.detection));
        eprintln!("not collecting anything: with no targets every archive would go; pass --arch LIST to say what to keep");
        return Ok(ExitStatus::NoGpu);
    }
    let scan = scan_config(&args.scan).scan();
    let mut warnings = local.detection.warnings.clone();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut candidates = Vec::new();
    for (dir, state) in &states {
        let manifests: Vec<_> = scan.manifests.iter().filter(|m| &m.kpack_dir == dir).collect();
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
                    if needs(&m.manifest, &local.ids).archives.iter().any(|n| n.index == i) {
                        continue;
                    }
                    format!("no local target ({}) may load it", local.detection.targets.join(", "))
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
    let removed = if args.yes { apply_removals(&candidates)? } else { Vec::new() };
    let out = Output {
        targets: local.detection.targets.clone(),
        candidates,
        removed,
        dry_run: !args.yes,
        warnings,
    };
    if args.json {
        print_json(&out)?;
        return Ok(ExitStatus::Success);
    }
    print_warnings(&out.warnings);
    let mut text = String::new();
    for c in &out.candidates {
        let verb = if args.yes { "removed" } else { "would remove" };
        text.push_str(&format!("{verb} {}: {}\n", c.path().display(), c.reason));
    }
    if out.candidates.is_empty() {
        text.push_str("nothing to collect\n");
    } else if !args.yes {
        text.push_str("pass --yes to remove them\n");
    }
    print_text(&text)?;
    Ok(ExitStatus::Success)
}
