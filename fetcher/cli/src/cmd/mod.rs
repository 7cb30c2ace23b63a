//! One module per subcommand: arguments in, a call into the library
//! (`rocm_kpack_fetcher::ops`, `detect`), text or JSON out, and the exit
//! status. Plumbing several commands share (targets and scan configuration
//! from their argument groups, warnings) lives here.

mod detect;
mod doctor;
mod gc;
mod install;
mod list;
pub mod pip_index_url;
pub mod pip_install;
mod prune;
mod remove;
pub mod status;
pub mod trigger;
mod verify;

use rocm_kpack_cli::{ExitStatus, UsageError};
use rocm_kpack_fetcher::detect::LocalTargets;
use rocm_kpack_fetcher::install::{LockOptions, PermissionPolicy};
use rocm_kpack_fetcher::resolve::ScanConfig;
use rocm_kpack_loader::detect::{
    DetectOptions, Detection, ARCH_OVERRIDE_ENV, BOOTSTRAP_DISABLE_ENV, BOOTSTRAP_FORCE_ENV,
    CONDA_ARCH_ENV, HSA_OVERRIDE_ENV, UV_ARCH_ENV,
};

use crate::cli::{Command, NativeArgs, ScanArgs, TargetArgs};

/// Interpreter asked for site-packages (empty: none).
pub const PYTHON_ENV: &str = "ROCM_KPACK_PYTHON";

/// Runs one subcommand. `Ok` carries the exit status of a command that
/// completed (it may still be "no GPU" or "problems found"); an `Err` is
/// printed once by `main`. `-q` ([`rocm_kpack_cli::quiet`]) leaves only
/// errors and the `--json` document.
pub fn run(command: Command) -> anyhow::Result<ExitStatus> {
    match command {
        Command::Detect(args) => detect::run(&args),
        Command::Install(args) => install::run(&args),
        Command::Status(args) => status::run(&args),
        Command::List(args) => list::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Remove(args) => remove::run(&args),
        Command::Gc(args) => gc::run(&args),
        Command::Prune(args) => prune::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Trigger(args) => trigger::run(&args),
        Command::PipIndexUrl(args) => pip_index_url::run(&args),
        Command::Pip(args) => pip_install::run(&args, false),
        Command::Uv(args) => pip_install::run(&args, true),
        Command::Docs(docs) => docs.run(<crate::cli::Cli as clap::CommandFactory>::command()),
    }
}

/// How the commands that write or delete in a prefix lock its `.kpack`
/// directories: `--wait` and `--unsafe-permissions`.
pub fn lock_options(args: &ScanArgs) -> LockOptions {
    LockOptions {
        wait: std::time::Duration::from_secs(args.wait),
        permissions: PermissionPolicy::from_allow_unsafe(args.unsafe_permissions),
    }
}

/// The pip device distributions of the scan's interpreter for `targets`
/// (status, doctor), read under the scan's permission policy; None
/// without an interpreter.
pub fn pip_device_status(
    args: &ScanArgs,
    config: &ScanConfig,
    targets: &[rocm_kpack_format::target::TargetId],
) -> anyhow::Result<Option<rocm_kpack_fetcher::pm::pip::NativeStatus>> {
    Ok(rocm_kpack_fetcher::pm::pip::NativeStatus::of_python(
        config.python.as_deref(),
        targets,
        PermissionPolicy::from_allow_unsafe(args.unsafe_permissions),
    )?)
}

/// The scan configuration of the command line (`--python`, else
/// `ROCM_KPACK_PYTHON`, else python3; blank: no Python environment). An
/// interpreter named with `--python` must be usable (the scan would
/// otherwise skip its site-packages with only a warning).
pub fn scan_config(args: &ScanArgs) -> anyhow::Result<ScanConfig> {
    if let Some(python) = args.python.as_deref().filter(|p| !p.trim().is_empty()) {
        rocm_kpack_fetcher::python::Interpreter::trusted(
            python,
            PermissionPolicy::from_allow_unsafe(args.unsafe_permissions),
        )
        .map_err(|e| anyhow::Error::new(e).context(format!("--python {python}")))?;
    }
    let python = match args
        .python
        .clone()
        .or_else(|| std::env::var(PYTHON_ENV).ok())
    {
        Some(v) if v.trim().is_empty() => None,
        Some(v) => Some(v),
        None => Some("python3".to_string()),
    };
    Ok(ScanConfig {
        root: args.root.clone(),
        prefixes: args.prefixes.clone(),
        default_prefixes: !args.no_default_prefixes,
        python,
    })
}

