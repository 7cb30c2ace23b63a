//! `rocm-kpack-fetch install`: checks the arguments, finds the targets and
//! the sources, runs [`ops::install`] (or a package manager) and prints the
//! outcome; exit 3 without targets, 1 when a manifest is refused, 4 for
//! `--strict` problems.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocm_kpack_cli::iec_size;
use rocm_kpack_cli::{print_json, print_stdout, ExitStatus, UsageError};
use rocm_kpack_fetch::client::{Backoff, ClientOptions, HostCause};
use rocm_kpack_fetch::detect::{targets_origin, LocalTargets};
use rocm_kpack_fetch::download::Cache;
use rocm_kpack_fetch::execute::{ExecOptions, Failed, Installed, Owned, Report};
use rocm_kpack_fetch::ops::install::{
    InstallError, InstallRequest, PackageManager, PmInstallRequest, SourcesRequest,
};
use rocm_kpack_fetch::ops::{self, default_cache_dir};
use rocm_kpack_fetch::plan::{InstallPlan, Summary};
use rocm_kpack_fetch::pm::{apt::Apt, dnf::Dnf, pip::Pip, PmPlan};
use rocm_kpack_fetch::progress::{Bars, Lines, Reporter, Silent};
use rocm_kpack_fetch::sources::SourceError;
use serde::Serialize;

use super::{local_targets, print_warnings, scan_config};
use crate::cli::{InstallArgs, NetArgs, ScanArgs, Via};

/// `--json` output of `install`.
#[derive(Debug, Serialize)]
struct Output<'a> {
    dry_run: bool,
    plan: &'a InstallPlan,
    summary: Summary,
    installed: &'a [Installed],
    failed: &'a [Failed],
    owned: &'a [Owned],
    removed: &'a [std::path::PathBuf],
    warnings: &'a [String],
}

/// Runs `install`; `quiet` (`-q`): no progress and no `targets:` line on
/// stderr (warnings and errors stay).
pub fn run(args: &InstallArgs, quiet: bool) -> anyhow::Result<ExitStatus> {
    if !args.auto && args.targets.targets.is_empty() {
        return Err(UsageError(
            "say which targets to install for: --auto (the GPUs detected here) or --target TARGET[,...]"
                .into(),
        )
        .into());
    }
    let started = Instant::now();
    let local = local_targets(&args.targets)?;
    let mut warnings = local.detection.warnings.clone();
    if local.ids.is_empty() {
        return super::no_targets(&local, args.json.enabled);
    }
    check_local_sources(&args.net)?;
    if args.via.is_some() || args.python {
        return run_pm(args, &local, warnings, quiet);
    }
    if !args.json.enabled && !quiet {
        print_targets(&local);
    }
    let reporter: Arc<dyn Reporter> = if quiet {
        Arc::new(Silent)
    } else if !args.json.enabled && std::io::stderr().is_terminal() {
        Arc::new(Bars::new())
    } else {
        Arc::new(Lines::default())
    };
    let outcome = ops::install::run(InstallRequest {
        scan: scan_config(&args.scan),
        targets: local.ids.clone(),
        sources: SourcesRequest {
            urls: args.net.sources.clone(),
            offline: args.net.offline.clone(),
            allow_http: args.net.allow_http,
        },
        dry_run: args.dry_run,
        exec: exec_options(&args.net, &args.scan),
        reporter,
    })
    .map_err(|e| match e {
        // The user typed these: a usage error.
        InstallError::Sources(e @ (SourceError::BadUrl { .. } | SourceError::Scheme { .. })) => {
            anyhow::Error::new(UsageError(e.to_string()))
        }
        other => anyhow::Error::new(other),
    })?;
    warnings.extend(outcome.warnings);
    finish(
        args,
        &outcome.plan,
        &outcome.report,
        &warnings,
        args.dry_run,
        started,
    )
}

