//! The command line (clap derive). Argument groups that several commands
//! need, such as [`TargetArgs`], are separate structs to flatten in.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use rocm_kpack::detect::{ArchOverride, OverrideSource};

/// Exit codes and environment, shown by `--help`.
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success; for detect: at least one GPU target (or targets given by --arch
     or ROCM_KPACK_ARCH_OVERRIDE)
  1  error (unreadable --sysfs-root, I/O failure, ...)
  2  usage error (bad option; bad --arch, ROCM_KPACK_ARCH_OVERRIDE or
     HSA_OVERRIDE_GFX_VERSION value)
  3  no AMD GPU found (amdgpu not loaded, no KFD topology, or no GPU node)

Environment:
  ROCM_KPACK_ARCH_OVERRIDE  comma-separated targets that replace detection
                            (--arch takes precedence)
  HSA_OVERRIDE_GFX_VERSION  MAJOR.MINOR.STEPPING that every GPU is treated as,
                            as the ROCm runtime does (e.g. 11.0.0 = gfx1100)
  RUST_LOG                  log filter for diagnostics on stderr (e.g. debug)";

/// Detect local AMD GPUs and fetch, verify and install the device code
/// (.kpack archives) they need.
#[derive(Debug, Parser)]
#[command(name = "rocm-kpack-fetch", version, after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the local AMD GPUs (from the kernel's KFD topology in sysfs) and
    /// the union of their targets, which is what gets installed.
    #[command(after_help = EXIT_STATUS_HELP)]
    Detect(DetectArgs),
}

/// `detect` options.
#[derive(Debug, Args)]
pub struct DetectArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Print one JSON object (stable field names) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Choosing the local targets; shared by every command that installs.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Read sysfs and /dev below DIR instead of / (fixture trees, chroots).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub sysfs_root: PathBuf,
    /// Use these targets instead of detecting them: a comma-separated list
    /// such as gfx1100,gfx90a:xnack- (for machines without a GPU).
    #[arg(long, value_name = "LIST", value_parser = parse_arch)]
    pub arch: Option<ArchOverride>,
}

fn parse_arch(list: &str) -> Result<ArchOverride, String> {
    ArchOverride::parse(OverrideSource::CommandLine, list).map_err(|e| e.to_string())
}
