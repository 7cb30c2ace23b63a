//! Progress of transfers through a small reporter trait: the download code
//! calls it, the command line picks an implementation: bars on a terminal
//! (the `rocm-kpack-fetch` binary renders them), one line per event
//! otherwise ([`Lines`]), or nothing ([`Silent`]).

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use rocm_kpack_cli::iec_size;

/// Receives transfer events. Implementations must be cheap: `advance` is
/// called for every received chunk.
pub trait Reporter: Send + Sync {
    /// A transfer of `name` (`total` bytes, `already` of them kept from an
    /// earlier attempt) from `url` begins.
    fn start(&self, name: &str, url: &str, total: u64, already: u64) -> Box<dyn Transfer>;
    /// A free-form note (a retry, a skipped source).
    fn note(&self, message: &str);
    /// All transfers are over: release the terminal before other output.
    fn close(&self) {}
}

/// One transfer in progress.
pub trait Transfer: Send + Sync {
    /// `bytes` more arrived.
    fn advance(&self, bytes: u64);
    /// The transfer restarted at `position` (resume or restart from 0).
    fn reset(&self, position: u64);
    /// Finished: `Ok` when the file is complete and verified.
    fn finish(&self, outcome: Result<(), &str>);
}

/// Reports nothing.
#[derive(Debug, Default)]
pub struct Silent;

struct SilentTransfer;

impl Reporter for Silent {
    fn start(&self, _: &str, _: &str, _: u64, _: u64) -> Box<dyn Transfer> {
        Box::new(SilentTransfer)
    }
    fn note(&self, _: &str) {}
}

impl Transfer for SilentTransfer {
    fn advance(&self, _: u64) {}
    fn reset(&self, _: u64) {}
    fn finish(&self, _: Result<(), &str>) {}
}

/// One line on stderr per start, retry and end: for logs and pipes. A
/// note that only repeats an earlier one for another file (`FILE: HOST:
/// CAUSE`, the same host and cause) is not printed again.
#[derive(Debug, Default)]
pub struct Lines {
    seen: Mutex<std::collections::HashSet<String>>,
}

struct LineTransfer {
    name: String,
    started: Instant,
    received: Mutex<u64>,
}

/// One line on stderr; a closed stderr is not an error.
pub fn line(text: &str) {
    let mut err = std::io::stderr().lock();
    // A closed stderr is no reason to fail an install.
    let _ = writeln!(err, "{text}");
}

impl Reporter for Lines {
    fn start(&self, name: &str, url: &str, total: u64, already: u64) -> Box<dyn Transfer> {
        let resume = if already > 0 {
            format!(", resuming at {}", iec_size(already))
        } else {
            String::new()
        };
        // `total` is the file's size as published (decoded, for an
        // encoded object); what crosses the network is counted below.
        line(&format!(
            "fetching {name} ({} published) from {url}{resume}",
            iec_size(total)
        ));
        Box::new(LineTransfer {
            name: name.to_string(),
            started: Instant::now(),
            received: Mutex::new(0),
        })
    }
    fn note(&self, message: &str) {
        let after_file = message.split_once(": ").map_or(message, |(_, rest)| rest);
        let key = after_file
            .split("; retrying")
            .next()
            .unwrap_or(after_file)
            .to_string();
        if self
            .seen
            .lock()
            .map(|mut seen| seen.insert(key))
            .unwrap_or(true)
        {
            line(message);
        }
    }
}

impl Transfer for LineTransfer {
    fn advance(&self, bytes: u64) {
        if let Ok(mut r) = self.received.lock() {
            *r += bytes;
        }
    }
    fn reset(&self, _: u64) {}
    fn finish(&self, outcome: Result<(), &str>) {
        let received = self.received.lock().map_or(0, |r| *r);
        let secs = self.started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => line(&format!(
                "fetched {}: {} transferred in {secs:.1}s ({}/s)",
                self.name,
                iec_size(received),
                iec_size(rate(received, secs)),
            )),
            Err(why) => line(&format!("failed {}: {why}", self.name)),
        }
    }
}

fn rate(bytes: u64, secs: f64) -> u64 {
    if secs <= 0.0 {
        return bytes;
    }
    // Display only; precision loss on huge values does not matter.
    (bytes as f64 / secs) as u64
}
