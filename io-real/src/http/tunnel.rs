//! Connections that stop speaking HTTP: a WebSocket an application accepted (HTTP/1.1
//! `Upgrade`, RFC 6455).
//!
//! hyper hands the socket to whoever asked for the upgrade and its connection future
//! ends. The connection is still the worker's, though: it must stay counted (the drain
//! waits for it, and `--max-connections` holds it), a full worker must not pick it as an
//! idle connection to close, and a drain must reach it. So each connection that may
//! upgrade carries a [`Tunnel`] in its request's extensions: the session that takes the
//! socket runs under it, the connection's task waits for the session before it ends, and
//! the session is told when its worker drains.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::watchdog::{Activity, Unanswered};

/// The one session a connection may turn into.
#[derive(Debug)]
pub struct Tunnel {
    session: Mutex<Option<JoinHandle<()>>>,
    drain: watch::Receiver<bool>,
    activity: Arc<Activity>,
    send_timeout: Duration,
}

impl Tunnel {
    pub(crate) fn new(
        drain: watch::Receiver<bool>,
        activity: Arc<Activity>,
        send_timeout: Duration,
    ) -> Arc<Tunnel> {
        Arc::new(Tunnel {
            session: Mutex::new(None),
            drain,
            activity,
            send_timeout,
        })
    }

    /// Tells when the worker starts draining (`true`, or the sender dropped).
    pub fn drain(&self) -> watch::Receiver<bool> {
        self.drain.clone()
    }

    /// How long one write to the peer may wait for it (the connections' `send_timeout`).
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
    }

    /// Runs `session` as this connection's: the connection counts as busy (never closed
    /// as idle to make room) until the session ends, and the connection's task waits for
    /// it. A connection has one socket, so a second session is refused (returns false).
    pub fn open(&self, session: impl Future<Output = ()> + Send + 'static) -> bool {
        let mut slot = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return false;
        }
        // Started like a request, finished when the session ends, however it ends.
        self.activity.request_started();
        let busy = Unanswered::new(Arc::clone(&self.activity));
        *slot = Some(tokio::spawn(async move {
            let _busy = busy;
            session.await;
        }));
        true
    }

    /// Waits for the session, if one was opened.
    pub(crate) async fn finished(&self) {
        let session = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(session) = session {
            // A panicking session has ended as well; the panic is tokio's to report.
            let _ = session.await;
        }
    }
}
