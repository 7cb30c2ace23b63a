//! `rocm-kpack-fetch trigger`: what the package hooks run (the deb's dpkg
//! file trigger, the rpm's transaction file triggers) after a transaction
//! that installed, upgraded or removed `.kpm` manifests. Reads the paths
//! (arguments, and rpm's file list on stdin), turns them into an
//! [`ops::trigger::TriggerRequest`] (the work is described there), prints
//! the one line it reports and always exits 0, whatever its input (a usage
//! error is that one line too).
//!
//! Its whole run is bounded: a `.kpack` directory another run has locked
//! is waited for at most [`LOCK_WAIT`], then its work is left to
//! `install --auto` or the timer; the fetch here stops after `--timeout`.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetcher::install::{LockOptions, PermissionPolicy};
use rocm_kpack_fetcher::ops;
use rocm_kpack_fetcher::ops::trigger::TriggerRequest;

/// Set to 1 to make the hooks do nothing (image builds).
pub const SKIP_ENV: &str = "ROCM_KPACK_FETCH_SKIP";
/// The sysfs root the hooks detect GPUs under (chroots, tests).
pub const SYSFS_ROOT_ENV: &str = "ROCM_KPACK_SYSFS_ROOT";
/// Set to 1 to let the hooks use http:// sources (`--allow-http`).
pub const ALLOW_HTTP_ENV: &str = "ROCM_KPACK_ALLOW_HTTP";

/// How long the trigger waits for a `.kpack` directory another
/// rocm-kpack-fetch has locked before it leaves the work to `install
/// --auto` or the timer (a package transaction must not hang on a lock).
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The trigger's locking: [`LOCK_WAIT`], and directories other users may
/// write refused (the hooks have no `--unsafe-permissions`).
const TRIGGER_LOCK: LockOptions = LockOptions {
    wait: LOCK_WAIT,
    permissions: PermissionPolicy::Strict,
};

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
            .filter(|p| ops::trigger::is_kpack_manifest(p))
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
    // Without /proc (a bare chroot) the name this process was started by
    // (found on PATH like it was) stands in.
    let exe = std::env::current_exe()
        .ok()
        .or_else(|| std::env::args_os().next().map(PathBuf::from));
    let report = ops::trigger::run(&TriggerRequest {
        paths,
        removed_only: args.removed,
        no_systemd: args.no_systemd,
        timeout: Duration::from_secs(args.timeout),
        lock: TRIGGER_LOCK,
        exe,
        sysfs_root: std::env::var_os(SYSFS_ROOT_ENV).filter(|v| !v.is_empty()),
        allow_http: std::env::var(ALLOW_HTTP_ENV).is_ok_and(|v| v == "1"),
        quiet_child_logs: std::env::var_os("RUST_LOG").is_none(),
        python_env: crate::cmd::PYTHON_ENV,
    });
    if !report.parts.is_empty() {
        say(&report.parts.join("; "));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_paths_are_bytes_one_by_one() {
        let list =
            b"/usr/lib/x.so\n/opt/\xffbad/.kpack/a.kpm\n\n/opt/rocm/.kpack/b.kpm\r\nnul\0x\n";
        let paths = stdin_paths(list);
        let manifests: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| ops::trigger::is_kpack_manifest(p))
            .collect();
        assert_eq!(manifests.len(), 2, "{paths:?}");
        assert_eq!(
            manifests[0].as_os_str().as_encoded_bytes(),
            b"/opt/\xffbad/.kpack/a.kpm"
        );
        assert_eq!(manifests[1], &PathBuf::from("/opt/rocm/.kpack/b.kpm"));
    }
}
