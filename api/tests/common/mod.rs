//! A small HTTP/1.1 client over a TCP stream and a real server on 127.0.0.1
//! (port 0), shared by the HTTP test suites.
#![allow(dead_code)]

use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tra_api::server::{serve_on, ServerConfig};

/// Start a server with this configuration, strict (a failing rewrite rule
/// answers 500 instead of a plan with a warning: tests must see it); its address.
pub async fn start(config: ServerConfig) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig { strict: true, ..config };
    tokio::spawn(async move { serve_on(listener, config).await.expect("serve") });
    addr
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("status {}: body is not JSON ({e}): {}", self.status, String::from_utf8_lossy(&self.body))
        })
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    /// The error object, after checking the status and the shape.
    pub fn error(&self, status: u16) -> Value {
        let v = self.json();
        assert_eq!(self.status, status, "expected status {status}, got {}: {v}", self.status);
        let e = &v["error"];
        assert!(e["code"].is_string() && e["message"].is_string() && e["at"].is_string(), "not an error object: {v}");
        assert!(!e["message"].as_str().unwrap().is_empty());
        e.clone()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>) -> Response {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let body = body.unwrap_or(b"");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // The server may answer (413) before reading the whole body: ignore write errors.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match tokio::time::timeout(Duration::from_secs(120), stream.read(&mut buf)).await.expect("response in time") {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) if !raw.is_empty() => break,
            Err(e) => panic!("read: {e}"),
        }
    }
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))).collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Response { status, headers, body }
}

/// The payload of a body sent with `Transfer-Encoding: chunked`.
pub fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[eol + 2 + size + 2..];
    }
    out
}

pub async fn get(addr: SocketAddr, path: &str) -> Response {
    http(addr, "GET", path, None).await
}

pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    http(addr, "POST", path, Some(body.to_string().as_bytes())).await
}

/// A scratch directory under the system's temp dir, unique to this test
/// process and tag, removed (with everything in it) when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A fresh, empty directory `tra-<tag>-<pid>`.
    pub fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tra-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    /// A file in it.
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
    /// A file in it, as a string (for command-line arguments).
    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Threads of the test process spinning until dropped: another program
/// keeping a machine busy, as a calibration or a run should notice.
pub struct Spinners(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Spinners {
    /// `n` spinning threads.
    pub fn start(n: usize) -> Spinners {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Spinners(stop, threads)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        self.1.drain(..).for_each(|t| t.join().unwrap());
    }
}

/// Whether this process may use every processor of its machine: in a
/// container allowed fewer, a calibration cannot tell whose time is on its
/// processors, and says nothing about others.
pub fn sees_the_whole_machine() -> bool {
    let host = std::fs::read_to_string("/proc/stat")
        .map(|s| s.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count())
        .unwrap_or(usize::MAX);
    std::thread::available_parallelism().map_or(0, usize::from) >= host
}