/// `--source` directories and `--offline` must exist: a typo is a usage
/// error before anything is planned, not one failure per archive.
fn check_local_sources(net: &NetArgs) -> anyhow::Result<()> {
    for text in &net.sources {
        let url = rocm_kpack_fetch::sources::parse_source_url(text, "--source", net.allow_http)
            .map_err(|e| UsageError(e.to_string()))?;
        if url.scheme() == "file" {
            let dir = url.to_file_path().unwrap_or_default();
            if !dir.is_dir() {
                return Err(UsageError(format!(
                    "--source {text}: {} is not a directory",
                    dir.display()
                ))
                .into());
            }
        }
    }
    if let Some(dir) = &net.offline {
        if !dir.is_dir() {
            return Err(UsageError(format!("--offline {}: not a directory", dir.display())).into());
        }
    }
    Ok(())
}

/// `targets: LIST (origin)` on stderr.
fn print_targets(local: &LocalTargets) {
    eprintln!(
        "targets: {} ({})",
        local.detection.targets.join(", "),
        targets_origin(&local.detection)
    );
}

fn exec_options(net: &NetArgs, scan: &ScanArgs) -> ExecOptions {
    let cache = net
        .cache_dir
        .clone()
        .unwrap_or_else(|| default_cache_dir(&scan.root));
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
            speed_limit: net.speed_limit,
            speed_time: Duration::from_secs_f64(net.speed_time),
        },
        jobs: usize::try_from(net.jobs).unwrap_or(1),
        cache: Cache::new(cache),
        lock: super::lock_options(scan),
        transport: (!net.no_transport).then(|| net.frame_level.unwrap_or_default()),
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
    if args.json.enabled {
        print_json(&Output {
            dry_run,
            plan,
            summary,
            installed: &report.installed,
            failed: &report.failed,
            owned: &report.owned,
            removed: &report.removed,
            warnings,
        })?;
    } else {
        print_warnings(warnings);
        for o in &report.owned {
            eprintln!(
                "rocm-kpack-fetch: not installing {}: the installed package {} owns it, so it is the package manager's (upgrade or remove {} to change it)",
                o.path.display(),
                o.package,
                o.package
            );
        }
        let mut text = String::new();
        if dry_run {
            text.push_str(&plan.to_string());
        } else {
            for i in &report.installed {
                let from = i.source.as_deref().unwrap_or("the download cache");
                text.push_str(&format!(
                    "installed {} ({}) from {from}\n",
                    i.path.display(),
                    iec_size(i.size)
                ));
            }
            for p in &report.removed {
                text.push_str(&format!(
                    "removed {} (its manifest no longer lists it)\n",
                    p.display()
                ));
            }
            let fetched: u64 = report.installed.iter().map(|i| i.transferred).sum();
            let removed = match report.removed.len() {
                0 => String::new(),
                n => format!(", {n} superseded removed"),
            };
            text.push_str(&format!(
                "{} installed ({} transferred), {} already present, {} failed{removed} in {:.1}s\n",
                report.installed.len(),
                iec_size(fetched),
                summary.present,
                report.failed.len(),
                started.elapsed().as_secs_f64(),
            ));
        }
        print_stdout(&text)?;
    }
    if !report.failed.is_empty() {
        anyhow::bail!(failure_summary(&report.failed));
    }
    if !plan.refused_manifests.is_empty() {
        return Ok(refused_failure(plan.refused_manifests.len()));
    }
    let refused_files = plan
        .components
        .iter()
        .flat_map(|c| c.databases.iter())
        .filter(|d| d.action == rocm_kpack_fetch::plan::Action::Refused)
        .count();
    if refused_files > 0 {
        eprintln!("rocm-kpack-fetch: {refused_files} database file(s) refused (see warnings); the install is incomplete");
        return Ok(ExitStatus::Failure);
    }
    if args.strict && summary.no_device_code > 0 {
        return Ok(strict_failure());
    }
    Ok(ExitStatus::Success)
}

/// A manifest was refused (malformed, hostile names): whatever else was
/// installed, the run failed (exit 1), so scripts and package hooks notice.
fn refused_failure(n: usize) -> ExitStatus {
    eprintln!("rocm-kpack-fetch: {n} manifest(s) refused (see warnings); their archives were not installed");
    ExitStatus::Failure
}

