//! ASGI applications in the workers (`--asgi`), against the real binary: Starlette and
//! FastAPI served with lifespan startup before ready and shutdown after the drain, request
//! bodies, streamed responses, files sent by path (`http.response.pathsend`) and by
//! descriptor (`http.response.zerocopysend`, a plain ASGI application), a
//! lifespan that fails (the first generation exits 3 with the application's traceback; a
//! reload with it leaves the old code serving), and a client that hangs up on a stream the
//! application notices as a disconnect. WebSockets: `apps_websocket.rs`.
//!
//! Requests go through curl. Each test says SKIPPED and passes when the interpreter the
//! binary embeds lacks the framework (scripts/test installs the pinned versions).

use std::path::Path;
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

/// A Starlette application; its lifespan writes `events.log` beside the module, so a test
/// sees startup and shutdown, and what the stream saw of a disconnect.
const STARLETTE_APP: &str = r#"
import asyncio, os
from contextlib import asynccontextmanager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

EVENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "events.log")

def note(what):
    with open(EVENTS, "a") as log:
        log.write("%s %d\n" % (what, os.getpid()))

@asynccontextmanager
async def lifespan(app):
    if os.environ.get("FAIL_STARTUP") or os.path.exists(EVENTS + ".fail"):
        raise RuntimeError("the database is not there")
    note("startup")
    yield {"greeting": "hello from the lifespan"}
    await asyncio.sleep(float(os.environ.get("SHUTDOWN_SECS", "0")))
    note("shutdown")

async def hello(request):
    return PlainTextResponse("hello from starlette\n")

async def state(request):
    return JSONResponse({"greeting": request.state.greeting, "pid": os.getpid()})

async def echo(request):
    body = await request.body()
    return JSONResponse({"len": len(body), "sum": sum(body) % 65521,
                         "scheme": request.url.scheme, "query": request.url.query,
                         "client": request.client.host, "path": request.url.path})

async def stream(request):
    async def chunks():
        for i in range(50):
            yield ("chunk %d\n" % i) * 100
            await asyncio.sleep(0)
    return StreamingResponse(chunks(), media_type="text/plain")

async def endless(request):
    async def chunks():
        try:
            while True:
                yield b"x" * 65536
                await asyncio.sleep(0.01)
        finally:
            note("stream ended")
    return StreamingResponse(chunks(), media_type="application/octet-stream")

async def boom(request):
    raise RuntimeError("boom in a coroutine")

async def download(request):
    return FileResponse(os.path.join(os.path.dirname(EVENTS), "big.bin"))

inner = Starlette(routes=[
    Route("/hello", hello), Route("/state", state), Route("/echo", echo, methods=["POST"]),
    Route("/stream", stream), Route("/endless", endless), Route("/boom", boom),
    Route("/download", download),
], lifespan=lifespan)

async def app(scope, receive, send):
    # Notes a file the server is asked to send itself (http.response.pathsend).
    async def watched(message):
        if message["type"] == "http.response.pathsend":
            note("pathsend")
        await send(message)
    await inner(scope, receive, watched)
"#;

const FASTAPI_APP: &str = r#"
from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()

class Item(BaseModel):
    name: str
    price: float
    tags: list[str] = []

@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None):
    return {"item_id": item_id, "q": q}

@app.post("/items")
async def create_item(item: Item):
    return {"name": item.name, "total": item.price * 2, "tags": item.tags}
"#;

fn available(module: &str) -> bool {
    python_imports(&[module])
}

fn app_tree(name: &str, module: &str, source: &str) -> Tree {
    python_app_tree(name, module, source)
}

fn args<'a>(target: &'a str, app_dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [FAST, &["--asgi", target, "--app-dir", app_dir], extra].concat()
}

fn events(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("app/events.log")).unwrap_or_default()
}

