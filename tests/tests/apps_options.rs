//! The application flags, one by one, against the real binary: `--app-factory` (the
//! factory is called and what it returns serves; a factory that is not one, or returns
//! no application, fails the start naming which), the `write()` callable PEP 3333 gives
//! `start_response`'s callers, `--check-config`'s `recycling_overlap_memory_bound`, and
//! `--lifespan on|off` and `--lifespan-timeout` with plain ASGI applications.
//!
//! The applications are plain Python (no framework); each test says SKIPPED and passes
//! when the binary's interpreter is missing.

use std::time::Duration;

use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

/// A WSGI module with a factory (which counts its calls in `factory.log`), things that
/// are not factories, and an application that answers through `write()`.
const WSGI_APP: &str = r#"
import os
from wsgiref.validate import validator

HERE = os.path.dirname(os.path.abspath(__file__))

def served(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/write":
        # PEP 3333's imperative API: part of the body through write(), the rest returned.
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"first written, ")
        write(b"")
        write(b"second written, ")
        return [b"then returned"]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"made by the factory"]

def create_app():
    with open(os.path.join(HERE, "factory.log"), "a") as log:
        log.write("called %d\n" % os.getpid())
    return validator(served)

def returns_a_number():
    return 42

NOT_A_FACTORY = "a string"

def raises():
    raise RuntimeError("the settings file is missing")
"#;

fn python_here() -> bool {
    python_imports(&["wsgiref.validate", "asyncio"])
}

fn wsgi_args<'a>(target: &'a str, app_dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [FAST, &["--wsgi", target, "--app-dir", app_dir], extra].concat()
}

/// Starts `args` expecting the first generation to fail: its stderr.
fn failed_start(tree: &Tree, args: &[&str]) -> String {
    let mut server = Server::start(tree, 1, args, &[]);
    let (status, _) = server.wait_exit(START_MARGIN + DRAIN_TIMEOUT + FORCE_TIMEOUT + BOUND);
    let stderr = server.stderr();
    assert_eq!(status.code(), Some(3), "a startup failure: {stderr}");
    assert!(
        stderr.contains("service failed (startup_failure)"),
        "{stderr}"
    );
    stderr
}

#[test]
fn a_factory_is_called_once_per_worker_and_what_it_returns_serves_write_included() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("factory", "made", WSGI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let args = wsgi_args("made:create_app", app_dir, &["--app-factory"]);
    let server = Server::start(&tree, 2, &args, &[]);
    let (status, _) = server.wait_ready(2, BOUND);
    let answer = curl(server.addr, "/", &[]);
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"made by the factory"[..])
    );
    // write() output comes first, in order, then the returned iterable.
    for _ in 0..3 {
        let answer = curl(server.addr, "/write", &[]);
        assert_eq!(
            (
                answer.status,
                String::from_utf8_lossy(&answer.body).as_ref()
            ),
            (200, "first written, second written, then returned")
        );
    }
    let calls = std::fs::read_to_string(tree.dir.join("app/factory.log")).expect("factory.log");
    let mut callers: Vec<u32> = calls
        .lines()
        .filter_map(|l| l.strip_prefix("called ")?.parse().ok())
        .collect();
    callers.sort_unstable();
    let mut workers = worker_pids(&status);
    workers.sort_unstable();
    assert_eq!(callers, workers, "one call in each worker: {calls}");
    let stderr = server.stderr();
    assert!(!stderr.contains("the application raised"), "{stderr}");
}

#[test]
fn a_wrong_factory_fails_the_start_saying_what_was_wrong() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("badfactory", "made", WSGI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let cases = [
        (
            "made:returns_a_number",
            "made:returns_a_number() returned no callable application: it returned a int",
        ),
        (
            "made:NOT_A_FACTORY",
            "made:NOT_A_FACTORY is not a factory to call (--app-factory): it is a str",
        ),
        ("made:raises", "RuntimeError: the settings file is missing"),
    ];
    for (target, said) in cases {
        let stderr = failed_start(&tree, &wsgi_args(target, app_dir, &["--app-factory"]));
        assert!(
            stderr.contains(said),
            "{target}: wants {said:?} in {stderr}"
        );
    }
    // The factory's own frame is in the traceback.
    let stderr = failed_start(
        &tree,
        &wsgi_args("made:raises", app_dir, &["--app-factory"]),
    );
    assert!(
        stderr.contains("made.py\", line 30, in raises"),
        "the factory's frame: {stderr}"
    );
}

#[test]
fn check_config_prints_the_memory_a_recycle_overlap_needs() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("overlap", "made", WSGI_APP);
    let app_dir = tree.dir.join("app");
    let root = tree.root();
    let run = |extra: &[&str]| {
        let args = [
            &[
                root.to_str().expect("utf-8"),
                "--check-config",
                "--wsgi",
                "made:create_app",
                "--app-factory",
                "--app-dir",
                app_dir.to_str().expect("utf-8"),
            ][..],
            extra,
        ]
        .concat();
        let done = run_servery(&args, &[], BOUND);
        assert!(done.status.success(), "{}", done.stderr);
        done.stdout
            .lines()
            .find_map(|l| l.strip_prefix("recycling_overlap_memory_bound = "))
            .map(str::to_owned)
    };
    // Three workers and one replacement during a recycle: four times the limit.
    let bound = run(&["--workers", "3", "--worker-max-rss", "100000000"]);
    assert_eq!(bound.as_deref(), Some("400000000"));
    let bound = run(&["--workers", "1", "--worker-max-rss", "64000000"]);
    assert_eq!(bound.as_deref(), Some("128000000"), "one worker needs two");
    // No limit: nothing to account.
    assert_eq!(run(&["--workers", "3"]).as_deref(), Some("0"));
}

