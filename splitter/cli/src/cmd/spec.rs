//! `rocm-kpack spec show [--spec FILE] [--json]`, `rocm-kpack spec check FILE`.

use std::path::PathBuf;

use rocm_kpack_cli::{print_stdout, ExitStatus, JsonArg};
use rocm_kpack_pkgspec::Spec;

use crate::cli::SpecArg;

/// Show the effective package spec, or check a spec file.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: SpecCommand,
}

/// `spec` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SpecCommand {
    /// Print the effective spec (the built-in one, or FILE with every
    /// default filled in) as TOML that `spec check` accepts.
    #[command(after_help = crate::cli::spec_show_help())]
    Show {
        #[command(flatten)]
        spec: SpecArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Validate a spec file; errors name the line and column.
    #[command(after_help = crate::cli::spec_check_help())]
    Check {
        /// The spec file (TOML).
        file: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let text = match args.command {
        SpecCommand::Show { spec, json } => {
            let spec = spec.load()?;
            if json.enabled {
                rocm_kpack_cli::json_document(&rocm_kpack_pkgspec::schema::SpecDocument::from(
                    &spec,
                ))?
            } else {
                spec.to_toml()?
            }
        }
        SpecCommand::Check { file } => {
            let spec = Spec::from_file(&file)?;
            format!(
                "{}: OK ({} device groups: {}; {} kernel-database rules)\n",
                file.display(),
                spec.groups.len(),
                spec.group_names().join(", "),
                spec.kernel_databases.len()
            )
        }
    };
    print_stdout(&text)?;
    Ok(ExitStatus::Success)
}
