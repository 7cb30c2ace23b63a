//! Carrying out an [`InstallPlan`]: download every archive to fetch (once
//! per sha256, even when several prefixes need it), `--jobs` at a time, then
//! put it in place in each `.kpack` directory and record it in the state.
//!
//! The state entry is written before the archive appears (without a file
//! stamp) and completed after, so a crash in between leaves an entry the
//! next run re-checks by hashing, never an installed file nobody recorded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, HostCause};
use crate::download::{self, Cache, Fetched, Wanted};
use crate::install::{
    package_owner, place_copy, place_from_partial, Destination, LockOptions, PermissionPolicy,
};
use crate::plan::{ComponentPlan, InstallPlan, ItemKind, PlannedArchive};
use crate::progress::Reporter;
use crate::sources::Sources;
use crate::state::{FileStamp, State, StateEntry};

/// How to execute.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Network behaviour.
    pub client: ClientOptions,
    /// Parallel transfers (at least 1).
    pub jobs: usize,
    /// Partial-download cache.
    pub cache: Cache,
    /// How the `.kpack` directories are locked, and whether directories
    /// other users may write are refused (`--wait`,
    /// `--unsafe-permissions`).
    pub lock: LockOptions,
}

/// An archive put in place.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    /// Component.
    pub component: String,
    /// Archive file name.
    pub filename: String,
    /// Installed path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
    /// Masked URL it came from (`null`: completed from the cache).
    pub source: Option<String>,
    /// Bytes transferred in this run for it.
    pub transferred: u64,
    /// Bytes already held in the cache when this run started.
    pub resumed_from: u64,
}

/// An archive that could not be installed.
#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    /// Component.
    pub component: String,
    /// Archive file name.
    pub filename: String,
    /// Where it should have gone.
    pub path: PathBuf,
    /// Why, with causes.
    pub error: String,
    /// Each source's failure in a few words (empty for local failures).
    pub causes: Vec<HostCause>,
}

/// A database file not written because an installed package owns its
/// path: the package manager's file, even where it is missing or differs.
#[derive(Debug, Clone, Serialize)]
pub struct Owned {
    /// Component.
    pub component: String,
    /// The database file's key (relative to the prefix).
    pub filename: String,
    /// Its path.
    pub path: PathBuf,
    /// The package dpkg or rpm says owns it.
    pub package: String,
}

/// What execution did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Archives installed.
    pub installed: Vec<Installed>,
    /// Archives that failed.
    pub failed: Vec<Failed>,
    /// Database files left alone because a package owns them.
    pub owned: Vec<Owned>,
    /// Superseded archives removed (filled in by `ops::install`).
    pub removed: Vec<PathBuf>,
}

/// One destination of a download.
#[derive(Debug, Clone)]
struct Dest {
    component: String,
    manifest: String,
    kpack_dir: PathBuf,
    archive: PlannedArchive,
}

/// One download and where it goes.
#[derive(Debug, Clone)]
struct Job {
    want: Wanted,
    dests: Vec<Dest>,
}

fn jobs_of(plan: &InstallPlan, sources: &Sources) -> Vec<Job> {
    let mut by_hash: BTreeMap<([u8; 32], bool), Job> = BTreeMap::new();
    let mut order = Vec::new();
    for (c, a) in plan.fetches() {
        let Some(sha) = a.sha256_bytes() else {
            continue;
        };
        let dest = dest_of(c, a);
        let encoded = a.kind == ItemKind::Database;
        let urls = if encoded {
            sources.database_urls_for(&c.component, &sha)
        } else {
            sources.urls_for(&c.component, &a.filename, &sha)
        };
        // An archive and a database file with the same bytes are still two
        // downloads: one is stored encoded.
        let job = by_hash.entry((sha, encoded)).or_insert_with(|| {
            order.push((sha, encoded));
            Job {
                want: Wanted {
                    name: a.filename.clone(),
                    size: a.size,
                    sha256: sha,
                    urls: Vec::new(),
                    encoded,
                },
                dests: Vec::new(),
            }
        });
        for u in urls {
            if !job.want.urls.contains(&u) {
                job.want.urls.push(u);
            }
        }
        job.dests.push(dest);
    }
    order.iter().filter_map(|key| by_hash.remove(key)).collect()
}

fn dest_of(c: &ComponentPlan, a: &PlannedArchive) -> Dest {
    Dest {
        component: c.component.clone(),
        manifest: c
            .manifest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        kpack_dir: c.kpack_dir.clone(),
        archive: a.clone(),
    }
}

fn failed(d: &Dest, error: String) -> Failed {
    Failed {
        component: d.component.clone(),
        filename: d.archive.filename.clone(),
        path: d.archive.path.clone(),
        error,
        causes: Vec::new(),
    }
}

