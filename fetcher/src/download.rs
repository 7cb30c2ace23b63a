//! Downloading one archive: stream into a partial file in the cache, keyed
//! by the expected sha256 (`<cache>/partial/<hex>.part`), hashing while
//! streaming; resume a kept partial with an HTTP `Range` request after
//! re-hashing its bytes; never accept more bytes than the manifest's size;
//! check size and sha256 at the end. Sources are tried in order, each with
//! retries for transient errors. A hash failure discards every byte held;
//! when the bytes were spliced onto a resumed partial, the same source is
//! asked again from byte 0 (a bad mirror's partial never poisons a good one).
//!
//! A kernel-database file is stored zstd-encoded: its bytes are decoded as
//! they arrive, so the partial holds (and the size bound, sha256 and
//! resume logic apply to) the installed bytes. A decoder cannot pick up in
//! the middle of a stream, so an interrupted encoded transfer starts again
//! at byte 0 (the objects are small: a few percent of the installed size)
//! and a failed one leaves no partial behind. Decoding stops at the first
//! output that would pass the manifest's size, so a small object that
//! decodes to gigabytes (a zstd bomb) never writes more than that size.
//!
//! A `file://` or `--offline` source opens regular files only, without
//! blocking: a FIFO there is an error for that file, not a stalled run.
//!
//! The partial file is `flock`ed while in use, so two processes that need
//! the same archive (for different prefixes) do not write it together.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_RANGE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use rocm_kpack_fs::Sha256;
use sha2::Digest;

use crate::client::{masked, retry, Attempted, Client, FetchError, HostCause};
use crate::progress::{Reporter, Transfer};
use rocm_kpack_cli::iec_size;

/// Bytes gathered before one write to the partial file.
const WRITE_BUFFER: usize = 1 << 20;

/// Where partial downloads are kept between runs.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache rooted at `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of partial downloads.
    pub fn partial_dir(&self) -> PathBuf {
        self.dir.join("partial")
    }

    /// The partial file for an archive with this sha256.
    pub fn partial_path(&self, sha256: &[u8; 32]) -> PathBuf {
        self.partial_dir()
            .join(format!("{}.part", hex::encode(sha256)))
    }

    /// Kept partial downloads: (path, bytes held). Missing cache: none.
    pub fn partials(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let entries = match fs::read_dir(self.partial_dir()) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "part") {
                out.push((path, entry.metadata()?.len()));
            }
        }
        out.sort();
        Ok(out)
    }
}

/// What to download: the manifest's facts and the candidate URLs, in the
/// order to try them.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// Archive file name (for messages).
    pub name: String,
    /// Exact size from the manifest.
    pub size: u64,
    /// SHA-256 from the manifest.
    pub sha256: [u8; 32],
    /// Candidate URLs (https, http with `--allow-http`, or file).
    pub urls: Vec<Url>,
    /// The objects at those URLs are zstd-encoded (database files); `size`
    /// and `sha256` are those of the decoded bytes.
    pub encoded: bool,
}

/// A complete, verified download held in the cache, still locked.
#[derive(Debug)]
pub struct Fetched {
    /// The partial file, now complete and verified.
    pub partial: Partial,
    /// Masked URL it came from (`None`: complete from an earlier run).
    pub url: Option<String>,
    /// Bytes received over the network (or read from a `file://` source) in
    /// this run.
    pub transferred: u64,
    /// Bytes that were already held when this run started.
    pub resumed_from: u64,
}

/// Why an archive could not be downloaded.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// No URL to try.
    #[error("{name}: no source configured (use --source URL, --offline DIR or /etc/rocm-kpack/sources.d)")]
    NoSource {
        /// Archive file name.
        name: String,
    },
    /// Every source failed; one entry per URL tried.
    #[error("could not fetch {name} from any source:{}", list(attempts))]
    AllFailed {
        /// Archive file name.
        name: String,
        /// The last error of each URL, with retries spent.
        attempts: Vec<Attempted>,
    },
    /// A local file could not be written or read.
    #[error("fetching {name}: {error}")]
    Local {
        /// Archive file name.
        name: String,
        /// The error.
        #[source]
        error: FetchError,
    },
}