#[test]
fn starlette_runs_its_lifespan_around_serving_bodies_and_streams() {
    if !available("starlette") {
        return;
    }
    let tree = app_tree("starlette", "star", STARLETTE_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let mut server = Server::start(&tree, 2, &args("star:app", app_dir, &[]), &[]);
    server.wait_ready(2, BOUND);
    assert_eq!(
        events(&tree.dir).matches("startup").count(),
        2,
        "each worker ran its lifespan startup before it was ready"
    );
    let addr = server.addr;
    let a = curl(addr, "/hello", &[]);
    assert_eq!(
        (a.status, a.body.as_slice()),
        (200, &b"hello from starlette\n"[..])
    );
    let state = curl_json(addr, "/state", &[]);
    assert_eq!(state["greeting"], "hello from the lifespan", "{state}");

    // A 2 MiB body, streamed to the coroutine.
    let body: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let file = tree.dir.join("body.bin");
    std::fs::write(&file, &body).expect("write body");
    let data = format!("@{}", file.display());
    let got = curl_json(addr, "/echo?x=1", &["--data-binary", &data]);
    let sum = body.iter().map(|&b| u64::from(b)).sum::<u64>() % 65521;
    assert_eq!(got["len"], body.len(), "{got}");
    assert_eq!(got["sum"], sum, "{got}");
    assert_eq!(got["query"], "x=1", "{got}");
    assert_eq!(got["client"], "127.0.0.1", "{got}");

    let a = curl(addr, "/stream", &[]);
    let want: String = (0..50)
        .map(|i| format!("chunk {i}\n").repeat(100))
        .collect();
    assert_eq!(a.status, 200);
    assert!(
        a.body == want.as_bytes(),
        "streamed body differs ({} bytes)",
        a.body.len()
    );

    // Starlette's FileResponse hands its file to the server (http.response.pathsend).
    let big: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(tree.dir.join("app/big.bin"), &big).expect("write big.bin");
    let a = curl(addr, "/download", &[]);
    assert_eq!(a.status, 200);
    assert!(a.body == big, "the file differs ({} bytes)", a.body.len());
    assert!(events(&tree.dir).contains("pathsend"), "sent by path");

    // An exception before the response starts: 500, the traceback in the log.
    assert_eq!(curl(addr, "/boom", &[]).status, 500);

    // A client that hangs up on an endless stream: the application's generator ends.
    let cut = curl(
        addr,
        "/endless",
        &["--max-filesize", "1000000", "--max-time", "5"],
    );
    assert_ne!(cut.exit, Some(0), "curl stopped the endless stream");
    wait_until(BOUND, "the stream to notice its client left", || {
        events(&tree.dir).contains("stream ended").then_some(())
    });

    server.signal(Sig::TERM);
    let (status, _) = server.wait_exit(BOUND);
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert_eq!(
        events(&tree.dir).matches("shutdown").count(),
        2,
        "each worker ran its lifespan shutdown after draining: {}",
        events(&tree.dir)
    );
    let stderr = server.stderr();
    assert!(stderr.contains("boom in a coroutine"), "{stderr}");
}

#[test]
fn a_failing_lifespan_startup_fails_the_start_and_a_reload_keeps_the_old_code() {
    if !available("starlette") {
        return;
    }
    // At start: exit 3 with the application's words.
    let tree = app_tree("lifespanfail", "star", STARLETTE_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let mut server = Server::start(
        &tree,
        1,
        &args("star:app", app_dir, &[]),
        &[("FAIL_STARTUP", "1")],
    );
    let (status, _) = server.wait_exit(BOUND);
    assert_eq!(status.code(), Some(3), "{}", server.stderr());
    let stderr = server.stderr();
    assert!(stderr.contains("the database is not there"), "{stderr}");
    assert!(stderr.contains("lifespan startup"), "{stderr}");
    drop(server);

    // On reload: the new generation fails its lifespan, the old one serves on.
    let server = Server::start(&tree, 1, &args("star:app", app_dir, &[]), &[]);
    server.wait_ready(1, BOUND);
    std::fs::write(tree.dir.join("app/events.log.fail"), "").expect("arm the failure");
    let _ = server.ctl(&json!({"cmd": "reload"}));
    wait_until(BOUND, "the failed reload to be given up", || {
        let s = server.status();
        (s.to_string().contains("the database is not there") && s["state"] == "ready").then_some(())
    });
    for _ in 0..5 {
        assert_eq!(
            curl(server.addr, "/hello", &[]).status,
            200,
            "the old code serves"
        );
    }
}

#[test]
fn fastapi_validates_and_answers_json() {
    if !available("fastapi") {
        return;
    }
    let tree = app_tree("fastapi", "fast", FASTAPI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let server = Server::start(&tree, 2, &args("fast:app", app_dir, &[]), &[]);
    server.wait_ready(2, BOUND);
    let addr = server.addr;
    let got = curl_json(addr, "/items/42?q=servery", &[]);
    assert_eq!(got, json!({"item_id": 42, "q": "servery"}));
    let got = curl_json(
        addr,
        "/items",
        &[
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"name": "bolt", "price": 1.25, "tags": ["a", "b"]}"#,
        ],
    );
    assert_eq!(
        got,
        json!({"name": "bolt", "total": 2.5, "tags": ["a", "b"]})
    );
    // FastAPI's own validation: 422 with its error document.
    let bad = curl(
        addr,
        "/items",
        &[
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"name": 1}"#,
        ],
    );
    assert_eq!(bad.status, 422, "{}", String::from_utf8_lossy(&bad.body));
    assert_eq!(curl(addr, "/items/not-a-number", &[]).status, 422);
    assert_eq!(curl(addr, "/nowhere", &[]).status, 404);
}

/// FAST with another drain timeout.
fn with_drain(drain: &'static str, target: &'static str, app_dir: &str) -> Vec<String> {
    let mut args: Vec<String> = FAST.iter().map(|a| (*a).to_owned()).collect();
    if let Some(i) = args.iter().position(|a| a == "--drain-timeout") {
        args[i + 1] = drain.to_owned();
    }
    args.extend([
        "--asgi".into(),
        target.into(),
        "--app-dir".into(),
        app_dir.into(),
    ]);
    args
}

#[test]
fn a_lifespan_shutdown_runs_while_the_worker_beats_and_one_past_the_drain_is_cut() {
    if !available("starlette") {
        return;
    }
    let tree = app_tree("slowshutdown", "star", STARLETTE_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");

    // Three seconds of shutdown, twice the heartbeat timeout, inside a ten-second drain:
    // it completes, and nobody is judged hung.
    let args = with_drain("10", "star:app", app_dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&tree, 1, &args, &[("SHUTDOWN_SECS", "3")]);
    server.wait_ready(1, BOUND);
    server.signal(Sig::TERM);
    let (status, took) = server.wait_exit(BOUND);
    eprintln!(
        "MEASURED a 3 s lifespan shutdown → exit {:?} {took:?} after spawn",
        status.code()
    );
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert!(
        events(&tree.dir).contains("shutdown"),
        "the shutdown completed"
    );
    let stderr = server.stderr();
    assert!(!stderr.contains("drain_hang"), "{stderr}");
    assert!(stderr.contains("lifespan shutdown completed"), "{stderr}");
    drop(server);

    // Sixty seconds of shutdown in a two-second drain: cut at the deadline, and said.
    let _ = std::fs::remove_file(tree.dir.join("app/events.log"));
    let args = with_drain("2", "star:app", app_dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&tree, 1, &args, &[("SHUTDOWN_SECS", "60")]);
    server.wait_ready(1, BOUND);
    let stopped = std::time::Instant::now();
    server.signal(Sig::TERM);
    let (status, _) = server.wait_exit(BOUND);
    let took = stopped.elapsed();
    eprintln!(
        "MEASURED a 60 s lifespan shutdown in a 2 s drain → exit {:?} {took:?} after the stop",
        status.code()
    );
    assert!(
        took < Duration::from_secs(10),
        "cut, not waited for: {took:?}"
    );
    assert!(
        !events(&tree.dir).contains("shutdown"),
        "it never completed"
    );
    let stderr = server.stderr();
    assert!(
        stderr.contains("shutdown was cut at the drain deadline"),
        "{stderr}"
    );
}

/// A bare ASGI application, no framework: which event loop runs it.
const BARE_APP: &str = r#"
import asyncio

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    kind = type(asyncio.get_running_loop()).__module__.split(".")[0]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": kind.encode()})
"#;

#[test]
fn the_event_loop_is_uvloop_when_asked_or_installed_and_asyncio_when_asked() {
    let tree = app_tree("loops", "bare", BARE_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let has_uvloop = available("uvloop");
    for (choice, expected) in [
        ("asyncio", "asyncio"),
        ("auto", if has_uvloop { "uvloop" } else { "asyncio" }),
        ("uvloop", "uvloop"),
    ] {
        if choice == "uvloop" && !has_uvloop {
            continue;
        }
        let server = Server::start(
            &tree,
            1,
            &args("bare:app", app_dir, &["--loop", choice]),
            &[],
        );
        server.wait_ready(1, BOUND);
        let a = curl(server.addr, "/", &[]);
        assert_eq!(
            (a.status, String::from_utf8_lossy(&a.body).into_owned()),
            (200, expected.to_owned()),
            "--loop {choice}"
        );
    }
}

/// A bare ASGI application whose responses' bodies wait: `/held` sends its head, then
/// waits until `/release` is asked before it sends the body.
const HELD_APP: &str = r#"
import asyncio

released = None

async def app(scope, receive, send):
    global released
    if scope["type"] != "http":
        return
    if released is None:
        released = asyncio.Event()
    if scope["path"] == "/release":
        released.set()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"x-held", b"yes"), (b"content-length", b"8")]})
    await released.wait()
    await send({"type": "http.response.body", "body": b"released"})
