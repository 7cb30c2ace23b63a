//! `rocm-kpack-fetch pip install <pip args>` and `rocm-kpack-fetch uv pip
//! install <uv args>`: resolve first, then install exactly what the local
//! GPUs need ([`rocm_kpack_fetcher::pm::pip_install`]). Our options come
//! before `install` (`pip`) or `pip install` (`uv`); everything after is
//! read as the client reads it.

use anyhow::Context;
use clap::Args;
use rocm_kpack_cli::{iec_size, plural, ExitStatus, JsonArg, UsageError};
use rocm_kpack_fetcher::install::PermissionPolicy;
use rocm_kpack_fetcher::pm::describe;
use rocm_kpack_fetcher::pm::pip_install::{
    install_command, parse_args, resolve, run as run_client, unmark_dependencies, Client,
    ClientKind, Plan, WrapError,
};
use rocm_kpack_fetcher::pm::pip_sizes::size_left_out;
use rocm_kpack_fetcher::python::Interpreter;
use serde::Serialize;

use super::{local_targets, print_warnings};
use crate::cli::TargetArgs;

/// `pip` / `uv` options.
#[derive(Debug, Args)]
pub struct PipInstallArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Interpreter to install into (`pip`; for `uv`, unless uv's own
    /// --python is given) [default: $ROCM_KPACK_PYTHON, else python3].
    #[arg(long, value_name = "PATH", alias = "python-exe")]
    pub python: Option<String>,
    /// The uv program (`uv` only) [default: uv on PATH].
    #[arg(long, value_name = "PATH")]
    pub uv_exe: Option<String>,
    /// Resolve and print what would be installed, install nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Accept an interpreter or site-packages that other users may write
    /// (refused by default: its .pth files would run as this user).
    #[arg(long)]
    pub unsafe_permissions: bool,
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
    plan: &'a Plan,
    command: Vec<String>,
}

/// Runs the wrapper; `uv`: `uv pip install`. Exit 3 without targets.
pub fn run(args: &PipInstallArgs, uv: bool) -> anyhow::Result<ExitStatus> {
    let kind = if uv { ClientKind::Uv } else { ClientKind::Pip };
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
    if !uv && args.uv_exe.is_some() {
        return Err(UsageError("--uv-exe is for `rocm-kpack-fetch uv`, not `pip`".into()).into());
    }
    let cwd = std::env::current_dir().context("current directory")?;
    let user = parse_args(kind, rest, &cwd).map_err(|e| UsageError(e.to_string()))?;
    let local = local_targets(&args.targets)?;
    if local.ids.is_empty() {
        return super::no_targets(&local, args.json.enabled, None);
    }
    let name = user
        .python
        .clone()
        .unwrap_or_else(|| super::interpreter(args.python.as_deref()));
    let python = Interpreter::trusted(
        &name,
        PermissionPolicy::from_allow_unsafe(args.unsafe_permissions),
    )?;
    let client = Client {
        kind,
        python,
        uv: args.uv_exe.clone().unwrap_or_else(|| "uv".into()),
        quiet: rocm_kpack_cli::quiet(),
    };
    let dry_run = args.dry_run || user.dry_run;
    let tmp = tempfile::Builder::new()
        .prefix("rocm-kpack-fetch-pip-")
        .tempdir()
        .context("temporary directory")?;
    let mut plan = resolve(&client, &user, &local.ids, tmp.path()).map_err(wrap_error)?;
    if dry_run {
        size_left_out(&client, &user, &mut plan, tmp.path());
    }
    let cmd = install_command(&client, &user, &plan, tmp.path()).map_err(wrap_error)?;
    let mut command = vec![cmd.get_program().to_string_lossy().into_owned()];
    command.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    if !args.json.enabled {
        print_warnings(&local.detection.warnings);
        print_warnings(&plan.warnings);
    }
    let doc = Output {
        dry_run,
        targets: &local.detection.targets,
        plan: &plan,
        command: command.clone(),
    };
    args.json
        .report(&doc, || render(&plan, dry_run, &describe(&cmd)))?;
    if !dry_run {
        run_client(cmd)?;
        print_warnings(&unmark_dependencies(&client, &user, &plan));
    }
    Ok(ExitStatus::Success)
}

fn wrap_error(e: WrapError) -> anyhow::Error {
    match e {
        WrapError::Option { .. } => UsageError(e.to_string()).into(),
        other => other.into(),
    }
}

/// The plan as text: each distribution with its size, what was left out,
/// the totals.
fn render(plan: &Plan, dry_run: bool, command: &str) -> String {
    let verb = if dry_run {
        "would install"
    } else {
        "installing"
    };
    let mut text = format!(
        "device extras for this machine: {}\n",
        plan.local_extras.join(", ")
    );
    for c in &plan.install {
        let extras = if c.extras.is_empty() {
            String::new()
        } else {
            format!("[{}]", c.extras.join(","))
        };
        text.push_str(&format!(
            "{verb} {}{extras}=={} ({})\n",
            c.name,
            c.version,
            iec_size(c.bytes)
        ));
    }
    for l in &plan.left_out {
        let size = match (plan.left_out_bytes, l.bytes) {
            (None, _) => String::new(),
            (Some(_), Some(n)) => format!("; {}", iec_size(n)),
            (Some(_), None) => "; size unknown".to_string(),
        };
        text.push_str(&format!(
            "left out {} (required by {}[{}], for no GPU here{size})\n",
            l.requirement,
            l.by,
            l.extras.join(",")
        ));
    }
    let n = plan.install.len();
    let m = plan.left_out.len();
    text.push_str(&format!(
        "{}, {} to download",
        plural(n, "distribution", "distributions"),
        iec_size(plan.bytes)
    ));
    match plan.left_out_bytes {
        _ if m == 0 => text.push_str("; the plain command would download the same\n"),
        Some(more) => {
            let unknown = plan.left_out.iter().filter(|l| l.bytes.is_none()).count();
            let unknown = if unknown == 0 {
                String::new()
            } else {
                format!(", {unknown} of them of unknown size")
            };
            text.push_str(&format!(
                "; the plain command would also download the {m} left out: {} more{unknown}\n",
                iec_size(more)
            ));
        }
        None => text.push_str(&format!(
            "; the plain command would also download the {m} left out\n"
        )),
    }
    if dry_run {
        text.push_str(&format!("{command}\n"));
    }
    text
}
