//! Carrying out an [`InstallPlan`]: download every archive to fetch (once
//! per sha256, even when several prefixes need it), `--jobs` at a time, then
//! put it in place in each `.kpack` directory and record it in the state.
//!
//! The state entry is written before the archive appears (without a file
//! stamp) and completed after, so a crash in between leaves an entry the
//! next run re-checks by hashing, never an installed file nobody recorded.
//!
//! An archive whose manifest lists a transport form (of a format this
//! fetcher reads) is first downloaded that way, decoded like a database
//! object, and rebuilt at the destination (`--frame-level`); when that
//! fails for any reason the archive itself is downloaded, with one note
//! saying why (docs/packaging.md, "Transport form").
//!
//! Likewise a component that needs every member of a database set its
//! store's `index.json` lists ([`crate::database_sets`]) downloads the set
//! and installs each member as if it had been downloaded alone; on any
//! failure the members not installed are fetched one by one
//! (docs/packaging.md, "Transport form: kernel databases").

use std::collections::BTreeMap;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{masked, Client, ClientOptions, HostCause};
use crate::database_sets;
use crate::download::{self, Cache, Fetched, Partial, Wanted};
use crate::install::{
    package_owner, place_copy, place_from_partial, place_written, Destination, LockOptions,
    PermissionPolicy, PlaceError,
};
use crate::plan::{Action, ComponentPlan, InstallPlan, ItemKind, PlannedArchive};
use crate::progress::Reporter;
use crate::sources::Sources;
use crate::state::{FileStamp, Rebuilt, State, StateEntry};
use rocm_kpack_format::archive::transport::{rebuild_checked_archive, RebuildOptions};
use rocm_kpack_format::archive::DEFAULT_IN_FLIGHT_BYTES;
use rocm_kpack_format::database_set::{self, SetMember};
use rocm_kpack_format::layout::store::MAX_INDEX_FILE;
use rocm_kpack_format::manifest::ArchiveTransport;

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
    /// Download an archive's transport form where the manifest and the
    /// store have one, and frame it at this level (`None`:
    /// `--no-transport`, always the archive itself).
    pub transport: Option<FrameLevel>,
}

/// The highest `--frame-level`: zstd's levels above it need a window
/// (and memory) no installing machine should be asked for.
pub const MAX_FRAME_LEVEL: i32 = 19;

/// The zstd level of the frames of an archive rebuilt here from its
/// transport form (`--frame-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameLevel {
    /// This level: the code objects are the published ones, the file is
    /// not (its frames differ), so it is checked against the manifest's
    /// transport sha256.
    Level(i32),
    /// The published archive's level (the manifest's `transport.level`):
    /// the file is the published archive byte for byte, checked against
    /// the manifest's sha256.
    Release,
}

impl FrameLevel {
    /// The default level, measured on Debian's librocsparse0 (gfx90a):
    /// the cheapest level whose archive is at most 1.25 times the
    /// published one (docs/packaging.md, "Transport form: the fetcher's
    /// frame level").
    pub const DEFAULT: i32 = 5;
}

impl Default for FrameLevel {
    fn default() -> Self {
        FrameLevel::Level(FrameLevel::DEFAULT)
    }
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
    /// Rebuilt here from the archive's transport form (`size` and
    /// `sha256` are then those of the file written here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<Rebuilt>,
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
    /// The file being written when its file system filled up (or the
    /// quota ran out): the cache's partial download or the archive's
    /// destination, for advice about that file system.
    #[serde(skip)]
    pub disk_full: Option<PathBuf>,
}

/// Whether an I/O error in `err`'s chain says the file system is full.
fn is_disk_full(err: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(err), |e| e.source()).any(|e| {
        e.downcast_ref::<io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            )
        })
    })
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
    /// The archive's transport form, tried first.
    transport: Option<TransportJob>,
}

/// An archive's transport form to download and rebuild.
#[derive(Debug, Clone)]
struct TransportJob {
    /// The decoded stream: size and sha256 from the manifest's transport.
    want: Wanted,
    /// The frame level to rebuild at.
    level: i32,
    /// `--frame-level release`: the result must be the published archive.
    release: bool,
}

