//! One entry point for `split`: what the input is (an install tree, a build
//! artifact directory, or a directory of artifact directories) is decided
//! here, once, and the command makes one call, planning or splitting.

use std::path::{Path, PathBuf};

use crate::split::artifact::{is_artifact_dir, plan_artifact, split_artifact};
use crate::split::batch::{batch_inputs, split_batch};
use crate::split::engine::{EngineError, Result, SplitOptions, SplitReport};
use crate::split::plan::SplitPlan;
use crate::split::tree::{plan_tree, split_tree};

/// What a split reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitInput {
    /// An install tree (an /opt/rocm layout, an extracted package).
    Tree(PathBuf),
    /// One build artifact directory (`<name>_<component>_<suffix>/` with
    /// `artifact_manifest.txt`).
    Artifact(PathBuf),
    /// A directory whose artifact directories are split one by one.
    Batch(PathBuf),
}

impl SplitInput {
    /// Classifies `input`; `batch` asks for every artifact directory under
    /// it. A missing input is an error here, before any output is made.
    pub fn detect(input: &Path, batch: bool) -> Result<Self> {
        if !input.exists() {
            return Err(EngineError::Input {
                path: input.to_path_buf(),
                why: "no such file or directory".into(),
            });
        }
        let input = input.to_path_buf();
        Ok(if batch {
            SplitInput::Batch(input)
        } else if is_artifact_dir(&input) {
            SplitInput::Artifact(input)
        } else {
            // A run that finds nothing is an error that says where it
            // looked, not an empty generic/ and exit 0.
            if input.is_dir() && !holds_an_entry(&input)? {
                return Err(EngineError::Input {
                    path: input,
                    why: "holds no file, symlink or artifact directory to split (searched the whole tree)"
                        .into(),
                });
            }
            SplitInput::Tree(input)
        })
    }
}

/// Whether anything but directories lies at or below `dir` (symlinks are
/// not followed).
fn holds_an_entry(dir: &Path) -> Result<bool> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let list = std::fs::read_dir(&d).map_err(|e| EngineError::io("cannot list", &d, e))?;
        for item in list {
            let item = item.map_err(|e| EngineError::io("cannot list", &d, e))?;
            let kind = item
                .file_type()
                .map_err(|e| EngineError::io("cannot stat", &item.path(), e))?;
            if kind.is_dir() {
                todo.push(item.path());
            } else {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A split to plan or to run.
#[derive(Debug)]
pub struct SplitRequest {
    pub input: SplitInput,
    /// Where the output trees go (ignored by a dry run).
    pub out: PathBuf,
    pub options: SplitOptions,
    /// Plan only: write nothing.
    pub dry_run: bool,
}

/// What a [`SplitRequest`] did: planned or split.
#[derive(Debug)]
pub enum RequestOutcome {
    /// A dry run: the plan of every input, and notes on the artifact
    /// directories a batch skips.
    Planned {
        plans: Vec<SplitPlan>,
        notes: Vec<String>,
    },
    /// The outputs written.
    Split(SplitReport),
}

/// Plans or runs `request`.
pub fn split(request: &SplitRequest) -> Result<RequestOutcome> {
    let opts = &request.options;
    if request.dry_run {
        let (plans, notes) = match &request.input {
            SplitInput::Batch(dir) => {
                let (inputs, notes) = batch_inputs(dir)?;
                let plans = inputs
                    .iter()
                    .map(|i| plan_artifact(i, opts))
                    .collect::<Result<_>>()?;
                (plans, notes)
            }
            SplitInput::Artifact(dir) => (vec![plan_artifact(dir, opts)?], Vec::new()),
            SplitInput::Tree(dir) => (vec![plan_tree(dir, opts)?], Vec::new()),
        };
        return Ok(RequestOutcome::Planned { plans, notes });
    }
    let out = &request.out;
    let report = match &request.input {
        SplitInput::Batch(dir) => split_batch(dir, out, opts)?,
        SplitInput::Artifact(dir) => split_artifact(dir, out, opts)?,
        SplitInput::Tree(dir) => split_tree(dir, out, opts)?,
    };
    Ok(RequestOutcome::Split(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_input_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        let err = SplitInput::detect(&missing, false).expect_err("missing input");
        assert!(err.to_string().contains("no such file"), "{err}");
    }

    #[test]
    fn an_empty_tree_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        let err = SplitInput::detect(dir.path(), false).expect_err("empty");
        assert!(
            err.to_string().contains(&dir.path().display().to_string())
                && err.to_string().contains("searched the whole tree"),
            "{err}"
        );
    }

    #[test]
    fn batch_wins_over_detection_and_a_plain_directory_is_a_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), "x").expect("write");
        assert_eq!(
            SplitInput::detect(dir.path(), true).expect("batch"),
            SplitInput::Batch(dir.path().to_path_buf())
        );
        assert_eq!(
            SplitInput::detect(dir.path(), false).expect("tree"),
            SplitInput::Tree(dir.path().to_path_buf())
        );
    }
}