impl DownloadError {
    /// Each source's failure in a few words (one per host and cause), for
    /// a summary per host as apt prints one.
    pub fn causes(&self) -> Vec<HostCause> {
        let mut causes: Vec<HostCause> = match self {
            DownloadError::NoSource { .. } => vec![HostCause {
                host: "no source".into(),
                cause: "no source configured".into(),
            }],
            DownloadError::AllFailed { attempts, .. } => {
                attempts.iter().map(|a| HostCause::from(&a.error)).collect()
            }
            DownloadError::Local { error, .. } => vec![HostCause::from(error)],
        };
        causes.sort();
        causes.dedup();
        causes
    }
}

fn list(attempts: &[Attempted]) -> String {
    attempts.iter().map(|a| format!("\n  {a}")).collect()
}

/// A locked partial download: file, bytes held, hash state of those bytes.
#[derive(Debug)]
pub struct Partial {
    path: PathBuf,
    file: File,
    hasher: Sha256,
    /// Bytes hashed so far (written or buffered).
    len: u64,
    buf: Vec<u8>,
}

impl Partial {
    /// Opens (creating) and locks the partial file at `path`, then hashes
    /// what it already holds; a file longer than `size` is emptied. Blocks
    /// while another process holds the lock.
    pub fn open(path: &Path, size: u64) -> io::Result<Partial> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let file = loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
            // The holder may have moved the file into a prefix meanwhile:
            // only a lock on the file still at `path` counts.
            let held = file.metadata()?;
            match fs::metadata(path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => break file,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        };
        let mut partial = Partial {
            path: path.to_path_buf(),
            file,
            hasher: Sha256::new(),
            len: 0,
            buf: Vec::new(),
        };
        let held = partial.file.metadata()?.len();
        if held > size {
            partial.truncate()?;
        } else {
            partial.rehash(held)?;
        }
        Ok(partial)
    }

    /// Path of the partial file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file handle (locked).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn rehash(&mut self, held: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        let hasher = &mut self.hasher;
        self.len =
            rocm_kpack_fs::for_each_block((&self.file).take(held), |block| hasher.update(block))?;
        self.file.set_len(self.len)?;
        self.file.seek(SeekFrom::Start(self.len))?;
        Ok(())
    }

    /// Drops everything held.
    pub fn truncate(&mut self) -> io::Result<()> {
        self.buf.clear();
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.hasher = Sha256::new();
        self.len = 0;
        Ok(())
    }

    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.hasher.update(data);
        self.len += data.len() as u64;
        if self.buf.is_empty() && data.len() >= WRITE_BUFFER {
            return self.file.write_all(data);
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes buffered bytes to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let result = self.file.write_all(&self.buf);
            if result.is_err() {
                // Whatever reached the file is unknown: start over next time.
                self.buf.clear();
                let _ = self.truncate();
            }
            result?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Appends everything `r` yields (hashed as it is written); returns
    /// the bytes appended. The caller checks [`Partial::len`] and
    /// [`Partial::digest`] against what it expects.
    pub fn fill_from(&mut self, r: &mut dyn Read) -> io::Result<u64> {
        let total = io::copy(r, self)?;
        Partial::flush(self)?;
        Ok(total)
    }

    /// SHA-256 of the bytes held.
    pub fn digest(&self) -> [u8; 32] {
        self.hasher.clone().finalize().into()
    }

    /// Removes the file (it stays locked until dropped).
    pub fn remove(self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The first `n` bytes of `buf`. A count past its end (a reader or the
/// decoder breaking its contract) is an error, never a silently shorter
/// slice.
fn head(buf: &[u8], n: usize) -> io::Result<&[u8]> {
    buf.get(..n).ok_or_else(|| {
        io::Error::other(format!(
            "{n} bytes reported in a buffer of {} bytes",
            buf.len()
        ))
    })
}

fn local(path: &Path, source: io::Error) -> FetchError {
    FetchError::Local {
        path: path.to_path_buf(),
        source,
    }
}

/// Downloads `want` into the cache, verifying size and sha256. Returns the
/// locked, complete partial for the installer to move into place.
pub async fn fetch(
    client: &Client,
    cache: &Cache,
    want: &Wanted,
    reporter: &dyn Reporter,
) -> Result<Fetched, DownloadError> {
    let name = want.name.clone();
    let local_err = |error| DownloadError::Local {
        name: name.clone(),
        error,
    };
    let path = cache.partial_path(&want.sha256);
    let size = want.size;
    let open_path = path.clone();
    let mut partial = tokio::task::spawn_blocking(move || Partial::open(&open_path, size))
        .await
        .map_err(|e| local_err(local(&path, io::Error::other(e))))?
        .map_err(|e| local_err(local(&path, e)))?;
    let resumed_from = partial.len();

    if partial.len() == want.size {
        if partial.digest() == want.sha256 {
            return Ok(Fetched {
                partial,
                url: None,
                transferred: 0,
                resumed_from,
            });
        }
        partial.truncate().map_err(|e| local_err(local(&path, e)))?;
    }
    if want.urls.is_empty() {
        return Err(DownloadError::NoSource { name });
    }

    let mut attempts = Vec::new();
    let mut transfer: Option<Box<dyn Transfer>> = None;
    let mut transferred = 0u64;
    for url in &want.urls {
        let shown = masked(url);
        let mut retries = 0u32;
        loop {
            let before = partial.len();
            let mut wire = 0u64;
            let result = attempt(
                client,
                url,
                &mut partial,
                want,
                reporter,
                &mut transfer,
                &mut wire,
            )
            .await;
            transferred += wire;
            let error = match result {
                Ok(()) => {
                    let actual = partial.digest();
                    if actual == want.sha256 {
                        if let Some(t) = transfer.take() {
                            t.finish(Ok(()));
                        }
                        return Ok(Fetched {
                            partial,
                            url: Some(shown),
                            transferred,
                            resumed_from,
                        });
                    }
                    // Wrong content: drop every byte held. When this
                    // attempt resumed bytes from an earlier one (another
                    // source, or an earlier run), the bad bytes may be
                    // those: ask this source again from byte 0 before
                    // blaming it.
                    partial.truncate().map_err(|e| local_err(local(&path, e)))?;
                    if before > 0 && !want.encoded {
                        reporter.note(&format!(
                            "{}: resumed download from {shown} does not match its sha256; starting over from byte 0",
                            want.name
                        ));
                        continue;
                    }
                    FetchError::HashMismatch {
                        url: shown.clone(),
                        expected: hex::encode(want.sha256),
                        actual: hex::encode(actual),
                    }
                }
                Err(e) => e,
            };
            if error.is_local() {
                if let Some(t) = transfer.take() {
                    t.finish(Err(&error.to_string()));
                }
                drop_unresumable(partial, want);
                return Err(local_err(error));
            }
            if matches!(
                error,
                FetchError::Oversize { .. }
                    | FetchError::Encoding { .. }
                    | FetchError::TooSlow { .. }
            ) {
                partial.truncate().map_err(|e| local_err(local(&path, e)))?;
            }
            // Progress earns the connection a fresh set of retries.
            if partial.len() > before {
                retries = 0;
            }
            if error.is_transient() && retries < client.options.retries {
                let wait = client.options.backoff.delay(retries, error.retry_after());
                reporter.note(&format!(
                    "{}: {}: {}; retrying in {:.1}s",
                    want.name,
                    error.host(),
                    error.brief(),
                    wait.as_secs_f64()
                ));
                tokio::time::sleep(wait).await;
                retries += 1;
                continue;
            }
            if !matches!(error, FetchError::NotFound { .. }) {
                reporter.note(&format!(
                    "{}: {}: {}",
                    want.name,
                    error.host(),
                    error.brief()
                ));
            }
            attempts.push(Attempted { error, retries });
            break;
        }
    }
    let summary = DownloadError::AllFailed { name, attempts };
    if let Some(t) = transfer.take() {
        t.finish(Err(&summary.to_string()));
    }
    drop_unresumable(partial, want);
    Err(summary)
}

/// Fetches a small object whose size and sha256 nobody vouches for (a
/// store's `index.json`) into memory: one try, at most `limit` bytes
/// (more is an error), with the read timeout and the
/// throughput floor of every transfer. `Ok(None)`: the source does not
/// have it (HTTP 404/410, a missing file).
pub async fn fetch_small(
    client: &Client,
    url: &Url,
    limit: u64,
) -> Result<Option<Vec<u8>>, FetchError> {
    let shown = masked(url);
    let oversize = || FetchError::Encoding {
        url: shown.clone(),
        detail: format!("larger than the {limit}-byte limit"),
    };
    if url.scheme() == "file" {
        let src = url.to_file_path().map_err(|()| FetchError::FileSource {
            url: shown.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a local file path"),
        })?;
        // As for every object of a local store: links are followed, only
        // a regular file is opened, without blocking.
        return match rocm_kpack_fs::read_limited_following(&src, limit) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) => {
                let e = io::Error::from(e);
                match e.kind() {
                    io::ErrorKind::NotFound => Ok(None),
                    // Over the limit too: the error names it.
                    _ => Err(FetchError::FileSource {
                        url: shown,
                        source: e,
                    }),
                }
            }
        };
    }
    let mut resp = client.get(url, 0).await?;
    match resp.status() {
        StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(None),
        StatusCode::OK => {}
        status => {
            return Err(FetchError::Status {
                url: shown,
                status: status.as_u16(),
                retry_after: None,
            })
        }
    }
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(oversize());
    }
    let mut reader = ChunkReader::new(&client.options);
    let mut bytes = Vec::new();
    while let Some(chunk) = reader.next(&mut resp, &shown).await? {
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(oversize());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Some(bytes))
}

