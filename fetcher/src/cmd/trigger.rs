//! `rocm-kpack-fetch trigger`: what the package hooks run (the deb's dpkg
//! file trigger, the rpm's transaction file triggers) after a transaction
//! that installed, upgraded or removed `.kpm` manifests.
//!
//! 1. Removes the archives this tool installed for manifests that are gone
//!    (their package was removed), and its bookkeeping in `.kpack/`
//!    directories left with nothing else ([`ops::gc::orphans`], through
//!    the same removal path as `gc`).
//! 2. Unless `--removed`: hands `install --auto` to rocm-kpack-fetch.service
//!    when systemd runs (the package manager never waits for the network),
//!    else runs it here, as a child process bounded by `--timeout`, for
//!    the `.kpack/` directories named (all installed manifests when none).
//!
//! It never calls apt, dpkg, rpm or dnf (they hold their locks), prints one
//! line, and always exits 0, whatever its input (a usage error is that one
//! line too): no GPU, no network or a bad source must not fail the package
//! transaction; `install --auto` (or the timer) retries.
//!
//! Its whole run is bounded: a `.kpack` directory another run has locked
//! is waited for at most [`LOCK_WAIT`], then its work is left to
//! `install --auto` or the timer; the fetch here stops after `--timeout`.

use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetch::ops;
use rocm_kpack_fetch::resolve::ScanConfig;
use rocm_kpack_format::layout::{KPACK_DIR, MANIFEST_EXT};

/// Set to 1 to make the hooks do nothing (image builds).
pub const SKIP_ENV: &str = "ROCM_KPACK_FETCH_SKIP";
/// The sysfs root the hooks detect GPUs under (chroots, tests).
pub const SYSFS_ROOT_ENV: &str = "ROCM_KPACK_SYSFS_ROOT";
/// Set to 1 to let the hooks use http:// sources (`--allow-http`).
pub const ALLOW_HTTP_ENV: &str = "ROCM_KPACK_ALLOW_HTTP";

const SERVICE: &str = "rocm-kpack-fetch.service";

/// How long the trigger waits for a `.kpack` directory another
/// rocm-kpack-fetch has locked before it leaves the work to `install
/// --auto` or the timer (a package transaction must not hang on a lock).
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Default of `--timeout`: seconds the fetch may take when it runs here.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// Most bytes of paths read from stdin (rpm's file list of a transaction).
const MAX_STDIN: u64 = 64 << 20;

/// `trigger` options.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// `.kpack` directories, manifests or prefixes the transaction touched
    /// (dpkg's trigger names); only these are looked at. None: every
    /// installed manifest.
    #[arg(value_name = "PATH", value_parser = clap::value_parser!(OsString))]
    pub paths: Vec<OsString>,
    /// Also read paths from stdin, one per line (rpm's file triggers);
    /// nothing is done unless a `.kpack/*.kpm` is among them.
    #[arg(long)]
    pub stdin: bool,
    /// Only remove the archives of manifests that are gone; fetch nothing.
    #[arg(long)]
    pub removed: bool,
    /// Never hand the fetch to systemd; run it here.
    #[arg(long)]
    pub no_systemd: bool,
    /// Seconds the fetch may take here before it is stopped (the timer
    /// retries later).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_TIMEOUT_SECS)]
    pub timeout: u64,
}

fn say(line: &str) {
    // A closed stdout must not turn into a failure of the hook.
    let _ = rocm_kpack_cli::print_stdout(&format!("rocm-kpack-fetch: {line}\n"));
}

/// Runs `trigger`: always exit 0 (problems are the one line printed).
pub fn run(args: &TriggerArgs) -> anyhow::Result<ExitStatus> {
    rocm_kpack_fetch::install::set_lock_wait(LOCK_WAIT);
    let mut paths: Vec<PathBuf> = args
        .paths
        .iter()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect();
    if args.stdin {
        let mut bytes = Vec::new();
        // A closed or unreadable stdin is an empty list.
        let _ = std::io::stdin()
            .lock()
            .take(MAX_STDIN)
            .read_to_end(&mut bytes);
        let manifests: Vec<PathBuf> = stdin_paths(&bytes)
            .into_iter()
            .filter(|p| is_kpack_manifest(p))
            .collect();
        if manifests.is_empty() {
            // rpm runs the trigger for every transaction under its paths:
            // stay silent when no manifest was installed.
            return Ok(ExitStatus::Success);
        }
        paths.extend(manifests);
    }
    if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") {
        say(&format!(
            "{SKIP_ENV}=1: not fetching device code (run `rocm-kpack-fetch install --auto` later)"
        ));
        return Ok(ExitStatus::Success);
    }
    let prefixes = scope(&paths);
    let config = ScanConfig {
        root: PathBuf::from("/"),
        default_prefixes: prefixes.is_empty(),
        prefixes: prefixes.clone(),
        python: None,
    };
    let mut parts = Vec::new();
    match prune(&config) {
        Ok(0) => {}
        Ok(n) => parts.push(format!("removed {n} archive(s) of removed packages")),
        Err(e) if is_lock_timeout(&e) => parts.push(format!(
            "{}; leaving the archives of removed packages to `rocm-kpack-fetch install --auto` (or the timer)",
            lock_holder(&e)
        )),
        Err(e) => parts.push(format!("could not remove the archives of removed packages: {e:#}")),
    }
    if !args.removed {
        parts.push(fetch(args, &prefixes));
    }
    if !parts.is_empty() {
        say(&parts.join("; "));
    }
    Ok(ExitStatus::Success)
}

