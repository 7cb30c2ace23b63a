//! What can go wrong fetching one URL. Every variant names the URL (masked,
//! see [`super::url`]); [`Attempted`] adds how many retries were spent.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// One failed attempt at one URL.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The source does not have the file (404/410, or a missing `file://`
    /// path): try the next URL.
    #[error("{url}: not found (HTTP {status})")]
    NotFound {
        /// Masked URL.
        url: String,
        /// 404 or 410 (0 for `file://`).
        status: u16,
    },
    /// Any other unexpected status.
    #[error("{url}: HTTP {status}{}", retry_after.map_or(String::new(), |d| format!(" (Retry-After {}s)", d.as_secs())))]
    Status {
        /// Masked URL.
        url: String,
        /// The status code.
        status: u16,
        /// The server's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// Connecting, sending or receiving failed inside the HTTP client.
    #[error("{url}: {}", chain(source))]
    Transport {
        /// Masked URL.
        url: String,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// Nothing arrived for the read timeout (headers or body).
    #[error("{url}: timed out: no data for {:.1}s", timeout.as_secs_f64())]
    Stalled {
        /// Masked URL.
        url: String,
        /// The read timeout that expired.
        timeout: Duration,
    },
    /// Data came, but slower than the throughput floor for a whole window
    /// (a store that drips bytes to hold the transfer open).
    #[error("{url}: too slow: {bytes} bytes in {:.0}s, below the floor of {floor} bytes/s (--speed-limit, --speed-time)", window.as_secs_f64())]
    TooSlow {
        /// Masked URL.
        url: String,
        /// Bytes received in the window.
        bytes: u64,
        /// The window.
        window: Duration,
        /// The floor, bytes per second.
        floor: u64,
    },
    /// The body ended early (the connection closed cleanly mid-file).
    #[error("{url}: body ended after {got} of {expected} bytes")]
    ShortBody {
        /// Masked URL.
        url: String,
        /// Bytes of the file held after this attempt.
        got: u64,
        /// Bytes the manifest says the file has.
        expected: u64,
    },
    /// The server sent (or announced) more bytes than the manifest's size;
    /// reading stopped there.
    #[error("{url}: more data than the manifest's {expected} bytes; download cut off")]
    Oversize {
        /// Masked URL.
        url: String,
        /// Bytes the manifest says the file has.
        expected: u64,
    },
    /// A store object that is not in an encoding this tool reads, or whose
    /// encoded stream is damaged.
    #[error("{url}: {detail}")]
    Encoding {
        /// Masked URL.
        url: String,
        /// What is wrong.
        detail: String,
    },
    /// A `206 Partial Content` reply for a range other than the one asked.
    #[error("{url}: asked for bytes from {asked}, got {detail}")]
    BadRange {
        /// Masked URL.
        url: String,
        /// First byte requested.
        asked: u64,
        /// What the `Content-Range` header said.
        detail: String,
    },
    /// The complete file does not have the manifest's hash.
    #[error("{url}: sha256 mismatch: expected {expected}, got {actual}")]
    HashMismatch {
        /// Masked URL.
        url: String,
        /// Hex digest from the installed manifest.
        expected: String,
        /// Hex digest of what was received.
        actual: String,
    },
    /// A redirect the client did not follow: a scheme other than https,
    /// or plain http outside loopback or without `--allow-http`.
    #[error(
        "{url}: refusing redirect to {location} (only https, or loopback http with --allow-http)"
    )]
    Redirect {
        /// Masked URL.
        url: String,
        /// Where it pointed (shown escaped).
        location: String,
    },
    /// Reading a `file://` source failed (other than "not found").
    #[error("{url}: {source}")]
    FileSource {
        /// Masked URL.
        url: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A local file (the download cache) could not be written or read: no
    /// other source will do better, so this ends the file's download.
    #[error("{}: {source}", path.display())]
    Local {
        /// The local file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// `err` and its causes, joined by ": " (reqwest's own `Display` hides
/// the cause, which is the interesting part: "connection refused").
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    rocm_kpack_cli::std_error_chain(err)
}

impl FetchError {
    /// Worth retrying on the same URL.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Status { status, .. } => {
                reqwest::StatusCode::from_u16(*status).is_ok_and(super::retry::is_transient_status)
            }
            FetchError::Transport { source, .. } => super::retry::is_transient_error(source),
            FetchError::Stalled { .. }
            | FetchError::ShortBody { .. }
            | FetchError::BadRange { .. } => true,
            FetchError::FileSource { source, .. } => super::retry::is_transient_io(source.kind()),
            FetchError::NotFound { .. }
            | FetchError::Oversize { .. }
            | FetchError::Encoding { .. }
            | FetchError::TooSlow { .. }
            | FetchError::HashMismatch { .. }
            | FetchError::Redirect { .. }
            | FetchError::Local { .. } => false,
        }
    }

    /// A local problem: trying other sources is pointless.
    pub fn is_local(&self) -> bool {
        matches!(self, FetchError::Local { .. })
    }

    /// The server's `Retry-After`, if this error carries one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            FetchError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl FetchError {
    /// Where the attempt went, for a per-host summary: `host[:port]` of the
    /// URL, `local file` for `file://` sources, `local disk` for the cache.
    pub fn host(&self) -> String {
        let url = match self {
            FetchError::NotFound { url, .. }
            | FetchError::Status { url, .. }
            | FetchError::Transport { url, .. }
            | FetchError::Stalled { url, .. }
            | FetchError::TooSlow { url, .. }
            | FetchError::ShortBody { url, .. }
            | FetchError::Oversize { url, .. }
            | FetchError::Encoding { url, .. }
            | FetchError::BadRange { url, .. }
            | FetchError::HashMismatch { url, .. }
            | FetchError::Redirect { url, .. }
            | FetchError::FileSource { url, .. } => url,
            FetchError::Local { .. } => return LOCAL_DISK_HOST.into(),
        };
        match reqwest::Url::parse(url) {
            Ok(u) if u.scheme() == "file" => "local files".into(),
            Ok(u) => match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                _ => url.clone(),
            },
            Err(_) => url.clone(),
        }
    }

    /// The cause in a few words, without the URL (which [`Self::host`]
    /// names): `cannot resolve the host name`, `connection refused`,
    /// `HTTP 500`, `timed out`, ...
    pub fn brief(&self) -> String {
        match self {
            FetchError::NotFound { status, .. } if *status == 0 => "file not found".into(),
            FetchError::NotFound { status, .. } => format!("not found (HTTP {status})"),
            FetchError::Status { status, .. } => format!("HTTP {status}"),
            FetchError::Transport { source, .. } => {
                let text = chain(source).to_ascii_lowercase();
                if text.contains("dns error") || text.contains("failed to lookup address") {
                    "cannot resolve the host name".into()
                } else if text.contains("connection refused") {
                    "connection refused".into()
                } else if source.is_timeout() || text.contains("timed out") {
                    "timed out".into()
                } else if text.contains("certificate") || text.contains("tls") {
                    "TLS error (certificate or handshake)".into()
                } else if text.contains("connection reset") {
                    "connection reset".into()
                } else {
                    innermost(source)
                }
            }
            FetchError::Stalled { timeout, .. } => {
                format!("no data for {:.0}s", timeout.as_secs_f64())
            }
            FetchError::TooSlow { bytes, window, .. } => {
                format!("too slow ({bytes} bytes in {:.0}s)", window.as_secs_f64())
            }
            FetchError::ShortBody { .. } => "connection closed mid-file".into(),
            FetchError::Oversize { .. } => "sent more bytes than the manifest says".into(),
            FetchError::BadRange { .. } => "wrong byte range in the reply".into(),
            FetchError::Encoding { detail, .. } => detail.clone(),
            FetchError::HashMismatch { .. } => "sha256 mismatch (damaged or wrong file)".into(),
            FetchError::Redirect { location, .. } => {
                format!("refusing redirect to {location} (not https)")
            }
            FetchError::FileSource { source, .. } | FetchError::Local { source, .. } => {
                source.to_string()
            }
        }
    }
}

/// The deepest cause's text (the one that says what happened).
fn innermost(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// [`FetchError::host`] of a local file's failure ([`FetchError::Local`]):
/// no source, and no network, is to blame.
pub const LOCAL_DISK_HOST: &str = "local disk";

/// One source's failure in a few words: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct HostCause {
    /// [`FetchError::host`].
    pub host: String,
    /// [`FetchError::brief`].
    pub cause: String,
}

impl From<&FetchError> for HostCause {
    fn from(e: &FetchError) -> Self {
        HostCause {
            host: e.host(),
            cause: e.brief(),
        }
    }
}

/// The last error from one URL and the retries spent on it.
#[derive(Debug)]
pub struct Attempted {
    /// The error that ended the attempts.
    pub error: FetchError,
    /// Retries after the first try.
    pub retries: u32,
}

impl fmt::Display for Attempted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.retries {
            0 => write!(f, "{}", self.error),
            1 => write!(f, "{} (after 1 retry)", self.error),
            n => write!(f, "{} (after {n} retries)", self.error),
        }
    }
}