/// Executes `plan`. `locked` maps each `.kpack` directory this process
/// holds the lock of to `Ok`, or to the reason it could not be locked
/// (archives for it then fail with that reason). `states` are the loaded
/// states of the locked directories; they are updated and saved.
pub fn execute(
    plan: &InstallPlan,
    sources: &Sources,
    options: &ExecOptions,
    locked: &BTreeMap<PathBuf, Result<(), String>>,
    states: BTreeMap<PathBuf, State>,
    reporter: Arc<dyn Reporter>,
) -> anyhow::Result<Report> {
    let jobs = jobs_of(plan, sources);
    let mut report = Report::default();
    if jobs.is_empty() {
        return Ok(report);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client = Client::new(options.client.clone())?;
    let states = Arc::new(Mutex::new(states));
    let semaphore = Arc::new(Semaphore::new(options.jobs.max(1)));
    runtime.block_on(async {
        let mut set = JoinSet::new();
        for job in jobs {
            // Destinations in directories we could not lock fail now.
            let (ok, blocked): (Vec<Dest>, Vec<Dest>) = job
                .dests
                .into_iter()
                .partition(|d| matches!(locked.get(&d.kpack_dir), Some(Ok(()))));
            for d in &blocked {
                let why = match locked.get(&d.kpack_dir) {
                    Some(Err(e)) => e.clone(),
                    _ => format!("{} is not locked", d.kpack_dir.display()),
                };
                report.failed.push(failed(d, why));
            }
            if ok.is_empty() {
                continue;
            }
            let job = Job {
                want: job.want,
                dests: ok,
            };
            let client = client.clone();
            let cache = options.cache.clone();
            let reporter = reporter.clone();
            let states = states.clone();
            let semaphore = semaphore.clone();
            let permissions = options.lock.permissions;
            set.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                run_job(client, cache, job, reporter, states, permissions).await
            });
        }
        while let Some(done) = set.join_next().await {
            match done {
                Ok(placed) => {
                    report.installed.extend(placed.installed);
                    report.failed.extend(placed.failed);
                    report.owned.extend(placed.owned);
                }
                Err(e) => anyhow::bail!("a transfer task failed: {e}"),
            }
        }
        Ok(())
    })?;
    // Deterministic output order.
    report.installed.sort_by(|a, b| a.path.cmp(&b.path));
    report.failed.sort_by(|a, b| a.path.cmp(&b.path));
    report.owned.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(report)
}

type Shared = Arc<Mutex<BTreeMap<PathBuf, State>>>;

