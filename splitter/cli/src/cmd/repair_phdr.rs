//! `rocm-kpack repair-phdr PATH... [--yes] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_splitter::split::repair::{repair_phdr, RepairOptions};

/// Find the ELF files whose program header table Linux before 5.18 would
/// not find, and rewrite them in place with --yes.
///
/// Such kernels (RHEL 8 and 9, Ubuntu 22.04, Debian 11; qemu-user too)
/// hand ld.so the address "first PT_LOAD's p_vaddr - p_offset + e_phoff"
/// for the table, and an executable whose table is mapped elsewhere stops
/// before main. Trees split by older versions of this tool, or by others,
/// and files that `strip`/`objcopy` rewrote after such a split, can be
/// like that; `rocm-kpack verify` names them. Without --yes this only lists
/// what it would change (exit 4 when there is something). With --yes each
/// file is written beside the original and renamed over it (same mode and
/// owner): a table in a segment of its own is given the address the kernel
/// uses; otherwise a copy of the table goes at the end of the file, which
/// grows. Section addresses and contents never change. Run it after
/// stripping.
///
/// Examples:
///   rocm-kpack repair-phdr /opt/rocm          # list what would change
///   rocm-kpack repair-phdr /opt/rocm --yes    # and rewrite it in place
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files or directories (searched recursively; symbolic links are not followed).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Rewrite the files found (otherwise only list them).
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let report = repair_phdr(&args.paths, RepairOptions { apply: args.yes })?;
    args.json.document(&report, || report.to_string())?;
    Ok(if report.files.is_empty() || report.applied {
        ExitStatus::Success
    } else {
        ExitStatus::Problems
    })
}
