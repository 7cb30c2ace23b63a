//! The HTTP client: reqwest with rustls (ring) on tokio, with this
//! project's policies: https only (plain http only with `--allow-http`),
//! redirects only to https or to loopback, connect and read timeouts, and
//! the retry decisions of [`retry`].

pub mod error;
pub mod retry;
pub mod url;

use std::time::Duration;

use reqwest::header::{HeaderValue, ACCEPT_ENCODING, RANGE, USER_AGENT};
use reqwest::{redirect, Url};

pub use error::{Attempted, FetchError, HostCause, LOCAL_DISK_HOST};
pub use retry::Backoff;
pub use url::{is_loopback, masked, masked_text, MaskedUrl};

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

/// Network behaviour, from the command line.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// Longest wait for response headers or for the next body bytes.
    pub read_timeout: Duration,
    /// Retries per URL after the first try, for transient errors.
    pub retries: u32,
    /// Waits between retries.
    pub backoff: Backoff,
    /// Accept `http://` URLs (and redirects to loopback http).
    pub allow_http: bool,
    /// Throughput floor, bytes per second (0: none): a transfer that
    /// receives fewer than `speed_limit * speed_time` bytes in any window
    /// of `speed_time` is abandoned (curl's `--speed-limit`), and the
    /// next source is tried from byte 0.
    pub speed_limit: u64,
    /// The window of [`ClientOptions::speed_limit`] (curl's `--speed-time`).
    pub speed_time: Duration,
}

/// Default throughput floor, bytes per second (see
/// [`ClientOptions::speed_limit`]).
pub const DEFAULT_SPEED_LIMIT: u64 = 1024;
/// Default throughput window, seconds.
pub const DEFAULT_SPEED_TIME_SECS: u64 = 30;

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            retries: 4,
            backoff: Backoff {
                base: Duration::from_millis(500),
                max: Duration::from_secs(60),
            },
            allow_http: false,
            speed_limit: DEFAULT_SPEED_LIMIT,
            speed_time: Duration::from_secs(DEFAULT_SPEED_TIME_SECS),
        }
    }
}

/// A configured HTTP client. Cheap to share by reference across tasks.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The options it was built with.
    pub options: ClientOptions,
}

impl Client {
    /// Builds the client. Installs ring as the process's rustls crypto
    /// provider if none is installed yet.
    pub fn new(options: ClientOptions) -> Result<Client, reqwest::Error> {
        // Err means a provider is already installed, which is what we need.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let allow_http = options.allow_http;
        let policy = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                let msg = format!("more than {MAX_REDIRECTS} redirects");
                return attempt.error(msg);
            }
            if redirect_allowed(attempt.url(), allow_http) {
                attempt.follow()
            } else {
                let msg = format!(
                    "refusing redirect to {} (only https, or loopback http with --allow-http)",
                    masked(attempt.url())
                );
                attempt.error(msg)
            }
        });
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .redirect(policy)
            .referer(false)
            .build()?;
        Ok(Client { http, options })
    }

    /// Starts a GET of `url`, asking for bytes from `from` on when it is
    /// not 0. Waits at most the read timeout for the response headers.
    pub async fn get(&self, url: &Url, from: u64) -> Result<reqwest::Response, FetchError> {
        let mut req = self
            .http
            .get(url.clone())
            .header(ACCEPT_ENCODING, HeaderValue::from_static("identity"))
            .header(
                USER_AGENT,
                HeaderValue::from_static(concat!("rocm-kpack-fetch/", env!("CARGO_PKG_VERSION"))),
            );
        if from > 0 {
            let range = HeaderValue::from_str(&format!("bytes={from}-"))
                .unwrap_or(HeaderValue::from_static("bytes=0-"));
            req = req.header(RANGE, range);
        }
        let timeout = self.options.connect_timeout + self.options.read_timeout;
        match tokio::time::timeout(timeout, req.send()).await {
            Err(_) => Err(FetchError::Stalled {
                url: masked(url),
                timeout: self.options.read_timeout,
            }),
            Ok(Err(source)) => Err(FetchError::Transport {
                url: masked(url),
                source,
            }),
            Ok(Ok(resp)) => Ok(resp),
        }
    }
}

/// Whether a URL may be fetched at all: https always, http with
/// `allow_http`, `file://` always.
pub fn scheme_allowed(url: &Url, allow_http: bool) -> bool {
    match url.scheme() {
        "https" | "file" => true,
        "http" => allow_http,
        _ => false,
    }
}

/// Whether a redirect may be followed to `url`: https, or http to a
/// loopback address when plain http is allowed at all.
pub fn redirect_allowed(url: &Url, allow_http: bool) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => allow_http && is_loopback(url),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn schemes() {
        assert!(scheme_allowed(&url("https://a.example/"), false));
        assert!(scheme_allowed(&url("file:///srv/m/"), false));
        assert!(!scheme_allowed(&url("http://a.example/"), false));
        assert!(scheme_allowed(&url("http://a.example/"), true));
        assert!(!scheme_allowed(&url("ftp://a.example/"), true));
    }

    #[test]
    fn redirects() {
        assert!(redirect_allowed(&url("https://cdn.example/x"), false));
        assert!(!redirect_allowed(&url("http://cdn.example/x"), true));
        assert!(!redirect_allowed(&url("http://127.0.0.1:9/x"), false));
        assert!(redirect_allowed(&url("http://127.0.0.1:9/x"), true));
        assert!(!redirect_allowed(&url("file:///etc/passwd"), true));
    }
}