async fn run_job(
    client: Client,
    cache: Cache,
    job: Job,
    reporter: Arc<dyn Reporter>,
    states: Shared,
    permissions: PermissionPolicy,
) -> Placed {
    let fetched = match download::fetch(&client, &cache, &job.want, reporter.as_ref()).await {
        Ok(f) => f,
        Err(e) => {
            let causes = e.causes();
            let msg = format!("{:#}", anyhow::Error::from(e));
            let fails = job
                .dests
                .iter()
                .map(|d| Failed {
                    causes: causes.clone(),
                    ..failed(d, msg.clone())
                })
                .collect();
            return Placed {
                failed: fails,
                ..Placed::default()
            };
        }
    };
    let dests = job.dests.clone();
    let sha = job.want.sha256;
    match tokio::task::spawn_blocking(move || {
        place_all(fetched, &dests, &sha, &states, permissions)
    })
    .await
    {
        Ok(result) => result,
        Err(e) => Placed {
            failed: job
                .dests
                .iter()
                .map(|d| failed(d, format!("install task failed: {e}")))
                .collect(),
            ..Placed::default()
        },
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Records `entry` for `d` in its state (or removes the record when
/// `None`) and saves it. Returns the previous record.
fn record(
    states: &Shared,
    d: &Dest,
    entry: Option<StateEntry>,
) -> Result<Option<StateEntry>, String> {
    let mut guard = states
        .lock()
        .map_err(|_| "state lock poisoned".to_string())?;
    let state = guard.entry(d.kpack_dir.clone()).or_default();
    let name = d.archive.filename.clone();
    let map = match d.archive.kind {
        ItemKind::Archive => &mut state.archives,
        ItemKind::Database => &mut state.databases,
    };
    let previous = match entry {
        Some(e) => map.insert(name, e),
        None => map.remove(&name),
    };
    state
        .save(&d.kpack_dir)
        .map_err(|e| format!("recording the install: {e}"))?;
    Ok(previous)
}

/// Records directories made for a database file of `d` (relative to the
/// prefix) in its state, so that removing the file removes them once empty.
fn record_created_dirs(states: &Shared, d: &Dest, created: Vec<String>) -> Result<(), String> {
    let mut guard = states
        .lock()
        .map_err(|_| "state lock poisoned".to_string())?;
    let state = guard.entry(d.kpack_dir.clone()).or_default();
    state.created_dirs.extend(created);
    state
        .save(&d.kpack_dir)
        .map_err(|e| format!("recording the directories made: {e}"))
}

/// What placing one download did.
#[derive(Debug, Default)]
struct Placed {
    installed: Vec<Installed>,
    failed: Vec<Failed>,
    owned: Vec<Owned>,
}

/// Opens where `d` goes: its `.kpack` directory for an archive; for a
/// database file the directory below its prefix, made and checked on the
/// way ([`Destination::database`], recording the directories made).
fn open_destination(
    states: &Shared,
    d: &Dest,
    permissions: PermissionPolicy,
) -> Result<Destination, String> {
    let a = &d.archive;
    match a.kind {
        ItemKind::Archive => {
            Destination::archive(&d.kpack_dir, &a.filename).map_err(|e| e.to_string())
        }
        ItemKind::Database => {
            let prefix = d.kpack_dir.parent().unwrap_or(std::path::Path::new("/"));
            let (dest, created) = Destination::database(prefix, &a.filename, permissions)
                .map_err(|e| e.to_string())?;
            if !created.is_empty() {
                if let Err(e) = record_created_dirs(states, d, created) {
                    tracing::warn!("{}: {e}", a.path.display());
                }
            }
            Ok(dest)
        }
    }
}

fn place_all(
    fetched: Fetched,
    dests: &[Dest],
    sha: &[u8; 32],
    states: &Shared,
    permissions: PermissionPolicy,
) -> Placed {
    let mut out = Placed::default();
    let Fetched {
        partial,
        url,
        transferred,
        resumed_from,
    } = fetched;
    let mut partial = Some(partial);
    let last = dests.len().saturating_sub(1);
    for (i, d) in dests.iter().enumerate() {
        let a = &d.archive;
        // A database file's path that an installed package owns is the
        // package manager's, whether the file is there, missing or
        // different: never written (docs/formats.md section 3).
        if a.kind == ItemKind::Database {
            let prefix = d.kpack_dir.parent().unwrap_or(std::path::Path::new("/"));
            if let Some(package) = package_owner(prefix, &a.path) {
                out.owned.push(Owned {
                    component: d.component.clone(),
                    filename: a.filename.clone(),
                    path: a.path.clone(),
                    package,
                });
                continue;
            }
        }
        let mut entry = StateEntry {
            component: d.component.clone(),
            manifest: d.manifest.clone(),
            family: a.family.clone(),
            architectures: a.architectures.clone(),
            size: a.size,
            sha256: hex::encode(sha),
            source: url.clone(),
            installed_at: now_secs(),
            targets: a.targets.clone(),
            reason: a.reason(),
            file: None,
        };
        let previous = match record(states, d, Some(entry.clone())) {
            Ok(p) => p,
            Err(e) => {
                out.failed.push(failed(d, e));
                continue;
            }
        };
        let dest = match open_destination(states, d, permissions) {
            Ok(dest) => dest,
            Err(e) => {
                if let Err(undo) = record(states, d, previous) {
                    tracing::warn!("{}: {undo}", a.path.display());
                }
                out.failed.push(failed(d, e));
                continue;
            }
        };
        // Every destination but the last gets a copy; the last takes the
        // cached file itself (a rename when on the same filesystem).
        let placed = if i == last {
            match partial.take() {
                Some(p) => place_from_partial(p, &dest, sha),
                None => continue,
            }
        } else {
            match &partial {
                Some(p) => place_copy(p.path(), &dest, sha),
                None => continue,
            }
        };
        match placed {
            Ok(meta) => {
                entry.file = Some(FileStamp::of(&meta));
                if let Err(e) = record(states, d, Some(entry)) {
                    tracing::warn!("{}: {e}", a.path.display());
                }
                out.installed.push(Installed {
                    component: d.component.clone(),
                    filename: a.filename.clone(),
                    path: a.path.clone(),
                    size: a.size,
                    sha256: hex::encode(sha),
                    source: url.clone(),
                    transferred: if i == 0 { transferred } else { 0 },
                    resumed_from: if i == 0 { resumed_from } else { 0 },
                });
            }
            Err(e) => {
                // Nothing changed on disk: put the old record back.
                if let Err(undo) = record(states, d, previous) {
                    tracing::warn!("{}: {undo}", a.path.display());
                }
                out.failed.push(failed(d, e.to_string()));
            }
        }
    }
    out
}
