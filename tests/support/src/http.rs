//! The product's HTTP server (`rocm_kpack_serve`, splitter/serve) with a
//! test handler: serves in-memory files by path and/or a directory, logs
//! every request, and misbehaves on cue (one-shot faults per path, or
//! standing ones), so clients are tested against real HTTP.
//!
//! [`Server::start`] serves in-memory files, one request per connection;
//! [`serve_dir`] serves a directory with keep-alive, as `rocm-kpack demo`
//! does.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rocm_kpack_serve::{self as serve, Dir, Handler, Response};

/// A way to misbehave for one request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// 404 Not Found.
    NotFound,
    /// This status with an optional `Retry-After` value.
    Status(u16, Option<String>),
    /// Announce the full length, send this many body bytes, then close.
    DropAfter(usize),
    /// Same length, different bytes.
    WrongBytes,
    /// Send this many body bytes, then go silent for the duration.
    StallAfter(usize, Duration),
    /// Send the file plus this many extra bytes, without Content-Length
    /// (the body ends when the connection closes).
    Oversize(usize),
    /// Announce (Content-Length) and send the file plus extra bytes.
    OversizeAnnounced(usize),
    /// Hold the body until the gate opens (at most 30 s).
    Gate(Gate),
    /// Announce the full length, then send one byte per interval (a store
    /// that keeps a transfer alive without ever finishing it), until the
    /// body ends or the server stops.
    Drip(Duration),
    /// 302 to this location.
    Redirect(String),
}

/// A one-way latch a test opens to let held responses continue.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }
    /// Opens it for good.
    pub fn open(&self) {
        let (lock, cond) = &*self.0;
        *relock(lock) = true;
        cond.notify_all();
    }
    fn wait(&self, limit: Duration) {
        let (lock, cond) = &*self.0;
        let guard = relock(lock);
        let _unused = cond.wait_timeout_while(guard, limit, |open| !*open);
    }
}

/// One logged request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, or whatever was sent.
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// Status answered.
    pub status: u16,
    /// Content-Type answered ("" for none).
    pub content_type: String,
}

#[derive(Default)]
struct State {
    files: Mutex<HashMap<String, Arc<[u8]>>>,
    dir: Option<Dir>,
    once: Mutex<HashMap<String, VecDeque<Fault>>>,
    always: Mutex<HashMap<String, Fault>>,
    log: Mutex<Vec<Request>>,
    logged: Condvar,
    /// One request per connection.
    close: bool,
    stop: AtomicBool,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running server; stops when dropped.
pub struct Server {
    state: Arc<State>,
    inner: serve::Server,
}

impl Server {
    /// Serves in-memory files ([`Server::add`]) on an ephemeral port of
    /// 127.0.0.1, closing the connection after each response.
    pub fn start() -> Server {
        Server::with_state(State {
            close: true,
            ..State::default()
        })
        .expect("bind 127.0.0.1")
    }

