//! Split build artifact directories (docs/packaging.md input 3): a directory
//! `<name>_<component>_<suffix>/` whose `artifact_manifest.txt` lists stage
//! prefixes (`math-libs/rocRAND/stage`), content living under them.
//!
//! Output: `<name>_<component>_generic/` (host-only files under the same
//! prefixes, `.kpack/<name>_<component>.kpm` in every prefix holding split
//! binaries) and one `<name>_<component>_<tree>/` per device tree (a
//! group, or a generic ISA: [`rocm_kpack_pkgspec::Spec::placement`]) holding
//! its archives `.kpack/<name>_<component>_<processor>.kpack` in the first
//! such prefix, plus its database files, each with its own
//! `artifact_manifest.txt`. All binaries of an artifact share one archive
//! set; archive keys are artifact-relative paths
//! (`math-libs/rocRAND/stage/lib/librocrand.so.1.1#0`), markers point at
//! their own prefix's `.kpack/`. [`crate::split::batch`] splits every
//! artifact directory under a parent this way.
//!
//! Over [`crate::split::engine`]: [`split_artifact`] starts a run, plans the
//! artifact ([`plan_artifact`]) and has the engine execute and commit it.

use std::fs;
use std::path::Path;

use rocm_kpack_pkgspec::DatabaseClassifier;

use crate::split::engine::{EngineError, Result, Run, SplitOptions, SplitReport};
use crate::split::plan::{self, KpackMode, Layout, Root, SplitPlan};
use crate::split::scan::{self, Scan};

pub use crate::split::engine::MANIFEST_TXT;

/// Whether `dir` is an artifact directory (has `artifact_manifest.txt`).
pub fn is_artifact_dir(dir: &Path) -> bool {
    dir.join(MANIFEST_TXT).is_file()
}

/// Splits an artifact directory name `<name>_<component>_<suffix>` at its
/// last `_`: (`<name>_<component>`, suffix). `blas_lib_gfx110X-dgpu` ->
/// (`blas_lib`, `gfx110X-dgpu`).
pub fn parse_artifact_name(dir_name: &str) -> Option<(&str, &str)> {
    let (prefix, suffix) = dir_name.rsplit_once('_')?;
    (!prefix.is_empty() && !suffix.is_empty()).then_some((prefix, suffix))
}

/// Reads and checks `artifact_manifest.txt`: one relative prefix per line
/// (blank lines and `#` comments skipped); `..`, absolute paths, duplicates
/// and nested prefixes are errors.
pub fn read_prefixes(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join(MANIFEST_TXT);
    let text = fs::read_to_string(&path).map_err(|e| EngineError::Input {
        path: path.clone(),
        why: format!("cannot be read: {e}"),
    })?;
    let mut out: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let p = line.trim();
        if p.is_empty() || p.starts_with('#') {
            continue;
        }
        let p = p.trim_end_matches('/');
        let bad = |why: &str| EngineError::Input {
            path: path.clone(),
            why: format!("line {}: prefix {p:?} {why}", n + 1),
        };
        if p.starts_with('/') || !p.split('/').all(|c| !matches!(c, "" | "." | "..")) {
            return Err(bad("must be a relative path without `.` or `..`"));
        }
        for q in &out {
            if q == p {
                return Err(bad("is listed twice"));
            }
            if p.starts_with(&format!("{q}/")) || q.starts_with(&format!("{p}/")) {
                return Err(bad(&format!("overlaps prefix {q:?}")));
            }
        }
        out.push(p.to_string());
    }
    Ok(out)
}

/// Splits the artifact directory `input` into `out` (see the module docs).
pub fn split_artifact(input: &Path, out: &Path, opts: &SplitOptions) -> Result<SplitReport> {
    opts.spec.validate()?;
    let run = Run::start(&[input], out, opts, &[])?;
    let report = split_one(input, &run, opts)?;
    run.commit(report, input, out)
}

/// Plans one artifact and has `run` execute it into its staging directory.
pub(crate) fn split_one(input: &Path, run: &Run, opts: &SplitOptions) -> Result<SplitReport> {
    let plan = run.work().install(|| plan_artifact(input, opts))?;
    run.execute(&plan, opts)
}