"#;

/// Reads from `stream` until `until` is in what was read, or the stream's read timeout.
fn read_until(stream: &mut std::net::TcpStream, until: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(until.len()).any(|w| w == until) {
        match stream.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {:?}", String::from_utf8_lossy(&got))),
        }
    }
    Ok(got)
}

/// A response head whose body is not ready goes to the client on its own (the adapter
/// holds a head only until the loop goes round, decision 0053), for every response held
/// in the same turn of the loop; the body follows when the application sends it.
#[test]
fn heads_whose_bodies_wait_go_out_alone_and_the_bodies_follow() {
    use std::io::Write as _;
    let tree = app_tree("held", "held", HELD_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let server = Server::start(&tree, 1, &args("held:app", app_dir, &[]), &[]);
    server.wait_ready(1, BOUND);
    let mut clients: Vec<std::net::TcpStream> = (0..3)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(server.addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let request = format!("GET /held HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
            c.write_all(request.as_bytes()).expect("write");
            c
        })
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let head = read_until(c, b"\r\n\r\n").unwrap_or_else(|e| {
            panic!("client {i}: the head of a response whose body waits did not come alone: {e}")
        });
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "client {i}: {head}");
        assert!(head.contains("x-held: yes"), "client {i}: {head}");
        assert!(
            !head.contains("released"),
            "client {i}: the body came before its release"
        );
    }
    assert_eq!(curl(server.addr, "/release", &[]).status, 204);
    for (i, c) in clients.iter_mut().enumerate() {
        read_until(c, b"released")
            .unwrap_or_else(|e| panic!("client {i}: the body did not follow its head: {e}"));
    }
}

