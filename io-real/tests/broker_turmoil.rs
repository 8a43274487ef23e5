//! The worker's broker client against a parent over a simulated network (turmoil).
//!
//! The "worker" host runs the real pieces a worker runs: the control-channel codec
//! (`encode_worker` / `FrameDecoder`) and `servery::worker::broker::BrokerHandle` around
//! the core's `BrokerClient`. The "parent" host wraps the core's `Broker` behind the same
//! codec, the way the real parent routes broker frames. turmoil supplies the network
//! (message latency, holding a link, crashing a host) and virtual time, so reply
//! timeouts are exercised deterministically and instantly.
//!
//! What is shown:
//! - requests and grants round-trip over the framing;
//! - a held link makes a request time out (`TimedOut`: the write fails closed) after the
//!   configured reply timeout, and the grant that arrives once the link is released is
//!   given back by the client, so the parent's table ends empty;
//! - a crash of the parent host reaches the client as EOF: the request in flight fails
//!   `ParentGone` at once (well before its timeout) and so does every later one.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use servery::worker::broker::BrokerHandle;
use servery_core::broker::{Broker, ClientError, Owner};
use servery_core::proto::{
    BrokerReply, BrokerRequest, FrameDecoder, MAX_FRAME_DEFAULT, ParentMessage, TargetKey,
    WorkerMessage, encode_parent,
};
use servery_core::rng::CoreRng;
use servery_core::{Generation, Instant, RawConfig, WorkerId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

const PORT: u16 = 7070;
const REPLY_TIMEOUT: Duration = Duration::from_millis(250);
const WORKER: WorkerId = WorkerId(1);
const OWNER: Owner = Owner {
    worker: WORKER,
    generation: Generation(1),
};

/// What the parent host keeps across its own crash (the test's view of its tables).
#[derive(Default)]
struct ParentState {
    broker: Option<Broker>,
    /// While set, the parent stops reading: requests stay in flight.
    stalled: AtomicBool,
}

type Shared = Arc<Mutex<ParentState>>;

fn new_broker() -> Broker {
    let config = RawConfig::default().validate().expect("default config");
    Broker::new(config.broker().clone(), CoreRng::from_seed([7; 32]))
}

fn with_broker<T>(shared: &Shared, f: impl FnOnce(&mut Broker) -> T) -> T {
    let mut state = shared.lock().unwrap_or_else(|p| p.into_inner());
    f(state.broker.get_or_insert_with(new_broker))
}

fn key(name: &str) -> TargetKey {
    TargetKey {
        dir_device: 1,
        dir_inode: 2,
        name: name.into(),
    }
}

/// The parent: one worker channel at a time, every broker frame through the core broker,
/// revocation at EOF, as `servery_core::parent::Parent` routes them.
async fn parent(shared: Shared) -> turmoil::Result {
    let epoch = tokio::time::Instant::now();
    let now = move || Instant::from_nanos(epoch.elapsed().as_nanos() as u64);
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (mut stream, _) = listener.accept().await?;
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        let mut buf = vec![0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            // Stalled: what was read waits unprocessed (and dies with a crash).
            while shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stalled
                .load(Ordering::SeqCst)
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if n == 0 {
                with_broker(&shared, |b| b.revoke_worker(WORKER));
                break;
            }
            decoder.push(&buf[..n]);
            let mut out = Vec::new();
            while let Some(message) = decoder.next_worker_message()? {
                if let WorkerMessage::Broker { id, request } = message {
                    with_broker(&shared, |b| {
                        b.handle_timeout(now());
                        b.handle_request(now(), OWNER, id, request);
                        while let Some((_, id, reply)) = b.poll_reply() {
                            encode_parent(&ParentMessage::Broker { id, reply }, &mut out)
                                .expect("a broker reply fits");
                        }
                    });
                }
            }
            stream.write_all(&out).await?;
        }
    }
}

/// The worker's side of the channel: a writer task for the client's frames and a reader
/// that routes replies and reports EOF, exactly the worker's plumbing.
async fn connect() -> std::io::Result<BrokerHandle> {
    let stream = TcpStream::connect(("parent", PORT)).await?;
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut frames) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let handle = BrokerHandle::new(8, REPLY_TIMEOUT, move |frame| {
        let _ = tx.send(frame);
    });
    tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    let reader = handle.clone();
    tokio::spawn(async move {
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        let mut buf = vec![0u8; 4096];
        loop {
            let n = rd.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return reader.channel_closed();
            }
            decoder.push(&buf[..n]);
            loop {
                match decoder.next_parent_message() {
                    Ok(Some(ParentMessage::Broker { id, reply })) => reader.on_reply(id, reply),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return reader.channel_closed(),
                }
            }
        }
    });
    Ok(handle)
}

/// Waits in virtual time, at most `bound`, for `cond`.
async fn eventually(bound: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < bound, "not within {bound:?}: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn sim() -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(60))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .build()
}