/// After a failed download: keeps a non-empty plain partial for the next
/// run to resume; removes an empty one, and an encoded one whatever it
/// holds (a decoder cannot resume, so its bytes would only take disk space
/// until the next run empties them: up to the manifest's size, whatever
/// the object's own).
fn drop_unresumable(partial: Partial, want: &Wanted) {
    if partial.is_empty() || want.encoded {
        if let Err(e) = partial.remove() {
            tracing::debug!("{}: cannot remove its partial download: {e}", want.name);
        }
    }
}

/// One try of one URL: append to `partial` until it holds `want.size`
/// bytes. `Ok` means complete (hash not yet checked).
async fn attempt(
    client: &Client,
    url: &Url,
    partial: &mut Partial,
    want: &Wanted,
    reporter: &dyn Reporter,
    transfer: &mut Option<Box<dyn Transfer>>,
    wire: &mut u64,
) -> Result<(), FetchError> {
    let mut sink = Sink::new(want).map_err(|e| local(partial.path(), e))?;
    if want.encoded && !partial.is_empty() {
        // A decoder cannot resume mid-stream: start again at byte 0.
        partial.truncate().map_err(|e| local(partial.path(), e))?;
    }
    if url.scheme() == "file" {
        return attempt_file(url, partial, want, reporter, transfer, &mut sink, wire).await;
    }
    let shown = masked(url);
    let from = partial.len();
    let mut resp = client.get(url, from).await?;
    let status = resp.status();
    match status {
        StatusCode::NOT_FOUND | StatusCode::GONE => {
            return Err(FetchError::NotFound {
                url: shown,
                status: status.as_u16(),
            })
        }
        StatusCode::PARTIAL_CONTENT => {
            let header = resp
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            if content_range(&header) != Some((from, want.size)) {
                partial.truncate().map_err(|e| local(partial.path(), e))?;
                return Err(FetchError::BadRange {
                    url: shown,
                    asked: from,
                    detail: format!("Content-Range {header:?}"),
                });
            }
        }
        StatusCode::OK => {
            if from > 0 {
                // The server ignored the range: start over.
                partial.truncate().map_err(|e| local(partial.path(), e))?;
            }
        }
        StatusCode::RANGE_NOT_SATISFIABLE if from > 0 => {
            partial.truncate().map_err(|e| local(partial.path(), e))?;
            return Err(FetchError::BadRange {
                url: shown,
                asked: from,
                detail: "416 Range Not Satisfiable".into(),
            });
        }
        s if s.is_redirection() => {
            // reqwest hands back redirects it will not follow (schemes it
            // does not speak, such as file: or ftp:): never followed here.
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(FetchError::Redirect {
                url: shown,
                location: rocm_kpack_format::layout::names::shown(&location),
            });
        }
        _ => {
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry::parse_retry_after(v, std::time::SystemTime::now()));
            return Err(FetchError::Status {
                url: shown,
                status: status.as_u16(),
                retry_after,
            });
        }
    }
    let start = partial.len();
    if let Some(announced) = resp.content_length() {
        if start.saturating_add(announced) > sink.wire_limit(want) {
            return Err(FetchError::Oversize {
                url: shown,
                expected: want.size,
            });
        }
    }
    begin(transfer, reporter, want, &shown, start);

    let mut reader = ChunkReader::new(&client.options);
    let result = loop {
        let chunk = match reader.next(&mut resp, &shown).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match sink.put(&chunk, partial, want, &shown) {
            Ok(taken) => {
                *wire += taken;
                if let Some(t) = transfer {
                    t.advance(taken);
                }
            }
            Err(e) => break Err(e),
        }
    };
    partial.flush().map_err(|e| local(partial.path(), e))?;
    result?;
    sink.complete(partial, want, shown)
}

