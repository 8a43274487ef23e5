//! A plain HTTP/1.1 client and a bounded load generator.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::*;

/// One `GET` with `Connection: close`; the status and body, or why it failed.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no complete response head in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let body = raw[end + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    if let Some(length) = length
        && length != body.len()
    {
        return Err(format!("truncated body: {} of {length} bytes", body.len()));
    }
    Ok((status, body))
}

/// Client threads doing `GET path` in a loop and checking every answer.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    threads: Vec<JoinHandle<ClientReport>>,
    started: Instant,
}

/// One client's failures: as text, and each with when it was started.
type ClientReport = (Vec<String>, Vec<(Instant, String)>);

/// What a [`Load`] saw.
#[derive(Debug)]
pub struct LoadReport {
    pub ok: u64,
    pub failed: u64,
    /// The first failures, with when they happened.
    pub failures: Vec<String>,
    /// The first failed requests of each client, with when each was started, oldest
    /// first.
    pub failed_starts: Vec<(Instant, String)>,
    pub elapsed: Duration,
}

/// A load stops by itself after this long even if a test forgets it.
pub const LOAD_LIMIT: Duration = Duration::from_secs(120);

impl Load {
    pub fn start(addr: SocketAddr, path: &str, expected: &[u8], clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let threads = (0..clients)
            .map(|_| {
                let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
                let (path, expected) = (path.to_owned(), expected.to_vec());
                std::thread::spawn(move || {
                    let mut failures = Vec::new();
                    let mut failed_starts: Vec<(Instant, String)> = Vec::new();
                    while !stop.load(Ordering::Relaxed) && started.elapsed() < LOAD_LIMIT {
                        let start = Instant::now();
                        match http_get(addr, &path) {
                            Ok((200, body)) if body == expected => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                let what = match other {
                                    Ok((status, body)) => {
                                        format!("status {status}, {} bytes", body.len())
                                    }
                                    Err(e) => e,
                                };
                                if failures.len() < 20 {
                                    failures.push(format!("{:?}: {what}", started.elapsed()));
                                }
                                if failed_starts.len() < 100 {
                                    failed_starts.push((start, what));
                                }
                                // A refused or reset connection returns at once; do not
                                // spin while the service has no worker.
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                    }
                    (failures, failed_starts)
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            threads,
            started,
        }
    }

    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Wait until `n` more requests succeed than now.
    pub fn wait_for_more(&self, n: u64, bound: Duration) {
        let target = self.ok() + n;
        wait_until(bound, &format!("{n} more successful requests"), || {
            (self.ok() >= target).then_some(())
        });
    }

    pub fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        let mut failed_starts = Vec::new();
        for t in self.threads {
            let (theirs, starts) = t.join().unwrap_or_default();
            failures.extend(theirs);
            failed_starts.extend(starts);
        }
        failed_starts.sort_by_key(|(start, _)| *start);
        LoadReport {
            ok: self.ok.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            failures,
            failed_starts,
            elapsed: self.started.elapsed(),
        }
    }
}

/// What curl (a client nobody here wrote) got: its exit code, the status and the body.
#[derive(Debug)]
pub struct CurlAnswer {
    pub exit: Option<i32>,
    pub status: u16,
    pub body: Vec<u8>,
}

/// `curl -s ARGS http://ADDR/PATH`, bounded by `--max-time 20`.
pub fn curl(addr: SocketAddr, path: &str, args: &[&str]) -> CurlAnswer {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("http://{addr}{path}"))
        .output()
        .expect("run curl");
    let mut body = out.stdout;
    let split = body.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let status = String::from_utf8_lossy(&body[split + 1..])
        .trim()
        .parse()
        .unwrap_or(0);
    body.truncate(split);
    CurlAnswer {
        exit: out.status.code(),
        status,
        body,
    }
}

/// A 200 answer's body as JSON (panics naming the path otherwise).
pub fn curl_json(addr: SocketAddr, path: &str, args: &[&str]) -> serde_json::Value {
    let a = curl(addr, path, args);
    let text = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, 200, "{path}: {text}");
    serde_json::from_slice(&a.body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// `curl -s -D - ARGS URL` (bounded by `--max-time 60`): the response head, lower-case,
/// and the body as curl gives it (decoded when ARGS has `--compressed`).
pub fn curl_head_and_body(url: &str, args: &[&str]) -> (String, Vec<u8>) {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "60", "-D", "-"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head from {url}"));
    let head = String::from_utf8_lossy(&out.stdout[..split]).to_ascii_lowercase();
    (head, out.stdout[split + 4..].to_vec())
}
