//! Django under servery's workers (`--wsgi project.wsgi:application`), against the real
//! binary: a minimal project the test writes (no database), whose application object is
//! `validator(get_wsgi_application())`, so any PEP 3333 violation by the server raises in
//! the application and fails the request. Text, JSON both ways, a form POST with a file
//! upload through `request.FILES` (large enough that Django spools it to a temporary
//! file), `StreamingHttpResponse` (whole, and broken half-way), `FileResponse` (through
//! `wsgi.file_wrapper`), a non-ASCII path, two cookies, Django's own 404, HEAD on a
//! kept-alive connection, and concurrent requests on two workers.
//!
//! No middleware strips `wsgi.input_terminated` here, unlike tests/apps.rs: Django ignores
//! that key and always reads the body through its `LimitedStream`, with a size (at most
//! `CONTENT_LENGTH`), so the validator's rule that `read()` has one argument holds without
//! help. The `/info` view reports the key, and the test checks servery set it.
//!
//! Django's `Set-Cookie` values start with a space, which HTTP/2 forbids: a test holds
//! servery to trimming it.
//!
//! Requests go through curl, a client nobody here wrote. Each test says SKIPPED and
//! passes when the interpreter the binary embeds lacks Django (scripts/test installs the
//! pinned version from scripts/python-packages.txt).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::serde_json::{Value, json};
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

const SETTINGS: &str = r#"
import os

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET_KEY = "servery-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "project.urls"
INSTALLED_APPS = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
# No database: nothing here needs one.
DATABASES = {}
USE_TZ = True
# Uploads above 1 MiB are spooled to a file in the project's own directory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 1 << 20
FILE_UPLOAD_TEMP_DIR = os.path.join(BASE_DIR, "uploads")
"#;

const URLS: &str = r#"
from django.urls import path
from . import views

urlpatterns = [
    path("hello", views.hello),
    path("info", views.info),
    path("echo", views.echo),
    path("upload", views.upload),
    path("stream", views.stream),
    path("broken-stream", views.broken_stream),
    path("download", views.download),
    path("café", views.cafe),
    path("cookies", views.cookies),
]
"#;

const VIEWS: &str = r#"
import hashlib, json, os
from django.conf import settings
from django.http import (FileResponse, HttpResponse, HttpResponseNotAllowed, JsonResponse,
                         StreamingHttpResponse)

def hello(request):
    return HttpResponse("hello from django\n", content_type="text/plain")

def info(request):
    meta = request.META
    return JsonResponse({
        "method": request.method,
        "path": request.path,
        "query": {k: request.GET.getlist(k) for k in request.GET},
        "remote": meta.get("REMOTE_ADDR"),
        "host": request.get_host(),
        "scheme": request.scheme,
        "header": request.headers.get("X-Servery-Test"),
        "script_name": meta.get("SCRIPT_NAME"),
        "server_protocol": meta.get("SERVER_PROTOCOL"),
        "multiprocess": meta["wsgi.multiprocess"],
        "multithread": meta["wsgi.multithread"],
        "input_terminated": meta.get("wsgi.input_terminated"),
        "pid": os.getpid(),
    })

def echo(request):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    body = request.body
    return JsonResponse({"got": json.loads(body), "length": len(body),
                         "content_type": request.content_type})

def upload(request):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    upload = request.FILES["file"]
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    return JsonResponse({
        "name": request.POST["name"],
        "filename": upload.name,
        "size": upload.size,
        "sha256": digest.hexdigest(),
        "spooled": hasattr(upload, "temporary_file_path"),
    })

def stream(request):
    def chunks():
        for i in range(50):
            yield ("chunk %d\n" % i) * 100
    return StreamingHttpResponse(chunks(), content_type="text/plain")

def broken_stream(request):
    def chunks():
        yield b"first part\n" * 100
        raise RuntimeError("the stream breaks on purpose")
    return StreamingHttpResponse(chunks(), content_type="text/plain")

def download(request):
    path = os.path.join(settings.BASE_DIR, "download.bin")
    return FileResponse(open(path, "rb"), as_attachment=True, filename="download.bin")

def cafe(request):
    return HttpResponse(request.path.encode("utf-8"), content_type="text/plain; charset=utf-8")