/// The body of one response, chunk by chunk, under the read timeout and
/// the throughput floor (every transfer's rules, whatever keeps its bytes).
struct ChunkReader {
    timeout: Duration,
    floor: Floor,
    last_data: Instant,
}

impl ChunkReader {
    fn new(options: &crate::client::ClientOptions) -> ChunkReader {
        ChunkReader {
            timeout: options.read_timeout,
            floor: Floor::new(options),
            last_data: Instant::now(),
        }
    }

    /// The next chunk, None at the end of the body.
    async fn next(
        &mut self,
        resp: &mut reqwest::Response,
        shown: &str,
    ) -> Result<Option<bytes::Bytes>, FetchError> {
        loop {
            // Wake at the read timeout or at the end of the throughput
            // window, whichever comes first.
            let wait = self
                .floor
                .cap((self.last_data + self.timeout).saturating_duration_since(Instant::now()));
            let polled = tokio::time::timeout(wait, resp.chunk()).await;
            self.floor.check(shown)?;
            let chunk = match polled {
                Err(_) if self.last_data.elapsed() < self.timeout => continue,
                Err(_) => {
                    return Err(FetchError::Stalled {
                        url: shown.to_string(),
                        timeout: self.timeout,
                    })
                }
                Ok(Err(source)) => {
                    return Err(FetchError::Transport {
                        url: shown.to_string(),
                        source,
                    })
                }
                Ok(Ok(None)) => return Ok(None),
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.last_data = Instant::now();
            self.floor.add(chunk.len() as u64);
            return Ok(Some(chunk));
        }
    }
}

/// Appending (hashed, buffered) as a writer, for [`Partial::fill_from`].
impl Write for Partial {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Partial::flush(self)
    }
}