    fn with_state(state: State) -> io::Result<Server> {
        let state = Arc::new(state);
        let handler = TestHandler(Arc::clone(&state));
        Ok(Server {
            state,
            inner: serve::Server::with_handler(handler)?,
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash: append `/path`).
    pub fn url(&self) -> String {
        self.inner.url.trim_end_matches('/').to_string()
    }

    /// `http://127.0.0.1:PORT/`, the URL of the served root.
    pub fn root_url(&self) -> &str {
        &self.inner.url
    }

    /// Serves `bytes` at `path` (starting with `/`), ahead of any directory.
    pub fn add(&self, path: &str, bytes: Vec<u8>) {
        relock(&self.state.files).insert(path.to_string(), bytes.into());
    }

    /// The next request for `path` gets `fault` (queued in order).
    pub fn push_fault(&self, path: &str, fault: Fault) {
        relock(&self.state.once)
            .entry(path.to_string())
            .or_default()
            .push_back(fault);
    }

    /// Every request for `path` (`*`: any path) gets `fault` until cleared.
    pub fn set_fault(&self, path: &str, fault: Fault) {
        relock(&self.state.always).insert(path.to_string(), fault);
    }

    /// Makes the next `count` requests for `path` answer `status` with an
    /// empty body (replacing faults queued for it).
    pub fn fail_next(&self, path: &str, status: u16, count: usize) {
        let faults = std::iter::repeat_n(Fault::Status(status, None), count).collect();
        relock(&self.state.once).insert(path.to_string(), faults);
    }

    /// Removes standing and queued faults.
    pub fn clear_faults(&self) {
        relock(&self.state.always).clear();
        relock(&self.state.once).clear();
    }

    /// Requests so far.
    pub fn requests(&self) -> Vec<Request> {
        relock(&self.state.log).clone()
    }

    /// Requests for one path.
    pub fn requests_for(&self, path: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Waits until `n` requests were logged; false on timeout.
    pub fn wait_for_requests(&self, n: usize, limit: Duration) -> bool {
        let guard = relock(&self.state.log);
        let (guard, _) = self
            .state
            .logged
            .wait_timeout_while(guard, limit, |log| log.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        guard.len() >= n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Ends stalled responses; `inner` stops accepting after this.
        self.state.stop.store(true, Ordering::SeqCst);
    }
}

/// Serves the directory `root` (as `rocm-kpack demo` does) with keep-alive;
/// faults and in-memory files work as for [`Server::start`].
pub fn serve_dir(root: impl AsRef<Path>) -> io::Result<Server> {
    Server::with_state(State {
        dir: Some(Dir::new(root.as_ref())?),
        ..State::default()
    })
}

struct TestHandler(Arc<State>);

impl Handler for TestHandler {
    fn handle(&self, request: &serve::Request) -> Response {
        let s = &*self.0;
        let path = &request.path;
        let fault = relock(&s.once)
            .get_mut(path)
            .and_then(VecDeque::pop_front)
            .or_else(|| {
                let always = relock(&s.always);
                always.get(path).or_else(|| always.get("*")).cloned()
            });
        let mut response = match fault {
            Some(Fault::NotFound) => Response::status(404),
            Some(Fault::Status(code, retry_after)) => {
                let r = Response::status(code);
                match retry_after {
                    Some(v) => r.with_header("Retry-After", &v),
                    None => r,
                }
            }
            Some(Fault::Redirect(to)) => Response::status(302).with_header("Location", &to),
            fault => {
                let file = relock(&s.files).get(path).cloned();
                let response = match (file, &s.dir) {
                    (Some(bytes), _) => Response::bytes(request, "application/octet-stream", bytes),
                    (None, Some(dir)) => dir.handle(request),
                    (None, None) => Response::status(404),
                };
                match fault {
                    Some(f) if matches!(response.status, 200 | 206) => {
                        misbehave(response, f, &self.0)
                    }
                    _ => response,
                }
            }
        };
        response.close |= s.close;
        relock(&s.log).push(Request {
            method: request.method.clone(),
            path: path.clone(),
            range: request.header("range").map(str::to_string),
            status: response.status,
            content_type: response.header("content-type").unwrap_or("").to_string(),
        });
        s.logged.notify_all();
        response
    }
}

/// Applies a body fault to a successful response.
fn misbehave(mut r: Response, fault: Fault, state: &Arc<State>) -> Response {
    let body = std::mem::replace(&mut r.body, Box::new(io::empty()));
    let extra = |n: usize| io::repeat(0x42).take(n as u64);
    r.body = match fault {
        // The server closes the connection when a body ends early.
        Fault::DropAfter(n) => Box::new(body.take(n as u64)),
        Fault::WrongBytes => Box::new(Flipped(body)),
        Fault::StallAfter(n, pause) => Box::new(Stalled {
            body: body.take(n as u64),
            pause,
            state: Arc::clone(state),
        }),
        Fault::Oversize(n) => {
            r.length = None;
            Box::new(body.chain(extra(n)))
        }
        Fault::OversizeAnnounced(n) => {
            r.length = r.length.map(|l| l + n as u64);
            Box::new(body.chain(extra(n)))
        }
        Fault::Gate(gate) => Box::new(Gated {
            gate: Some(gate),
            body,
        }),
        Fault::Drip(every) => Box::new(Drip {
            body,
            every,
            state: Arc::clone(state),
        }),
        Fault::NotFound | Fault::Status(..) | Fault::Redirect(_) => body,
    };
    r
}

struct Flipped<R>(R);

impl<R: Read> Read for Flipped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf)?;
        for b in buf.iter_mut().take(n) {
            *b ^= 0x5a;
        }
        Ok(n)
    }
}

/// Its bytes, then silence until the pause is over or the server stops.
struct Stalled<R> {
    body: R,
    pause: Duration,
    state: Arc<State>,
}

impl<R: Read> Read for Stalled<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.body.read(buf)?;
        if n == 0 {
            let until = Instant::now() + self.pause;
            while Instant::now() < until && !self.state.stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(n)
    }
}

/// One byte per interval.
struct Drip<R> {
    body: R,
    every: Duration,
    state: Arc<State>,
}

impl<R: Read> Read for Drip<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let until = Instant::now() + self.every;
        while Instant::now() < until {
            if self.state.stop.load(Ordering::SeqCst) {
                return Ok(0);
            }
            thread::sleep(Duration::from_millis(20));
        }
        match buf.first_mut() {
            Some(one) => self.body.read(std::slice::from_mut(one)),
            None => Ok(0),
        }
    }
}

struct Gated<R> {
    gate: Option<Gate>,
    body: R,
}

impl<R: Read> Read for Gated<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(gate) = self.gate.take() {
            gate.wait(Duration::from_secs(30));
        }
        self.body.read(buf)
    }
}
