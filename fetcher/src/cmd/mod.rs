//! The subcommands that work on installed manifests. Each turns parsed
//! arguments into library calls and prints text or JSON; shared plumbing
//! (targets, scan configuration, states, output) lives here.

pub mod doctor;
pub mod gc;
pub mod install;
pub mod list;
pub mod remove;
pub mod status;
pub mod verify;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use rocm_kpack::detect::Detection;
use rocm_kpack_format::target::TargetId;
use serde::Serialize;

use crate::cli::{ScanArgs, TargetArgs};
use crate::detect::local_detection;
use crate::resolve::ScanConfig;
use crate::state::State;

/// Interpreter asked for site-packages (empty: none).
pub const PYTHON_ENV: &str = "ROCM_KPACK_PYTHON";

/// The scan configuration of the command line.
pub fn scan_config(args: &ScanArgs) -> ScanConfig {
    let python = match std::env::var(PYTHON_ENV) {
        Ok(v) if v.trim().is_empty() => None,
        Ok(v) => Some(v),
        Err(_) => Some("python3".to_string()),
    };
    ScanConfig {
        root: args.root.clone(),
        prefixes: args.prefixes.clone(),
        default_prefixes: !args.no_default_prefixes,
        python,
    }
}

/// Detection plus its targets parsed as target ids.
pub struct LocalTargets {
    /// What detection found (or the override).
    pub detection: Detection,
    /// The targets to install for.
    pub ids: Vec<TargetId>,
}

/// Detects (or takes `--arch`) and parses the targets. Unparsable names
/// from sysfs are dropped with a warning in the detection.
pub fn local_targets(args: &TargetArgs) -> anyhow::Result<LocalTargets> {
    let mut detection = local_detection(args)?;
    let mut ids = Vec::new();
    for t in &detection.targets {
        match TargetId::parse(t) {
            Ok(id) => ids.push(id),
            Err(e) => detection.warnings.push(format!("ignoring target {t:?}: {e}")),
        }
    }
    Ok(LocalTargets { detection, ids })
}

/// Where the targets came from, for messages.
pub fn targets_origin(d: &Detection) -> String {
    match &d.arch_override {
        Some(o) => format!("from {}", o.source),
        None => "detected".to_string(),
    }
}

/// The default cache directory: below `--root` when one is given, else
/// `/var/cache/rocm-kpack-fetch` for root and the XDG cache for others.
pub fn default_cache_dir(root: &Path) -> PathBuf {
    const NAME: &str = "rocm-kpack-fetch";
    if root != Path::new("/") {
        return root.join("var/cache").join(NAME);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/cache").join(NAME);
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join(NAME);
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join(NAME),
        None => std::env::temp_dir().join(NAME),
    }
}

/// Loads the state of each directory read-only; problems become warnings
/// and an empty state.
pub fn load_states(dirs: &[PathBuf], warnings: &mut Vec<String>) -> BTreeMap<PathBuf, State> {
    dirs.iter()
        .map(|d| {
            let state = State::load(d).unwrap_or_else(|e| {
                warnings.push(e.to_string());
                State::default()
            });
            (d.clone(), state)
        })
        .collect()
}

/// Prints `value` as pretty JSON on stdout, with a final newline.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).context("writing JSON")?;
    writeln!(out).context("writing JSON")?;
    out.flush().context("writing JSON")
}

/// Prints text on stdout.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes()).context("writing output")?;
    out.flush().context("writing output")
}

/// Prints warnings on stderr, one per line.
pub fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// The message for "no targets": what detection saw and how to override.
pub fn no_targets_message(d: &Detection) -> String {
    let mut text = Vec::new();
    // detect's own wording says why there is no GPU.
    if crate::detect::write_text(&mut text, d).is_err() {
        return "no AMD GPU found; pass --arch LIST".into();
    }
    String::from_utf8_lossy(&text).trim_end().to_string()
}

/// An archive rocm-kpack-fetch installed, chosen for removal.
#[derive(Debug, Clone, Serialize)]
pub struct Removal {
    /// Its `.kpack` directory.
    pub kpack_dir: PathBuf,
    /// Archive file name.
    pub filename: String,
    /// Component recorded for it.
    pub component: String,
    /// Why it goes.
    pub reason: String,
}

impl Removal {
    /// Full path of the archive.
    pub fn path(&self) -> PathBuf {
        self.kpack_dir.join(&self.filename)
    }
}

/// Removes the archives under each directory's lock, dropping their state
/// records. Only archives still recorded when the lock is held are touched.
/// Returns the paths removed.
pub fn apply_removals(removals: &[Removal]) -> anyhow::Result<Vec<PathBuf>> {
    let mut by_dir: BTreeMap<&Path, Vec<&Removal>> = BTreeMap::new();
    for r in removals {
        by_dir.entry(r.kpack_dir.as_path()).or_default().push(r);
    }
    let mut removed = Vec::new();
    for (dir, list) in by_dir {
        let _lock = crate::install::DirLock::acquire(dir, |p| {
            eprintln!("waiting for another rocm-kpack-fetch to finish ({} is locked)", p.display());
        })
        .with_context(|| format!("cannot lock {}", dir.display()))?;
        let mut state = State::load(dir)?;
        for r in list {
            if state.archives.remove(&r.filename).is_none() {
                continue;
            }
            let path = r.path();
            match crate::install::remove_archive(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => removed.push(path),
                Err(e) => {
                    // Keep the record of a file that is still there.
                    state.save(dir)?;
                    return Err(e).with_context(|| format!("removing {}", path.display()));
                }
            }
        }
        state.save(dir)?;
    }
    Ok(removed)
}