/// The throughput floor of one transfer: bytes counted per window of
/// `speed_time`; a window that ends below `speed_limit * speed_time`
/// bytes ends the transfer.
struct Floor {
    limit: u64,
    window: Duration,
    start: Instant,
    bytes: u64,
}

impl Floor {
    fn new(options: &crate::client::ClientOptions) -> Floor {
        Floor {
            limit: options.speed_limit,
            window: options.speed_time,
            start: Instant::now(),
            bytes: 0,
        }
    }

    fn enabled(&self) -> bool {
        self.limit > 0 && !self.window.is_zero()
    }

    /// `wait`, shortened to end no later than the current window.
    fn cap(&self, wait: Duration) -> Duration {
        if !self.enabled() {
            return wait;
        }
        wait.min((self.start + self.window).saturating_duration_since(Instant::now()))
    }

    fn add(&mut self, n: u64) {
        self.bytes = self.bytes.saturating_add(n);
    }

    /// At the end of a window: too few bytes is [`FetchError::TooSlow`],
    /// else a new window starts.
    fn check(&mut self, url: &str) -> Result<(), FetchError> {
        if !self.enabled() || self.start.elapsed() < self.window {
            return Ok(());
        }
        let needed = (self.limit as f64 * self.window.as_secs_f64()) as u64;
        if self.bytes < needed {
            return Err(FetchError::TooSlow {
                url: url.to_string(),
                bytes: self.bytes,
                window: self.window,
                floor: self.limit,
            });
        }
        self.start = Instant::now();
        self.bytes = 0;
        Ok(())
    }
}

/// Tells the reporter a transfer (re)started at `from`.
fn begin(
    transfer: &mut Option<Box<dyn Transfer>>,
    reporter: &dyn Reporter,
    want: &Wanted,
    url: &str,
    from: u64,
) {
    match transfer {
        Some(t) => {
            t.reset(from);
            if from > 0 {
                reporter.note(&format!(
                    "{}: resuming at {} from {url}",
                    want.name,
                    iec_size(from)
                ));
            }
        }
        None => *transfer = Some(reporter.start(&want.name, url, want.size, from)),
    }
}