def cookies(request):
    # Django's WSGI handler gives each Set-Cookie as Morsel.output(header=""): the value
    # starts with a space (" a=1; Path=/").
    response = HttpResponse("two cookies\n", content_type="text/plain")
    response.set_cookie("a", "1")
    response.set_cookie("b", "2", httponly=True)
    return response
"#;

const WSGI: &str = r#"
import os
from wsgiref.validate import validator
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

application = validator(get_wsgi_application())
"#;

/// The bytes `/download` serves: not a multiple of any block size.
fn download_body() -> Vec<u8> {
    (0..200_003u32).map(|i| (i % 253) as u8).collect()
}

/// Writes the project into `dir` (which goes on `sys.path`).
fn write_project(dir: &Path) {
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    std::fs::create_dir_all(dir.join("uploads")).expect("uploads dir");
    for (name, source) in [
        ("__init__.py", ""),
        ("settings.py", SETTINGS),
        ("urls.py", URLS),
        ("views.py", VIEWS),
        ("wsgi.py", WSGI),
    ] {
        std::fs::write(project.join(name), source).expect("write project file");
    }
    std::fs::write(dir.join("download.bin"), download_body()).expect("write download");
}

/// Whether the interpreter that servery embeds can import Django.
fn django_available() -> bool {
    python_imports(&["django"])
}