/// What failed, as apt says it: one line per host and cause with the
/// number of archives it failed, then what to do. Failures without a
/// source behind them (local disk, install) are listed by path. `--json`
/// has every error in full.
fn failure_summary(failed: &[Failed]) -> String {
    use std::collections::BTreeMap;
    let mut by_host: BTreeMap<&HostCause, usize> = BTreeMap::new();
    let mut other = Vec::new();
    for f in failed {
        if f.causes.is_empty() {
            other.push(format!("  {}: {}", f.path.display(), f.error));
        }
        for c in &f.causes {
            *by_host.entry(c).or_default() += 1;
        }
    }
    let mut msg = format!(
        "{} {} could not be installed:",
        failed.len(),
        if failed.len() == 1 {
            "archive"
        } else {
            "archives"
        }
    );
    for (c, n) in &by_host {
        let what = if *n == 1 { "archive" } else { "archives" };
        msg.push_str(&format!("\n  {}: {} ({n} {what})", c.host, c.cause));
    }
    for line in other {
        msg.push('\n');
        msg.push_str(&line);
    }
    if !by_host.is_empty() {
        msg.push_str(
            "\ncheck the network and the sources (--source, /etc/rocm-kpack/sources.d/), then run \
             the same command again: partial downloads resume (--json has every error in full)",
        );
    }
    msg
}

/// `--strict` and device code is missing: exit 4.
fn strict_failure() -> ExitStatus {
    eprintln!(
        "rocm-kpack-fetch: --strict: device code is missing for a local target (see warnings)"
    );
    ExitStatus::Problems
}

/// `--json` output of the package-manager modes.
#[derive(Debug, Serialize)]
struct PmOutput<'a> {
    dry_run: bool,
    targets: &'a [String],
    plan: &'a PmPlan,
    command: Option<String>,
    warnings: &'a [String],
}

/// `install --via apt|dnf|pip` / `--python`: plan device packages and run
/// the package manager (or print the plan).
fn run_pm(
    args: &InstallArgs,
    local: &LocalTargets,
    mut warnings: Vec<String>,
    quiet: bool,
) -> anyhow::Result<ExitStatus> {
    let via = if args.python {
        Via::Pip
    } else {
        args.via.unwrap_or(Via::Pip)
    };
    if !args.json.enabled && !quiet {
        print_targets(local);
    }
    let native = super::native_scheme(&args.native)?;
    let pm = match via {
        Via::Apt => PackageManager::Apt(Apt {
            root: args.scan.root.clone(),
            extra: args.pm_opts.clone(),
            native: native.clone(),
        }),
        Via::Dnf => PackageManager::Dnf(Dnf {
            root: args.scan.root.clone(),
            extra: args.pm_opts.clone(),
            native: native.clone(),
        }),
        Via::Pip => PackageManager::Pip(Pip {
            python: super::interpreter(args.python_exe.as_deref()),
            index_url: args.index_url.clone(),
            extra: args.pm_opts.clone(),
            permissions: rocm_kpack_fetch::install::PermissionPolicy::from_allow_unsafe(
                args.scan.unsafe_permissions,
            ),
        }),
    };
    let request = PmInstallRequest {
        scan: scan_config(&args.scan),
        pm,
        targets: local.ids.clone(),
        naming: rocm_kpack_pkgspec::defaults::naming(),
        dry_run: args.dry_run,
    };
    let outcome = ops::install::run_package_manager(request, |outcome| {
        warnings.extend(outcome.warnings.iter().cloned());
        let command = (!outcome.plan.packages.is_empty()).then(|| outcome.plan.command_line());
        if args.json.enabled {
            return print_json(&PmOutput {
                dry_run: args.dry_run,
                targets: &local.detection.targets,
                plan: &outcome.plan,
                command,
                warnings: &warnings,
            });
        }
        print_warnings(&warnings);
        match &command {
            // The plan is the command line a user would type.
            Some(line) if args.dry_run => print_stdout(&format!("{line}\n")),
            Some(_) => Ok(()),
            None => print_stdout("nothing to install: no installed package needs device packages for these targets\n"),
        }
    })?;
    if outcome.refused > 0 {
        return Ok(refused_failure(outcome.refused));
    }
    if args.strict && outcome.uncovered {
        return Ok(strict_failure());
    }
    Ok(ExitStatus::Success)
}