/// A plain ASGI application that sends parts of a file by descriptor
/// (`http.response.zerocopysend`) and closes its file as soon as `send()` returns.
const ZEROCOPY_APP: &str = r#"
import os

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.bin")

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if "http.response.zerocopysend" not in scope["extensions"]:
        await send({"type": "http.response.start", "status": 501, "headers": []})
        await send({"type": "http.response.body", "body": b"not offered"})
        return
    size = os.path.getsize(DATA)
    with open(DATA, "rb") as f:
        if scope["path"] == "/whole":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(size).encode())]})
            await send({"type": "http.response.zerocopysend", "file": f})
        elif scope["path"] == "/parts":
            f.seek(100)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"head:", "more_body": True})
            # A descriptor number with an offset and a count; then the file object from
            # its position; then a count past the end, which stops at the end.
            await send({"type": "http.response.zerocopysend", "file": f.fileno(),
                        "offset": 10, "count": 20, "more_body": True})
            await send({"type": "http.response.zerocopysend", "file": f, "count": 5,
                        "more_body": True})
            await send({"type": "http.response.zerocopysend", "file": f,
                        "offset": size - 3, "count": 100, "more_body": True})
            await send({"type": "http.response.body", "body": b":tail"})
"#;

#[test]
fn a_file_sent_by_descriptor_goes_out_whole_or_in_parts_between_bodies() {
    let tree = app_tree("zerocopy", "zc", ZEROCOPY_APP);
    let data: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(tree.dir.join("app/data.bin"), &data).expect("write data.bin");
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let server = Server::start(&tree, 1, &args("zc:app", app_dir, &[]), &[]);
    server.wait_ready(1, BOUND);

    // The application closed its file as soon as send() returned; all of it arrives.
    let whole = curl(server.addr, "/whole", &[]);
    assert_eq!(
        whole.status,
        200,
        "{}",
        String::from_utf8_lossy(&whole.body)
    );
    assert!(
        whole.body == data,
        "the file differs ({} bytes)",
        whole.body.len()
    );

    let parts = curl(server.addr, "/parts", &[]);
    let want = [
        &b"head:"[..],
        &data[10..30],
        &data[100..105],
        &data[data.len() - 3..],
        b":tail",
    ]
    .concat();
    assert_eq!(parts.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&parts.body[..5]),
        "head:",
        "the body before the file"
    );
    assert!(
        parts.body == want,
        "bodies and file parts in order: {} bytes, want {}",
        parts.body.len(),
        want.len()
    );
}

