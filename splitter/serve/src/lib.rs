//! A small HTTP/1.1 server bound to 127.0.0.1 on an ephemeral port: enough
//! for apt, dnf, pip and rocm-kpack-fetch to use a repository `publish` just
//! wrote (the demo, and trying a repository before uploading it).
//!
//! GET and HEAD with keep-alive and single-range `Range: bytes=N-[M]`.
//! What a request gets is up to a [`Handler`]: [`Dir`] serves a directory
//! (paths confined to it, PEP 691 `index.json` negotiation). The handler is
//! pluggable so that tests can serve in-memory files and misbehave on cue
//! without any fault code living here.

use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// PEP 691 JSON and HTML media types.
const PEP691_JSON: &str = "application/vnd.pypi.simple.v1+json";
const PEP691_HTML: &str = "application/vnd.pypi.simple.v1+html";

/// Longest request or header line accepted; a client is local, so anything
/// longer is a bug, not a long URL.
const MAX_LINE: u64 = 64 * 1024;

/// How long an idle keep-alive connection is kept.
const IDLE: Duration = Duration::from_secs(30);

/// One parsed request.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `HEAD`, or whatever was sent.
    pub method: String,
    /// The request target as sent.
    pub target: String,
    /// The target's path, percent-decoded, without query or fragment.
    pub path: String,
    /// Header names and values in the order sent.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What to send back. The server writes the status line and headers, then
/// at most `length` bytes of `body`; a body that ends early closes the
/// connection, which is how a client learns of a truncated response.
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Extra headers (Content-Length and Connection are the server's).
    pub headers: Vec<(String, String)>,
    /// The body (not read for HEAD).
    pub body: Box<dyn Read + Send>,
    /// Content-Length; `None` sends none and closes after the body.
    pub length: Option<u64>,
    /// Close the connection after this response.
    pub close: bool,
}

impl Response {
    /// `status` with an empty body.
    pub fn status(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Box::new(io::empty()),
            length: Some(0),
            close: false,
        }
    }

    /// `len` bytes of `content` answering `request`: 200, 206 for a
    /// satisfiable single range, or 416.
    pub fn content(
        request: &Request,
        content_type: &str,
        mut content: impl Read + Seek + Send + 'static,
        len: u64,
    ) -> Response {
        let unsatisfiable =
            || Response::status(416).with_header("Content-Range", &format!("bytes */{len}"));
        let (status, start, end) = match request.header("range").and_then(parse_range) {
            None => (200, 0, len),
            Some((start, end)) => {
                let end = end.map_or(len, |e| e.saturating_add(1).min(len));
                if start >= end {
                    return unsatisfiable();
                }
                (206, start, end)
            }
        };
        if content.seek(SeekFrom::Start(start)).is_err() {
            return Response::status(500);
        }
        let mut response = Response {
            status,
            headers: Vec::new(),
            body: Box::new(content.take(end - start)),
            length: Some(end - start),
            close: false,
        }
        .with_header("Content-Type", content_type)
        .with_header("Accept-Ranges", "bytes");
        if status == 206 {
            response =
                response.with_header("Content-Range", &format!("bytes {start}-{}/{len}", end - 1));
        }
        response
    }

    /// In-memory `bytes` answering `request`, as [`Response::content`].
    pub fn bytes(
        request: &Request,
        content_type: &str,
        bytes: impl AsRef<[u8]> + Send + 'static,
    ) -> Response {
        let len = bytes.as_ref().len() as u64;
        Response::content(request, content_type, Cursor::new(bytes), len)
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Decides what each request gets; called from one thread per connection.
pub trait Handler: Send + Sync + 'static {
    /// The response to `request`.
    fn handle(&self, request: &Request) -> Response;
}

impl<F: Fn(&Request) -> Response + Send + Sync + 'static> Handler for F {
    fn handle(&self, request: &Request) -> Response {
        self(request)
    }
}

/// Serves the files below a directory.
///
/// A directory URL serves its `index.html`, or its `index.json` as PEP 691
/// JSON when the Accept header prefers that (pip does), so a `publish --pip`
/// tree needs nothing else. Paths that would leave the root, directly or
/// through a symlink, get 404.
#[derive(Debug, Clone)]
pub struct Dir {
    root: PathBuf,
}

impl Dir {
    /// Serves `root` (which must exist).
    pub fn new(root: &Path) -> io::Result<Dir> {
        Ok(Dir {
            root: root.canonicalize()?,
        })
    }

