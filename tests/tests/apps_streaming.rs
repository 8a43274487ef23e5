//! Bodies that must never be held whole, against the real binary: a 256 MiB upload read
//! in chunks by a WSGI application (`wsgi.input`) and by an ASGI one (`receive()`), a
//! 256 MiB response from a WSGI generator and from ASGI `more_body` messages, each with the
//! worker's peak resident memory (`VmHWM` in `/proc`, reset before the transfer) far
//! below the body's size; and `wsgi.file_wrapper`, sent by the server itself (the
//! application's file object is never read), over HTTP/1.1 and over TLS with HTTP/2.
//!
//! Plain Python applications; each test says SKIPPED and passes without the interpreter.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use servery_tests::serde_json::Value;
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);
/// The size of every large body here.
const BIG: u64 = 256 << 20;
/// How much a worker's peak memory may grow while it moves [`BIG`] bytes: a quarter.
const GROWTH_LIMIT: u64 = BIG / 4;

/// A WSGI application (no validator: it would hide `wsgi.file_wrapper` from the server).
const WSGI_APP: &str = r#"
import io, json, os

HERE = os.path.dirname(os.path.abspath(__file__))

class CountedFile(io.FileIO):
    # Every read the Python side makes of the file is noted: the server's own path makes none.
    def read(self, *args):
        with open(os.path.join(HERE, "reads.log"), "a") as log:
            log.write("read\n")
        return super().read(*args)

def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/count":
        stream, total, sevens, reads = environ["wsgi.input"], 0, 0, 0
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            total += len(chunk)
            sevens += chunk.count(b"\x07")
            reads += 1
        body = json.dumps({"bytes": total, "sevens": sevens, "reads": reads}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    if path == "/generate":
        size = int(environ["QUERY_STRING"])
        def chunks():
            for i in range(size // 65536):
                # A new object each time, so a server that kept them would keep them all.
                yield bytes([i % 256]) * 65536
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return chunks()
    if path == "/file":
        f = CountedFile(os.path.join(HERE, "big.bin"))
        f.seek(int(environ["QUERY_STRING"] or 0))
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](f)
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"no route"]
"#;

