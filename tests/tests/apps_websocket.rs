//! ASGI WebSockets in the workers, against the real binary and the `websockets` client:
//! Starlette's echo (text, binary, a 1 MiB message, subprotocol choice, ping), a refusal
//! before accept (403), a message over the limit (1009), FastAPI's JSON socket, and a
//! socket open during `ctl recycle` closed with 1012 (service restart) while its worker
//! drains — the application told, the replacement serving the next socket; and two tasks
//! sending on one socket at once, both woken when room comes.
//!
//! Each test says SKIPPED and passes when the interpreter the binary embeds lacks the
//! framework or the client (scripts/test installs the pinned versions).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use servery_tests::serde_json::{self, Value, json};
use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);

const STARLETTE_APP: &str = r#"
import os
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

EVENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "events.log")

def note(what):
    with open(EVENTS, "a") as log:
        log.write("%s %d\n" % (what, os.getpid()))

async def echo(websocket):
    offered = websocket.scope["subprotocols"]
    await websocket.accept(subprotocol="chat.v1" if "chat.v1" in offered else None)
    note("accepted")
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            note("disconnect %s" % message["code"])
            return
        if message.get("text") is not None:
            await websocket.send_text(message["text"])
        else:
            await websocket.send_bytes(message["bytes"])

async def refuse(websocket):
    await websocket.close(code=1008)

app = Starlette(routes=[WebSocketRoute("/ws/echo", echo), WebSocketRoute("/ws/refuse", refuse)])
"#;

const FASTAPI_APP: &str = r#"
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

app = FastAPI()

@app.websocket("/ws/sum")
async def total(websocket: WebSocket):
    await websocket.accept()
    running = 0
    try:
        while True:
            item = await websocket.receive_json()
            running += item["add"]
            await websocket.send_json({"total": running})
    except WebSocketDisconnect:
        pass
"#;

/// A plain ASGI application whose two tasks send on one socket at once, and a watcher that
/// marks (a file) the moment both wait for room: the client reads nothing until then.
const TWO_SENDERS_APP: &str = r#"
import asyncio, os

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "both-waiting")
PER_TASK = 256
CHUNK = b"x" * 65536

async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    waiting = [False, False]

    async def sender(me):
        for _ in range(PER_TASK):
            waiting[me] = True
            await send({"type": "websocket.send", "bytes": CHUNK})
            waiting[me] = False

    async def watch():
        # This task runs only while both senders are suspended, and a sender suspends
        # only inside send() waiting for room: both flags up means both wait at once.
        while True:
            if all(waiting):
                open(MARK, "w").close()
                return
            await asyncio.sleep(0.005)

    watcher = asyncio.ensure_future(watch())
    await asyncio.gather(sender(0), sender(1))
    watcher.cancel()
    await send({"type": "websocket.close", "code": 1000})
"#;

/// A plain ASGI application that sends until its socket is full, marks (a file) that it
/// waits for room, and on the send that fails writes how many sends were taken.
const QUEUED_APP: &str = r#"
import asyncio, os

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = b"y" * 65536

async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    state = {"taken": 0, "waiting": False}

    async def watch():
        # Runs only while the sender is suspended, which it is only inside send().
        while True:
            if state["waiting"]:
                open(os.path.join(HERE, "blocked"), "w").close()
                return
            await asyncio.sleep(0.005)

    watcher = asyncio.ensure_future(watch())
    try:
        while True:
            state["waiting"] = True
            await send({"type": "websocket.send", "bytes": CHUNK})
            state["waiting"] = False
            state["taken"] += 1
    except OSError as e:
        outcome = type(e).__name__
    finally:
        watcher.cancel()
    with open(os.path.join(HERE, "taken"), "w") as out:
        out.write("%d %s" % (state["taken"], outcome))
"#;

/// The client: one mode a run, one JSON line out (and `OPEN` first in `hold`).
const CLIENT: &str = r#"
import asyncio, json, os, sys
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

