//! `verify`: re-hash every present archive and database file of every
//! installed manifest and compare size and sha256; an archive this tool installed that has
//! disappeared is a problem too. An archive that differs from the
//! manifest's sha256 but whose manifest lists a transport form may have
//! been rebuilt here at another frame level: its transport stream is
//! computed again from the file (every frame decoded, every byte and the
//! TOC hashed) and compared with the manifest's transport sha256, so the
//! check covers every byte the loader reads, whatever the state file says.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::load_states;
use crate::resolve::{RefusedManifest, Scan};
use crate::unlisted::BinaryCoverage;
use rocm_kpack_format::archive::transport::transport_summary;
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::manifest::ArchiveTransport;
use rocm_kpack_fs::sha256_regular;

/// Result for one archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Size and sha256 match the manifest.
    Ok,
    /// Rebuilt here from its transport form (its frames differ from the
    /// published archive's): every code object decoded and hashed with the
    /// TOC, and the result is the manifest's transport sha256.
    Rebuilt,
    /// Size matches; the (legacy) manifest has no sha256 to check.
    SizeOnly,
    /// Present but different from the manifest.
    Damaged,
    /// Installed by rocm-kpack-fetch, now gone.
    Missing,
    /// Could not be read.
    Unreadable,
}

impl Verdict {
    /// Damaged, missing or unreadable.
    pub fn is_problem(self) -> bool {
        matches!(
            self,
            Verdict::Damaged | Verdict::Missing | Verdict::Unreadable
        )
    }
}

/// One archive checked.
#[derive(Debug, Serialize)]
pub struct Checked {
    /// Manifest component.
    pub component: String,
    /// The archive.
    pub path: PathBuf,
    /// How it came out.
    pub verdict: Verdict,
    /// Why, when not plainly ok.
    pub detail: Option<String>,
}

/// What `verify` found (its `--json` output).
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// Every present (or missing) archive.
    pub archives: Vec<Checked>,
    /// Listed archives that are not installed (and were not by this tool).
    pub not_installed: usize,
    /// Host binaries of trees without a `.kpm`, checked for the targets
    /// (detected or `--target`): what the loader finds ([`crate::unlisted`]).
    pub unlisted: Vec<BinaryCoverage>,
    /// Problem archives, refused manifests and target settings of
    /// `unlisted` without an archive.
    pub problems: usize,
    /// Manifests that could not be read.
    pub refused_manifests: Vec<RefusedManifest>,
    /// Unreadable state files.
    pub warnings: Vec<String>,
}

/// An archive that is not the published one, checked as one rebuilt from
/// the manifest's transport form (`size` and `sha256` of its stream).
fn check_rebuilt(path: &Path, (size, sha256): (u64, [u8; 32])) -> (Verdict, Option<String>) {
    let summary = Archive::open(path).and_then(|a| transport_summary(&a));
    match summary {
        Ok(s) if s.size == size && s.sha256 == sha256 => (
            Verdict::Rebuilt,
            Some("rebuilt locally; content and TOC checked against the manifest's transport sha256".into()),
        ),
        Ok(s) => (
            Verdict::Damaged,
            Some(format!(
                "neither the published archive nor one rebuilt from its transport form: content and TOC hash to {} ({} bytes), the manifest's transport is {} ({} bytes)",
                hex::encode(s.sha256),
                s.size,
                hex::encode(sha256),
                size
            )),
        ),
        Err(e) => (
            Verdict::Damaged,
            Some(format!(
                "neither the published archive nor one rebuilt from its transport form: {e}"
            )),
        ),
    }
}

/// Checks every archive the manifests of `scan` list; `unlisted` is the
/// coverage of the host binaries without a manifest
/// ([`crate::unlisted::check`], empty without targets).
pub fn verify(scan: &Scan, unlisted: Vec<BinaryCoverage>) -> VerifyReport {
    let mut warnings = Vec::new();
    let states = load_states(&scan.kpack_dirs, &mut warnings);
    let mut archives = Vec::new();
    let mut not_installed = 0;
    for m in &scan.manifests {
        let state = states.get(&m.kpack_dir);
        // (path, recorded as installed by this tool, size, sha256,
        // transport form).
        let archives_of = m.manifest.kpack_files.iter().map(|f| {
            let recorded = state.is_some_and(|s| s.archives.contains_key(&f.filename));
            let transport = match &f.transport {
                Some(ArchiveTransport::Solid { size, sha256, .. }) => Some((*size, *sha256)),
                _ => None,
            };
            (m.archive_path(f), recorded, f.size, f.sha256, transport)
        });
        let databases_of = m.manifest.database_files.iter().map(|f| {
            let recorded = state.is_some_and(|s| s.databases.contains_key(&f.path));
            (
                m.database_path(&f.path),
                recorded,
                f.size,
                Some(f.sha256),
                None,
            )
        });
        for (path, recorded, size, sha256, transport) in archives_of.chain(databases_of) {
            let (verdict, detail) = if !path.exists() {
                if recorded {
                    (
                        Verdict::Missing,
                        Some("installed by rocm-kpack-fetch, now gone".to_string()),
                    )
                } else {
                    not_installed += 1;
                    continue;
                }
            } else {
                match sha256_regular(&path) {
                    Err(e) => (Verdict::Unreadable, Some(e.to_string())),
                    Ok((len, actual)) => match (sha256, transport) {
                        (Some(want), Some(t)) if want != actual => check_rebuilt(&path, t),
                        _ if len != size => (
                            Verdict::Damaged,
                            Some(format!("{len} bytes, manifest says {size}")),
                        ),
                        (None, _) => (Verdict::SizeOnly, Some("legacy manifest: no sha256".into())),
                        (Some(want), _) if want == actual => (Verdict::Ok, None),
                        (Some(want), _) => (
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
    let problems = archives.iter().filter(|c| c.verdict.is_problem()).count()
        + scan.refused.len()
        + unlisted.iter().map(|b| b.missing.len()).sum::<usize>();
    VerifyReport {
        archives,
        not_installed,
        unlisted,
        problems,
        refused_manifests: scan.refused.clone(),
        warnings,
    }
}
