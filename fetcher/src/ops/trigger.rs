//! The package hooks' work after a transaction that installed, upgraded
//! or removed `.kpm` manifests ([`run`]; `rocm-kpack-fetch trigger` only
//! reads its arguments and prints the one line this returns).
//!
//! 1. Removes the archives this tool installed for manifests that are gone
//!    (their package was removed), and its bookkeeping in `.kpack/`
//!    directories left with nothing else ([`super::gc::orphans`], through
//!    the same removal path as `gc`).
//! 2. Unless [`TriggerRequest::removed_only`]: hands `install --auto` to
//!    rocm-kpack-fetch.service when systemd runs (the package manager never
//!    waits for the network), else runs it here, as a child process bounded
//!    by [`TriggerRequest::timeout`], for the `.kpack/` directories named
//!    (all installed manifests when none).
//!
//! It never calls apt, dpkg, rpm or dnf (they hold their locks) and never
//! fails: no GPU, no network or a bad source must not fail the package
//! transaction; `install --auto` (or the timer) retries.

use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::RemovalError;
use crate::error::chain_text;
use crate::install::LockOptions;
use crate::resolve::ScanConfig;
use rocm_kpack_format::layout::{KPACK_DIR, MANIFEST_EXT};

const SERVICE: &str = "rocm-kpack-fetch.service";

/// The exit status of `install` when there is no GPU.
const NO_GPU_EXIT: i32 = 3;

/// What the trigger is asked to do.
#[derive(Debug, Clone)]
pub struct TriggerRequest {
    /// `.kpack` directories, manifests or prefixes the transaction touched;
    /// only these are looked at. Empty: every installed manifest.
    pub paths: Vec<PathBuf>,
    /// Only remove the archives of manifests that are gone; fetch nothing.
    pub removed_only: bool,
    /// Never hand the fetch to systemd; run it here.
    pub no_systemd: bool,
    /// How long the fetch may take here before it is stopped.
    pub timeout: Duration,
    /// How `.kpack` directories are locked (a package transaction must not
    /// hang on a lock: a short wait), here and in the fetch.
    pub lock: LockOptions,
    /// This program, run as `install --auto` for the fetch (`None`: it
    /// could not be found, and the fetch fails saying so).
    pub exe: Option<PathBuf>,
    /// `--sysfs-root` for the fetch.
    pub sysfs_root: Option<OsString>,
    /// `--allow-http` for the fetch.
    pub allow_http: bool,
    /// Silence the fetch's log lines (the caller's `RUST_LOG` is unset).
    pub quiet_child_logs: bool,
    /// The environment variable naming the interpreter asked for
    /// site-packages, emptied for the fetch.
    pub python_env: &'static str,
}

/// What the trigger did, as the parts of its one line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerReport {
    /// Archives of removed packages removed.
    pub removed: usize,
    /// What happened, one clause each (joined by `; ` into the line).
    pub parts: Vec<String>,
}

/// Removes the orphans of the directories `req.paths` name, then fetches
/// (unless [`TriggerRequest::removed_only`]). Never fails: problems are
/// parts of the report.
pub fn run(req: &TriggerRequest) -> TriggerReport {
    let prefixes = scope(&req.paths);
    let config = ScanConfig {
        root: PathBuf::from("/"),
        default_prefixes: prefixes.is_empty(),
        prefixes: prefixes.clone(),
        python: None,
    };
    let mut report = TriggerReport::default();
    match prune(&config, req.lock) {
        Ok(0) => {}
        Ok(n) => {
            report.removed = n;
            report
                .parts
                .push(format!(
                    "removed {} of removed packages",
                    rocm_kpack_cli::plural(n, "archive", "archives")
                ));
        }
        Err(e) if is_lock_timeout(&e) => report.parts.push(format!(
            "{}; leaving the archives of removed packages to `rocm-kpack-fetch install --auto` (or the timer)",
            lock_holder(&e)
        )),
        Err(e) => report.parts.push(format!(
            "could not remove the archives of removed packages: {}",
            chain_text(&e)
        )),
    }
    if !req.removed_only {
        report.parts.push(fetch(req, &prefixes));
    }
    report
}

/// `e` and its causes.
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| c.source())
}

/// Whether `e` is a lock another run held for longer than the wait.
fn is_lock_timeout(e: &RemovalError) -> bool {
    causes(e)
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// The holder's words of a lock timeout ("… is held by … (pid N) …").
fn lock_holder(e: &RemovalError) -> String {
    causes(e)
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .find(|io| io.kind() == std::io::ErrorKind::TimedOut)
        .map(|io| io.to_string())
        .and_then(|t| t.split(" for more than").next().map(str::to_string))
        .unwrap_or_else(|| "a .kpack directory is locked".into())
}

/// Whether `path` names a manifest in a `.kpack` directory.
pub fn is_kpack_manifest(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == MANIFEST_EXT)
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == KPACK_DIR)
}

