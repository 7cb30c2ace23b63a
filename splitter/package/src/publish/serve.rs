//! A small static file server for a published repository, bound to
//! 127.0.0.1 on an ephemeral port: enough for apt, dnf, pip and
//! rocm-kpack-fetch to use a repository `publish` just wrote (the demo, and
//! trying a repository before uploading it). GET and HEAD only, with
//! single-range `Range` requests; paths are confined to the root.

use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running server; stops when dropped.
pub struct Server {
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `root` on 127.0.0.1 (ephemeral port) in a background thread.
    pub fn start(root: &Path) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let root = root.canonicalize()?;
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = handle(stream, &root);
                });
            }
        });
        Ok(Server {
            url: format!("http://{addr}/"),
            stop,
            addr,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Maps a request path onto a file below `root`, refusing anything that
/// could leave it (`..`, absolute components) and symlinks that do.
fn resolve(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next()?;
    let mut out = root.to_path_buf();
    for part in Path::new(path.trim_start_matches('/')).components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if out.is_dir() {
        out.push("index.html");
    }
    let real = out.canonicalize().ok()?;
    real.starts_with(root).then_some(real)
}

fn handle(stream: TcpStream, root: &Path) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let mut range = None;
        let mut close = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("range: bytes=") {
                range = parse_range(v.trim());
            } else if lower.starts_with("connection: close") {
                close = true;
            }
        }
        let head = method == "HEAD";
        if method != "GET" && !head {
            respond(&mut stream, "405 Method Not Allowed", 0, None)?;
            return Ok(());
        }
        match resolve(root, target).and_then(|p| std::fs::File::open(p).ok()) {
            None => respond(&mut stream, "404 Not Found", 0, None)?,
            Some(mut file) => {
                let len = file.metadata()?.len();
                let (status, start, end) = match range {
                    Some((s, e)) if s < len => {
                        ("206 Partial Content", s, e.map_or(len, |e| (e + 1).min(len)))
                    }
                    Some(_) => {
                        respond(&mut stream, "416 Range Not Satisfiable", 0, None)?;
                        continue;
                    }
                    None => ("200 OK", 0, len),
                };
                let content_range =
                    (status.starts_with("206")).then(|| format!("bytes {start}-{}/{len}", end - 1));
                respond(&mut stream, status, end - start, content_range.as_deref())?;
                if !head {
                    file.seek(SeekFrom::Start(start))?;
                    io::copy(&mut (&mut file).take(end - start), &mut stream)?;
                }
            }
        }
        if close {
            let _ = stream.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

/// `a-b`, `a-` (single range only).
fn parse_range(v: &str) -> Option<(u64, Option<u64>)> {
    let (a, b) = v.split_once('-')?;
    let start = a.parse().ok()?;
    let end = if b.is_empty() { None } else { Some(b.parse().ok()?) };
    Some((start, end))
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    len: u64,
    content_range: Option<&str>,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nAccept-Ranges: bytes\r\n");
    if let Some(r) = content_range {
        head.push_str(&format!("Content-Range: {r}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())
}