    /// The directory served (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a decoded request path names and its Content-Type, if it
    /// is inside the root.
    pub fn resolve(&self, path: &str, accept: &str) -> Option<(PathBuf, &'static str)> {
        let mut out = self.root.clone();
        for part in Path::new(path.trim_start_matches('/')).components() {
            match part {
                Component::Normal(p) => out.push(p),
                Component::CurDir => {}
                _ => return None,
            }
        }
        let out = self.inside(&out)?;
        if !out.is_dir() {
            return out.is_file().then(|| {
                let t = content_type(&out);
                (out, t)
            });
        }
        let json = quality(accept, PEP691_JSON);
        if json > 0.0 && json >= quality(accept, PEP691_HTML) {
            if let Some(p) = self.inside(&out.join("index.json")).filter(|p| p.is_file()) {
                return Some((p, PEP691_JSON));
            }
        }
        let html = self
            .inside(&out.join("index.html"))
            .filter(|p| p.is_file())?;
        let t = if quality(accept, PEP691_HTML) > 0.0 {
            PEP691_HTML
        } else {
            "text/html; charset=utf-8"
        };
        Some((html, t))
    }

    fn inside(&self, path: &Path) -> Option<PathBuf> {
        let real = path.canonicalize().ok()?;
        real.starts_with(&self.root).then_some(real)
    }
}

impl Handler for Dir {
    fn handle(&self, request: &Request) -> Response {
        if request.method != "GET" && request.method != "HEAD" {
            return Response::status(405).with_header("Allow", "GET, HEAD");
        }
        let found = self
            .resolve(&request.path, request.header("accept").unwrap_or(""))
            .and_then(|(path, t)| {
                let file = std::fs::File::open(path).ok()?;
                let len = file.metadata().ok()?.len();
                Some((file, len, t))
            });
        match found {
            Some((file, len, t)) => Response::content(request, t, file, len),
            None => Response::status(404),
        }
    }
}

/// A running server; stops accepting when dropped.
pub struct Server {
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves the directory `root` (see [`Dir`]) in a background thread.
    pub fn start(root: &Path) -> io::Result<Server> {
        Server::with_handler(Dir::new(root)?)
    }

    /// Answers every request with `handler`, in background threads.
    pub fn with_handler(handler: impl Handler) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handler: Arc<dyn Handler> = Arc::new(handler);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let handler = Arc::clone(&handler);
                std::thread::spawn(move || {
                    // A client that hung up is not the server's problem.
                    let _ = serve_connection(stream, &*handler);
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

    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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

fn serve_connection(stream: TcpStream, handler: &dyn Handler) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE))?;
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    while let Some((request, keep_alive)) = read_request(&mut reader)? {
        let response = handler.handle(&request);
        if !write_response(&mut out, request.method == "HEAD", response)? || !keep_alive {
            break;
        }
    }
    let _ = out.shutdown(Shutdown::Both);
    Ok(())
}

/// The next request and whether the client allows keep-alive; `None` when
/// the client closed the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<(Request, bool)>> {
    let mut line = String::new();
    // RFC 9112 2.2: ignore empty lines before the request line.
    while line.trim().is_empty() {
        line.clear();
        if reader.by_ref().take(MAX_LINE).read_line(&mut line)? == 0 {
            return Ok(None);
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let http10 = parts.next() == Some("HTTP/1.0");
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.by_ref().take(MAX_LINE).read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let request = Request {
        path: percent_decode(target.split(['?', '#']).next().unwrap_or("/")),
        method,
        target,
        headers,
    };
    // GET and HEAD carry no body, but skip one if sent so the next request
    // on this connection parses.
    let body = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0u64);
    io::copy(&mut reader.by_ref().take(body), &mut io::sink())?;
    let connection = request
        .header("connection")
        .unwrap_or("")
        .to_ascii_lowercase();
    let keep_alive = if http10 {
        connection.contains("keep-alive")
    } else {
        !connection.contains("close")
    };
    Ok(Some((request, keep_alive)))
}

/// Writes `response`; true if the connection can carry another request.
fn write_response(out: &mut TcpStream, head_only: bool, response: Response) -> io::Result<bool> {
    let Response {
        status,
        headers,
        body,
        length,
        close,
    } = response;
    let close = close || length.is_none();
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if let Some(n) = length {
        head.push_str(&format!("Content-Length: {n}\r\n"));
    }
    for (k, v) in &headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if head_only {
        return Ok(!close);
    }
    let limit = length.unwrap_or(u64::MAX);
    let mut body = body.take(limit);
    // Each chunk goes out as soon as it is read, so a body that pauses
    // (a test's stall) leaves what came before it on the wire.
    let mut buf = vec![0u8; 256 * 1024];
    let mut sent = 0u64;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        out.write_all(buf.get(..n).unwrap_or_default())?;
        sent += n as u64;
    }
    Ok(!close && sent == limit)
}

