//! `rocm-kpack-fetch list`: [`ops::list`] as text or JSON.

use rocm_kpack_cli::iec_size;
use rocm_kpack_cli::{print_json, print_stdout, ExitStatus};
use rocm_kpack_fetch::ops::{self, list::Presence};

use super::{print_warnings, scan_config};
use crate::cli::ListArgs;

/// Runs `list`.
pub fn run(args: &ListArgs) -> anyhow::Result<ExitStatus> {
    let out = ops::list::list(&scan_config(&args.scan).scan());
    if args.json.enabled {
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
            let name = c
                .manifest
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            text.push_str(&format!("  {} ({name}):\n", c.component));
            for a in c.archives.iter().chain(&c.databases) {
                let status = match a.status {
                    Presence::Fetched => "fetched",
                    Presence::Present => "present",
                    Presence::Absent => "absent",
                };
                text.push_str(&format!(
                    "    {status:<8} {}  {}  {}  [{}]\n",
                    a.filename,
                    a.family,
                    iec_size(a.size),
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
    for r in &out.refused_manifests {
        text.push_str(&format!(
            "refused manifest {}: {}\n",
            r.path.display(),
            r.error
        ));
    }
    print_stdout(&text)?;
    Ok(ExitStatus::Success)
}