/// Detection with `--sysfs-root` / `--target` and the override variables of
/// this process's environment (`--target`, then `ROCM_KPACK_ARCH_OVERRIDE`,
/// then `ROCM_BOOTSTRAP_DISABLE_DETECTION=1`, then
/// `ROCM_BOOTSTRAP_FORCE_GFX_ARCH`, `UV_AMD_GPU_ARCHITECTURE`,
/// `CONDA_OVERRIDE_AMDGPU_ARCH`).
pub fn detection(args: &TargetArgs) -> anyhow::Result<Detection> {
    Ok(rocm_kpack_fetcher::detect::local_detection(
        &args.sysfs_root,
        &detect_options(args)?,
    )?)
}

/// [`detection`] with its targets parsed.
pub fn local_targets(args: &TargetArgs) -> anyhow::Result<LocalTargets> {
    Ok(rocm_kpack_fetcher::detect::local_targets(
        &args.sysfs_root,
        &detect_options(args)?,
    )?)
}

/// `--target` and the override variables; bad values are usage errors.
fn detect_options(args: &TargetArgs) -> anyhow::Result<DetectOptions> {
    // An env override that --target replaces is not even parsed.
    let target_override = args.target_override();
    let arch_env = match target_override {
        Some(_) => None,
        None => env_var(ARCH_OVERRIDE_ENV)?,
    };
    let hsa_env = env_var(HSA_OVERRIDE_ENV)?;
    let mut opts = DetectOptions::from_env_values(arch_env.as_deref(), hsa_env.as_deref())
        .map_err(|e| UsageError(e.to_string()))?;
    if target_override.is_some() {
        opts.arch_override = target_override;
    }
    let tools = rocm_kpack_fetcher::detect::ToolEnv {
        bootstrap_disable: env_var(BOOTSTRAP_DISABLE_ENV)?,
        bootstrap_force: env_var(BOOTSTRAP_FORCE_ENV)?,
        uv: env_var(UV_ARCH_ENV)?,
        conda: env_var(CONDA_ARCH_ENV)?,
    };
    rocm_kpack_fetcher::detect::apply_tool_env(&mut opts, &tools).map_err(UsageError)?;
    rocm_kpack_fetcher::detect::check_override(&opts).map_err(UsageError)?;
    Ok(opts)
}

fn env_var(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(value) => match value.into_string() {
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(UsageError(format!("{name} is not valid UTF-8")).into()),
        },
    }
}

/// The native package scheme of `--native-host` / `--native-device`; a
/// bad pattern is a usage error.
pub fn native_scheme(
    args: &NativeArgs,
) -> anyhow::Result<rocm_kpack_fetcher::pm::native::NativeScheme> {
    rocm_kpack_fetcher::pm::native::NativeScheme::new(&args.native_host, &args.native_device)
        .map_err(|e| UsageError(e.to_string()).into())
}

/// The interpreter of `--python`, else `$ROCM_KPACK_PYTHON` (when not
/// blank), else `python3`.
pub fn interpreter(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_string)
        .or_else(|| {
            std::env::var(PYTHON_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "python3".into())
}

/// The `--json` document of a command that stops for want of targets:
/// the detection, its fields in the order of `detect --json`.
#[derive(serde::Serialize)]
struct NoTargets<'a> {
    targets: &'a [String],
    detection: &'a Detection,
}

/// Says there are no targets, then `why` nothing is done when given (JSON:
/// the detection), and returns exit 3.
pub fn no_targets(
    local: &LocalTargets,
    json: bool,
    why: Option<&str>,
) -> anyhow::Result<ExitStatus> {
    if json {
        rocm_kpack_cli::print_json_document(&NoTargets {
            targets: &[],
            detection: &local.detection,
        })?;
    } else if !rocm_kpack_cli::quiet() {
        eprintln!(
            "{}",
            rocm_kpack_fetcher::detect::no_targets_message(&local.detection)
        );
        if let Some(why) = why {
            eprintln!("{why}");
        }
    }
    Ok(ExitStatus::NoGpu)
}

/// Prints warnings on stderr, one per line, in the style of every warning
/// (`rocm-kpack-fetch: warning: ...`); not with `-q`.
pub fn print_warnings(warnings: &[String]) {
    for w in warnings {
        tracing::warn!("{w}");
    }
}