async def main(url, mode):
    if mode == "echo":
        async with connect(url + "/ws/echo", subprotocols=["chat.v2", "chat.v1"], max_size=None) as ws:
            out = {"subprotocol": ws.subprotocol}
            await ws.send("héllo")
            out["text"] = await ws.recv()
            await ws.send(b"\x00\x01binary")
            out["bytes"] = list(await ws.recv())
            big = bytes(range(256)) * 4096
            await ws.send(big)
            out["big"] = (await ws.recv()) == big
            await asyncio.wait_for(await ws.ping(b"p"), 10)
            out["pong"] = True
        out["close"] = ws.close_code
    elif mode == "toobig":
        async with connect(url + "/ws/echo", max_size=None) as ws:
            try:
                await ws.send(b"x" * (17 << 20))
                await ws.recv()
                out = {"code": None}
            except ConnectionClosed as e:
                out = {"code": e.rcvd.code if e.rcvd else None}
    elif mode == "refused":
        try:
            async with connect(url + "/ws/refuse"):
                out = {"status": 101}
        except InvalidStatus as e:
            out = {"status": e.response.status_code}
    elif mode == "sum":
        async with connect(url + "/ws/sum") as ws:
            totals = []
            for n in (1, 2, 39):
                await ws.send(json.dumps({"add": n}))
                totals.append(json.loads(await ws.recv())["total"])
            out = {"totals": totals}
    elif mode == "hold":
        async with connect(url + "/ws/echo") as ws:
            await ws.send("hi")
            await ws.recv()
            print("OPEN", flush=True)
            try:
                await ws.recv()
                out = {"code": None}
            except ConnectionClosed as e:
                out = {"code": e.rcvd.code if e.rcvd else None,
                       "reason": e.rcvd.reason if e.rcvd else None}
    elif mode == "slow-reader":
        # The client library stops reading the socket once one message waits unread, so
        # the server's queue and both sockets' buffers fill before the mark appears.
        async with connect(url + "/ws", max_size=None, max_queue=1) as ws:
            mark = sys.argv[3]
            for _ in range(2000):
                if os.path.exists(mark):
                    break
                await asyncio.sleep(0.01)
            out = {"marked": os.path.exists(mark), "messages": 0, "bytes": 0}
            try:
                while True:
                    message = await asyncio.wait_for(ws.recv(), 10)
                    out["messages"] += 1
                    out["bytes"] += len(message)
            except ConnectionClosed as e:
                out["close"] = e.rcvd.code if e.rcvd else None
            except asyncio.TimeoutError:
                out["close"] = "none within 10 s"
    elif mode == "late-reader":
        async with connect(url + "/ws", max_size=None, max_queue=1) as ws:
            go = sys.argv[3]
            for _ in range(3000):
                if os.path.exists(go):
                    break
                await asyncio.sleep(0.01)
            out = {"messages": 0}
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
                    out["messages"] += 1
            except ConnectionClosed as e:
                out["close"] = e.rcvd.code if e.rcvd else None
            except asyncio.TimeoutError:
                out["close"] = "none within 10 s"
    print(json.dumps(out), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;

fn available(modules: &[&str]) -> bool {
    python_imports(modules)
}

fn app_tree(name: &str, module: &str, source: &str) -> Tree {
    let tree = python_app_tree(name, module, source);
    std::fs::write(tree.dir.join("client.py"), CLIENT).expect("write client");
    tree
}

fn start(tree: &Tree, workers: u32, target: &str) -> Server {
    let app_dir = tree.dir.join("app");
    let app_dir = app_dir.to_str().expect("utf-8");
    let args = [FAST, &["--asgi", target, "--app-dir", app_dir]].concat();
    let server = Server::start(tree, workers, &args, &[]);
    server.wait_ready(workers as usize, BOUND);
    server
}

fn client(tree: &Tree, server: &Server, mode: &str) -> Command {
    let mut command = Command::new("python3");
    command
        .arg(tree.dir.join("client.py"))
        .arg(format!("ws://{}", server.addr))
        .arg(mode);
    command
}

/// Runs the client in `mode` to its end and reads its JSON line.
fn run_client(tree: &Tree, server: &Server, mode: &str) -> Value {
    let done = run_command(client(tree, server, mode), BOUND);
    let line = done.stdout.lines().last().unwrap_or_default().to_owned();
    serde_json::from_str(&line).unwrap_or_else(|_| {
        panic!(
            "client {mode}: {line:?}\n{}\nserver: {}",
            done.stderr,
            server.stderr()
        )
    })
}

fn events(tree: &Tree) -> String {
    std::fs::read_to_string(tree.dir.join("app/events.log")).unwrap_or_default()
}

#[test]
fn starlette_echoes_over_a_websocket_refuses_and_limits() {
    if !available(&["starlette", "websockets"]) {
        return;
    }
    let tree = app_tree("ws_starlette", "star", STARLETTE_APP);
    let server = start(&tree, 2, "star:app");

    let echo = run_client(&tree, &server, "echo");
    assert_eq!(
        echo,
        json!({
            "subprotocol": "chat.v1",
            "text": "héllo",
            "bytes": [0, 1, 98, 105, 110, 97, 114, 121],
            "big": true,
            "pong": true,
            "close": 1000,
        })
    );
    wait_until(BOUND, "the application to see the client's close", || {
        events(&tree).contains("disconnect 1000").then_some(())
    });

    let refused = run_client(&tree, &server, "refused");
    assert_eq!(refused, json!({"status": 403}), "closed before accept");

    let too_big = run_client(&tree, &server, "toobig");
    assert_eq!(too_big, json!({"code": 1009}), "a 17 MiB message");
    wait_until(BOUND, "the application to hear of the 1009", || {
        events(&tree).contains("disconnect 1009").then_some(())
    });

    // Not a WebSocket handshake: refused before the application sees it.
    let bad = curl(
        server.addr,
        "/ws/echo",
        &[
            "-i",
            "-H",
            "Upgrade: websocket",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Sec-WebSocket-Version: 8",
            "-H",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ],
    );
    assert_eq!(bad.status, 426, "an old protocol version");
    let head = String::from_utf8_lossy(&bad.body).to_ascii_lowercase();
    assert!(head.contains("sec-websocket-version: 13"), "{head}");
}

#[test]
fn fastapi_keeps_state_across_json_messages() {
    if !available(&["fastapi", "websockets"]) {
        return;
    }
    let tree = app_tree("ws_fastapi", "api", FASTAPI_APP);
    let server = start(&tree, 1, "api:app");
    let sums = run_client(&tree, &server, "sum");
    assert_eq!(sums, json!({"totals": [1, 3, 42]}));
}

#[test]
fn a_websocket_open_during_a_recycle_is_closed_with_1012_and_the_next_one_is_served() {
    if !available(&["starlette", "websockets"]) {
        return;
    }
    let tree = app_tree("ws_recycle", "star", STARLETTE_APP);
    let server = start(&tree, 1, "star:app");
    let first = server.status();
    let old_pids = worker_pids(&first);

    let mut holder = client(&tree, &server, "hold")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the client");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let open = lines.next().and_then(Result::ok);
    assert_eq!(open.as_deref(), Some("OPEN"), "the socket opened");

    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    let closed = lines.next().and_then(Result::ok).unwrap_or_default();
    let closed: Value = serde_json::from_str(&closed).expect("the client's verdict");
    assert_eq!(
        closed,
        json!({"code": 1012, "reason": "service restart"}),
        "the draining worker closed the socket as a restart"
    );
    let _ = holder.wait();
    wait_until(BOUND, "the application to see the 1012", || {
        events(&tree).contains("disconnect 1012").then_some(())
    });

    // The replacement took over, and serves the client's reconnection.
    wait_until(BOUND, "the old worker to be replaced", || {
        let now = worker_pids(&server.status());
        (now.len() == 1 && now != old_pids).then_some(())
    });
    let echo = run_client(&tree, &server, "echo");
    assert_eq!(echo["text"], "héllo", "{echo}");
}

/// Two tasks of one application send on one socket while its client reads nothing: both
/// wait for room at once, and each must be woken when room comes — every message
/// arrives and the application's close follows.
#[test]
fn two_tasks_sending_on_one_websocket_are_both_woken_when_room_comes() {
    if !available(&["websockets"]) {
        return;
    }
    let tree = app_tree("ws_two_senders", "two", TWO_SENDERS_APP);
    let server = start(&tree, 1, "two:app");
    let mark = tree.dir.join("app/both-waiting");
    let mut command = client(&tree, &server, "slow-reader");
    command.arg(&mark);
    let done = run_command(command, BOUND);
    let line = done.stdout.lines().last().unwrap_or_default().to_owned();
    let out: Value =
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("client: {line:?}\n{}", done.stderr));
    assert_eq!(out["marked"], true, "both senders waited at once: {out}");
    assert_eq!(
        out,
        json!({"marked": true, "messages": 512, "bytes": 512 * 65536, "close": 1000}),
        "every message of both tasks arrived, then the close"
    );
}

