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
//! their own prefix's `.kpack/`. With `--batch`, every artifact directory
//! under a parent is split this way (`*_generic` ones have no device code
//! and are skipped, as the reference splitter does).

use std::fs;
use std::path::Path;

use rocm_kpack_pkgspec::DatabaseClassifier;

use crate::budget::Work;
use crate::split::plan::{self, KpackMode, Layout, Root, SplitPlan};
use crate::split::scan::{self, Scan};
use crate::split::tree::{execute, Result, SplitOptions, SplitReport, Staging, TreeError};

/// The file listing an artifact's stage prefixes.
pub const MANIFEST_TXT: &str = "artifact_manifest.txt";

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
    let text = fs::read_to_string(&path).map_err(|e| TreeError::Input {
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
        let bad = |why: &str| TreeError::Input {
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
    let staging = Staging::new(&[input], out, opts.output.replace_existing)?;
    let work = opts.work()?;
    let mut report = split_one(input, &staging, opts, &work)?;
    staging.publish()?;
    report.input = input.to_path_buf();
    report.output = out.to_path_buf();
    Ok(report)
}

/// Splits every artifact directory under `parent` into `out`. Generic
/// artifacts (`*_generic`) are skipped; two artifacts of one
/// `<name>_<component>` are an error (split them separately and
/// `recombine`).
pub fn split_batch(parent: &Path, out: &Path, opts: &SplitOptions) -> Result<SplitReport> {
    if opts.component.is_some() {
        return Err(TreeError::Invalid(
            "--component cannot be used with --batch (each artifact's name gives its component)"
                .into(),
        ));
    }
    opts.spec.validate()?;
    let (artifacts, skipped) = batch_list(parent)?;
    let staging = Staging::new(&[parent], out, opts.output.replace_existing)?;
    let work = opts.work()?;
    let mut report = SplitReport::default();
    for (_, _, path) in &artifacts {
        report.absorb(split_one(path, &staging, opts, &work)?);
    }
    staging.publish()?;
    report.warnings.extend(skipped);
    report.input = parent.to_path_buf();
    report.output = out.to_path_buf();
    Ok(report)
}

type BatchList = (Vec<(String, String, std::path::PathBuf)>, Vec<String>);

fn batch_list(parent: &Path) -> Result<BatchList> {
    let mut artifacts = Vec::new();
    let mut skipped = Vec::new();
    let list = fs::read_dir(parent).map_err(|e| TreeError::Input {
        path: parent.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    for item in list {
        let item = item.map_err(|e| TreeError::io("cannot list", parent, e))?;
        let path = item.path();
        let name = item.file_name().to_string_lossy().into_owned();
        if !path.is_dir() || !is_artifact_dir(&path) {
            continue;
        }
        match parse_artifact_name(&name) {
            Some((_, "generic")) => {
                skipped.push(format!("{name}: generic artifact, no device code; skipped"))
            }
            Some((prefix, _)) => artifacts.push((name.clone(), prefix.to_string(), path)),
            None => {
                return Err(TreeError::Input {
                    path,
                    why: "artifact directory name is not <name>_<component>_<suffix>".into(),
                })
            }
        }
    }
    artifacts.sort();
    if artifacts.is_empty() {
        return Err(TreeError::Input {
            path: parent.to_path_buf(),
            why: "holds no artifact directory (a subdirectory with artifact_manifest.txt) to split"
                .into(),
        });
    }
    for pair in artifacts.windows(2) {
        if let [a, b] = pair {
            if a.1 == b.1 {
                return Err(TreeError::Input {
                    path: parent.to_path_buf(),
                    why: format!(
                        "artifacts {} and {} would both produce {}_generic; split them separately and recombine",
                        a.0, b.0, a.1
                    ),
                });
            }
        }
    }
    Ok((artifacts, skipped))
}

/// Plans and executes one artifact into the staging directory.
fn split_one(
    input: &Path,
    staging: &Staging,
    opts: &SplitOptions,
    work: &Work,
) -> Result<SplitReport> {
    let plan = work.install(|| plan_artifact(input, opts))?;
    staging.check_free(&plan.layout.dir_name(&plan::Dest::Generic))?;
    execute(&plan, staging.path(), opts, work)
}

/// The plan for splitting one artifact directory (nothing is written).
pub fn plan_artifact(input: &Path, opts: &SplitOptions) -> Result<SplitPlan> {
    if !is_artifact_dir(input) {
        return Err(TreeError::Input {
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
            .ok_or_else(|| TreeError::Input {
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

/// The artifact directories `split_batch` would split under `parent`
/// (sorted), and notes on the ones it skips.
pub fn batch_inputs(parent: &Path) -> Result<(Vec<std::path::PathBuf>, Vec<String>)> {
    let (artifacts, skipped) = batch_list(parent)?;
    Ok((artifacts.into_iter().map(|(_, _, p)| p).collect(), skipped))
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
