//! When to try again: errors are classified by walking their source chain
//! (a timeout or reset connection deep inside reqwest/hyper is transient; a
//! TLS certificate failure or a 404 is not), and waits grow exponentially
//! with jitter, or follow the server's `Retry-After`.

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;

/// Whether an HTTP status is worth retrying on the same URL: request
/// timeout, too many requests, and the server-side 5xx family except
/// "not implemented" (which a retry cannot fix).
pub fn is_transient_status(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED)
}

/// Whether a transport error is worth retrying: walks the source chain for
/// timeouts, connection failures and I/O errors of a dropped connection.
/// Redirect-policy, builder and certificate errors are fatal.
pub fn is_transient_error(err: &reqwest::Error) -> bool {
    if err.is_builder() || err.is_redirect() || err.is_status() {
        return false;
    }
    if err.is_timeout() {
        return true;
    }
    // A certificate problem is wrapped as a connect error: look for it first.
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if io
                .get_ref()
                .is_some_and(|inner| inner.is::<rustls::Error>())
            {
                return false;
            }
            return is_transient_io(io.kind());
        }
        if e.is::<rustls::Error>() {
            return false;
        }
        source = e.source();
    }
    // Connect failures (refused, unreachable) and body/request errors
    // without an I/O cause (hyper's "connection closed before message
    // completed", "end of file before message length reached") are network
    // hiccups. reqwest reports body read errors as "decode" errors; with no
    // content decoders enabled that is all they can be.
    err.is_connect() || err.is_body() || err.is_decode() || err.is_request()
}

/// I/O error kinds that mean "the network or peer hiccuped".
pub fn is_transient_io(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | BrokenPipe
            | TimedOut
            | UnexpectedEof
            | Interrupted
            | WouldBlock
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

/// `Retry-After`: delay seconds or an HTTP date (RFC 9110 10.2.3). A date
/// in the past means "now".
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Exponential backoff with jitter: attempt n waits a random time in
/// `[d/2, d]` with `d = base * 2^n`, capped at `max`. A server's
/// `Retry-After` replaces the computed wait (capped at `max` too, so a
/// hostile value cannot park the installer for hours).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First wait.
    pub base: Duration,
    /// Upper bound for any wait.
    pub max: Duration,
}

impl Backoff {
    /// The wait before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.max);
        }
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        let full = self.base.saturating_mul(factor).min(self.max);
        let half = full / 2;
        let spread = u64::try_from((full - half).as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(fastrand::u64(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(s).expect("status");
            assert!(is_transient_status(status), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 416, 501] {
            let status = StatusCode::from_u16(s).expect("status");
            assert!(!is_transient_status(status), "{s}");
        }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(" 1 ", now), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(7)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let d0 = b.delay(0, None);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100),
                "{d0:?}"
            );
            let d2 = b.delay(2, None);
            assert!(
                d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400),
                "{d2:?}"
            );
            let d9 = b.delay(30, None);
            assert!(
                d9 >= Duration::from_millis(500) && d9 <= Duration::from_secs(1),
                "{d9:?}"
            );
        }
        assert_eq!(
            b.delay(0, Some(Duration::from_millis(300))),
            Duration::from_millis(300)
        );
        assert_eq!(
            b.delay(0, Some(Duration::from_secs(3600))),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn io_kinds() {
        assert!(is_transient_io(io::ErrorKind::ConnectionReset));
        assert!(is_transient_io(io::ErrorKind::UnexpectedEof));
        assert!(!is_transient_io(io::ErrorKind::PermissionDenied));
        assert!(!is_transient_io(io::ErrorKind::InvalidData));
    }
}
