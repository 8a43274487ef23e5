//! WebSocket keep-alive, against the real binary with a raw RFC 6455 client written here
//! (so the test decides when pongs go out, which no library client lets it): the server
//! pings an idle socket every interval, a peer that answers stays connected, and one that
//! falls silent is closed with 1011 "keepalive ping timeout" after one unanswered interval.
//! The interval is 20 s; builds with the `test-hooks` feature shorten it through
//! `SERVERY_TEST_WS_PING_MS`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use servery_tests::*;

const BOUND: Duration = Duration::from_secs(30);
/// The shortened ping interval.
const PING_MS: u64 = 300;

/// Accepts every socket and waits for its end, noting how it ended.
const APP: &str = r#"
import os
EVENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "events.log")

async def app(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            with open(EVENTS, "a") as log:
                log.write("disconnect %s\n" % message.get("code"))
            return
"#;

/// One frame from the server (never masked): (opcode, payload).
fn read_frame(stream: &mut BufReader<TcpStream>) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head)?;
    let opcode = head[0] & 0x0f;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            stream.read_exact(&mut b)?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            stream.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).expect("frame length")];
    stream.read_exact(&mut payload)?;
    Ok((opcode, payload))
}

/// A pong from the client (masked, with a zero mask, as RFC 6455 allows), echoing `data`.
fn pong(stream: &mut TcpStream, data: &[u8]) {
    let mut frame = vec![0x8a, 0x80 | u8::try_from(data.len()).expect("a short ping")];
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(data);
    stream.write_all(&frame).expect("send pong");
}

#[test]
fn a_peer_that_answers_pings_stays_and_a_silent_one_is_closed_with_1011() {
    if !python_imports(&["asyncio"]) {
        return;
    }
    if !test_hooks_in(&servery_bin()).is_ok_and(|found| found.contains(&"SERVERY_TEST_WS_PING_MS"))
    {
        skipped("the binary under test lacks the test hooks (SERVERY_TEST_WS_PING_MS)");
        return;
    }
    let tree = python_app_tree("wskeepalive", "sock", APP);
    let app_dir = tree.dir.join("app");
    let args = [
        FAST,
        &[
            "--asgi",
            "sock:app",
            "--app-dir",
            app_dir.to_str().expect("utf-8"),
        ],
    ]
    .concat();
    let ping_ms = PING_MS.to_string();
    let server = Server::start(&tree, 1, &args, &[("SERVERY_TEST_WS_PING_MS", &ping_ms)]);
    server.wait_ready(1, BOUND);

    let mut stream = TcpStream::connect(server.addr).expect("connect");
    stream.set_read_timeout(Some(BOUND)).expect("timeout");
    write!(
        stream,
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    )
    .expect("handshake");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    assert!(line.starts_with("HTTP/1.1 101"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        if line == "\r\n" {
            break;
        }
    }

    // Answered pings: the socket stays open across them, one per interval.
    const ANSWERED: usize = 5;
    let opened = Instant::now();
    for n in 0..ANSWERED {
        let (opcode, data) = read_frame(&mut reader).expect("a frame");
        assert_eq!(opcode, 0x9, "ping {n}: opcode {opcode:#x}, {data:?}");
        pong(&mut stream, &data);
    }
    let answered_for = opened.elapsed();
    assert!(
        answered_for >= Duration::from_millis(PING_MS * (ANSWERED as u64 - 1)),
        "one ping an interval, not a flood: {ANSWERED} in {answered_for:?}"
    );

    // Silence: one more ping goes unanswered, and the next tick closes the socket.
    let silent = Instant::now();
    let (opcode, _) = read_frame(&mut reader).expect("the unanswered ping");
    assert_eq!(opcode, 0x9);
    let (opcode, payload) = read_frame(&mut reader).expect("the close");
    let took = silent.elapsed();
    eprintln!(
        "MEASURED {ANSWERED} pings answered over {answered_for:?}; a silent peer closed {took:?} after it fell silent (interval {PING_MS} ms)"
    );
    assert_eq!(opcode, 0x8, "a Close frame: {payload:?}");
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    assert_eq!(code, 1011, "{payload:?}");
    assert_eq!(&payload[2..], b"keepalive ping timeout");
    // The application hears of it as a disconnect.
    let (ended, _) = wait_until(BOUND, "the application told of the disconnect", || {
        let text = std::fs::read_to_string(tree.dir.join("app/events.log")).unwrap_or_default();
        (!text.is_empty()).then_some(text)
    });
    assert!(ended.starts_with("disconnect "), "{ended}");
}
