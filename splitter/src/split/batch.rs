//! Split every artifact directory under a parent (`split --batch`): each
//! is planned and executed as [`crate::split::artifact`] does, all into one
//! run of [`crate::split::engine`] so they publish together. `*_generic`
//! ones have no device code and are skipped, as the reference splitter
//! does.

use std::fs;
use std::path::{Path, PathBuf};

use crate::split::artifact::{is_artifact_dir, parse_artifact_name, split_one};
use crate::split::engine::{EngineError, Result, Run, SplitOptions, SplitReport};

/// Splits every artifact directory under `parent` into `out`. Generic
/// artifacts (`*_generic`) are skipped; two artifacts of one
/// `<name>_<component>` are an error (split them separately and
/// `recombine`).
pub fn split_batch(parent: &Path, out: &Path, opts: &SplitOptions) -> Result<SplitReport> {
    if opts.component.is_some() {
        return Err(EngineError::Invalid(
            "--component cannot be used with --batch (each artifact's name gives its component)"
                .into(),
        ));
    }
    opts.spec.validate()?;
    let (artifacts, skipped) = batch_list(parent)?;
    let run = Run::start(&[parent], out, opts, &[])?;
    let mut report = SplitReport::default();
    for (_, _, path) in &artifacts {
        report.absorb(split_one(path, &run, opts)?);
    }
    report.warnings.extend(skipped);
    run.commit(report, parent, out)
}

type BatchList = (Vec<(String, String, PathBuf)>, Vec<String>);

fn batch_list(parent: &Path) -> Result<BatchList> {
    let mut artifacts = Vec::new();
    let mut skipped = Vec::new();
    let list = fs::read_dir(parent).map_err(|e| EngineError::Input {
        path: parent.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    for item in list {
        let item = item.map_err(|e| EngineError::io("cannot list", parent, e))?;
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
                return Err(EngineError::Input {
                    path,
                    why: "artifact directory name is not <name>_<component>_<suffix>".into(),
                })
            }
        }
    }
    artifacts.sort();
    if artifacts.is_empty() {
        return Err(EngineError::Input {
            path: parent.to_path_buf(),
            why: "holds no artifact directory (a subdirectory with artifact_manifest.txt) to split"
                .into(),
        });
    }
    for pair in artifacts.windows(2) {
        if let [a, b] = pair {
            if a.1 == b.1 {
                return Err(EngineError::Input {
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

/// The artifact directories `split_batch` would split under `parent`
/// (sorted), and notes on the ones it skips.
pub fn batch_inputs(parent: &Path) -> Result<(Vec<PathBuf>, Vec<String>)> {
    let (artifacts, skipped) = batch_list(parent)?;
    Ok((artifacts.into_iter().map(|(_, _, p)| p).collect(), skipped))
}