/// The plan for splitting one artifact directory (nothing is written).
pub fn plan_artifact(input: &Path, opts: &SplitOptions) -> Result<SplitPlan> {
    if !is_artifact_dir(input) {
        return Err(EngineError::Input {
            path: input.to_path_buf(),
            why: format!("is not an artifact directory (no {MANIFEST_TXT})"),
        });
    }
    let dir_name = input
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let component = match &opts.component {
        Some(c) => c.clone(),
        None => parse_artifact_name(&dir_name)
            .map(|(p, _)| p.to_string())
            .ok_or_else(|| EngineError::Input {
                path: input.to_path_buf(),
                why: "name is not <name>_<component>_<suffix>; pass --component NAME_COMPONENT"
                    .into(),
            })?,
    };
    let layout = Layout::Artifact {
        prefix: component.clone(),
    };
    let prefixes = read_prefixes(input)?;
    let classifier = DatabaseClassifier::new(&opts.spec)?;
    let mut warnings = Vec::new();
    let mut scans: Vec<(String, Scan)> = Vec::new();
    for p in &prefixes {
        let dir = input.join(p);
        if !dir.is_dir() {
            warnings.push(format!(
                "{}: stage prefix {p} does not exist; skipped",
                input.display()
            ));
            continue;
        }
        scans.push((p.clone(), scan::scan(&dir, &classifier)?));
    }
    // Files outside every prefix are not part of the artifact.
    for item in walkdir::WalkDir::new(input)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
    {
        let Ok(item) = item else { continue };
        let rel = item.path().strip_prefix(input).unwrap_or(item.path());
        let rel_s = rel.to_string_lossy();
        if rel_s == MANIFEST_TXT || item.file_type().is_dir() {
            continue;
        }
        let covered = prefixes.iter().any(|p| rel_s.starts_with(&format!("{p}/")));
        if !covered {
            warnings.push(format!(
                "{}: {rel_s} is under no stage prefix; ignored",
                input.display()
            ));
        }
    }
    let roots: Vec<Root<'_>> = scans
        .iter()
        .map(|(p, s)| Root {
            prefix: p.clone(),
            scan: s,
        })
        .collect();
    let mut plan = plan::plan(
        &roots,
        layout,
        &KpackMode::Artifact { component },
        &opts.spec,
    )?;
    // The directories above each prefix keep their modes and times too.
    for p in &plan.prefixes.clone() {
        let mut acc = String::new();
        for part in p.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            if plan.dirs.contains_key(&acc) {
                continue;
            }
            if let Ok(m) = fs::metadata(input.join(&acc)) {
                use std::os::unix::fs::PermissionsExt;
                plan.dirs.insert(
                    acc.clone(),
                    (
                        m.permissions().mode() & 0o7777,
                        filetime::FileTime::from_last_modification_time(&m),
                    ),
                );
            }
        }
    }
    plan.warnings.extend(warnings);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names() {
        assert_eq!(
            parse_artifact_name("rand_lib_gfx90X"),
            Some(("rand_lib", "gfx90X"))
        );
        assert_eq!(
            parse_artifact_name("blas_lib_gfx110X-dgpu"),
            Some(("blas_lib", "gfx110X-dgpu"))
        );
        assert_eq!(
            parse_artifact_name("amd-llvm_lib_generic"),
            Some(("amd-llvm_lib", "generic"))
        );
        assert_eq!(parse_artifact_name("plain"), None);
        assert_eq!(parse_artifact_name("_x"), None);
    }

    #[test]
    fn prefixes_are_checked() {
        let d = tempfile::tempdir().expect("tempdir");
        let write = |s: &str| fs::write(d.path().join(MANIFEST_TXT), s).expect("write");
        write("math-libs/rocRAND/stage\n\n# c\nmath-libs/hipRAND/stage/\n");
        assert_eq!(
            read_prefixes(d.path()).expect("ok"),
            ["math-libs/rocRAND/stage", "math-libs/hipRAND/stage"]
        );
        for bad in ["../x\n", "/abs\n", "a/./b\n", "a\na\n", "a\na/b\n"] {
            write(bad);
            assert!(read_prefixes(d.path()).is_err(), "{bad:?}");
        }
    }
}