/// `N-` or `N-M` after `bytes=`, single range only; anything else is
/// ignored (answered in full), as RFC 9110 allows.
fn parse_range(value: &str) -> Option<(u64, Option<u64>)> {
    let (a, b) = value.trim().strip_prefix("bytes=")?.split_once('-')?;
    let start = a.trim().parse().ok()?;
    let b = b.trim();
    let end = if b.is_empty() {
        None
    } else {
        Some(b.parse().ok()?)
    };
    Some((start, end))
}

/// The q-value `accept` gives `media` exactly (0 if not listed).
fn quality(accept: &str, media: &str) -> f32 {
    accept
        .split(',')
        .filter_map(|item| {
            let mut params = item.split(';');
            if !params.next()?.trim().eq_ignore_ascii_case(media) {
                return None;
            }
            let q = params
                .find_map(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(1.0);
            Some(q)
        })
        .fold(0.0, f32::max)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex = b
            .get(i + 1..i + 3)
            .filter(|_| c == b'%')
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(h) => {
                out.push(h);
                i += 3;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
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

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_negotiation() {
        assert_eq!(parse_range("bytes=5-"), Some((5, None)));
        assert_eq!(parse_range("bytes=5-9"), Some((5, Some(9))));
        assert_eq!(parse_range("bytes=-5"), None);
        assert_eq!(parse_range("bytes=1-2,4-5"), None);
        let pip = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01";
        assert_eq!(quality(pip, PEP691_JSON), 1.0);
        assert_eq!(quality(pip, PEP691_HTML), 0.1);
        assert_eq!(
            quality("application/vnd.pypi.simple.v1+json;q=0", PEP691_JSON),
            0.0
        );
        assert_eq!(percent_decode("/a%2Bb%zz%4"), "/a+b%zz%4");
    }

    /// Sends `requests` on one connection and returns everything read back.
    fn exchange(server: &Server, requests: &str) -> String {
        let mut c = TcpStream::connect(server.addr()).expect("connect");
        c.write_all(requests.as_bytes()).expect("send");
        c.shutdown(Shutdown::Write).expect("half-close");
        let mut out = String::new();
        c.read_to_string(&mut out).expect("read");
        out
    }

    #[test]
    fn serves_a_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("root/simple/p")).expect("mkdir");
        std::fs::write(tmp.path().join("root/a b.txt"), "0123456789").expect("write");
        std::fs::write(tmp.path().join("root/simple/p/index.html"), "html").expect("write");
        std::fs::write(tmp.path().join("root/simple/p/index.json"), "json").expect("write");
        std::fs::write(tmp.path().join("secret"), "no").expect("write");
        let server = Server::start(&tmp.path().join("root")).expect("start");
        // Keep-alive: all answered on one connection, in order.
        let out = exchange(
            &server,
            "GET /a%20b.txt HTTP/1.1\r\nRange: bytes=2-4\r\n\r\n\
             HEAD /a%20b.txt HTTP/1.1\r\n\r\n\
             GET /a%20b.txt HTTP/1.1\r\nRange: bytes=10-\r\n\r\n\
             GET /../secret HTTP/1.1\r\n\r\n\
             GET /simple/p/ HTTP/1.1\r\nAccept: application/vnd.pypi.simple.v1+json\r\n\r\n\
             GET /simple/p HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        let statuses: Vec<&str> = out.split("HTTP/1.1 ").filter_map(|r| r.get(..3)).collect();
        assert_eq!(
            statuses,
            ["206", "200", "416", "404", "200", "200"],
            "{out}"
        );
        assert!(
            out.contains("Content-Range: bytes 2-4/10\r\n\r\n234HTTP/1.1"),
            "{out}"
        );
        assert!(out.contains("Content-Length: 10\r\n"), "{out}");
        assert!(
            out.contains("Content-Type: application/vnd.pypi.simple.v1+json\r\n"),
            "{out}"
        );
        assert!(out.contains("\r\n\r\njsonHTTP/1.1"), "{out}");
        assert!(out.ends_with("\r\n\r\nhtml"), "{out}");
    }

    #[test]
    fn short_bodies_close_the_connection() {
        let server = Server::with_handler(|r: &Request| {
            let mut response = Response::bytes(r, "text/plain", b"abcdef".to_vec());
            response.body = Box::new(response.body.take(2));
            response
        })
        .expect("start");
        let out = exchange(&server, "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        assert!(
            out.ends_with(
                "Content-Length: 6\r\nContent-Type: text/plain\r\nAccept-Ranges: bytes\r\n\r\nab"
            ),
            "{out}"
        );
    }
}
