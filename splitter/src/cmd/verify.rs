//! `rocm-kpack verify TREE [--targets gfx1100,...] [--json]`.

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
/// --targets, each binary is checked for every arch its reachable archives
/// carry. Exit status 1 and a list of problems when anything is wrong.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tree (e.g. generic/ and one group extracted over each other).
    pub tree: PathBuf,
    /// Targets every binary must have code for, comma-separated, as the GPU
    /// reports them (gfx1100,gfx90a:sramecc+:xnack-); each is looked up
    /// natively, then through its generic ISA, as a runtime does.
    #[arg(long, value_delimiter = ',')]
    pub targets: Option<Vec<String>>,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let targets = args.targets.map(|t| {
        t.into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
    });
    if targets.as_ref().is_some_and(Vec::is_empty) {
        anyhow::bail!("--targets needs at least one target");
    }
    let report = verify_tree(&args.tree, &VerifyOptions { targets })?;
    args.json.print(&report, || report.to_string())?;
    // Problems in the tree are exit 1, as for any failure (see the table).
    Ok(if report.ok() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