/// `bytes START-END/TOTAL` -> (START, TOTAL), when END is TOTAL-1.
fn content_range(value: &str) -> Option<(u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let start: u64 = start.trim().parse().ok()?;
    let end: u64 = end.trim().parse().ok()?;
    let total: u64 = total.trim().parse().ok()?;
    (end.checked_add(1) == Some(total) && start <= end).then_some((start, total))
}

/// A `file://` source: copy from the local path, resuming like HTTP.
async fn attempt_file(
    url: &Url,
    partial: &mut Partial,
    want: &Wanted,
    reporter: &dyn Reporter,
    transfer: &mut Option<Box<dyn Transfer>>,
    sink: &mut Sink,
    wire: &mut u64,
) -> Result<(), FetchError> {
    let shown = masked(url);
    let src = url.to_file_path().map_err(|()| FetchError::FileSource {
        url: shown.clone(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "not a local file path"),
    })?;
    let file_err = |source: io::Error| {
        if source.kind() == io::ErrorKind::NotFound {
            FetchError::NotFound {
                url: shown.clone(),
                status: 0,
            }
        } else {
            FetchError::FileSource {
                url: shown.clone(),
                source,
            }
        }
    };
    // The store is a directory the administrator chose: a link in it to a
    // file elsewhere is followed (the bytes are checked against the
    // manifest's sha256 anyway), but whatever is opened must be a regular
    // file, opened without blocking (a FIFO would stall the run forever).
    let mut file =
        rocm_kpack_fs::open_regular_following(&src).map_err(|e| file_err(io::Error::from(e)))?;
    let len = file.metadata().map_err(file_err)?.len();
    if len > sink.wire_limit(want) {
        return Err(FetchError::Oversize {
            url: shown,
            expected: want.size,
        });
    }
    if len < want.size && !want.encoded {
        // A local file does not grow by retrying.
        return Err(FetchError::HashMismatch {
            url: shown,
            expected: format!("{} ({} bytes)", hex::encode(want.sha256), want.size),
            actual: format!("a file of {len} bytes"),
        });
    }
    let from = partial.len();
    file.seek(SeekFrom::Start(from)).map_err(file_err)?;
    begin(transfer, reporter, want, &shown, from);
    // Local reads are blocking; the block is short (one buffer) each time.
    let mut block = vec![0u8; WRITE_BUFFER];
    while partial.len() < want.size {
        let n = file.read(&mut block).map_err(file_err)?;
        if n == 0 {
            break;
        }
        let taken = sink.put(head(&block, n).map_err(file_err)?, partial, want, &shown)?;
        *wire += taken;
        if let Some(t) = transfer.as_ref() {
            t.advance(taken);
        }
        tokio::task::yield_now().await;
    }
    partial.flush().map_err(|e| local(partial.path(), e))?;
    sink.complete(partial, want, shown)
}

/// Where received bytes go: straight into the partial, or through a zstd
/// decoder (database objects). Either way the partial never grows past the
/// manifest's size.
enum Sink {
    Plain,
    Zstd(Box<Decoding>),
}

struct Decoding {
    dec: zstd::stream::raw::Decoder<'static>,
    /// The object's first bytes, until there are enough to check the magic.
    head: Vec<u8>,
    out: Vec<u8>,
    wire: u64,
    frame_done: bool,
}

impl Sink {
    fn new(want: &Wanted) -> io::Result<Sink> {
        if !want.encoded {
            return Ok(Sink::Plain);
        }
        Ok(Sink::Zstd(Box::new(Decoding {
            dec: zstd::stream::raw::Decoder::new()?,
            head: Vec::new(),
            out: vec![0u8; WRITE_BUFFER],
            wire: 0,
            frame_done: false,
        })))
    }

    /// The most bytes a source may send: the size for a plain file; for
    /// an encoded one, more than zstd ever needs for incompressible data
    /// (a stream that decodes to little forever is cut off here).
    fn wire_limit(&self, want: &Wanted) -> u64 {
        match self {
            Sink::Plain => want.size,
            Sink::Zstd(_) => want
                .size
                .saturating_add(want.size / 8)
                .saturating_add(64 << 10),
        }
    }

