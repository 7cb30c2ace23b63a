//! `rocm-kpack-fetch install`: checks the arguments, finds the targets and
//! the sources, runs [`ops::install`] (or a package manager) and prints the
//! outcome; exit 3 without targets, 1 when a manifest is refused, 4 for
//! `--strict` problems.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::progress::Bars;
use rocm_kpack_cli::{iec_size, plural};
use rocm_kpack_cli::{quiet, ExitStatus, UsageError};
use rocm_kpack_fetcher::client::{Backoff, ClientOptions, HostCause, LOCAL_DISK_HOST};
use rocm_kpack_fetcher::detect::{targets_origin, LocalTargets};
use rocm_kpack_fetcher::download::Cache;
use rocm_kpack_fetcher::execute::{ExecOptions, Failed, Installed, Owned, Report};
use rocm_kpack_fetcher::ops::install::{
    InstallError, InstallRequest, PackageManager, PmInstallRequest, SourcesRequest,
};
use rocm_kpack_fetcher::ops::{self, default_cache_dir};
use rocm_kpack_fetcher::plan::{InstallPlan, Summary};
use rocm_kpack_fetcher::pm::{apt::Apt, dnf::Dnf, pip::Pip, PmPlan};
use rocm_kpack_fetcher::progress::{Lines, Reporter, Silent};
use rocm_kpack_fetcher::sources::SourceError;
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

/// Runs `install`; `-q`: no progress, no `targets:` line, no report and
/// no warnings (errors and the `--json` document stay).
pub fn run(args: &InstallArgs) -> anyhow::Result<ExitStatus> {
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
        return super::no_targets(&local, args.json.enabled, None);
    }
    check_local_sources(&args.net)?;
    if args.via.is_some() {
        return run_pm(args, &local, warnings);
    }
    if !args.json.enabled && !quiet() {
        print_targets(&local);
    }
    let reporter: Arc<dyn Reporter> = if quiet() {
        Arc::new(Silent)
    } else if !args.json.enabled && std::io::stderr().is_terminal() {
        Arc::new(Bars::new())
    } else {
        Arc::new(Lines::default())
    };
    let scan = scan_config(&args.scan)?;
    let searched = scan.searched();
    let outcome = ops::install::run(InstallRequest {
        scan,
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
        &searched,
    )
}

