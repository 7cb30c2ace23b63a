//! `rocm-kpack verify TREE [--target gfx1100,...] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_splitter::split::verify::{verify_tree, VerifyOptions};

/// Check an installed (overlaid) tree the way the runtime will use it.
///
/// Every split binary's marker must resolve, through its .kpm manifest and
/// @GFXARCH@ pattern, to an archive entry for every wrapper and every
/// target; every archive entry must belong to a binary whose marker reaches
/// it; every .kpm entry must match its archive's size and sha256; an
/// archive no .kpm lists must be one a marker's @GFXARCH@ pattern reaches
/// (as in overlaid shard outputs, or trees without a .kpm) and hold only
/// code its name stands for. Without
/// --target, each binary is checked for every arch its reachable archives
/// carry. Exit status 4 and a list of problems when anything is wrong in
/// the tree; 1 when the tree cannot be read.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tree (e.g. generic/ and one group extracted over each other).
    pub tree: PathBuf,
    /// GPU targets every binary must have code for, as the GPU reports them
    /// (repeatable or comma-separated: gfx1100,gfx90a:sramecc+:xnack-);
    /// each is looked up natively, then through its generic ISA, as a
    /// runtime does. Checked against the family table.
    #[arg(long = "target", alias = "targets", value_name = "TARGET", value_delimiter = ',',
          value_parser = rocm_kpack_cli::parse_target)]
    pub targets: Vec<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let targets = (!args.targets.is_empty()).then_some(args.targets);
    let report = verify_tree(&args.tree, &VerifyOptions { targets })?;
    args.json.document(&report, || report.to_string())?;
    // Problems found in the tree are exit 4, as for rocm-kpack-fetch verify;
    // a tree that cannot be read is an error (exit 1).
    Ok(if report.ok() {
        ExitStatus::Success
    } else {
        ExitStatus::Problems
    })
}
