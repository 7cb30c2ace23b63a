//! Split an install tree: every fat binary into a host-only binary plus
//! per-processor archives, kernel databases to their device tree, everything
//! else copied as is (symlinks as symlinks, hard links as hard links, modes
//! and mtimes kept). The output `OUT/generic/` and `OUT/<tree>/` trees
//! (a group's, holding `<component>_<processor>.kpack` for each of its
//! processors, or a generic ISA's, holding `<component>_<generic-isa>.kpack`)
//! occupy disjoint paths and overlay into a working install.
//!
//! Over [`crate::split::engine`]: [`split_tree`] starts a run, plans the
//! tree ([`plan_tree`]: [`crate::split::scan`] -> [`crate::split::plan`])
//! and has the engine execute and commit it.

use std::fs;
use std::path::Path;

use rocm_kpack_pkgspec::DatabaseClassifier;

use crate::split::engine::{EngineError, Result, Run, SplitOptions, SplitReport};
use crate::split::plan::{self, KpackMode, Layout, Root, SplitPlan};
use crate::split::scan;

/// Splits the install tree `input` into `out/generic/` and `out/<tree>/`
/// (see the module docs). `out` is created if missing and must not hold
/// those names yet.
pub fn split_tree(input: &Path, out: &Path, opts: &SplitOptions) -> Result<SplitReport> {
    let meta = fs::metadata(input).map_err(|e| EngineError::Input {
        path: input.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    if !meta.is_dir() {
        return Err(EngineError::Input {
            path: input.to_path_buf(),
            why: "is not a directory (use `rocm-kpack split-binary` for one file)".into(),
        });
    }
    opts.spec.validate()?;
    // `generic` is refused before the (long) scan, not after it.
    let run = Run::start(&[input], out, opts, &["generic"])?;
    let plan = run.work().install(|| plan_tree(input, opts))?;
    let report = run.execute(&plan, opts)?;
    run.commit(report, input, out)
}

/// The plan for splitting the install tree `input` (nothing is written).
pub fn plan_tree(input: &Path, opts: &SplitOptions) -> Result<SplitPlan> {
    let classifier = DatabaseClassifier::new(&opts.spec)?;
    let scan = scan::scan(input, &classifier)?;
    Ok(plan::plan(
        &[Root {
            prefix: String::new(),
            scan: &scan,
        }],
        Layout::Tree,
        &KpackMode::Tree {
            component: opts.component.clone(),
            prefix_dirs: opts
                .prefix_dirs
                .iter()
                .map(|p| p.trim_matches('/').to_string())
                .collect(),
        },
        &opts.spec,
    )?)
}
