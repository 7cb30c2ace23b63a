//! `rocm-kpack-fetch pip install <pip args>` and `rocm-kpack-fetch uv pip
//! install <uv args>`: one install, with the local GPUs' `device-<target>`
//! extras added to every requirement that declares them
//! ([`rocm_kpack_fetch::pm::pip_install`]). Our options come before
//! `install` (`pip`) or `pip install` (`uv`); everything after goes to the
//! client unchanged but for the extras.

use anyhow::Context;
use clap::Args;
use rocm_kpack_cli::{print_json, print_stdout, ExitStatus, JsonArg, UsageError};
use rocm_kpack_fetch::pm::pip_install::{
    absolute_paths, declared_extras, query_args, rewrite, Client, WrapPlan,
};
use serde::Serialize;

use super::{local_targets, print_warnings};
use crate::cli::TargetArgs;

/// `pip` / `uv` options.
#[derive(Debug, Args)]
pub struct PipInstallArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Interpreter whose pip installs (`pip`) and reads the requirements'
    /// metadata (both) [default: $ROCM_KPACK_PYTHON, else python3].
    #[arg(long, value_name = "PATH")]
    pub python_exe: Option<String>,
    /// The uv program (`uv` only) [default: uv on PATH].
    #[arg(long, value_name = "PATH")]
    pub uv_exe: Option<String>,
    /// Print the command that would run, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
    /// `install ARGS...` (pip) or `pip install ARGS...` (uv).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "install ARGS"
    )]
    pub args: Vec<String>,
}

/// `--json` output.
#[derive(Debug, Serialize)]
struct Output<'a> {
    dry_run: bool,
    targets: &'a [String],
    command: Vec<String>,
    plan: &'a WrapPlan,
}

/// Runs the wrapper; `uv`: `uv pip install`. Exit 3 without targets.
pub fn run(args: &PipInstallArgs, uv: bool) -> anyhow::Result<ExitStatus> {
    let lead: &[&str] = if uv {
        &["pip", "install"]
    } else {
        &["install"]
    };
    let rest = match args.args.get(..lead.len()) {
        Some(head) if head.iter().zip(lead).all(|(a, b)| a == b) => &args.args[lead.len()..],
        _ => {
            let program = if uv { "uv" } else { "pip" };
            return Err(UsageError(format!(
                "expected `rocm-kpack-fetch {program} [OPTIONS] {} ARGS...`",
                lead.join(" ")
            ))
            .into());
        }
    };
    let local = local_targets(&args.targets)?;
    if local.ids.is_empty() {
        return super::no_targets(&local, args.json.enabled);
    }
    let python = super::interpreter(args.python_exe.as_deref());
    let client = if uv {
        Client::Uv {
            uv: args.uv_exe.clone().unwrap_or_else(|| "uv".into()),
        }
    } else {
        Client::Pip {
            python: python.clone(),
        }
    };
    // pip runs from `/`; uv where the user is.
    let rest: Vec<String> = if uv {
        rest.to_vec()
    } else {
        let cwd = std::env::current_dir().context("current directory")?;
        absolute_paths(rest, &cwd)
    };
    let query = query_args(&rest);
    let declared = if query.iter().any(|a| !a.starts_with('-')) {
        declared_extras(&python, &query)?
    } else {
        Default::default()
    };
    let plan = rewrite(&rest, &declared, &local.ids);
    let cmd = client.command(&plan.args);
    let mut command = vec![cmd.get_program().to_string_lossy().into_owned()];
    command.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    if args.json.enabled {
        print_json(&Output {
            dry_run: args.dry_run,
            targets: &local.detection.targets,
            command: command.clone(),
            plan: &plan,
        })?;
    } else {
        print_warnings(&local.detection.warnings);
        print_warnings(&plan.warnings);
        if args.dry_run {
            print_stdout(&format!("{}\n", command.join(" ")))?;
        }
    }
    if !args.dry_run {
        client.install(&plan.args)?;
    }
    Ok(ExitStatus::Success)
}