const ASGI_APP: &str = r#"
import json

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/count":
        total, sevens, messages = 0, 0, 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            total += len(chunk)
            sevens += chunk.count(b"\x07")
            messages += 1
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body",
                    "body": json.dumps({"bytes": total, "sevens": sevens, "reads": messages}).encode()})
        return
    size = int(scope["query_string"])
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")]})
    for i in range(size // 65536):
        await send({"type": "http.response.body", "body": bytes([i % 256]) * 65536, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
"#;

fn python_here() -> bool {
    python_imports(&["asyncio", "json"])
}

/// One worker serving `module:app` with `--wsgi` or `--asgi`.
fn serve(tree: &Tree, flag: &str, module: &str, extra: &[&str]) -> (Server, u32) {
    let app_dir = tree.dir.join("app");
    let target = format!("{module}:app");
    let args = [
        FAST,
        &[flag, &target, "--app-dir", app_dir.to_str().expect("utf-8")],
        extra,
    ]
    .concat();
    let server = Server::start(tree, 1, &args, &[]);
    let (status, _) = server.wait_ready(1, BOUND);
    let pid = worker_pids(&status)[0];
    (server, pid)
}

/// A field of `/proc/PID/status`, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {text}"));
    kib * 1024
}

/// Runs `transfer` and returns how far the worker's peak resident memory rose above
/// what it held before: the peak (`VmHWM`) is reset to the current size first, so the
/// growth is measured, not sampled.
fn peak_growth(pid: u32, transfer: impl FnOnce()) -> u64 {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before = proc_status_bytes(pid, "VmRSS");
    transfer();
    proc_status_bytes(pid, "VmHWM").saturating_sub(before)
}

/// The byte at `offset` of every uploaded body: a pattern that repeats every 251 bytes.
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// POSTs [`BIG`] bytes of [`pattern`] with a declared length, written as fast as the
/// server takes them, and returns the JSON answer.
fn upload(addr: SocketAddr) -> Value {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(BOUND)).expect("timeout");
    stream.set_write_timeout(Some(BOUND)).expect("timeout");
    write!(
        stream,
        "POST /count HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {BIG}\r\nConnection: close\r\n\r\n"
    )
    .expect("head");
    // 251 MiB-aligned blocks: the pattern restarts at every multiple of 251 bytes.
    let block: Vec<u8> = (0..251 * 4096).map(pattern).collect();
    let mut sent = 0u64;
    while sent < BIG {
        let n = (BIG - sent).min(block.len() as u64) as usize;
        stream.write_all(&block[..n]).expect("body");
        sent += n as u64;
    }
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).expect("status line");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut rest = String::new();
    reader.read_to_string(&mut rest).expect("answer");
    let body = rest.split("\r\n\r\n").nth(1).expect("a body");
    servery_tests::serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// How many of [`BIG`] bytes of [`pattern`] are 7.
fn sevens() -> u64 {
    (0..251u64).filter(|&b| b == 7).count() as u64 * (BIG / 251) + u64::from(BIG % 251 > 7)
}

/// `curl -o /dev/null`: (status, bytes received).
fn download(url: &str, extra: &[&str]) -> (u16, u64) {
    let out = Command::new("curl")
        .args(["-s", "-k", "--max-time", "60", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{size_download}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut parts = text
        .split_whitespace()
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let code = parts.next().unwrap_or(0) as u16;
    (code, parts.next().unwrap_or(0))
}

fn check_upload(flag: &str, module: &str, source: &str) {
    let tree = python_app_tree(&format!("upload{module}"), module, source);
    let (server, pid) = serve(&tree, flag, module, &[]);
    let mut answer = Value::Null;
    let growth = peak_growth(pid, || answer = upload(server.addr));
    eprintln!(
        "MEASURED {flag}: a {BIG} B upload read in {} chunks raised the worker's peak RSS by {growth} B",
        answer["reads"]
    );
    assert_eq!(answer["bytes"].as_u64(), Some(BIG), "{answer}");
    assert_eq!(answer["sevens"].as_u64(), Some(sevens()), "{answer}");
    assert!(
        answer["reads"].as_u64().is_some_and(|r| r > 64),
        "read in many pieces: {answer}"
    );
    assert!(
        growth < GROWTH_LIMIT,
        "{flag}: the worker's peak RSS rose {growth} B for a {BIG} B body (limit {GROWTH_LIMIT})"
    );
}

fn check_streamed_response(flag: &str, module: &str, source: &str) {
    let tree = python_app_tree(&format!("stream{module}"), module, source);
    let (server, pid) = serve(&tree, flag, module, &[]);
    let url = format!("http://{}/generate?{BIG}", server.addr);
    let mut got = (0, 0);
    let growth = peak_growth(pid, || got = download(&url, &[]));
    eprintln!(
        "MEASURED {flag}: a {BIG} B streamed response raised the worker's peak RSS by {growth} B"
    );
    assert_eq!(got, (200, BIG), "status and size");
    assert!(
        growth < GROWTH_LIMIT,
        "{flag}: the worker's peak RSS rose {growth} B for a {BIG} B response (limit {GROWTH_LIMIT})"
    );
}

#[test]
fn a_wsgi_upload_is_read_from_wsgi_input_in_chunks_never_held_whole() {
    if python_here() {
        check_upload("--wsgi", "wsgiapp", WSGI_APP);
    }
}

#[test]
fn an_asgi_upload_arrives_in_receive_chunks_never_held_whole() {
    if python_here() {
        check_upload("--asgi", "asgiapp", ASGI_APP);
    }
}

#[test]
fn a_wsgi_generator_response_is_streamed_never_held_whole() {
    if python_here() {
        check_streamed_response("--wsgi", "wsgiapp", WSGI_APP);
    }
}

#[test]
fn an_asgi_more_body_response_is_streamed_never_held_whole() {
    if python_here() {
        check_streamed_response("--asgi", "asgiapp", ASGI_APP);
    }
}

#[test]
fn a_wsgi_file_wrapper_is_sent_by_the_server_without_python_reading_the_file() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("filewrapper", "wsgiapp", WSGI_APP);
    // 64 MiB of a known pattern, so a part from an offset can be checked.
    let size: u64 = 64 << 20;
    let content: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    std::fs::write(tree.dir.join("app/big.bin"), &content).expect("big.bin");
    let reads = || std::fs::read_to_string(tree.dir.join("app/reads.log")).unwrap_or_default();

    for (tls, extra) in [(false, &[][..]), (true, &["--tls-self-signed"][..])] {
        let (server, pid) = serve(&tree, "--wsgi", "wsgiapp", extra);
        let base = if tls {
            format!("https://{}", server.addr)
        } else {
            format!("http://{}", server.addr)
        };
        let curl_extra: &[&str] = if tls { &["--http2"] } else { &[] };
        let mut got = (0, 0);
        let growth = peak_growth(pid, || got = download(&format!("{base}/file"), curl_extra));
        eprintln!(
            "MEASURED wsgi.file_wrapper of {size} B (tls {tls}): worker peak RSS +{growth} B"
        );
        assert_eq!(got, (200, size), "tls {tls}");
        assert!(growth < size / 2, "tls {tls}: peak RSS +{growth} B");

        // From where the application left the file: the rest, byte for byte.
        let out = Command::new("curl")
            .args(["-s", "-k", "--max-time", "60"])
            .args(curl_extra)
            .arg(format!("{base}/file?1000000"))
            .output()
            .expect("curl");
        assert!(
            out.stdout == content[1_000_000..],
            "tls {tls}: the file from offset 1000000 ({} bytes)",
            out.stdout.len()
        );
        let python_reads = reads().lines().count();
        assert_eq!(
            python_reads, 0,
            "tls {tls}: the application's file object was read {python_reads} times, so Python sent the file"
        );
    }
}
