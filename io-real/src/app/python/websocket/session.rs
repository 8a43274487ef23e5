//! An accepted WebSocket's life on the tokio side: frames both ways, pings, the close
//! handshake from either side, and the drain's 1012.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

use super::{
    ABNORMAL, CLOSE_WAIT, INTERNAL_ERROR, In, MAX_MESSAGE, NORMAL, Out, PROTOCOL_ERROR,
    SERVICE_RESTART, Socket, TOO_BIG, ping_interval,
};

/// Serves an accepted WebSocket until it is closed.
pub(super) async fn session(
    socket: Arc<Socket>,
    mut outs: mpsc::Receiver<Out>,
    upgrade: OnUpgrade,
    mut drain: watch::Receiver<bool>,
    send_timeout: Duration,
) {
    let Ok(upgraded) = upgrade.await else {
        socket.disconnected(ABNORMAL, "");
        return;
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let (mut sink, mut stream) = ws.split();
    let every = ping_interval();
    let mut ping = tokio::time::interval_at(Instant::now() + every, every);
    let mut heard = true;
    let mut closing: Option<Instant> = None;
    let mut app_done = false;
    let mut draining = false;
    let mut peer_closed = false;
    // A frame or message the socket would not take: closed with this code after the loop.
    let mut refused: Option<u16> = None;
    // Sends one message, bounded by the connections' send timeout; false if it failed.
    macro_rules! send {
        ($message:expr) => {
            matches!(
                tokio::time::timeout(send_timeout, sink.send($message)).await,
                Ok(Ok(()))
            )
        };
    }
    macro_rules! close {
        ($code:expr, $reason:expr) => {{
            let frame = CloseFrame {
                code: $code.into(),
                reason: $reason.into(),
            };
            if peer_closed {
                // tungstenite answers the peer's Close itself: let the reply go out.
                closing.get_or_insert(Instant::now() + CLOSE_WAIT);
            } else if closing.is_none() {
                closing = Some(if send!(Message::Close(Some(frame))) {
                    Instant::now() + CLOSE_WAIT
                } else {
                    Instant::now()
                });
            }
        }};
    }
    // The server closes on its own (a drain): what the application queued before was
    // answered as taken and goes out ahead of the Close, and the queue is closed first, so
    // a later send fails (the application's send raises, as when the client has gone)
    // instead of being taken and lost.
    macro_rules! close_after_queued {
        ($code:expr, $reason:expr) => {{
            outs.close();
            while let Ok(out) = outs.try_recv() {
                socket.sent_one();
                match out {
                    Out::Message(message) => {
                        if closing.is_none() && !send!(message) {
                            // The peer cannot take it: end now, as a failed send does.
                            closing = Some(Instant::now());
                        }
                    }
                    Out::Close(code, reason) => close!(code, reason),
                    Out::Accept(..) => {}
                    Out::Done(_) => app_done = true,
                }
            }
            close!($code, $reason);
        }};
    }
    loop {
        let room = socket.room.notified();
        // The peer's Close is always read: its reply must go out.
        let readable = peer_closed || closing.is_some() || socket.has_room();
        tokio::select! {
            frame = stream.next(), if readable => {
                heard = true;
                match frame {
                    Some(Ok(Message::Text(text))) => socket.push(In::Text(text)),
                    Some(Ok(Message::Binary(data))) => socket.push(In::Binary(data)),
                    Some(Ok(Message::Close(frame))) => {
                        // tungstenite queued the reply; the next read sends it.
                        peer_closed = true;
                        let (code, reason) = frame.map_or((1005, String::new()), |f| {
                            (u16::from(f.code), f.reason.as_str().to_owned())
                        });
                        socket.disconnected(code, &reason);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        use tokio_tungstenite::tungstenite::Error;
                        let code = match &error {
                            Error::Capacity(_) => TOO_BIG,
                            Error::Protocol(_) | Error::Utf8(_) => PROTOCOL_ERROR,
                            _ => ABNORMAL,
                        };
                        tracing::debug!(%error, "WebSocket read failed");
                        socket.disconnected(code, "");
                        if code != ABNORMAL && closing.is_none() && !peer_closed {
                            refused = Some(code);
                        }
                        break;
                    }
                    None => break,
                }
            }
            () = room, if !readable => {}
            out = outs.recv(), if !app_done => {
                socket.sent_one();
                match out {
                    Some(Out::Message(message)) => {
                        if closing.is_none() && !send!(message) {
                            break;
                        }
                    }
                    Some(Out::Close(code, reason)) => close!(code, reason),
                    Some(Out::Accept(..)) => {}
                    Some(Out::Done(raised)) => {
                        app_done = true;
                        if raised {
                            close!(INTERNAL_ERROR, "");
                        } else {
                            close!(NORMAL, "");
                        }
                    }
                    None => {
                        app_done = true;
                        close!(NORMAL, "");
                    }
                }
            }
            () = async { drop(drain.wait_for(|&d| d).await) }, if !draining => {
                draining = true;
                close_after_queued!(SERVICE_RESTART, "service restart");
            }
            _ = ping.tick(), if closing.is_none() => {
                if !heard {
                    // The peer is not reading: what is queued cannot reach it, but later
                    // sends must fail rather than be taken.
                    outs.close();
                    close!(INTERNAL_ERROR, "keepalive ping timeout");
                } else {
                    heard = false;
                    if !send!(Message::Ping(Bytes::new())) {
                        break;
                    }
                }
            }
            () = tokio::time::sleep_until(closing.unwrap_or_else(Instant::now)), if closing.is_some() => break,
        }
    }
    if let Some(code) = refused
        && let Ok(ws) = sink.reunite(stream)
    {
        linger(ws, code).await;
    }
    socket.disconnected(ABNORMAL, "");
}

/// Closes a socket whose peer sent what it may not (a message over the limit, a protocol
/// error) and whose bytes are still arriving: the Close goes out, then what the peer
/// still sends is read and dropped until it closes (at most [`CLOSE_WAIT`]). Dropping the
/// socket with unread bytes would reset it, and the peer would never read the Close.
async fn linger<IO>(mut ws: WebSocketStream<IO>, code: u16)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncReadExt as _;
    let by = Instant::now() + CLOSE_WAIT;
    let frame = CloseFrame {
        code: code.into(),
        reason: "".into(),
    };
    if tokio::time::timeout_at(by, ws.send(Message::Close(Some(frame))))
        .await
        .is_err()
    {
        return;
    }
    let raw = ws.get_mut();
    let mut scratch = vec![0; 64 * 1024];
    while let Ok(Ok(n)) = tokio::time::timeout_at(by, raw.read(&mut scratch)).await {
        if n == 0 {
            break;
        }
    }
}