#[test]
fn grants_and_releases_round_trip() -> turmoil::Result {
    let shared = Shared::default();
    let mut sim = sim();
    let s = shared.clone();
    sim.host("parent", move || parent(s.clone()));
    let s = shared.clone();
    sim.client("worker", async move {
        let broker = connect().await?;
        let granted = broker
            .call(BrokerRequest::AcquireLease { key: key("a") })
            .await;
        let Ok(BrokerReply::Granted { id, .. }) = granted else {
            panic!("expected a grant, got {granted:?}");
        };
        assert_eq!(
            broker
                .call(BrokerRequest::AcquireLease { key: key("a") })
                .await,
            Ok(BrokerReply::Rejected(servery_core::proto::Rejection::Busy)),
            "a second writer of the target is refused"
        );
        assert_eq!(with_broker(&s, |b| b.leases().count()), 1);
        broker.release(BrokerRequest::ReleaseLease { id });
        eventually(Duration::from_secs(1), "the lease released", || {
            with_broker(&s, |b| b.leases().count()) == 0
        })
        .await;
        // The release's own answer is nobody's business but the client's bookkeeping.
        eventually(Duration::from_secs(1), "nothing outstanding", || {
            broker.outstanding() == 0
        })
        .await;
        Ok(())
    });
    sim.run()
}

#[test]
fn a_held_reply_times_out_closed_and_the_late_grant_is_released() -> turmoil::Result {
    let shared = Shared::default();
    let mut sim = sim();
    let s = shared.clone();
    sim.host("parent", move || parent(s.clone()));
    let s = shared.clone();
    sim.client("worker", async move {
        let broker = connect().await?;
        // Warm: the channel works.
        assert!(matches!(
            broker.call(BrokerRequest::ReserveUpload { bytes: 1 }).await,
            Ok(BrokerReply::Granted { .. })
        ));
        turmoil::hold("worker", "parent");
        let asked = tokio::time::Instant::now();
        let answer = broker
            .call(BrokerRequest::AcquireLease { key: key("held") })
            .await;
        let waited = asked.elapsed();
        assert_eq!(answer, Err(ClientError::TimedOut));
        assert!(
            waited >= REPLY_TIMEOUT && waited < REPLY_TIMEOUT + Duration::from_millis(50),
            "failed after {waited:?}, the timeout is {REPLY_TIMEOUT:?}"
        );
        let granted_before = with_broker(&s, |b| b.stats().granted);
        // The link heals: the held request reaches the parent, which grants it; the
        // grant finds nobody waiting and the client gives it back.
        turmoil::release("worker", "parent");
        eventually(Duration::from_secs(2), "the late grant made", || {
            with_broker(&s, |b| b.stats().granted) > granted_before
        })
        .await;
        eventually(Duration::from_secs(2), "the late grant given back", || {
            with_broker(&s, |b| b.leases().count()) == 0
        })
        .await;
        // And the target is free for the next writer.
        assert!(matches!(
            broker
                .call(BrokerRequest::AcquireLease { key: key("held") })
                .await,
            Ok(BrokerReply::Granted { .. })
        ));
        Ok(())
    });
    sim.run()
}

#[test]
fn a_crashed_parent_fails_the_client_closed() -> turmoil::Result {
    let shared = Shared::default();
    let in_flight = Arc::new(AtomicBool::new(false));
    let mut sim = sim();
    let s = shared.clone();
    sim.host("parent", move || parent(s.clone()));
    let s = shared.clone();
    let flag = Arc::clone(&in_flight);
    sim.client("worker", async move {
        let broker = connect().await?;
        assert!(matches!(
            broker.call(BrokerRequest::ReserveUpload { bytes: 1 }).await,
            Ok(BrokerReply::Granted { .. })
        ));
        // The parent stops answering; the test crashes it while this request waits.
        s.lock()
            .unwrap_or_else(|p| p.into_inner())
            .stalled
            .store(true, Ordering::SeqCst);
        flag.store(true, Ordering::SeqCst);
        let asked = tokio::time::Instant::now();
        let answer = broker
            .call(BrokerRequest::AcquireLease { key: key("c") })
            .await;
        let waited = asked.elapsed();
        assert_eq!(answer, Err(ClientError::ParentGone));
        assert!(
            waited < REPLY_TIMEOUT,
            "EOF, not the timeout, ended the wait ({waited:?})"
        );
        assert!(broker.is_closed());
        // Everything after fails closed at once.
        assert_eq!(
            broker.call(BrokerRequest::ReserveUpload { bytes: 1 }).await,
            Err(ClientError::ParentGone)
        );
        assert_eq!(broker.outstanding(), 0);
        Ok(())
    });
    while !in_flight.load(Ordering::SeqCst) {
        sim.step()?;
    }
    // Let the request leave the client, then crash the parent host under it.
    for _ in 0..3 {
        sim.step()?;
    }
    sim.crash("parent");
    sim.run()
}