    /// At the end of the body: `Ok` when `partial` holds the manifest's
    /// size. Fewer bytes are a short body (transient: the connection may
    /// have dropped), unless the zstd frame ended: then the object decodes
    /// to fewer bytes than the manifest says, and asking again brings the
    /// same.
    fn complete(&self, partial: &Partial, want: &Wanted, url: String) -> Result<(), FetchError> {
        if partial.len() >= want.size {
            return Ok(());
        }
        match self {
            Sink::Zstd(d) if d.frame_done => Err(FetchError::Encoding {
                url,
                detail: format!(
                    "the zstd frame decodes to {} bytes; the manifest says {}",
                    partial.len(),
                    want.size
                ),
            }),
            _ => Err(FetchError::ShortBody {
                url,
                got: partial.len(),
                expected: want.size,
            }),
        }
    }

    /// Takes `chunk` from the wire; returns how many of its bytes were
    /// taken (the transfer's progress).
    fn put(
        &mut self,
        chunk: &[u8],
        partial: &mut Partial,
        want: &Wanted,
        url: &str,
    ) -> Result<u64, FetchError> {
        let limit = self.wire_limit(want);
        let oversize = || FetchError::Oversize {
            url: url.to_string(),
            expected: want.size,
        };
        let encoding = |detail: String| FetchError::Encoding {
            url: url.to_string(),
            detail,
        };
        let d = match self {
            Sink::Plain => {
                let room = usize::try_from(want.size - partial.len()).unwrap_or(usize::MAX);
                let take = chunk.len().min(room);
                head(chunk, take)
                    .and_then(|bytes| partial.append(bytes))
                    .map_err(|e| local(partial.path(), e))?;
                if chunk.len() > take {
                    return Err(oversize());
                }
                return Ok(take as u64);
            }
            Sink::Zstd(d) => d,
        };
        d.wire += chunk.len() as u64;
        if d.wire > limit {
            return Err(oversize());
        }
        let magic = rocm_kpack_format::layout::store::ZSTD_MAGIC;
        if d.head.len() < magic.len() {
            let need = magic.len() - d.head.len();
            d.head.extend(chunk.iter().take(need));
            if !magic.starts_with(&d.head) {
                return Err(encoding(format!(
                    "store object in an unknown encoding (starts with {}); this rocm-kpack-fetch reads {}-encoded database objects only",
                    hex::encode(&d.head),
                    rocm_kpack_format::layout::store::DATABASE_ENCODING
                )));
            }
        }
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let mut input = InBuffer::around(chunk);
        // Until the input is taken and the decoder has no output left
        // (a full output buffer may mean more is waiting).
        loop {
            if d.frame_done {
                if input.pos() < chunk.len() {
                    return Err(encoding("data after the end of the zstd frame".into()));
                }
                break;
            }
            let mut output = OutBuffer::around(d.out.as_mut_slice());
            let hint = d
                .dec
                .run(&mut input, &mut output)
                .map_err(|e| encoding(format!("damaged zstd stream: {e}")))?;
            let n = output.pos();
            if partial.len().saturating_add(n as u64) > want.size {
                return Err(oversize());
            }
            head(&d.out, n)
                .and_then(|bytes| partial.append(bytes))
                .map_err(|e| local(partial.path(), e))?;
            if hint == 0 {
                d.frame_done = true;
            } else if input.pos() == chunk.len() && n < d.out.len() {
                break;
            }
        }
        Ok(chunk.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_parsing() {
        assert_eq!(content_range("bytes 100-199/200"), Some((100, 200)));
        assert_eq!(content_range("bytes 0-0/1"), Some((0, 1)));
        assert_eq!(
            content_range("bytes 100-150/200"),
            None,
            "must run to the end"
        );
        assert_eq!(content_range("bytes */200"), None);
        assert_eq!(content_range("bytes 5-4/5"), None);
        assert_eq!(content_range(""), None);
    }

    #[test]
    fn partial_rehashes_kept_bytes_and_drops_oversized_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("partial").join("x.part");
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, b"hello ").expect("write");
        let mut p = Partial::open(&path, 11).expect("open");
        assert_eq!(p.len(), 6);
        p.append(b"world").expect("append");
        p.flush().expect("flush");
        let want: [u8; 32] = Sha256::digest(b"hello world").into();
        assert_eq!(p.digest(), want);
        drop(p);
        assert_eq!(fs::read(&path).expect("read"), b"hello world");
        // Longer than the expected size: emptied.
        let p = Partial::open(&path, 5).expect("open");
        assert_eq!(p.len(), 0);
        assert_eq!(fs::metadata(&path).expect("meta").len(), 0);
    }
}