/// The lines of rpm's file list, one path each, as bytes: a path that is
/// not UTF-8 is still a path (Linux paths are bytes), and one odd line
/// never drops the others.
fn stdin_paths(bytes: &[u8]) -> Vec<PathBuf> {
    bytes
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty() && !line.contains(&0))
        .map(|line| PathBuf::from(OsString::from_vec(line.to_vec())))
        .collect()
}

/// Whether `e` is a lock another run held for longer than the wait.
fn is_lock_timeout(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// The holder's words of a lock timeout ("… is held by … (pid N) …").
fn lock_holder(e: &anyhow::Error) -> String {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .find(|io| io.kind() == std::io::ErrorKind::TimedOut)
        .map(|io| io.to_string())
        .and_then(|t| t.split(" for more than").next().map(str::to_string))
        .unwrap_or_else(|| "a .kpack directory is locked".into())
}

/// Whether `path` names a manifest in a `.kpack` directory.
fn is_kpack_manifest(path: &Path) -> bool {
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
fn prune(config: &ScanConfig) -> anyhow::Result<usize> {
    let scan = config.scan();
    let mut warnings = Vec::new();
    let orphans = ops::gc::orphans(&scan, &mut warnings);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    // Only the directories the fetcher recorded making go with the files
    // (`remove_recorded`): an empty directory it did not make (a package's,
    // the system's `run/sshd` a database path reached) is not its to remove.
    let removed = if orphans.is_empty() {
        0
    } else {
        ops::apply_removals(&orphans, &scan)?.removed.len()
    };
    ops::gc::tidy_abandoned(&scan.kpack_dirs);
    Ok(removed)
}

/// Whether systemd is the running init (as `sd_booted()` decides).
fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Fetches (or hands the fetch to systemd); returns the line to print.
fn fetch(args: &TriggerArgs, prefixes: &[PathBuf]) -> String {
    if !args.no_systemd && systemd_running() {
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
    match fetch_here(args, prefixes) {
        Ok(line) => line,
        Err(e) => format!(
            "device code not fetched: {e:#}; run `rocm-kpack-fetch install --auto` to retry"
        ),
    }
}

/// `install --auto --json` as a child process with a deadline.
fn fetch_here(args: &TriggerArgs, prefixes: &[PathBuf]) -> anyhow::Result<String> {
    // Without /proc (a bare chroot) the name this process was started by
    // (found on PATH like it was) stands in.
    let exe = std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(PathBuf::from))
        .ok_or_else(|| anyhow::anyhow!("cannot find this program's path"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["install", "--auto", "--json", "--retries", "2"]);
    cmd.arg("--wait").arg(LOCK_WAIT.as_secs().to_string());
    if let Some(root) = std::env::var_os(SYSFS_ROOT_ENV).filter(|v| !v.is_empty()) {
        cmd.arg("--sysfs-root").arg(root);
    }
    if std::env::var(ALLOW_HTTP_ENV).is_ok_and(|v| v == "1") {
        cmd.arg("--allow-http");
    }
    if !prefixes.is_empty() {
        cmd.arg("--no-default-prefixes");
        for p in prefixes {
            cmd.arg("--prefix").arg(p);
        }
    }
    if std::env::var_os("RUST_LOG").is_none() {
        // The one line says what went wrong; log lines would bury it.
        cmd.env("RUST_LOG", "off");
    }
    cmd.env(crate::cmd::PYTHON_ENV, "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    // Drain both pipes while waiting (a full pipe would block the child).
    let mut stdout = child.stdout.take().map(drain);
    let mut stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
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
        anyhow::bail!("stopped after {} s", args.timeout);
    };
    Ok(match status.code() {
        Some(0) => summary(&out),
        Some(3) => "no AMD GPU found, so no device code was fetched (`rocm-kpack-fetch install --target TARGET` chooses targets)".into(),
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
        "device code for {}: {installed} archive(s) installed, {present} already present",
        targets.join(", ")
    );
    if removed > 0 {
        line.push_str(&format!(", {removed} superseded removed"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_paths_are_bytes_one_by_one() {
        let list =
            b"/usr/lib/x.so\n/opt/\xffbad/.kpack/a.kpm\n\n/opt/rocm/.kpack/b.kpm\r\nnul\0x\n";
        let paths = stdin_paths(list);
        let manifests: Vec<&PathBuf> = paths.iter().filter(|p| is_kpack_manifest(p)).collect();
        assert_eq!(manifests.len(), 2, "{paths:?}");
        assert_eq!(
            manifests[0].as_os_str().as_encoded_bytes(),
            b"/opt/\xffbad/.kpack/a.kpm"
        );
        assert_eq!(manifests[1], &PathBuf::from("/opt/rocm/.kpack/b.kpm"));
    }
}
