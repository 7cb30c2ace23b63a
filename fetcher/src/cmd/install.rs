//! `rocm-kpack-fetch install`: targets -> installed manifests -> plan ->
//! (dry run: print) -> lock the `.kpack` directories -> re-plan under the
//! locks -> download, verify, install -> report.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{
    default_cache_dir, load_states, local_targets, no_targets_message, print_json, print_text,
    print_warnings, scan_config, targets_origin,
};
use crate::cli::{InstallArgs, NetArgs};
use crate::client::{Backoff, ClientOptions};
use crate::download::Cache;
use crate::execute::{execute, ExecOptions, Report};
use crate::install::DirLock;
use crate::plan::{InstallPlan, Summary};
use crate::progress::{human_bytes, Bars, Lines, Reporter};
use crate::resolve::needs;
use crate::sources::{package_files, SourceError, Sources};
use crate::state::State;
use crate::{ExitStatus, UsageError};

/// `--json` output of `install`.
#[derive(Debug, Serialize)]
struct Output<'a> {
    dry_run: bool,
    plan: &'a InstallPlan,
    summary: Summary,
    installed: &'a [crate::execute::Installed],
    failed: &'a [crate::execute::Failed],
    warnings: &'a [String],
}

/// Runs `install`.
pub fn run(args: &InstallArgs) -> anyhow::Result<ExitStatus> {
    if !args.auto && args.targets.arch.is_none() {
        return Err(UsageError(
            "say which targets to install for: --auto (the GPUs detected here) or --arch LIST".into(),
        )
        .into());
    }
    let started = Instant::now();
    let local = local_targets(&args.targets)?;
    let mut warnings = local.detection.warnings.clone();
    if local.ids.is_empty() {
        if args.json {
            print_json(&serde_json::json!({ "targets": [], "detection": local.detection }))?;
        } else {
            eprintln!("{}", no_targets_message(&local.detection));
        }
        return Ok(ExitStatus::NoGpu);
    }
    let scan = scan_config(&args.scan).scan();
    if args.via.is_some() || args.python {
        return run_pm(args, &local, &scan, warnings);
    }
    let sources = Sources::load(
        &args.net.sources,
        args.net.offline.as_deref(),
        &args.scan.root,
        &package_files(&scan.manifests),
        args.net.allow_http,
    )
    .map_err(|e| match e {
        // The user typed these: a usage error.
        SourceError::BadUrl { .. } | SourceError::Scheme { .. } => anyhow::Error::new(UsageError(e.to_string())),
        other => anyhow::Error::new(other),
    })?;
    warnings.extend(sources.warnings.iter().cloned());
    if !args.json {
        eprintln!(
            "targets: {} ({})",
            local.detection.targets.join(", "),
            targets_origin(&local.detection)
        );
    }

    if args.dry_run {
        let states = load_states(&scan.kpack_dirs, &mut warnings);
        let plan = InstallPlan::build(&scan, &local.ids, &states);
        warnings.extend(plan.warnings());
        return finish(args, &plan, &Report::default(), &warnings, true, started);
    }

    // Lock every directory that will be written, in path order (no
    // deadlock between two runs), before judging what is present.
    let to_lock: BTreeSet<PathBuf> = scan
        .manifests
        .iter()
        .filter(|m| !needs(&m.manifest, &local.ids).archives.is_empty())
        .map(|m| m.kpack_dir.clone())
        .collect();
    let mut locks = Vec::new();
    let mut locked: BTreeMap<PathBuf, Result<(), String>> = BTreeMap::new();
    for dir in &to_lock {
        let lock = DirLock::acquire(dir, |path| {
            eprintln!(
                "waiting for another rocm-kpack-fetch to finish ({} is locked)",
                path.display()
            );
        });
        match lock {
            Ok(l) => {
                locks.push(l);
                locked.insert(dir.clone(), Ok(()));
            }
            Err(e) => {
                locked.insert(
                    dir.clone(),
                    Err(format!("cannot lock {}: {e} (run as root?)", dir.display())),
                );
            }
        }
    }
    let mut states = BTreeMap::new();
    for dir in &scan.kpack_dirs {
        let state = if locked.get(dir).is_some_and(Result::is_ok) {
            State::load_or_reset(dir, &mut warnings)?
        } else {
            State::load(dir).unwrap_or_default()
        };
        states.insert(dir.clone(), state);
    }
    let plan = InstallPlan::build(&scan, &local.ids, &states);
    warnings.extend(plan.warnings());

    let options = exec_options(&args.net, &args.scan.root);
    let reporter: Arc<dyn Reporter> = if !args.json && std::io::stderr().is_terminal() {
        Arc::new(Bars::new())
    } else {
        Arc::new(Lines)
    };
    let report = execute(&plan, &sources, &options, &locked, states, reporter.clone());
    reporter.close();
    let report = report?;
    drop(locks);
    finish(args, &plan, &report, &warnings, false, started)
}

fn exec_options(net: &NetArgs, root: &std::path::Path) -> ExecOptions {
    let cache = net.cache_dir.clone().unwrap_or_else(|| default_cache_dir(root));
    ExecOptions {
        client: ClientOptions {
            connect_timeout: Duration::from_secs_f64(net.connect_timeout),
            read_timeout: Duration::from_secs_f64(net.read_timeout),
            retries: net.retries,
            backoff: Backoff {
                base: Duration::from_millis(net.retry_base_ms),
                max: Duration::from_secs(60),
            },
            allow_http: net.allow_http,
        },
        jobs: usize::try_from(net.jobs).unwrap_or(1),
        cache: Cache::new(cache),
    }
}