/// The directories to scan for the paths given: a manifest's `.kpack`
/// directory, a directory as given; anything else is ignored.
fn scope(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        let dir = if is_kpack_manifest(p) {
            p.parent().map(Path::to_path_buf)
        } else {
            Some(p.clone())
        };
        // Never through a symlink: a user who owns a prefix could point its
        // `.kpack` anywhere.
        let real_dir = |d: &PathBuf| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir());
        if let Some(d) = dir.filter(real_dir) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// Removes the orphans of the scanned directories; returns how many.
fn prune(config: &ScanConfig, lock: LockOptions) -> Result<usize, RemovalError> {
    let scan = config.scan();
    let mut warnings = Vec::new();
    let orphans = super::gc::orphans(&scan, &mut warnings);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    // Only the directories the fetcher recorded making go with the files
    // (`remove_recorded`): an empty directory it did not make (a package's,
    // the system's `run/sshd` a database path reached) is not its to remove.
    let removed = if orphans.is_empty() {
        0
    } else {
        super::apply_removals(&orphans, &scan, lock)?.removed.len()
    };
    super::gc::tidy_abandoned(&scan.kpack_dirs, lock);
    Ok(removed)
}

/// Whether systemd is the running init (as `sd_booted()` decides).
fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Fetches (or hands the fetch to systemd); returns the line to print.
fn fetch(req: &TriggerRequest, prefixes: &[PathBuf]) -> String {
    if !req.no_systemd && systemd_running() {
        let started = Command::new("systemctl")
            .args(["start", "--no-block", SERVICE])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if started {
            return format!("fetching device code in the background ({SERVICE}; `journalctl -u {SERVICE}` shows the outcome)");
        }
    }
    match fetch_here(req, prefixes) {
        Ok(line) => line,
        Err(e) => format!(
            "device code not fetched: {}; run `rocm-kpack-fetch install --auto` to retry",
            chain_text(&e)
        ),
    }
}

/// Why the trigger's own fetch (a child process) did not run to the end.
#[derive(Debug, thiserror::Error)]
enum FetchHereError {
    /// This program's path is unknown, so it cannot start itself.
    #[error("cannot find this program's path")]
    NoProgram,
    /// The child could not be started or waited for.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The child ran past the deadline (seconds) and was killed.
    #[error("stopped after {0} s")]
    Timeout(u64),
}

/// `install --auto --json` as a child process with a deadline.
fn fetch_here(req: &TriggerRequest, prefixes: &[PathBuf]) -> Result<String, FetchHereError> {
    let exe = req.exe.as_ref().ok_or(FetchHereError::NoProgram)?;
    let mut cmd = Command::new(exe);
    cmd.args(["install", "--auto", "--json", "--retries", "2"]);
    cmd.arg("--wait").arg(req.lock.wait.as_secs().to_string());
    if let Some(root) = &req.sysfs_root {
        cmd.arg("--sysfs-root").arg(root);
    }
    if req.allow_http {
        cmd.arg("--allow-http");
    }
    if !prefixes.is_empty() {
        cmd.arg("--no-default-prefixes");
        for p in prefixes {
            cmd.arg("--prefix").arg(p);
        }
    }
    if req.quiet_child_logs {
        // The one line says what went wrong; log lines would bury it.
        cmd.env("RUST_LOG", "off");
    }
    cmd.env(req.python_env, "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    // Drain both pipes while waiting (a full pipe would block the child).
    let mut stdout = child.stdout.take().map(drain);
    let mut stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + req.timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = stdout
        .take()
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let err = stderr
        .take()
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let Some(status) = status else {
        return Err(FetchHereError::Timeout(req.timeout.as_secs()));
    };
    Ok(match status.code() {
        Some(0) => summary(&out),
        Some(NO_GPU_EXIT) => "no AMD GPU found, so no device code was fetched (`rocm-kpack-fetch install --target TARGET` chooses targets)".into(),
        code => {
            let why = err
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with("warning:") && !l.contains(" WARN "))
                .unwrap_or("no detail")
                .trim_start_matches("rocm-kpack-fetch: ")
                .trim_start_matches("error: ")
                .to_string();
            format!(
                "device code not fetched (exit {}): {why}; run `rocm-kpack-fetch install --auto` to retry",
                code.map_or_else(|| "by signal".into(), |c| c.to_string())
            )
        }
    })
}

fn drain<R: Read + Send + 'static>(r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    })
}

/// One line from `install --json`'s output.
fn summary(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let installed = v["installed"].as_array().map_or(0, Vec::len);
    let removed = v["removed"].as_array().map_or(0, Vec::len);
    let present = v["summary"]["present"].as_u64().unwrap_or(0);
    let targets: Vec<&str> = v["plan"]["targets"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
        .unwrap_or_default();
    let mut line = format!(
        "device code for {}: {} installed, {present} already present",
        targets.join(", "),
        rocm_kpack_cli::plural(installed, "archive", "archives")
    );
    if removed > 0 {
        line.push_str(&format!(", {removed} superseded removed"));
    }
    line
}