/// ASGI applications with and without lifespan support. Each writes what it saw to
/// `events.log` beside the module.
const ASGI_APP: &str = r#"
import asyncio, os

EVENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "events.log")

def note(what):
    with open(EVENTS, "a") as log:
        log.write(what + "\n")

async def answer(send, text):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": text})

async def supports(scope, receive, send):
    if scope["type"] == "lifespan":
        note("lifespan called")
        while True:
            message = await receive()
            note(message["type"])
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await answer(send, b"served")

async def refuses(scope, receive, send):
    # What an application without lifespan support does (Django's handler among them).
    if scope["type"] != "http":
        raise ValueError("unsupported scope %r" % scope["type"])
    await answer(send, b"served")

async def ignores(scope, receive, send):
    # What an application that returns from the lifespan scope without a word does.
    if scope["type"] == "lifespan":
        return
    await answer(send, b"served")

async def slow_startup(scope, receive, send):
    if scope["type"] == "lifespan":
        await receive()
        note("startup began")
        await asyncio.sleep(3600)
    await answer(send, b"served")
"#;

fn asgi_args<'a>(target: &'a str, app_dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [FAST, &["--asgi", target, "--app-dir", app_dir], extra].concat()
}

fn events(tree: &Tree) -> String {
    std::fs::read_to_string(tree.dir.join("app/events.log")).unwrap_or_default()
}

#[test]
fn lifespan_off_never_calls_the_lifespan_and_on_fails_an_application_without_it() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("lifespanmodes", "life", ASGI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");

    // `off`: served, and the lifespan scope never reaches the application, at startup or
    // at shutdown.
    let mut server = Server::start(
        &tree,
        1,
        &asgi_args("life:supports", app_dir, &["--lifespan", "off"]),
        &[],
    );
    server.wait_ready(1, BOUND);
    let answer = curl(server.addr, "/", &[]);
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"served"[..])
    );
    server.signal(Sig::TERM);
    let (status, _) = server.wait_exit(BOUND);
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert_eq!(events(&tree), "", "lifespan off: never called");
    drop(server);

    // The same application with `on` runs both phases (what `off` is told apart from).
    let mut server = Server::start(
        &tree,
        1,
        &asgi_args("life:supports", app_dir, &["--lifespan", "on"]),
        &[],
    );
    server.wait_ready(1, BOUND);
    assert_eq!(events(&tree), "lifespan called\nlifespan.startup\n");
    server.signal(Sig::TERM);
    server.wait_exit(BOUND);
    assert_eq!(
        events(&tree),
        "lifespan called\nlifespan.startup\nlifespan.shutdown\n"
    );
    drop(server);

    // `on` with an application that raises on the lifespan scope: the start fails with
    // the application's exception, as uvicorn's `--lifespan on` does...
    let stderr = failed_start(
        &tree,
        &asgi_args("life:refuses", app_dir, &["--lifespan", "on"]),
    );
    assert!(
        stderr.contains("lifespan startup") && stderr.contains("unsupported scope 'lifespan'"),
        "{stderr}"
    );
    // ...while `auto` serves it without lifespan.
    let server = Server::start(&tree, 1, &asgi_args("life:refuses", app_dir, &[]), &[]);
    server.wait_ready(1, BOUND);
    let answer = curl(server.addr, "/", &[]);
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"served"[..])
    );
    drop(server);

    // `on` with an application that returns from the lifespan scope without a word: the
    // startup `on` promises never ran, so the start fails saying so...
    let stderr = failed_start(
        &tree,
        &asgi_args("life:ignores", app_dir, &["--lifespan", "on"]),
    );
    assert!(
        stderr.contains("lifespan startup") && stderr.contains("--lifespan on"),
        "{stderr}"
    );
    // ...while `auto` serves it.
    let server = Server::start(&tree, 1, &asgi_args("life:ignores", app_dir, &[]), &[]);
    server.wait_ready(1, BOUND);
    assert_eq!(curl(server.addr, "/", &[]).status, 200);
}

#[test]
fn a_lifespan_startup_past_the_lifespan_timeout_fails_the_start() {
    if !python_here() {
        return;
    }
    let tree = python_app_tree("lifespantimeout", "life", ASGI_APP);
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let started = std::time::Instant::now();
    let stderr = failed_start(
        &tree,
        &asgi_args("life:slow_startup", app_dir, &["--lifespan-timeout", "1"]),
    );
    let took = started.elapsed();
    eprintln!("MEASURED a 1 s lifespan timeout → the start failed {took:?} after spawn");
    assert_eq!(events(&tree), "startup began\n", "the startup did begin");
    assert!(
        stderr.contains("lifespan startup")
            && stderr.contains("took longer than --lifespan-timeout (1 s)"),
        "{stderr}"
    );
    // Cut by the lifespan timeout (1 s), not by the worker's start timeout (FAST's 10 s),
    // which would kill the worker without the application's error.
    assert!(
        !stderr.contains("not ready within worker_start_timeout"),
        "the lifespan timeout, not the start timeout: {stderr}"
    );
}
