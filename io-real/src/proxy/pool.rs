//! One upstream's pool of HTTP/1.1 connections (`http://`, `https://`, `unix:` routes):
//! hyper's own `http1::SendRequest` handles, one pool per upstream in each worker, found
//! by the route's index (no key hashed per request). A request takes the connection
//! returned last (LIFO) that is idle, open and ready, or dials a new one; the response
//! body gives the connection back when it ends cleanly, with no task spawned per request
//! (decision 0123). The rules:
//!
//! - **reuse**: the last connection given back is taken first;
//! - **idle timeout**: a connection idle for longer than the timeout is never taken, and
//!   is closed by the pool's reaper (one task per pool, while it holds idle connections);
//! - **cap**: at most [`IDLE_CAP`] idle connections per upstream; one given back beyond
//!   it is closed;
//! - **no reuse after an error or a close**: only a response body that ended cleanly
//!   gives its connection back, never one whose upstream said it would close it, and a
//!   connection hyper found closed is never taken;
//! - **retry**: a request is sent again only when hyper gives it back unwritten (nothing
//!   of it, head or body, reached the connection) and the connection was a reused one;
//!   a fresh connection's failure is the request's (hyper-util's rule, for every method).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::header::{self, HeaderMap};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use super::UpstreamBody;
use super::UpstreamError;
use super::connect::{Connector, Target};

/// The most idle connections one upstream keeps in one worker.
pub(super) const IDLE_CAP: usize = 128;

/// What the pool needs to know of a connection: whether hyper found it closed, and
/// whether it is ready for another request (its last response read to the end).
trait Handle {
    fn is_closed(&self) -> bool;
    fn is_ready(&self) -> bool;
}

impl<B> Handle for SendRequest<B> {
    fn is_closed(&self) -> bool {
        SendRequest::is_closed(self)
    }
    fn is_ready(&self) -> bool {
        SendRequest::is_ready(self)
    }
}

/// The idle connections of one upstream, the one given back last at the end.
#[derive(Debug)]
struct IdleList<H> {
    /// Each with when it was given back; in that order.
    entries: Vec<(H, Instant)>,
    cap: usize,
    timeout: Duration,
    /// Whether the reaper task is running (it stops when the list is empty).
    reaping: bool,
}

impl<H: Handle> IdleList<H> {
    fn new(cap: usize, timeout: Duration) -> Self {
        IdleList {
            entries: Vec::new(),
            cap,
            timeout,
            reaping: false,
        }
    }

    /// The connection given back last that is open, ready and not idle past the
    /// timeout; closed and expired ones met on the way are dropped.
    fn take(&mut self, now: Instant) -> Option<H> {
        // Not ready yet (hyper has not finished with the last exchange): kept for later.
        let mut busy = Vec::new();
        let mut found = None;
        while let Some((handle, since)) = self.entries.pop() {
            if handle.is_closed() || now.saturating_duration_since(since) > self.timeout {
                continue;
            }
            if !handle.is_ready() {
                busy.push((handle, since));
                continue;
            }
            found = Some(handle);
            break;
        }
        self.entries.extend(busy.into_iter().rev());
        found
    }

    /// Keeps `handle` as idle from `now`, unless it is closed or the list is full (then
    /// it is dropped, which closes it). Whether it was kept.
    fn put(&mut self, handle: H, now: Instant) -> bool {
        if handle.is_closed() || self.entries.len() >= self.cap {
            return false;
        }
        self.entries.push((handle, now));
        true
    }

    /// Drops the connections idle past the timeout and the closed ones; when the next
    /// one will expire, if any is left.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let timeout = self.timeout;
        self.entries.retain(|(handle, since)| {
            !handle.is_closed() && now.saturating_duration_since(*since) <= timeout
        });
        self.entries.iter().map(|(_, since)| *since + timeout).min()
    }
}

/// Whether a request whose send failed may be sent again: only when hyper gave it back
/// unwritten and the connection was a reused one (an idle connection the upstream closed
/// as it was taken). A new connection that fails has nothing stale about it.
fn may_retry(reused: bool, given_back_unwritten: bool) -> bool {
    reused && given_back_unwritten
}

