//! A small static file server on 127.0.0.1 (ephemeral port) for tests that
//! drive real clients (apt, dnf, pip, the fetcher) against published
//! repositories. `serve_dir(path)` serves GET and HEAD from a directory;
//! the server stops when the returned [`Server`] is dropped.
//!
//! Directory URLs serve `index.html`, or `index.json` as
//! `application/vnd.pypi.simple.v1+json` when the Accept header asks for
//! that (PEP 691 content negotiation). Paths with `..` or that resolve
//! outside the root get 404. Every request is logged ([`Server::requests`]),
//! and [`Server::fail_next`] makes the next requests for a path answer with
//! a given status, for fault tests.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD` (or whatever was sent).
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// Status answered.
    pub status: u16,
    /// Content-Type answered ("" for errors).
    pub content_type: String,
}

#[derive(Default)]
struct Shared {
    log: Vec<Request>,
    /// path -> (status, remaining count)
    faults: HashMap<String, (u16, usize)>,
}

/// A running server; stops on drop.
pub struct Server {
    /// Base URL with a trailing slash, e.g. `http://127.0.0.1:41234/`.
    pub url: String,
    /// The port.
    pub port: u16,
    root: PathBuf,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Requests answered so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .lock()
            .map(|s| s.log.clone())
            .unwrap_or_default()
    }

    /// Makes the next `count` requests for `path` (e.g. `/files/x.whl`)
    /// answer `status` with an empty body.
    pub fn fail_next(&self, path: &str, status: u16, count: usize) {
        if let Ok(mut s) = self.shared.lock() {
            s.faults.insert(path.to_string(), (status, count));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `root` on 127.0.0.1 at an ephemeral port.
pub fn serve_dir(root: impl AsRef<Path>) -> io::Result<Server> {
    let root = root.as_ref().canonicalize()?;
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let port = listener.local_addr()?.port();
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(Shared::default()));
    let (r, st, sh) = (root.clone(), stop.clone(), shared.clone());
    let thread = std::thread::spawn(move || {
        for conn in listener.incoming() {
            if st.load(Ordering::SeqCst) {
                break;
            }
            let Ok(conn) = conn else { continue };
            let (r, sh) = (r.clone(), sh.clone());
            std::thread::spawn(move || {
                let _ = handle(conn, &r, &sh);
            });
        }
    });
    Ok(Server {
        url: format!("http://127.0.0.1:{port}/"),
        port,
        root,
        stop,
        shared,
        thread: Some(thread),
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b.get(i) == Some(&b'%') {
            if let Some(h) = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(h);
                i += 3;
                continue;
            }
        }
        out.push(b.get(i).copied().unwrap_or(b'?'));
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        Some("gz") => "application/gzip",
        Some("deb") => "application/vnd.debian.binary-package",
        Some("rpm") => "application/x-rpm",
        Some("whl") | Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

/// Maps a URL path to a file under root, or None (404).
fn resolve(root: &Path, url_path: &str, accept: &str) -> Option<(PathBuf, &'static str)> {
    let rel = url_path.trim_start_matches('/');
    let mut p = root.to_path_buf();
    for comp in rel.split('/') {
        match comp {
            "" | "." => {}
            ".." => return None,
            c => p.push(c),
        }
    }
    let p = p.canonicalize().ok()?;
    if !p.starts_with(root) {
        return None;
    }
    if p.is_dir() {
        let wants_json = accept.contains("application/vnd.pypi.simple.v1+json")
            && !accept.contains("application/vnd.pypi.simple.v1+json;q=0")
            && !accept.contains("application/vnd.pypi.simple.v1+json; q=0");
        let json = p.join("index.json");
        if wants_json && json.is_file() {
            return Some((json, "application/vnd.pypi.simple.v1+json"));
        }
        let html = p.join("index.html");
        return html.is_file().then(|| {
            let t = if accept.contains("application/vnd.pypi.simple.v1+html") {
                "application/vnd.pypi.simple.v1+html"
            } else {
                "text/html; charset=utf-8"
            };
            (html, t)
        });
    }
    p.is_file().then(|| {
        let t = content_type(&p);
        (p, t)
    })
}

fn handle(conn: TcpStream, root: &Path, shared: &Mutex<Shared>) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    // Keep-alive: serve requests until the client closes.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("/").to_string();
        let mut accept = String::new();
        let mut close = false;
        let mut body_len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let v = v.trim();
                match k.trim().to_ascii_lowercase().as_str() {
                    "accept" => accept = v.to_string(),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    "content-length" => body_len = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        if body_len > 0 {
            io::copy(&mut (&mut reader).take(body_len as u64), &mut io::sink())?;
        }
        let path = percent_decode(target.split(['?', '#']).next().unwrap_or("/"));
        let fault = shared.lock().ok().and_then(|mut s| {
            let f = s.faults.get_mut(&path)?;
            if f.1 == 0 {
                return None;
            }
            f.1 -= 1;
            Some(f.0)
        });
        let (status, file) = match fault {
            Some(code) => (code, None),
            None if method == "GET" || method == "HEAD" => match resolve(root, &path, &accept) {
                Some(f) => (200, Some(f)),
                None => (404, None),
            },
            None => (405, None),
        };
        if let Ok(mut s) = shared.lock() {
            s.log.push(Request {
                method: method.clone(),
                path: path.clone(),
                status,
                content_type: file.as_ref().map(|f| f.1.to_string()).unwrap_or_default(),
            });
        }
        let reason = match status {
            200 => "OK",
            404 => "Not Found",
            405 => "Method Not Allowed",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Error",
        };
        match file {
            Some((p, ctype)) => {
                let mut f = std::fs::File::open(&p)?;
                let len = f.metadata()?.len();
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n{}\r\n",
                    if close { "Connection: close\r\n" } else { "" }
                )?;
                if method == "GET" {
                    io::copy(&mut f, &mut out)?;
                }
            }
            None => {
                write!(
                    out,
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n",
                    reason.len(),
                    if close { "Connection: close\r\n" } else { "" }
                )?;
                if method != "HEAD" {
                    out.write_all(reason.as_bytes())?;
                }
            }
        }
        out.flush()?;
        if close {
            break;
        }
    }
    let _ = out.shutdown(Shutdown::Both);
    Ok(())
}
