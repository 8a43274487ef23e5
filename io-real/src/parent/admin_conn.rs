//! The admin listener's connections: which it holds, which to close when it is full, and
//! one connection served under the watchdog's deadlines (decision 0042).
//!
//! The rules are the worker's (`worker/admission.rs`, `http/conn.rs`) on a smaller scale:
//! HTTP/1 only, a few connections, no drain (the listener lives as long as the parent).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::admin::MAX_HEAD;
use crate::http::body::Body;
use crate::http::watchdog::{Activity, Deadlines, Metered, Unanswered, Verdict, Watch, finishing};

/// The connections the listener holds.
#[derive(Debug)]
pub(super) struct Connections {
    limit: usize,
    held: Vec<Held>,
    /// Rung when a connection's task ends.
    closed: Arc<Notify>,
}

#[derive(Debug)]
struct Held {
    activity: Arc<Activity>,
    evicted: bool,
}

impl Held {
    /// The connection's task has ended: only this list still holds its activity.
    fn gone(&self) -> bool {
        Arc::strong_count(&self.activity) == 1
    }

    /// Asked to close, and no request has started since.
    fn closing(&self) -> bool {
        self.evicted && self.activity.eviction_stands()
    }
}

impl Connections {
    pub(super) fn new(limit: usize) -> Self {
        Connections {
            limit,
            held: Vec::new(),
            closed: Arc::new(Notify::new()),
        }
    }

    /// Whether another connection may be accepted: below the limit (not counting those
    /// closing), or full with one that may be closed for it.
    pub(super) fn has_room(&mut self) -> bool {
        self.held.retain(|h| !h.gone());
        let open = self.held.iter().filter(|h| !h.closing()).count();
        open < self.limit || self.victim().is_some()
    }

    /// Resolves when a connection's task ends.
    pub(super) async fn one_closed(&self) {
        self.closed.notified().await;
    }

    /// Records a new connection, closing one to make room if the listener is full; its
    /// activity and the guard that tells the listener it closed, which
    /// [`serve_connection`] takes.
    pub(super) fn admit(&mut self) -> (Arc<Activity>, ClosedGuard) {
        self.held.retain(|h| !h.gone());
        let open = self.held.iter().filter(|h| !h.closing()).count();
        if open >= self.limit
            && let Some(i) = self.victim()
        {
            self.held[i].evicted = true;
            self.held[i].activity.evict();
        }
        let activity = Activity::new(Instant::now());
        self.held.push(Held {
            activity: Arc::clone(&activity),
            evicted: false,
        });
        (activity, ClosedGuard(Arc::clone(&self.closed)))
    }

    /// The connection to close to make room: never-requested first, then idle, the
    /// longest waiting first; one with a request in progress never.
    fn victim(&self) -> Option<usize> {
        self.held
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.closing() && !h.gone())
            .filter_map(|(i, h)| {
                let (since, never) = h.activity.idle_since()?;
                Some(((!never, since), i))
            })
            .min_by_key(|(key, _)| *key)
            .map(|(_, i)| i)
    }
}

/// Tells the listener that a connection has ended, however its task ends.
#[derive(Debug)]
pub(super) struct ClosedGuard(Arc<Notify>);

impl Drop for ClosedGuard {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// Serves one admin connection with `answer` until it closes, its deadline passes, or the
/// listener asks it to close to make room.
pub(super) async fn serve_connection<F, Fut>(
    stream: TcpStream,
    (activity, _closed): (Arc<Activity>, ClosedGuard),
    deadlines: Deadlines,
    answer: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    let in_service = Arc::clone(&activity);
    let service = service_fn(move |req| {
        in_service.request_started();
        let unanswered = Unanswered::new(Arc::clone(&in_service));
        let answered = answer(req);
        async move {
            let (head, body) = answered.await?.into_parts();
            Ok::<_, Infallible>(Response::from_parts(
                head,
                finishing(body, unanswered.answered()),
            ))
        }
    });
    let io = Metered::new(stream, Arc::clone(&activity));
    let conn = http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut watch = Watch::new(&activity);
    let watchdog = tokio::time::sleep_until(Instant::now());
    tokio::pin!(watchdog);
    // Asked to close, and read once more before it does (see the branches).
    let mut evicting = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "admin connection ended with an error");
                }
                return;
            }
            () = watchdog.as_mut() => {
                match activity.verdict(&mut watch, &deadlines, Instant::now()) {
                    Verdict::Recheck(at) => watchdog.as_mut().reset(at),
                    Verdict::Expired(why) => {
                        tracing::debug!(?why, "admin connection deadline passed");
                        return;
                    }
                }
            }
            () = activity.evicted(), if !evicting => {
                // As a worker's connection (`http/conn.rs`): a probe's head may be in the
                // socket unread, because this task has not run since the accept, and
                // closing then would reset the probe. So it is read once more first.
                evicting = activity.eviction_stands();
            }
            () = tokio::task::yield_now(), if evicting => {
                // `yield_now` is pending on its first poll, so the connection has been
                // polled (and has read what had arrived) since the eviction was seen.
                if activity.eviction_stands() {
                    tracing::debug!("closing an idle admin connection to admit a new one");
                    return;
                }
                evicting = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::watchdog::Unanswered;

    #[test]
    fn a_full_listener_closes_the_silent_then_the_idle_never_the_busy() {
        let mut held = Connections::new(3);
        let (busy, _busy_closed) = held.admit();
        busy.request_started();
        let _answering = Unanswered::new(Arc::clone(&busy));
        let (idle, _idle_closed) = held.admit();
        idle.request_started();
        drop(Unanswered::new(Arc::clone(&idle)));
        let (silent, _silent_closed) = held.admit();
        assert!(held.has_room(), "full, with connections it may close");
        // A fourth closes the one that never sent a request, then the idle one.
        let (fourth, _fourth_closed) = held.admit();
        assert!(silent.eviction_stands() && held.held[2].closing());
        // The fourth is served and idle from now on, after the first idle one.
        fourth.request_started();
        drop(Unanswered::new(Arc::clone(&fourth)));
        let (_fifth, _fifth_closed) = held.admit();
        assert!(held.held[1].closing(), "then the longest idle");
        assert!(
            !held.held[3].evicted,
            "not the idle one that was served since"
        );
        assert!(!held.held[0].evicted, "never the one answering");
        // The two asked to close do not count, and there are connections it may close.
        assert!(held.has_room());
    }

    #[test]
    fn a_connection_whose_task_ended_is_forgotten() {
        let mut held = Connections::new(1);
        let (gone, closed) = held.admit();
        drop((gone, closed));
        assert!(held.has_room());
        assert!(held.held.is_empty());
    }
}