/// Whether the upstream keeps the connection open after this response (RFC 9112 §9.3):
/// not when it says `Connection: close`, nor an HTTP/1.0 response without `keep-alive`.
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let says = |token: &str| {
        headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if says("close") {
        return false;
    }
    version != Version::HTTP_10 || says("keep-alive")
}

/// One upstream's HTTP/1.1 connections in one worker.
pub(super) struct Pool {
    target: Target,
    connector: Arc<Connector>,
    idle: Mutex<IdleList<SendRequest<UpstreamBody>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A connection taken from the pool for one exchange; the response body gives it back
/// ([`Lease::give_back`]) when it ends cleanly. Dropped otherwise, which closes it.
#[derive(Debug)]
pub(super) struct Lease {
    pool: Arc<Pool>,
    sender: SendRequest<UpstreamBody>,
}

impl Lease {
    /// The exchange ended cleanly: the connection is idle from now.
    pub(super) fn give_back(self) {
        let Lease { pool, sender } = self;
        pool.put(sender);
    }
}

impl Pool {
    pub(super) fn new(target: Target, connector: Arc<Connector>, idle_timeout: Duration) -> Self {
        Pool {
            target,
            connector,
            idle: Mutex::new(IdleList::new(IDLE_CAP, idle_timeout)),
        }
    }

    fn take(&self) -> Option<SendRequest<UpstreamBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.take(Instant::now())
    }

    fn put(self: Arc<Self>, sender: SendRequest<UpstreamBody>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.put(sender, Instant::now())
            && !idle.reaping
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            idle.reaping = true;
            runtime.spawn(reap(Arc::downgrade(&self)));
        }
    }

    /// A new connection, its hyper task spawned (it serves the connection until it
    /// closes, and hands it over on a `101`).
    async fn connect(&self) -> Result<SendRequest<UpstreamBody>, UpstreamError> {
        let stream = self
            .connector
            .dial(&self.target)
            .await
            .map_err(UpstreamError::Connect)?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Sends `request` (its URI in origin form) on an idle connection or a new one, and
    /// answers with the response head and the connection's lease; `None` when the
    /// upstream said it closes the connection after this response.
    pub(super) async fn send(
        self: &Arc<Self>,
        mut request: Request<UpstreamBody>,
    ) -> Result<(Response<Incoming>, Option<Lease>), UpstreamError> {
        loop {
            let (mut sender, reused) = match self.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let lease =
                        keeps_alive(response.version(), response.headers()).then(|| Lease {
                            pool: Arc::clone(self),
                            sender,
                        });
                    return Ok((response, lease));
                }
                Err(mut error) => {
                    let unwritten = error.take_message();
                    let retry = may_retry(reused, unwritten.is_some());
                    match unwritten {
                        Some(again) if retry => {
                            tracing::debug!(error = %error.error(), "a reused upstream connection was closed; sending again");
                            request = again;
                        }
                        _ => return Err(failed(&error.into_error())),
                    }
                }
            }
        }
    }
}

/// What the tests look at: the idle connections and the reaper.
#[cfg(test)]
impl Pool {
    /// How many connections the pool holds idle, and how many of them hyper has open
    /// and ready for a request (the ones the next request would take).
    pub(super) fn idle_counts(&self) -> (usize, usize) {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let ready = idle
            .entries
            .iter()
            .filter(|(handle, _)| !handle.is_closed() && handle.is_ready())
            .count();
        (idle.entries.len(), ready)
    }

    /// Whether the reaper task is running.
    pub(super) fn is_reaping(&self) -> bool {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).reaping
    }
}

/// A hyper error with its causes, as the 502's reason.
fn failed(error: &hyper::Error) -> UpstreamError {
    UpstreamError::Failed(super::with_causes(error))
}

/// Closes `pool`'s connections as they pass the idle timeout, until it holds none (or
/// is gone); then the next connection given back starts it again.
async fn reap(pool: Weak<Pool>) {
    let mut next = Instant::now();
    loop {
        tokio::time::sleep_until(next).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
        match idle.expire(Instant::now()) {
            Some(at) => next = at,
            None => {
                idle.reaping = false;
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
