//! The worker's broker client: [`servery_core::broker::BrokerClient`] behind an async
//! handle that request handlers share.
//!
//! The core client does the bookkeeping (request IDs, the bound on outstanding requests,
//! reply deadlines, fail-closed after EOF, compensating release of late grants); this
//! module only adds what needs a runtime:
//!
//! - **Waiting.** A caller of [`BrokerHandle::call`] parks on a oneshot until the
//!   worker's control-channel reader hands the parent's answer to
//!   [`BrokerHandle::on_reply`], or until the reply deadline passes. There is no timer
//!   task: the caller whose deadline it is runs the core's `handle_timeout`, and every new
//!   request does too, so a deadline is never missed for lack of someone to notice it.
//! - **Cancellation.** hyper drops a handler whose client went away, possibly while it
//!   waits for a grant. A grant that arrives for a caller that is no longer there is given
//!   back at once, exactly like a grant that arrives after its deadline.
//! - **Releasing from `Drop`.** [`BrokerHandle::release`] is synchronous and never
//!   refused (the core client lets releases bypass the outstanding bound), so the guards
//!   of the write flow can give a lease back from `Drop` on every exit path.
//!
//! The shared state is one `std::sync::Mutex` held only for the core calls and a channel
//! send, never across an await: no hand-written lock-free structure, nothing for loom.
//! Frames are sent while the lock is held so they leave in the order the core client
//! produced them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use servery_core::broker::{BrokerClient, ClientError, Completion};
use servery_core::proto::{BrokerReply, BrokerRequest, encode_worker};
use servery_core::{Instant, LeaseId};
use tokio::sync::{oneshot, watch};

/// What a broker call yields: the parent's answer, or why there is none.
pub type BrokerResult = Result<BrokerReply, ClientError>;

/// A cheap, cloneable handle on the worker's one broker client.
#[derive(Clone)]
pub struct BrokerHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BrokerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerHandle")
            .field("reply_timeout", &self.shared.reply_timeout)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

type SendFrame = dyn Fn(Vec<u8>) + Send + Sync;

struct Shared {
    state: Mutex<State>,
    /// Hands one encoded frame to the control channel's writer.
    send: Box<SendFrame>,
    /// The core's clock origin. tokio's clock rather than `std`'s, so that a simulated
    /// runtime (turmoil, paused time) moves deadlines and timers together.
    epoch: tokio::time::Instant,
    reply_timeout: Duration,
    closed: watch::Sender<bool>,
}

struct State {
    client: BrokerClient,
    waiters: HashMap<u64, Waiter>,
}

struct Waiter {
    tx: oneshot::Sender<BrokerResult>,
    request: Kind,
}

/// What a request could grant, so an unwanted grant can be given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    Reservation,
    Partial,
    Dav,
    Other,
}

impl Kind {
    fn of(request: &BrokerRequest) -> Kind {
        match request {
            BrokerRequest::AcquireLease { .. } | BrokerRequest::DavWriteLease { .. } => Kind::Lease,
            BrokerRequest::ReserveUpload { .. } => Kind::Reservation,
            BrokerRequest::ReservePartial { .. } | BrokerRequest::AdoptPartial { .. } => {
                Kind::Partial
            }
            BrokerRequest::DavLock { .. } => Kind::Dav,
            _ => Kind::Other,
        }
    }

    fn release(self, id: LeaseId) -> Option<BrokerRequest> {
        match self {
            Kind::Lease => Some(BrokerRequest::ReleaseLease { id }),
            Kind::Reservation => Some(BrokerRequest::ReleaseReservation { id }),
            Kind::Partial => Some(BrokerRequest::ReleasePartial { id }),
            Kind::Dav => Some(BrokerRequest::DavUnlock { token: id }),
            Kind::Other => None,
        }
    }
}

