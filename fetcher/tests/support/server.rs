//! A real HTTP/1.1 server on 127.0.0.1 for the fetcher's tests and its
//! benchmark: serves byte strings by path, honours `Range: bytes=N-[M]`,
//! logs every request, and misbehaves on cue (one-shot faults per path, or
//! standing faults). One request per connection (`Connection: close`).

#![allow(dead_code)] // each user needs a different subset

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

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
    /// Request path.
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// Status answered.
    pub status: u16,
}

#[derive(Default)]
struct Shared {
    files: Mutex<HashMap<String, Arc<Vec<u8>>>>,
    once: Mutex<HashMap<String, VecDeque<Fault>>>,
    always: Mutex<HashMap<String, Fault>>,
    log: Mutex<Vec<Request>>,
    logged: Condvar,
    stop: AtomicBool,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server; stops accepting when dropped.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Server {
    /// Starts on an ephemeral port of 127.0.0.1.
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                thread::spawn(move || handle(conn, &s));
            }
        });
        Server { addr, shared }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `bytes` at `path` (starting with `/`).
    pub fn add(&self, path: &str, bytes: Vec<u8>) {
        relock(&self.shared.files).insert(path.to_string(), Arc::new(bytes));
    }

    /// The next request for `path` gets `fault` (queued in order).
    pub fn push_fault(&self, path: &str, fault: Fault) {
        relock(&self.shared.once)
            .entry(path.to_string())
            .or_default()
            .push_back(fault);
    }

    /// Every request for `path` (`*`: any path) gets `fault` until cleared.
    pub fn set_fault(&self, path: &str, fault: Fault) {
        relock(&self.shared.always).insert(path.to_string(), fault);
    }

    /// Removes standing faults.
    pub fn clear_faults(&self) {
        relock(&self.shared.always).clear();
        relock(&self.shared.once).clear();
    }

    /// Requests so far.
    pub fn requests(&self) -> Vec<Request> {
        relock(&self.shared.log).clone()
    }

    /// Requests for one path.
    pub fn requests_for(&self, path: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.path == path).collect()
    }

    /// Waits until `n` requests were logged; false on timeout.
    pub fn wait_for_requests(&self, n: usize, limit: Duration) -> bool {
        let guard = relock(&self.shared.log);
        let (guard, _) = self
            .shared
            .logged
            .wait_timeout_while(guard, limit, |log| log.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        guard.len() >= n
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn handle(conn: TcpStream, s: &Shared) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut range = None;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    let fault = {
        let mut once = relock(&s.once);
        once.get_mut(&path).and_then(VecDeque::pop_front)
    }
    .or_else(|| {
        let always = relock(&s.always);
        always.get(&path).or_else(|| always.get("*")).cloned()
    });
    let file = relock(&s.files).get(&path).cloned();
    respond(conn, s, path, range, fault, file);
}

fn log(s: &Shared, path: &str, range: &Option<String>, status: u16) {
    relock(&s.log).push(Request {
        path: path.to_string(),
        range: range.clone(),
        status,
    });
    s.logged.notify_all();
}

/// `bytes=N-` or `bytes=N-M` -> (start, end exclusive) within `len`.
fn parse_range(value: &str, len: usize) -> Option<(usize, usize)> {
    let spec = value.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let start: usize = a.trim().parse().ok()?;
    let end = if b.trim().is_empty() {
        len
    } else {
        b.trim().parse::<usize>().ok()?.checked_add(1)?.min(len)
    };
    (start < len && start < end).then_some((start, end))
}

fn head(conn: &mut TcpStream, status: &str, headers: &[(String, String)]) -> std::io::Result<()> {
    let mut text = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    conn.write_all(text.as_bytes())
}

fn respond(
    mut conn: TcpStream,
    s: &Shared,
    path: String,
    range: Option<String>,
    fault: Option<Fault>,
    file: Option<Arc<Vec<u8>>>,
) {
    let plain = |n: usize| vec![("Content-Length".to_string(), n.to_string())];
    match &fault {
        Some(Fault::NotFound) => {
            log(s, &path, &range, 404);
            let _ = head(&mut conn, "404 Not Found", &plain(0));
            return;
        }
        Some(Fault::Status(code, retry_after)) => {
            log(s, &path, &range, *code);
            let mut h = plain(0);
            if let Some(r) = retry_after {
                h.push(("Retry-After".into(), r.clone()));
            }
            let _ = head(&mut conn, &format!("{code} Fault"), &h);
            return;
        }
        Some(Fault::Redirect(to)) => {
            log(s, &path, &range, 302);
            let mut h = plain(0);
            h.push(("Location".into(), to.clone()));
            let _ = head(&mut conn, "302 Found", &h);
            return;
        }
        _ => {}
    }
    let Some(file) = file else {
        log(s, &path, &range, 404);
        let _ = head(&mut conn, "404 Not Found", &plain(0));
        return;
    };
    let len = file.len();
    let (status, start, end) = match range.as_deref().map(|r| parse_range(r, len)) {
        None => ("200 OK", 0, len),
        Some(Some((a, b))) => ("206 Partial Content", a, b),
        Some(None) => {
            log(s, &path, &range, 416);
            let mut h = plain(0);
            h.push(("Content-Range".into(), format!("bytes */{len}")));
            let _ = head(&mut conn, "416 Range Not Satisfiable", &h);
            return;
        }
    };
    let code = if start == 0 && end == len && range.is_none() { 200 } else { 206 };
    log(s, &path, &range, code);
    let body: &[u8] = file.get(start..end).unwrap_or_default();
    let mut headers = Vec::new();
    if code == 206 {
        headers.push(("Content-Range".to_string(), format!("bytes {start}-{}/{len}", end - 1)));
    }
    let result = (|| -> std::io::Result<()> {
        match fault {
            Some(Fault::DropAfter(n)) => {
                headers.extend(plain(body.len()));
                head(&mut conn, status, &headers)?;
                conn.write_all(body.get(..n.min(body.len())).unwrap_or_default())?;
                conn.flush()?;
                let _ = conn.shutdown(std::net::Shutdown::Both);
            }
            Some(Fault::WrongBytes) => {
                headers.extend(plain(body.len()));
                head(&mut conn, status, &headers)?;
                let flipped: Vec<u8> = body.iter().map(|b| b ^ 0x5a).collect();
                conn.write_all(&flipped)?;
            }
            Some(Fault::StallAfter(n, pause)) => {
                headers.extend(plain(body.len()));
                head(&mut conn, status, &headers)?;
                conn.write_all(body.get(..n.min(body.len())).unwrap_or_default())?;
                conn.flush()?;
                sleep_until_stopped(s, pause);
            }
            Some(Fault::Oversize(extra)) => {
                head(&mut conn, status, &headers)?;
                conn.write_all(body)?;
                conn.write_all(&vec![0x42; extra])?;
            }
            Some(Fault::OversizeAnnounced(extra)) => {
                headers.extend(plain(body.len() + extra));
                head(&mut conn, status, &headers)?;
                conn.write_all(body)?;
                conn.write_all(&vec![0x42; extra])?;
            }
            Some(Fault::Gate(gate)) => {
                headers.extend(plain(body.len()));
                head(&mut conn, status, &headers)?;
                gate.wait(Duration::from_secs(30));
                conn.write_all(body)?;
            }
            _ => {
                headers.extend(plain(body.len()));
                head(&mut conn, status, &headers)?;
                conn.write_all(body)?;
            }
        }
        conn.flush()
    })();
    // A client that hung up (or was killed) is not the server's problem.
    let _ = result;
}

fn sleep_until_stopped(s: &Shared, pause: Duration) {
    let until = Instant::now() + pause;
    while Instant::now() < until && !s.stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(20));
    }
}