/// A complete 200 answer's body as JSON.
fn json_body(addr: SocketAddr, path: &str, args: &[&str]) -> Value {
    let a = curl(addr, path, args);
    let text = String::from_utf8_lossy(&a.body);
    assert_eq!((a.exit, a.status), (Some(0), 200), "{path}: {text}");
    servery_tests::serde_json::from_slice(&a.body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Starts servery on `tree` with the project, two workers, and waits until both are
/// ready.
fn serve(tree: &Tree) -> Server {
    let app_dir = tree.dir.join("app");
    write_project(&app_dir);
    let app_dir = app_dir.to_str().expect("utf-8");
    let args = [
        FAST,
        &[
            "--wsgi",
            "project.wsgi:application",
            "--app-dir",
            app_dir,
            "--max-blocking-threads",
            "4",
        ],
    ]
    .concat();
    let server = Server::start(tree, 2, &args, &[]);
    server.wait_ready(2, BOUND);
    server
}

#[test]
fn a_django_project_under_wsgiref_validate_serves_text_json_uploads_and_streams() {
    if !django_available() {
        return;
    }
    let tree = Tree::new("django");
    let server = serve(&tree);
    let addr = server.addr;

    let a = curl(addr, "/hello", &[]);
    assert_eq!(
        (a.exit, a.status, a.body.as_slice()),
        (Some(0), 200, &b"hello from django\n"[..])
    );

    // The environ, as Django reads it.
    let info = json_body(
        addr,
        "/info?q=a%20b&q=%C3%A9&empty=",
        &["-H", "X-Servery-Test: yes"],
    );
    assert_eq!(info["method"], "GET", "{info}");
    assert_eq!(info["path"], "/info", "{info}");
    assert_eq!(
        info["query"],
        json!({"q": ["a b", "é"], "empty": [""]}),
        "{info}"
    );
    assert_eq!(info["remote"], "127.0.0.1", "{info}");
    assert_eq!(info["host"], addr.to_string(), "{info}");
    assert_eq!(info["scheme"], "http", "{info}");
    assert_eq!(info["header"], "yes", "{info}");
    assert_eq!(info["script_name"], "", "{info}");
    assert_eq!(info["server_protocol"], "HTTP/1.1", "{info}");
    assert_eq!(info["multiprocess"], true, "two workers: {info}");
    assert_eq!(info["multithread"], true, "four threads: {info}");
    assert_eq!(info["input_terminated"], true, "{info}");

    // A non-ASCII path: PATH_INFO is the UTF-8 bytes as ISO-8859-1 characters (PEP 3333),
    // which Django turns back into the text of the route it matches.
    let a = curl(addr, "/caf%C3%A9", &[]);
    assert_eq!(
        (a.exit, a.status),
        (Some(0), 200),
        "{}",
        String::from_utf8_lossy(&a.body)
    );
    assert_eq!(String::from_utf8_lossy(&a.body), "/café");

    // JSON in, JSON out: request.body reads wsgi.input to CONTENT_LENGTH.
    let got = json_body(
        addr,
        "/echo",
        &[
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"a": [1, 2, "é"], "b": null}"#,
        ],
    );
    assert_eq!(got["got"], json!({"a": [1, 2, "é"], "b": null}), "{got}");
    assert_eq!(got["content_type"], "application/json", "{got}");
    assert_eq!(
        got["length"],
        r#"{"a": [1, 2, "é"], "b": null}"#.len(),
        "{got}"
    );

    // A form with a 3 MiB file: Django's multipart parser reads wsgi.input in sized
    // chunks and spools the file to disk (above FILE_UPLOAD_MAX_MEMORY_SIZE).
    let upload = tree.dir.join("upload.bin");
    let content: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&upload, &content).expect("write upload");
    let file_arg = format!("file=@{}", upload.display());
    let got = json_body(addr, "/upload", &["-F", "name=servery é", "-F", &file_arg]);
    assert_eq!(got["name"], "servery é", "{got}");
    assert_eq!(got["filename"], "upload.bin", "{got}");
    assert_eq!(got["size"], content.len(), "{got}");
    assert_eq!(got["sha256"], sha256_hex(&upload).as_str(), "{got}");
    assert_eq!(got["spooled"], true, "{got}");

    // StreamingHttpResponse, byte for byte.
    let a = curl(addr, "/stream", &[]);
    let want: String = (0..50)
        .map(|i| format!("chunk {i}\n").repeat(100))
        .collect();
    assert_eq!((a.exit, a.status), (Some(0), 200));
    assert!(
        a.body == want.as_bytes(),
        "streamed body differs ({} bytes of {})",
        a.body.len(),
        want.len()
    );

    // FileResponse: Django hands the open file to wsgi.file_wrapper.
    let a = curl(addr, "/download", &["-D", "-"]);
    assert_eq!((a.exit, a.status), (Some(0), 200));
    let split = a
        .body
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&a.body[..split]).to_ascii_lowercase();
    assert!(
        head.contains("content-disposition: attachment; filename=\"download.bin\""),
        "{head}"
    );
    assert!(head.contains("content-length: 200003"), "{head}");
    assert!(
        a.body[split + 4..] == download_body(),
        "download differs ({} bytes)",
        a.body.len() - split - 4
    );

    // Two cookies are two Set-Cookie fields, never folded into one (RFC 9110 §5.3).
    let a = curl(addr, "/cookies", &["-D", "-"]);
    let text = String::from_utf8_lossy(&a.body).into_owned();
    assert_eq!((a.exit, a.status), (Some(0), 200), "{text}");
    let cookies: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("set-cookie")
                .then(|| value.trim())
        })
        .collect();
    assert_eq!(cookies, ["a=1; Path=/", "b=2; HttpOnly; Path=/"], "{text}");

    // A route Django does not have: Django's own 404 (DEBUG off).
    let a = curl(addr, "/nowhere", &[]);
    assert_eq!((a.exit, a.status), (Some(0), 404));

    let stderr = server.stderr();
    assert!(
        !stderr.contains("the application raised"),
        "no request raised: {stderr}"
    );
    assert!(
        !stderr.contains("AssertionError"),
        "the validator found nothing: {stderr}"
    );
}