impl BrokerHandle {
    /// `capacity` outstanding requests at most (`broker.queue_capacity`), each answered
    /// within `reply_timeout` (`broker.reply_timeout`) or failed. `send` hands an encoded
    /// frame to the control channel; it must not block.
    pub fn new(
        capacity: u32,
        reply_timeout: Duration,
        send: impl Fn(Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        BrokerHandle {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    client: BrokerClient::new(capacity, reply_timeout),
                    waiters: HashMap::new(),
                }),
                send: Box::new(send),
                epoch: tokio::time::Instant::now(),
                reply_timeout,
                closed: watch::channel(false).0,
            }),
        }
    }

    fn now(&self) -> Instant {
        let elapsed = self.shared.epoch.elapsed();
        Instant::from_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock except a broken invariant, and the state
        // is still the best record of what is outstanding: keep using it.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ask the broker and wait for its answer. Fails closed: `Saturated` when too many
    /// requests are outstanding, `TimedOut` after the reply timeout, `ParentGone` once the
    /// control channel has closed.
    pub async fn call(&self, request: BrokerRequest) -> BrokerResult {
        let kind = Kind::of(&request);
        let (tx, mut rx) = oneshot::channel();
        let deadline = {
            let mut state = self.lock();
            let now = self.now();
            self.expire(&mut state, now);
            let id = state.client.request(now, request)?;
            state.waiters.insert(id, Waiter { tx, request: kind });
            self.flush(&mut state);
            now + self.shared.reply_timeout
        };
        let at = self.shared.epoch + Duration::from_nanos(deadline.as_nanos());
        tokio::select! {
            answer = &mut rx => answer.unwrap_or(Err(ClientError::ParentGone)),
            () = tokio::time::sleep_until(at) => {
                // Our deadline: let the core fail everything that is due (us included,
                // unless the answer raced in just now).
                let mut state = self.lock();
                let now = self.now();
                self.expire(&mut state, now);
                drop(state);
                rx.try_recv().unwrap_or(Err(ClientError::TimedOut))
            }
        }
    }

    /// Give a grant back without waiting. Never refused for lack of room; a no-op once
    /// the parent is gone (its revocation already took everything back).
    pub fn release(&self, request: BrokerRequest) {
        let mut state = self.lock();
        let now = self.now();
        state.client.release(now, request);
        self.flush(&mut state);
    }

    /// The parent's answer to request `id`, from the control-channel reader.
    pub fn on_reply(&self, id: u64, reply: BrokerReply) {
        let mut state = self.lock();
        let now = self.now();
        if let Some(completion) = state.client.on_reply(now, id, reply) {
            self.complete(&mut state, now, completion);
        }
        // A late grant produces a compensating release.
        self.flush(&mut state);
    }

    /// The control channel reached EOF (or became unintelligible): every waiting caller
    /// fails with `ParentGone`, and so will every later call.
    pub fn channel_closed(&self) {
        let mut state = self.lock();
        let now = self.now();
        for completion in state.client.channel_closed() {
            self.complete(&mut state, now, completion);
        }
        for (_, waiter) in state.waiters.drain() {
            let _ = waiter.tx.send(Err(ClientError::ParentGone));
        }
        drop(state);
        self.shared.closed.send_replace(true);
    }

    /// Whether the parent is gone. Work that depends on a grant must not complete after
    /// this: nothing backs the grant any more.
    pub fn is_closed(&self) -> bool {
        *self.shared.closed.borrow()
    }

    /// Resolves once the parent is gone.
    pub async fn closed(&self) {
        let mut rx = self.shared.closed.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Requests sent and not yet answered (including compensating releases).
    pub fn outstanding(&self) -> usize {
        self.lock().client.outstanding()
    }

    fn expire(&self, state: &mut State, now: Instant) {
        for completion in state.client.handle_timeout(now) {
            self.complete(state, now, completion);
        }
    }

    fn complete(&self, state: &mut State, now: Instant, completion: Completion) {
        match completion {
            Completion::Reply { id, reply } => {
                let Some(waiter) = state.waiters.remove(&id) else {
                    return;
                };
                let release = match waiter.tx.send(Ok(reply)) {
                    Err(Ok(BrokerReply::Granted { id: granted, .. })) => {
                        waiter.request.release(granted)
                    }
                    Err(Ok(BrokerReply::ProxyGrants { granted })) => {
                        Some(BrokerRequest::ReturnProxyGrants { count: granted })
                    }
                    Err(Ok(BrokerReply::CgiGrants { granted })) => {
                        Some(BrokerRequest::ReturnCgiGrants { count: granted })
                    }
                    _ => None,
                };
                if let Some(release) = release {
                    // The caller went away (its client disconnected) while the grant was
                    // on its way: nobody will ever release it but us.
                    tracing::debug!(request = id, ?release, "releasing a grant nobody waits for");
                    state.client.release(now, release);
                }
            }
            Completion::Failed { id, error } => {
                if let Some(waiter) = state.waiters.remove(&id) {
                    let _ = waiter.tx.send(Err(error));
                }
            }
        }
    }

    fn flush(&self, state: &mut State) {
        while let Some(message) = state.client.poll_outgoing() {
            let mut frame = Vec::with_capacity(64);
            // The core client queues only requests that fit (it refuses the others with
            // `ClientError::TooLarge`), so this cannot fail; were it to, the request
            // times out rather than a frame the parent would refuse going out.
            match encode_worker(&message, &mut frame) {
                Ok(()) => (self.shared.send)(frame),
                Err(e) => tracing::error!(error = %e, "cannot frame a broker request"),
            }
        }
    }
}

/// The environment variable that makes a worker measure its broker round trip once at
/// start (`docs/benchmarks.md`, "Broker"). Read only by builds with the `test-hooks`
/// feature; release builds do not have it.
#[cfg(feature = "test-hooks")]
pub const BENCH_ENV: &str = "SERVERY_BENCH_BROKER";

#[cfg(feature = "test-hooks")]
impl BrokerHandle {
    /// If [`BENCH_ENV`] asks for N rounds, measure N lease acquire + release round trips
    /// over this worker's real control channel and print the distribution to stderr.
    pub fn spawn_bench_from_env(&self, worker: u64) {
        let Some(rounds) = std::env::var(BENCH_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n > 0)
        else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(self.clone().bench(worker, rounds));
    }

    async fn bench(self, worker: u64, rounds: usize) {
        use servery_core::proto::TargetKey;
        // A key no directory has: (u64::MAX, u64::MAX) is never a real (device, inode).
        let key = TargetKey {
            dir_device: u64::MAX,
            dir_inode: u64::MAX,
            name: format!("bench-{worker}"),
        };
        let pair = |broker: BrokerHandle, key: TargetKey| async move {
            let t0 = tokio::time::Instant::now();
            let Ok(BrokerReply::Granted { id, .. }) =
                broker.call(BrokerRequest::AcquireLease { key }).await
            else {
                return None;
            };
            let t1 = tokio::time::Instant::now();
            broker.call(BrokerRequest::ReleaseLease { id }).await.ok()?;
            Some((t1 - t0, t0.elapsed()))
        };
        // Until the parent serves us (before HELLO it ignores our requests).
        while pair(self.clone(), key.clone()).await.is_none() {
            if self.is_closed() {
                return;
            }
        }
        let mut acquire = Vec::with_capacity(rounds);
        let mut both = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            match pair(self.clone(), key.clone()).await {
                Some((a, b)) => {
                    acquire.push(a);
                    both.push(b);
                }
                None => return,
            }
        }
        let pct = |v: &mut Vec<Duration>, p: usize| {
            v.sort_unstable();
            v[(v.len() * p / 100).min(v.len() - 1)].as_secs_f64() * 1e6
        };
        tell!(
            "servery: broker-bench worker={worker} rounds={rounds} acquire_us median={:.1} p99={:.1} acquire+release_us median={:.1} p99={:.1}",
            pct(&mut acquire, 50),
            pct(&mut acquire, 99),
            pct(&mut both, 50),
            pct(&mut both, 99),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_core::proto::{FrameDecoder, MAX_FRAME_DEFAULT, TargetKey, WorkerMessage};
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    fn handle(timeout: Duration) -> (BrokerHandle, UnboundedReceiver<Vec<u8>>) {
        let (tx, rx) = unbounded_channel();
        let h = BrokerHandle::new(2, timeout, move |frame| {
            let _ = tx.send(frame);
        });
        (h, rx)
    }

    async fn next_request(rx: &mut UnboundedReceiver<Vec<u8>>) -> (u64, BrokerRequest) {
        let frame = rx.recv().await.expect("a frame");
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        decoder.push(&frame);
        match decoder.next_worker_message() {
            Ok(Some(WorkerMessage::Broker { id, request })) => (id, request),
            other => panic!("expected a broker request, got {other:?}"),
        }
    }

    fn key() -> TargetKey {
        TargetKey {
            dir_device: 1,
            dir_inode: 2,
            name: "f".into(),
        }
    }

    fn granted(n: u128) -> BrokerReply {
        BrokerReply::Granted {
            id: LeaseId(n),
            expires_in_ms: 60_000,
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_its_caller() {
        let (h, mut rx) = handle(Duration::from_secs(30));
        let call = tokio::spawn({
            let h = h.clone();
            async move { h.call(BrokerRequest::AcquireLease { key: key() }).await }
        });
        let (id, request) = next_request(&mut rx).await;
        assert_eq!(request, BrokerRequest::AcquireLease { key: key() });
        h.on_reply(id, granted(9));
        assert_eq!(call.await.expect("joined"), Ok(granted(9)));
        assert_eq!(h.outstanding(), 0);
    }

    #[tokio::test]
    async fn a_late_grant_times_out_and_is_given_back() {
        let (h, mut rx) = handle(Duration::from_millis(30));
        let call = tokio::spawn({
            let h = h.clone();
            async move { h.call(BrokerRequest::AcquireLease { key: key() }).await }
        });
        let (id, _) = next_request(&mut rx).await;
        // The caller's own deadline fails it; then the grant arrives.
        assert_eq!(call.await.expect("joined"), Err(ClientError::TimedOut));
        h.on_reply(id, granted(7));
        let (_, release) = next_request(&mut rx).await;
        assert_eq!(release, BrokerRequest::ReleaseLease { id: LeaseId(7) });
    }

    #[tokio::test]
    async fn a_grant_for_a_caller_that_went_away_is_given_back() {
        let (h, mut rx) = handle(Duration::from_secs(30));
        let call = tokio::spawn({
            let h = h.clone();
            async move { h.call(BrokerRequest::ReserveUpload { bytes: 5 }).await }
        });
        let (id, _) = next_request(&mut rx).await;
        call.abort();
        assert!(call.await.expect_err("aborted").is_cancelled());
        h.on_reply(id, granted(3));
        let (_, release) = next_request(&mut rx).await;
        assert_eq!(
            release,
            BrokerRequest::ReleaseReservation { id: LeaseId(3) }
        );
    }

    #[tokio::test]
    async fn saturation_and_eof_fail_closed() {
        let (h, mut rx) = handle(Duration::from_secs(30));
        let calls: Vec<_> = (0..2)
            .map(|_| {
                let h = h.clone();
                tokio::spawn(async move { h.call(BrokerRequest::ReserveUpload { bytes: 1 }).await })
            })
            .collect();
        next_request(&mut rx).await;
        next_request(&mut rx).await;
        assert_eq!(
            h.call(BrokerRequest::ReserveUpload { bytes: 1 }).await,
            Err(ClientError::Saturated)
        );
        // Releases are never refused for lack of room.
        h.release(BrokerRequest::ReleaseLease { id: LeaseId(1) });
        next_request(&mut rx).await;
        assert!(!h.is_closed());
        h.channel_closed();
        for call in calls {
            assert_eq!(call.await.expect("joined"), Err(ClientError::ParentGone));
        }
        assert!(h.is_closed());
        h.closed().await;
        assert_eq!(
            h.call(BrokerRequest::ReserveUpload { bytes: 1 }).await,
            Err(ClientError::ParentGone)
        );
    }
}