/// The transport job for archive `a`, when the manifest lists a
/// transport form this fetcher reads and `level` allows it. A format it
/// does not know is skipped with a note: the archive itself is fetched,
/// as by a fetcher that predates transport forms.
fn transport_job(
    c: &ComponentPlan,
    a: &PlannedArchive,
    sources: &Sources,
    level: Option<FrameLevel>,
    reporter: &dyn Reporter,
) -> Option<TransportJob> {
    let level = level?;
    let (size, sha256, release_level) = match a.transport.as_ref()? {
        ArchiveTransport::Solid {
            size,
            sha256,
            level,
        } => (*size, *sha256, *level),
        ArchiveTransport::Unsupported { format } => {
            reporter.note(&format!(
                "{}: its transport form has format {format}, which this rocm-kpack-fetch does not read; fetching the archive itself",
                a.filename
            ));
            return None;
        }
    };
    let (level, release) = match (level, release_level) {
        (FrameLevel::Level(n), _) => (n, false),
        (FrameLevel::Release, Some(n)) => (n, true),
        (FrameLevel::Release, None) => {
            reporter.note(&format!(
                "{}: its manifest gives no frame level to rebuild it at; fetching the archive itself",
                a.filename
            ));
            return None;
        }
    };
    Some(TransportJob {
        want: Wanted {
            name: format!("{} (transport form)", a.filename),
            size,
            sha256,
            urls: sources.transport_urls_for(&c.component, &sha256),
            encoded: true,
        },
        level,
        release,
    })
}

/// The download jobs of `plan`, one per content.
fn jobs_of(
    plan: &InstallPlan,
    sources: &Sources,
    level: Option<FrameLevel>,
    reporter: &dyn Reporter,
) -> Vec<Job> {
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
                transport: transport_job(c, a, sources, level, reporter),
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
        disk_full: None,
    }
}