/// A drain closes a socket whose application waits for room: what the application was told
/// was taken still reaches the client, ahead of the 1012, and its next send raises.
#[test]
fn a_drain_sends_what_the_application_queued_before_its_close() {
    if !available(&["websockets"]) {
        return;
    }
    let tree = app_tree("ws_queued", "queued", QUEUED_APP);
    let server = start(&tree, 1, "queued:app");
    let old_pids = worker_pids(&server.status());
    let go = tree.dir.join("go");
    let mut command = client(&tree, &server, "late-reader");
    command
        .arg(&go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let reader = command.spawn().expect("start the client");
    wait_until(BOUND, "the application to wait for room", || {
        tree.dir.join("app/blocked").exists().then_some(())
    });
    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    wait_until(BOUND, "the old worker to drain", || {
        let status = server.status();
        status["workers"].as_array()?.iter().find(|w| {
            w["pid"].as_u64() == old_pids.first().map(|&p| u64::from(p)) && w["state"] == "draining"
        })?;
        Some(())
    });
    std::fs::write(&go, b"").expect("tell the client to read");
    let done = reader.wait_with_output().expect("the client's end");
    let stdout = String::from_utf8_lossy(&done.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let out: Value = serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "client: {line:?}\n{}",
            String::from_utf8_lossy(&done.stderr)
        )
    });
    let (taken, _) = wait_until_or(
        BOUND,
        || std::fs::read_to_string(tree.dir.join("app/taken")).ok(),
        || {
            format!(
                "the application's send after the drain's close never raised: a send after \
                 the close must fail, not be taken and lost (the client got {out})"
            )
        },
    );
    let (count, outcome) = taken.split_once(' ').expect("count and outcome");
    assert_eq!(
        outcome, "ClientDisconnected",
        "the send after the close raised"
    );
    assert_eq!(
        out,
        json!({"messages": count.parse::<u64>().expect("a count"), "close": 1012}),
        "every message the application was told was taken arrived, then the 1012"
    );
}