#[test]
fn a_django_stream_that_raises_half_way_is_cut_and_the_worker_serves_on() {
    if !django_available() {
        return;
    }
    let tree = Tree::new("django-cut");
    let server = serve(&tree);
    let addr = server.addr;

    // The generator yields a first chunk, then raises. The client must see a response
    // that did not end, never one that looks complete. How much of it arrives before
    // the connection closes depends on what was flushed: nothing (curl's 52, an empty
    // reply), the head (18), or the head and the first chunk (18; 56 if reset), and
    // all three are seen (a 200-request run: 73, 5 and 122).
    let first = b"first part\n".repeat(100);
    let a = curl(addr, "/broken-stream", &[]);
    assert!(
        matches!(a.exit, Some(18 | 52 | 56)),
        "curl saw the response cut (exit {:?}), not complete ({} bytes, status {})",
        a.exit,
        a.body.len(),
        a.status
    );
    assert!(matches!(a.status, 0 | 200), "no other status: {}", a.status);
    assert!(
        first.starts_with(&a.body),
        "what arrived is a prefix of what the application yielded: {:?}",
        String::from_utf8_lossy(&a.body)
    );
    let (stderr, _) = wait_until(BOUND, "the failure logged", || {
        let s = server.stderr();
        s.contains("the stream breaks on purpose").then_some(s)
    });
    assert!(
        stderr.contains("the application raised"),
        "logged as the application's failure: {stderr}"
    );
    assert!(
        stderr.contains("GET /broken-stream"),
        "the log names the request: {stderr}"
    );

    // Both workers serve on.
    for _ in 0..6 {
        let a = curl(addr, "/hello", &[]);
        assert_eq!(
            (a.exit, a.status, a.body.as_slice()),
            (Some(0), 200, &b"hello from django\n"[..])
        );
    }
    assert!(
        !server.stderr().contains("AssertionError"),
        "the validator found nothing: {}",
        server.stderr()
    );
}

#[test]
fn head_and_concurrent_requests_to_django_on_kept_alive_connections() {
    if !django_available() {
        return;
    }
    let tree = Tree::new("django-head");
    let server = serve(&tree);
    let addr = server.addr;

    // HEAD, then GET on the same connection: Django writes the body for HEAD as well, and
    // the server must drop it, or the GET's answer would be read from the wrong bytes.
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        s,
        "HEAD /hello HTTP/1.1\r\nHost: {addr}\r\n\r\nGET /hello HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .expect("read to the end (Connection: close)");
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(
        text.matches("HTTP/1.1 200 OK\r\n").count(),
        2,
        "two answers: {text:?}"
    );
    assert_eq!(
        text.matches("hello from django\n").count(),
        1,
        "one body, the GET's: {text:?}"
    );
    assert!(
        text.ends_with("\r\n\r\nhello from django\n"),
        "the GET's body ends the stream: {text:?}"
    );

    // Eight clients at once, ten requests each (a connection each): every one answered
    // whole, by the service's workers.
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| json_body(addr, "/info", &[])["pid"].as_u64())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut pids = std::collections::BTreeSet::new();
    for c in clients {
        for pid in c.join().expect("client") {
            pids.insert(pid.expect("a pid"));
        }
    }
    let status = server.status();
    let workers: std::collections::BTreeSet<u64> =
        worker_pids(&status).into_iter().map(u64::from).collect();
    assert!(
        pids.is_subset(&workers),
        "answered by the workers: {pids:?} of {workers:?}"
    );
    let stderr = server.stderr();
    assert!(!stderr.contains("the application raised"), "{stderr}");
    assert!(!stderr.contains("AssertionError"), "{stderr}");
}

/// Django gives every `Set-Cookie` value with a leading space. On HTTP/1.1 that is
/// optional white space and harmless; on HTTP/2 "a field value MUST NOT start or end with
/// an ASCII whitespace character" and a response carrying one "MUST be treated as
/// malformed" (RFC 9113 §8.2.1), so a strict HTTP/2 client would refuse every Django view
/// that sets a cookie (sessions, CSRF). servery trims the white space around WSGI header
/// values, as gunicorn does.
#[test]
fn django_cookies_reach_an_http2_client_without_surrounding_white_space() {
    if !django_available() {
        return;
    }
    let tree = Tree::new("django-h2");
    let server = serve(&tree);
    // h2c with prior knowledge; curl prints each field as `name: value`, so a value
    // that starts with a space shows as two.
    let a = curl(
        server.addr,
        "/cookies",
        &["--http2-prior-knowledge", "-D", "-"],
    );
    let text = String::from_utf8_lossy(&a.body).into_owned();
    assert_eq!((a.exit, a.status), (Some(0), 200), "{text}");
    assert!(text.starts_with("HTTP/2 200"), "spoken over HTTP/2: {text}");
    let cookies: Vec<&str> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .collect();
    assert_eq!(
        cookies,
        [
            "set-cookie: a=1; Path=/",
            "set-cookie: b=2; HttpOnly; Path=/"
        ],
        "each Set-Cookie value as Django meant it, with no white space around it"
    );
}