/// Prints the outcome and picks the exit status.
fn finish(
    args: &InstallArgs,
    plan: &InstallPlan,
    report: &Report,
    warnings: &[String],
    dry_run: bool,
    started: Instant,
) -> anyhow::Result<ExitStatus> {
    let summary = plan.summary();
    if args.json {
        print_json(&Output {
            dry_run,
            plan,
            summary,
            installed: &report.installed,
            failed: &report.failed,
            warnings,
        })?;
    } else {
        print_warnings(warnings);
        let mut text = String::new();
        if dry_run {
            text.push_str(&plan.to_string());
        } else {
            for i in &report.installed {
                let from = i.source.as_deref().unwrap_or("the download cache");
                text.push_str(&format!(
                    "installed {} ({}) from {from}\n",
                    i.path.display(),
                    human_bytes(i.size)
                ));
            }
            let fetched: u64 = report.installed.iter().map(|i| i.transferred).sum();
            text.push_str(&format!(
                "{} installed ({} transferred), {} already present, {} failed in {:.1}s\n",
                report.installed.len(),
                human_bytes(fetched),
                summary.present,
                report.failed.len(),
                started.elapsed().as_secs_f64(),
            ));
        }
        print_text(&text)?;
    }
    if !report.failed.is_empty() {
        let mut msg = format!("{} archive(s) could not be installed:", report.failed.len());
        for f in &report.failed {
            msg.push_str(&format!("\n  {}: {}", f.path.display(), f.error));
        }
        anyhow::bail!(msg);
    }
    if args.strict && (summary.no_device_code > 0 || !plan.refused_manifests.is_empty()) {
        eprintln!("rocm-kpack-fetch: --strict: device code is missing for a local target (see warnings)");
        return Ok(ExitStatus::Problems);
    }
    Ok(ExitStatus::Success)
}

/// `--json` output of the package-manager modes.
#[derive(Debug, Serialize)]
struct PmOutput<'a> {
    dry_run: bool,
    targets: &'a [String],
    plan: &'a crate::pm::PmPlan,
    command: Option<String>,
    warnings: &'a [String],
}

/// `install --via apt|dnf|pip` / `--python`: plan device packages and run
/// the package manager (or print the plan).
fn run_pm(
    args: &InstallArgs,
    local: &super::LocalTargets,
    scan: &crate::resolve::Scan,
    mut warnings: Vec<String>,
) -> anyhow::Result<ExitStatus> {
    use crate::cli::Via;
    use crate::pm::{apt::Apt, dnf::Dnf, pip::Pip, PmPlan};
    let naming = rocm_kpack_pkgspec::defaults::naming();
    let via = if args.python { Via::Pip } else { args.via.unwrap_or(Via::Pip) };
    if !args.json {
        eprintln!(
            "targets: {} ({})",
            local.detection.targets.join(", "),
            targets_origin(&local.detection)
        );
    }
    for r in &scan.refused {
        warnings.push(format!("refused manifest {}: {}", r.path.display(), r.error));
    }
    enum Pm {
        Apt(Apt),
        Dnf(Dnf),
        Pip(Pip),
    }
    // Before anything else: apt/dnf from inside dpkg/rpm would deadlock on
    // their lock (hooks must use file mode).
    if !args.dry_run {
        match via {
            Via::Apt => crate::pm::check_not_in_transaction(
                "apt-get",
                &args.scan.root.join("var/lib/dpkg/lock"),
            )?,
            Via::Dnf => crate::pm::check_not_in_transaction(
                "dnf",
                &args.scan.root.join("var/lib/rpm/.rpm.lock"),
            )?,
            Via::Pip => {}
        }
    }
    let pm = match via {
        Via::Apt => Pm::Apt(Apt {
            root: args.scan.root.clone(),
            extra: args.pm_opts.clone(),
        }),
        Via::Dnf => Pm::Dnf(Dnf {
            root: args.scan.root.clone(),
            extra: args.pm_opts.clone(),
        }),
        Via::Pip => Pm::Pip(Pip {
            python: args
                .python_exe
                .clone()
                .or_else(|| std::env::var(super::PYTHON_ENV).ok().filter(|v| !v.trim().is_empty()))
                .unwrap_or_else(|| "python3".into()),
            index_url: args.index_url.clone(),
            extra: args.pm_opts.clone(),
        }),
    };
    let plan: PmPlan = match &pm {
        Pm::Apt(a) => a.plan(scan, &local.ids, &naming)?,
        Pm::Dnf(d) => d.plan(scan, &local.ids, &naming)?,
        Pm::Pip(p) => p.plan(&local.ids, &naming)?,
    };
    warnings.extend(plan.warnings.iter().cloned());
    let command = (!plan.packages.is_empty()).then(|| plan.command_line());
    if args.json {
        print_json(&PmOutput {
            dry_run: args.dry_run,
            targets: &local.detection.targets,
            plan: &plan,
            command: command.clone(),
            warnings: &warnings,
        })?;
    } else {
        print_warnings(&warnings);
        match &command {
            // The plan is the command line a user would type.
            Some(line) if args.dry_run => print_text(&format!("{line}\n"))?,
            Some(_) => {}
            None => print_text("nothing to install: no installed package needs device packages for these targets\n")?,
        }
    }
    if command.is_some() && !args.dry_run {
        match &pm {
            Pm::Apt(a) => a.install(&plan)?,
            Pm::Dnf(d) => d.install(&plan)?,
            Pm::Pip(p) => p.install(&plan)?,
        }
    }
    let uncovered = plan.warnings.iter().any(|w| w.contains("publishes no device code"));
    if args.strict && (uncovered || !scan.refused.is_empty()) {
        eprintln!("rocm-kpack-fetch: --strict: device code is missing for a local target (see warnings)");
        return Ok(ExitStatus::Problems);
    }
    Ok(ExitStatus::Success)
}