/// Why a plan's execution stopped before its transfers ended (a failed
/// transfer is not one: it is in the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// The runtime that drives the transfers could not start.
    #[error(transparent)]
    Runtime(#[from] std::io::Error),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] reqwest::Error),
    /// A transfer task panicked or was cancelled.
    #[error("a transfer task failed: {0}")]
    Task(String),
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
) -> Result<Report, ExecuteError> {
    let mut report = Report::default();
    if plan.fetches().next().is_none() {
        return Ok(report);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client = Client::new(options.client.clone())?;
    let mut jobs = jobs_of(plan, sources, options.transport, reporter.as_ref());
    // `--no-transport` takes every file as it is stored, one by one.
    let set_jobs = match options.transport {
        Some(_) => runtime.block_on(set_jobs_of(&client, plan, sources, locked, &mut jobs)),
        None => Vec::new(),
    };
    let states = Arc::new(Mutex::new(states));
    let semaphore = Arc::new(Semaphore::new(options.jobs.max(1)));
    let ctx = JobContext {
        client,
        cache: options.cache.clone(),
        reporter: reporter.clone(),
        states,
        permissions: options.lock.permissions,
        rebuilds: Arc::new(Semaphore::new(1)),
    };
    runtime.block_on(async {
        let mut set = JoinSet::new();
        // Their destinations are all locked (set_jobs_of takes no other).
        for job in set_jobs {
            let ctx = ctx.clone();
            let semaphore = semaphore.clone();
            set.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                run_set_job(ctx, job).await
            });
        }
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
            let job = Job { dests: ok, ..job };
            let ctx = ctx.clone();
            let semaphore = semaphore.clone();
            set.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                run_job(ctx, job).await
            });
        }
        while let Some(done) = set.join_next().await {
            match done {
                Ok(placed) => {
                    report.installed.extend(placed.installed);
                    report.failed.extend(placed.failed);
                    report.owned.extend(placed.owned);
                }
                Err(e) => return Err(ExecuteError::Task(e.to_string())),
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

/// What every job shares.
#[derive(Clone)]
struct JobContext {
    client: Client,
    cache: Cache,
    reporter: Arc<dyn Reporter>,
    states: Shared,
    permissions: PermissionPolicy,
    /// One rebuild at a time: each holds up to the archive writer's
    /// in-flight bytes and keeps every core busy on its own.
    rebuilds: Arc<Semaphore>,
}

/// `dests` of a job failed with `msg` and `causes`.
fn all_failed(dests: &[Dest], msg: &str, causes: &[HostCause]) -> Vec<Failed> {
    dests
        .iter()
        .map(|d| Failed {
            causes: causes.to_vec(),
            ..failed(d, msg.to_string())
        })
        .collect()
}

/// A download's failure in one line: each source's cause.
fn brief(e: &download::DownloadError) -> String {
    e.causes()
        .iter()
        .map(|c| format!("{}: {}", c.host, c.cause))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Places `content` at `dests` on a blocking thread.
async fn place_blocking(ctx: &JobContext, content: Content, dests: Vec<Dest>) -> Placed {
    let states = ctx.states.clone();
    let permissions = ctx.permissions;
    let shown = dests.clone();
    match tokio::task::spawn_blocking(move || place_all(content, &dests, &states, permissions))
        .await
    {
        Ok(result) => result,
        Err(e) => Placed {
            failed: all_failed(&shown, &format!("install task failed: {e}"), &[]),
            ..Placed::default()
        },
    }
}

async fn run_job(ctx: JobContext, job: Job) -> Placed {
    let reporter = ctx.reporter.as_ref();
    let mut out = Placed::default();
    let mut dests = job.dests;
    if let Some(t) = job.transport {
        match download::fetch(&ctx.client, &ctx.cache, &t.want, reporter).await {
            Ok(fetched) => {
                let _rebuilding = ctx.rebuilds.clone().acquire_owned().await;
                let archive_sha = job.want.sha256;
                let content = Content::Rebuild {
                    fetched,
                    job: t,
                    archive_sha,
                };
                out = place_blocking(&ctx, content, dests).await;
                dests = std::mem::take(&mut out.fall_back);
                if let Some(why) = out.fall_back_reason.take() {
                    reporter.note(&format!(
                        "{}: rebuilding it from its transport form failed ({why}); fetching the archive itself",
                        job.want.name
                    ));
                }
                if dests.is_empty() {
                    return out;
                }
            }
            Err(e) => reporter.note(&format!(
                "{}: its transport form could not be downloaded ({}); fetching the archive itself",
                job.want.name,
                brief(&e)
            )),
        }
    }
    let placed = match download::fetch(&ctx.client, &ctx.cache, &job.want, reporter).await {
        Ok(fetched) => {
            let content = Content::Download {
                fetched,
                sha: job.want.sha256,
            };
            place_blocking(&ctx, content, dests).await
        }
        Err(e) => {
            let causes = e.causes();
            let disk_full = match &e {
                download::DownloadError::Local {
                    error: crate::client::FetchError::Local { path, .. },
                    ..
                } if is_disk_full(&e) => Some(path.clone()),
                _ => None,
            };
            let msg = crate::error::chain_text(&e);
            let mut failed = all_failed(&dests, &msg, &causes);
            for f in &mut failed {
                f.disk_full.clone_from(&disk_full);
            }
            Placed {
                failed,
                ..Placed::default()
            }
        }
    };
    out.installed.extend(placed.installed);
    out.failed.extend(placed.failed);
    out.owned.extend(placed.owned);
    out
}

/// A database set to download, and its members' own jobs, in the
/// set's order: what is installed from the set, or fetched one by one
/// when the set fails.
struct SetJob {
    /// The decoded stream: size and sha256 from the store's index (the
    /// size checked against the members, [`database_sets::choose`]).
    want: Wanted,
    members: Vec<(SetMember, Job)>,
}

/// The database sets to download for `plan`: for each component (in a
/// locked directory) with at least two database files to fetch, the sets
/// of the `index.json` of its sources whose every member it fetches. Each
/// member's own job (every destination of its content, all in locked
/// directories) moves from `jobs` into the set job, so a content is
/// downloaded once, and no file is in two sets. An index that cannot be
/// read gives no sets (logged): the files are fetched one by one, as from
/// a store that predates sets.
async fn set_jobs_of(
    client: &Client,
    plan: &InstallPlan,
    sources: &Sources,
    locked: &BTreeMap<PathBuf, Result<(), String>>,
    jobs: &mut Vec<Job>,
) -> Vec<SetJob> {
    let mut indexes: BTreeMap<String, Vec<database_sets::IndexSet>> = BTreeMap::new();
    let mut out = Vec::new();
    let is_locked = |dir: &PathBuf| matches!(locked.get(dir), Some(Ok(())));
    for c in &plan.components {
        if !is_locked(&c.kpack_dir) {
            continue;
        }
        let dbs: Vec<&PlannedArchive> = c
            .databases
            .iter()
            .filter(|a| matches!(a.action, Action::Fetch | Action::Replace))
            .collect();
        if dbs.len() < 2 {
            continue;
        }
        let mut sets = Vec::new();
        for url in sources.index_urls_for(&c.component) {
            let key = url.to_string();
            if !indexes.contains_key(&key) {
                let listed = match download::fetch_small(client, &url, MAX_INDEX_FILE).await {
                    Ok(Some(bytes)) => database_sets::parse_index(&bytes).unwrap_or_else(|e| {
                        tracing::info!("{}: {e}; no database sets from it", masked(&url));
                        Vec::new()
                    }),
                    Ok(None) => Vec::new(),
                    Err(e) => {
                        tracing::info!("{e}; no database sets from it");
                        Vec::new()
                    }
                };
                indexes.insert(key.clone(), listed);
            }
            sets.extend(indexes.get(&key).into_iter().flatten().cloned());
        }
        let needed: BTreeMap<String, (u64, [u8; 32])> = dbs
            .iter()
            .filter_map(|a| Some((a.filename.clone(), (a.size, a.sha256_bytes()?))))
            .collect();
        for chosen in database_sets::choose(&sets, &c.component, &needed) {
            // The member's job: the content, stored encoded, and every
            // destination in a locked directory.
            let at = |jobs: &[Job], m: &SetMember| {
                jobs.iter().position(|j| {
                    j.want.encoded
                        && j.want.sha256 == m.sha256
                        && j.dests.iter().all(|d| is_locked(&d.kpack_dir))
                })
            };
            if !chosen.members.iter().all(|m| at(jobs, m).is_some()) {
                continue;
            }
            let members: Vec<(SetMember, Job)> = chosen
                .members
                .into_iter()
                .filter_map(|m| {
                    let i = at(jobs, &m)?;
                    Some((m, jobs.remove(i)))
                })
                .collect();
            tracing::info!(
                "{}: {} database files of {} as one set",
                c.component,
                members.len(),
                chosen.processor
            );
            out.push(SetJob {
                want: Wanted {
                    name: format!("{} database set for {}", c.component, chosen.processor),
                    size: chosen.size,
                    sha256: chosen.sha256,
                    urls: sources.database_set_urls_for(&c.component, &chosen.sha256),
                    encoded: true,
                },
                members,
            });
        }
    }
    out
}

/// A downloaded set split into its members, each a complete, verified
/// partial download (in the set's member order).
struct Split {
    parts: Vec<Partial>,
    url: Option<String>,
    transferred: u64,
}

/// Reads the verified, decoded set stream of `fetched` and writes each
/// member into its own partial download in `cache`, checked against the
/// manifest's size and sha256 (`members`, by path) before it is kept. The
/// stream itself is removed whatever happens; on any failure so are the
/// members' partials.
fn split_set(fetched: Fetched, members: &[SetMember], cache: &Cache) -> Result<Split, String> {
    let Fetched {
        partial,
        url,
        transferred,
        ..
    } = fetched;
    let mut parts: BTreeMap<String, Partial> = BTreeMap::new();
    let read = (|| -> Result<(), String> {
        let mut input = partial.file();
        input.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        let mut input = io::BufReader::with_capacity(1 << 20, input);
        let wanted: BTreeMap<&str, &SetMember> =
            members.iter().map(|m| (m.path.as_str(), m)).collect();
        let invalid = |s: String| io::Error::new(io::ErrorKind::InvalidData, s);
        database_set::read_set(&mut input, &mut |m, data| {
            if wanted.get(m.path.as_str()) != Some(&m) {
                return Err(invalid(format!(
                    "{:?} is not a database file the manifest lists with this size and sha256",
                    m.path
                )));
            }
            let mut p = Partial::open(&cache.partial_path(&m.sha256), m.size)?;
            p.truncate()?;
            let filled = p.fill_from(data);
            let ok = p.len() == m.size && p.digest() == m.sha256;
            // Kept until the end, and removed there on failure.
            parts.insert(m.path.clone(), p);
            filled?;
            if !ok {
                return Err(invalid(format!(
                    "{:?} does not match its manifest entry",
                    m.path
                )));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok(())
    })();
    // As large as the files: never kept once read.
    if let Err(e) = partial.remove() {
        tracing::debug!("cannot remove a used database set stream: {e}");
    }
    let ordered = read.and_then(|()| {
        members
            .iter()
            .map(|m| {
                parts
                    .remove(&m.path)
                    .ok_or_else(|| format!("the set lacks {:?}", m.path))
            })
            .collect::<Result<Vec<Partial>, String>>()
    });
    match ordered {
        Ok(parts) => Ok(Split {
            parts,
            url,
            transferred,
        }),
        Err(e) => {
            for (_, p) in parts {
                if let Err(e) = p.remove() {
                    tracing::debug!("cannot remove a partial database file: {e}");
                }
            }
            Err(e)
        }
    }
}

/// Downloads a database set and installs its members; whatever fails
/// sends the members to their own jobs, with one note saying why.
async fn run_set_job(ctx: JobContext, set: SetJob) -> Placed {
    let reporter = ctx.reporter.as_ref();
    let why = match download::fetch(&ctx.client, &ctx.cache, &set.want, reporter).await {
        Ok(fetched) => {
            let members: Vec<SetMember> = set.members.iter().map(|(m, _)| m.clone()).collect();
            let cache = ctx.cache.clone();
            match tokio::task::spawn_blocking(move || split_set(fetched, &members, &cache)).await {
                Ok(Ok(split)) => {
                    let mut out = Placed::default();
                    let mut transferred = split.transferred;
                    for (partial, (m, job)) in split.parts.into_iter().zip(set.members) {
                        // The set's bytes on the wire count for its first member.
                        let fetched = Fetched {
                            partial,
                            url: split.url.clone(),
                            transferred: std::mem::take(&mut transferred),
                            resumed_from: 0,
                        };
                        let content = Content::Download {
                            fetched,
                            sha: m.sha256,
                        };
                        out.absorb(place_blocking(&ctx, content, job.dests).await);
                    }
                    return out;
                }
                Ok(Err(why)) => why,
                Err(e) => format!("task failed: {e}"),
            }
        }
        Err(e) => brief(&e),
    };
    reporter.note(&format!(
        "{}: {why}; fetching its files one by one",
        set.want.name
    ));
    let mut out = Placed::default();
    for (_, job) in set.members {
        out.absorb(run_job(ctx.clone(), job).await);
    }
    out
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
) -> Result<Option<StateEntry>, StateFailure> {
    let mut guard = states.lock().map_err(|_| StateFailure {
        message: "state lock poisoned".to_string(),
        disk_full: None,
    })?;
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
    state.save(&d.kpack_dir).map_err(|e| StateFailure {
        disk_full: match &e {
            crate::state::StateError::Io(io) if is_disk_full(&e) => Some(io.path.clone()),
            _ => None,
        },
        message: format!("recording the install: {e}"),
    })?;
    Ok(previous)
}

/// A state file that could not be saved: what to say, and the file
/// being written when its file system filled up.
#[derive(Debug)]
struct StateFailure {
    message: String,
    disk_full: Option<PathBuf>,
}

impl std::fmt::Display for StateFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl StateFailure {
    /// `d` failed for it.
    fn failed(self, d: &Dest) -> Failed {
        Failed {
            disk_full: self.disk_full,
            ..failed(d, self.message)
        }
    }
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
    /// Destinations a failed rebuild left for the archive itself.
    fall_back: Vec<Dest>,
    /// Why the rebuild failed.
    fall_back_reason: Option<String>,
}

impl Placed {
    /// Adds what `other` installed, failed and left to owners.
    fn absorb(&mut self, other: Placed) {
        self.installed.extend(other.installed);
        self.failed.extend(other.failed);
        self.owned.extend(other.owned);
    }
}

/// What is put at a job's destinations.
enum Content {
    /// A verified download of the file itself (sha256 `sha`): the last
    /// destination takes it, the others get copies.
    Download { fetched: Fetched, sha: [u8; 32] },
    /// A verified transport form: rebuilt at the first destination,
    /// copied from there to the others.
    Rebuild {
        fetched: Fetched,
        job: TransportJob,
        /// The manifest's sha256 of the published archive.
        archive_sha: [u8; 32],
    },
}

/// Rebuilds the archive of `job` from its verified, decoded transport
/// stream `flat` into `out` (empty, at its start), at the job's level, in
/// bounded memory ([`rebuild_checked_archive`]). `flat` is the download's
/// own open file, hashed against the manifest as its bytes arrived (in the
/// fetcher's private cache), so it is not hashed a second time; the
/// rebuild must still have read exactly the manifest's size. Returns the
/// sha256 of what it wrote.
fn rebuild(
    flat: &std::fs::File,
    out: &mut std::fs::File,
    job: &TransportJob,
) -> io::Result<[u8; 32]> {
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut input = flat;
    input.seek(SeekFrom::Start(0))?;
    let mut input = io::BufReader::with_capacity(1 << 20, input);
    // The fetcher has no memory setting: the writer's default bound; the
    // frames are compressed on the global rayon pool, one thread per core.
    let opts = RebuildOptions {
        level: job.level,
        in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
        pool: None,
    };
    let (out, size, _) = rebuild_checked_archive(&mut input, &mut *out, &opts)
        .map_err(|e| invalid(e.to_string()))?;
    if size != job.want.size {
        return Err(invalid(format!(
            "the stream read is {size} bytes; the manifest's transport is {} bytes",
            job.want.size
        )));
    }
    out.flush()?;
    out.seek(SeekFrom::Start(0))?;
    let (_, sha) = rocm_kpack_fs::sha256_reader(&mut *out)?;
    Ok(sha)
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
    content: Content,
    dests: &[Dest],
    states: &Shared,
    permissions: PermissionPolicy,
) -> Placed {
    let mut out = Placed::default();
    let (fetched, sha, job) = match content {
        Content::Download { fetched, sha } => (fetched, sha, None),
        Content::Rebuild {
            fetched,
            job,
            archive_sha,
        } => (fetched, archive_sha, Some(job)),
    };
    let Fetched {
        partial,
        url,
        transferred,
        resumed_from,
    } = fetched;
    let sha = &sha;
    let mut partial = Some(partial);
    // Rebuilt: the first archive written (path, sha256), copied to the
    // other destinations.
    let mut rebuilt: Option<(PathBuf, [u8; 32])> = None;
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
            rebuilt: None,
        };
        let previous = match record(states, d, Some(entry.clone())) {
            Ok(p) => p,
            Err(e) => {
                out.failed.push(e.failed(d));
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
        let with_sha = |placed: Result<std::fs::Metadata, PlaceError>, sha: &[u8; 32]| {
            placed.map(|meta| (meta, *sha))
        };
        let placed = match (&job, &rebuilt) {
            // Every destination but the last gets a copy; the last takes
            // the cached file itself (a rename when on the same
            // filesystem).
            (None, _) if i == last => match partial.take() {
                Some(p) => with_sha(place_from_partial(p, &dest, sha), sha),
                None => continue,
            },
            (None, _) => match &partial {
                Some(p) => with_sha(place_copy(p.path(), &dest, sha), sha),
                None => continue,
            },
            (Some(_), Some((first, local))) => with_sha(place_copy(first, &dest, local), local),
            (Some(job), None) => {
                let Some(flat) = &partial else { continue };
                // At the release level the result is the published
                // archive, and must be.
                let expect = job.release.then_some(sha);
                match place_written(&dest, expect, |file| rebuild(flat.file(), file, job)) {
                    Ok(done) => {
                        rebuilt = Some((dest.path().to_path_buf(), done.1));
                        Ok(done)
                    }
                    Err(e) => {
                        // Nothing changed on disk: the old record back, and
                        // this and every later destination to the archive
                        // itself.
                        if let Err(undo) = record(states, d, previous) {
                            tracing::warn!("{}: {undo}", a.path.display());
                        }
                        out.fall_back = dests[i..].to_vec();
                        out.fall_back_reason = Some(e.to_string());
                        break;
                    }
                }
            }
        };
        match placed {
            Ok((meta, actual)) => {
                entry.file = Some(FileStamp::of(&meta));
                entry.size = meta.len();
                entry.sha256 = hex::encode(actual);
                entry.rebuilt = job.as_ref().map(|j| Rebuilt {
                    transport_sha256: hex::encode(j.want.sha256),
                    level: j.level,
                });
                if let Err(e) = record(states, d, Some(entry.clone())) {
                    tracing::warn!("{}: {e}", a.path.display());
                }
                out.installed.push(Installed {
                    component: d.component.clone(),
                    filename: a.filename.clone(),
                    path: a.path.clone(),
                    size: entry.size,
                    sha256: entry.sha256,
                    source: url.clone(),
                    transferred: if i == 0 { transferred } else { 0 },
                    resumed_from: if i == 0 { resumed_from } else { 0 },
                    rebuilt: entry.rebuilt,
                });
            }
            Err(e) => {
                // Nothing changed on disk: put the old record back.
                if let Err(undo) = record(states, d, previous) {
                    tracing::warn!("{}: {undo}", a.path.display());
                }
                let disk_full = match &e {
                    PlaceError::Io(io) if is_disk_full(&e) => Some(io.path.clone()),
                    _ => None,
                };
                out.failed.push(Failed {
                    disk_full,
                    ..failed(d, e.to_string())
                });
            }
        }
    }
    // A decoded transport stream is as large as the uncompressed code:
    // never kept once used, whatever came of it.
    if job.is_some() {
        if let Some(p) = partial {
            if let Err(e) = p.remove() {
                tracing::debug!("cannot remove a used transport stream: {e}");
            }
        }
    }
    out
}