/// A minimal Django project served through Django's own ASGI handler.
const DJANGO_SETTINGS: &str = r#"
SECRET_KEY = "servery-test-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djasgi.urls"
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {}
USE_TZ = True
"#;

const DJANGO_URLS: &str = r#"
import json
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

async def hello(request):
    return HttpResponse("hello from django over asgi\n", content_type="text/plain")

async def echo(request):
    body = request.body
    return JsonResponse({"len": len(body), "method": request.method,
                         "q": request.GET.get("q"), "scheme": request.scheme})

def stream(request):
    return StreamingHttpResponse((("line %d\n" % i).encode() for i in range(1000)),
                                 content_type="text/plain")

urlpatterns = [path("hello", hello), path("echo", echo), path("stream", stream)]
"#;

const DJANGO_ASGI: &str = r#"
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djasgi.settings")
from django.core.asgi import get_asgi_application
application = get_asgi_application()
"#;

#[test]
fn django_serves_through_its_asgi_handler_without_lifespan_support() {
    if !available("django") {
        return;
    }
    let tree = Tree::new("django-asgi");
    let package = tree.dir.join("app/djasgi");
    std::fs::create_dir_all(&package).expect("package dir");
    for (name, text) in [
        ("__init__.py", ""),
        ("settings.py", DJANGO_SETTINGS),
        ("urls.py", DJANGO_URLS),
        ("asgi.py", DJANGO_ASGI),
    ] {
        std::fs::write(package.join(name), text).expect("write the project");
    }
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    // `auto`: Django's handler refuses the lifespan scope, and is served without it.
    let server = Server::start(
        &tree,
        2,
        &args("djasgi.asgi:application", app_dir, &[]),
        &[],
    );
    server.wait_ready(2, BOUND);
    let addr = server.addr;
    let a = curl(addr, "/hello", &[]);
    assert_eq!(
        (a.status, a.body.as_slice()),
        (200, &b"hello from django over asgi\n"[..])
    );
    let got = curl_json(addr, "/echo?q=servery", &["--data-binary", "0123456789"]);
    assert_eq!(got["len"], 10, "{got}");
    assert_eq!(got["method"], "POST", "{got}");
    assert_eq!(got["q"], "servery", "{got}");
    let a = curl(addr, "/stream", &[]);
    let want: String = (0..1000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(a.status, 200);
    assert!(
        a.body == want.as_bytes(),
        "streamed body differs ({} bytes)",
        a.body.len()
    );
    assert_eq!(curl(addr, "/nowhere", &[]).status, 404);
}
