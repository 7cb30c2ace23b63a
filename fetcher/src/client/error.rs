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
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

impl FetchError {
    /// Worth retrying on the same URL.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Status { status, .. } => reqwest::StatusCode::from_u16(*status)
                .is_ok_and(super::retry::is_transient_status),
            FetchError::Transport { source, .. } => super::retry::is_transient_error(source),
            FetchError::Stalled { .. } | FetchError::ShortBody { .. } | FetchError::BadRange { .. } => true,
            FetchError::FileSource { source, .. } => super::retry::is_transient_io(source.kind()),
            FetchError::NotFound { .. }
            | FetchError::Oversize { .. }
            | FetchError::HashMismatch { .. }
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