/// `--source` directories and `--offline` must exist: a typo is a usage
/// error before anything is planned, not one failure per archive.
fn check_local_sources(net: &NetArgs) -> anyhow::Result<()> {
    for text in &net.sources {
        let url = rocm_kpack_fetcher::sources::parse_source_url(text, "--source", net.allow_http)
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
    searched: &str,
) -> anyhow::Result<ExitStatus> {
    let summary = plan.summary();
    if !args.json.enabled {
        print_warnings(warnings);
        if !quiet() {
            for o in &report.owned {
                eprintln!(
                    "rocm-kpack-fetch: not installing {}: the installed package {} owns it, so it is the package manager's (upgrade or remove {} to change it)",
                    o.path.display(),
                    o.package,
                    o.package
                );
            }
        }
    }
    let doc = Output {
        dry_run,
        plan,
        summary,
        installed: &report.installed,
        failed: &report.failed,
        owned: &report.owned,
        removed: &report.removed,
        warnings,
    };
    args.json.report(&doc, || {
        if plan.components.is_empty() && plan.refused_manifests.is_empty() {
            return format!(
                "nothing to install: no .kpm manifest found ({})\n",
                searched
            );
        }
        if dry_run {
            return plan.to_string();
        }
        let mut text = String::new();
        // -v: also what was there already, and why it is needed.
        if rocm_kpack_cli::verbose() > 0 {
            for c in &plan.components {
                for a in c
                    .items()
                    .filter(|a| a.action == rocm_kpack_fetcher::plan::Action::Present)
                {
                    text.push_str(&format!("present {} ({})\n", a.path.display(), a.reason()));
                }
            }
        }
        for i in &report.installed {
            let from = i.source.as_deref().unwrap_or("the download cache");
            text.push_str(&format!(
                "installed {} ({} on disk) from {from}\n",
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
        text
    })?;
    if !report.failed.is_empty() {
        // The report (with --json, the document listing each failure in
        // full) is out; the error and its advice follow on stderr.
        let cache = args
            .net
            .cache_dir
            .clone()
            .unwrap_or_else(|| default_cache_dir(&args.scan.root));
        let (error, hint) = failure_summary(&report.failed, &cache);
        eprintln!("rocm-kpack-fetch: error: {error}");
        if let Some(hint) = hint {
            eprintln!("rocm-kpack-fetch: hint: {hint}");
        }
        return Ok(ExitStatus::Failure);
    }
    if !plan.refused_manifests.is_empty() {
        return Ok(refused_failure(plan.refused_manifests.len()));
    }
    let refused_files = plan
        .components
        .iter()
        .flat_map(|c| c.databases.iter())
        .filter(|d| d.action == rocm_kpack_fetcher::plan::Action::Refused)
        .count();
    if refused_files > 0 {
        eprintln!(
            "rocm-kpack-fetch: {} refused (see warnings); the install is incomplete",
            plural(refused_files, "database file", "database files")
        );
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
    eprintln!(
        "rocm-kpack-fetch: {} refused (see warnings); their archives were not installed",
        plural(n, "manifest", "manifests")
    );
    ExitStatus::Failure
}

/// What failed, as apt says it: one line per host and cause with the
/// number of archives it failed; failures without a source behind them
/// (local disk, install) are listed by path. Then what to do: for a full
/// file system, which one and how much is free (`rocm_kpack_cli::hint_for`);
/// for a source's failure, check the network and the sources. `--json`
/// has every error in full.
/// `cache` is the download cache: a full one can be moved (`--cache-dir`).
fn failure_summary(failed: &[Failed], cache: &std::path::Path) -> (String, Option<String>) {
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
    if let Some(path) = failed.iter().find_map(|f| f.disk_full.as_ref()) {
        let full = rocm_kpack_fs::PathError::new(
            "writing",
            path.clone(),
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        );
        let option = path.starts_with(cache).then_some("--cache-dir");
        let hint = rocm_kpack_cli::hint_for(&anyhow::Error::new(full), option)
            .map(|h| format!("{h}; then run the same command again"));
        return (msg, hint);
    }
    // Only a source's failure is the network's: a local one ("local
    // disk") is not.
    let remote = by_host.keys().any(|c| c.host != LOCAL_DISK_HOST);
    let hint = remote.then(|| {
        "check the network and the sources (--source, /etc/rocm-kpack/sources.d/), then run \
         the same command again: partial downloads resume (--json has every error in full)"
            .to_owned()
    });
    (msg, hint)
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
) -> anyhow::Result<ExitStatus> {
    let via = args.via.unwrap_or(Via::Pip);
    if !args.json.enabled && !quiet() {
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
            python: super::interpreter(args.scan.python.as_deref()),
            index_url: args.index_url.clone(),
            extra: args.pm_opts.clone(),
            permissions: rocm_kpack_fetcher::install::PermissionPolicy::from_allow_unsafe(
                args.scan.unsafe_permissions,
            ),
        }),
    };
    let request = PmInstallRequest {
        scan: scan_config(&args.scan)?,
        pm,
        targets: local.ids.clone(),
        naming: rocm_kpack_pkgspec::defaults::naming(),
        dry_run: args.dry_run,
    };
    let outcome = ops::install::run_package_manager(request, |outcome| {
        warnings.extend(outcome.warnings.iter().cloned());
        let command = (!outcome.plan.packages.is_empty()).then(|| outcome.plan.command_line());
        if !args.json.enabled {
            print_warnings(&warnings);
        }
        let doc = PmOutput {
            dry_run: args.dry_run,
            targets: &local.detection.targets,
            plan: &outcome.plan,
            command: command.clone(),
            warnings: &warnings,
        };
        args.json.report(&doc, || match &command {
            // The plan is the command line a user would type.
            Some(line) if args.dry_run => format!("{line}\n"),
            Some(_) => String::new(),
            None => {
                "nothing to install: no installed package needs device packages for these targets\n"
                    .to_owned()
            }
        })
    })?;
    if outcome.refused > 0 {
        return Ok(refused_failure(outcome.refused));
    }
    if args.strict && outcome.uncovered {
        return Ok(strict_failure());
    }
    Ok(ExitStatus::Success)
}
