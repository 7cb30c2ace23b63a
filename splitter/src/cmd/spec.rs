//! `rocm-kpack spec show [--spec FILE] [--json]`, `rocm-kpack spec check FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_pkgspec::Spec;

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
    Show {
        /// Spec file to load [default: the built-in spec].
        #[arg(long)]
        spec: Option<PathBuf>,
        /// Print JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Validate a spec file; errors name the line and column.
    Check {
        /// The spec file (TOML).
        file: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = match args.command {
        SpecCommand::Show { spec, json } => {
            let spec = match spec {
                Some(p) => Spec::from_file(&p)?,
                None => Spec::builtin(),
            };
            if json {
                spec.to_json()? + "\n"
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
    super::print_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