/// A client that answers the server's Close only when the test says: the draining worker
/// keeps the socket (and so itself) until the close handshake ends, because an upgraded
/// connection is still its connection.
#[test]
fn a_draining_worker_keeps_its_websocket_until_the_close_handshake_ends() {
    use std::io::{Read, Write};
    if !available(&["starlette"]) {
        return;
    }
    let tree = app_tree("ws_counted", "star", STARLETTE_APP);
    let server = start(&tree, 1, "star:app");
    let old = worker_pids(&server.status());

    let mut socket = std::net::TcpStream::connect(server.addr).expect("connect");
    socket.set_read_timeout(Some(BOUND)).expect("read timeout");
    write!(
        socket,
        "GET /ws/echo HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        server.addr
    )
    .expect("handshake");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        socket
            .read_exact(&mut byte)
            .expect("the handshake's answer");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "RFC 6455's accept key: {head}"
    );

    server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
    // The server's Close: FIN + opcode 8, unmasked, 2 + 15 bytes, code 1012.
    let mut close = [0u8; 19];
    socket.read_exact(&mut close).expect("the server's Close");
    assert_eq!(&close[..4], &[0x88, 17, 0x03, 0xF4], "{close:?}");
    assert_eq!(&close[4..], b"service restart");

    // Unanswered, the socket stays open: its worker waits for the handshake to end.
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("read timeout");
    let mut rest = [0u8; 16];
    match socket.read(&mut rest) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("the socket ended before the client's Close: {other:?}"),
    }
    assert!(
        old.iter().all(|&pid| alive(pid)),
        "the old worker is still draining"
    );

    // The client's Close (masked, code 1012): the server ends the TCP connection.
    let mask = [0x11, 0x22, 0x33, 0x44];
    socket
        .write_all(&[
            0x88,
            0x82,
            mask[0],
            mask[1],
            mask[2],
            mask[3],
            0x03 ^ mask[0],
            0xF4 ^ mask[1],
        ])
        .expect("the client's Close");
    socket.set_read_timeout(Some(BOUND)).expect("read timeout");
    assert_eq!(
        socket.read(&mut rest).expect("the end"),
        0,
        "closed after the handshake"
    );
    wait_until(BOUND, "the drained worker to exit", || {
        old.iter().all(|&pid| !alive(pid)).then_some(())
    });
    wait_until(BOUND, "the application to see the 1012", || {
        events(&tree).contains("disconnect 1012").then_some(())
    });
}
