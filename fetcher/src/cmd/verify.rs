//! `rocm-kpack-fetch verify`: re-hash every present archive of every
//! installed manifest and compare size and sha256; an archive this tool
//! installed that has disappeared is a problem too. Exit 4 on problems.

use std::path::PathBuf;

use serde::Serialize;

use super::{load_states, print_json, print_text, print_warnings, scan_config};
use crate::cli::VerifyArgs;
use crate::install::hash_file;
use crate::ExitStatus;

/// Result for one archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Size and sha256 match the manifest.
    Ok,
    /// Size matches; the (legacy) manifest has no sha256 to check.
    SizeOnly,
    /// Present but different from the manifest.
    Damaged,
    /// Installed by rocm-kpack-fetch, now gone.
    Missing,
    /// Could not be read.
    Unreadable,
}

#[derive(Debug, Serialize)]
struct Checked {
    component: String,
    path: PathBuf,
    verdict: Verdict,
    detail: Option<String>,
}

#[derive(Debug, Serialize)]
struct Output {
    archives: Vec<Checked>,
    /// Listed archives that are not installed (and were not by this tool).
    not_installed: usize,
    problems: usize,
    refused_manifests: Vec<crate::resolve::RefusedManifest>,
    warnings: Vec<String>,
}

/// Runs `verify`.
pub fn run(args: &VerifyArgs) -> anyhow::Result<ExitStatus> {
    let scan = scan_config(&args.scan).scan();
    let mut warnings = Vec::new();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut archives = Vec::new();
    let mut not_installed = 0;
    for m in &scan.manifests {
        let state = states.get(&m.kpack_dir);
        for f in &m.manifest.kpack_files {
            let path = m.archive_path(f);
            let (verdict, detail) = if !path.exists() {
                if state.is_some_and(|s| s.archives.contains_key(&f.filename)) {
                    (Verdict::Missing, Some("installed by rocm-kpack-fetch, now gone".to_string()))
                } else {
                    not_installed += 1;
                    continue;
                }
            } else {
                match hash_file(&path) {
                    Err(e) => (Verdict::Unreadable, Some(e.to_string())),
                    Ok((len, _)) if len != f.size => (
                        Verdict::Damaged,
                        Some(format!("{len} bytes, manifest says {}", f.size)),
                    ),
                    Ok((_, actual)) => match f.sha256 {
                        None => (Verdict::SizeOnly, Some("legacy manifest: no sha256".into())),
                        Some(want) if want == actual => (Verdict::Ok, None),
                        Some(want) => (
                            Verdict::Damaged,
                            Some(format!(
                                "sha256 {}, manifest says {}",
                                hex::encode(actual),
                                hex::encode(want)
                            )),
                        ),
                    },
                }
            };
            archives.push(Checked {
                component: m.manifest.component.clone(),
                path,
                verdict,
                detail,
            });
        }
    }
    let problems = archives
        .iter()
        .filter(|c| matches!(c.verdict, Verdict::Damaged | Verdict::Missing | Verdict::Unreadable))
        .count()
        + scan.refused.len();
    let out = Output {
        archives,
        not_installed,
        problems,
        refused_manifests: scan.refused.clone(),
        warnings,
    };
    if args.json {
        print_json(&out)?;
    } else {
        print_warnings(&out.warnings);
        let mut text = String::new();
        for c in &out.archives {
            let word = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::SizeOnly => "size-ok",
                Verdict::Damaged => "DAMAGED",
                Verdict::Missing => "MISSING",
                Verdict::Unreadable => "UNREADABLE",
            };
            match &c.detail {
                Some(d) => text.push_str(&format!("{word:<10} {}: {d}\n", c.path.display())),
                None => text.push_str(&format!("{word:<10} {}\n", c.path.display())),
            }
        }
        for r in &out.refused_manifests {
            text.push_str(&format!("REFUSED    {}: {}\n", r.path.display(), r.error));
        }
        text.push_str(&format!(
            "verified {} archive(s): {} problem(s); {} listed archive(s) not installed\n",
            out.archives.len(),
            out.problems,
            out.not_installed
        ));
        print_text(&text)?;
    }
    Ok(if out.problems > 0 {
        ExitStatus::Problems
    } else {
        ExitStatus::Success
    })
}
