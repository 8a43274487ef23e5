//! Telling a service manager (systemd, `Type=notify-reload`) what the service does, over
//! `NOTIFY_SOCKET` with `sd-notify`. Every notification follows an output of the core:
//! READY=1 when a generation commits, RELOADING=1 (with MONOTONIC_USEC) when a reload's
//! generation starts, STOPPING=1 when the listeners close; STATUS= whenever the state,
//! the generation or the number of ready workers changes. WATCHDOG=1 is sent from the
//! driver loop itself (see [`Notifier::watchdog`]), so a wedged loop stops it.
//! Without `NOTIFY_SOCKET` every call does nothing.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

#[derive(Debug, Default)]
pub(super) struct Notifier {
    enabled: bool,
    /// Half of `WATCHDOG_USEC`: how often the loop pings.
    watchdog_every: Option<Duration>,
    next_ping: Option<Instant>,
    /// A RELOADING=1 waits for its READY=1.
    reloading: bool,
    stopping: bool,
    /// What the last STATUS= said, to send it only when it changes.
    last_status: Option<(&'static str, u64, usize)>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`; the watchdog variables
    /// are removed, so workers never see them. Call before any thread is started.
    pub(super) fn from_env() -> Notifier {
        let mut usec = 0;
        let watchdog = sd_notify::watchdog_enabled(true, &mut usec);
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some();
        let watchdog_every =
            (enabled && watchdog && usec > 0).then(|| Duration::from_micros(usec / 2));
        Notifier {
            enabled,
            watchdog_every,
            next_ping: watchdog_every.map(|_| Instant::now()),
            ..Notifier::default()
        }
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(false, states) {
            tracing::warn!(error = %e, "cannot notify the service manager");
        }
    }

    /// A generation committed: the first, or a reload's.
    pub(super) fn committed(&mut self) {
        if self.stopping {
            return;
        }
        self.reloading = false;
        self.send(&[NotifyState::Ready]);
    }

    /// A reload's generation is being brought up.
    pub(super) fn reload_started(&mut self) {
        if self.stopping {
            return;
        }
        self.reloading = true;
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(_) => self.send(&[NotifyState::Reloading]),
        }
    }

    /// A reload ended without a new generation: the old one serves on. A reload refused
    /// before it started (an unreadable file, a setting fixed at start, one already in
    /// progress) still reports RELOADING=1 then READY=1: with `Type=notify-reload`
    /// systemd waits for that pair after its SIGHUP, and would otherwise time out.
    pub(super) fn reload_rejected(&mut self, message: &str) {
        if self.stopping {
            return;
        }
        if !self.reloading {
            self.reload_started();
        }
        self.reloading = false;
        let status = format!("reload rejected: {message}");
        self.send(&[NotifyState::Ready, NotifyState::Status(&status)]);
    }

    /// The listeners closed: the service is stopping.
    pub(super) fn stopping(&mut self) {
        if !self.stopping {
            self.stopping = true;
            self.send(&[NotifyState::Stopping]);
        }
    }

    /// STATUS= with the service's state, generation and ready workers, when it changed.
    pub(super) fn status(&mut self, state: &'static str, generation: u64, ready: usize) {
        let now = Some((state, generation, ready));
        if !self.enabled || self.last_status == now {
            return;
        }
        self.last_status = now;
        let status = format!("{state}: generation {generation}, {ready} ready workers");
        self.send(&[NotifyState::Status(&status)]);
    }

    /// Ping the watchdog if it is due; returns how long the loop may wait before the
    /// next ping (`timeout` itself when there is no watchdog or it is sooner).
    pub(super) fn watchdog(&mut self, timeout: Option<Duration>) -> Option<Duration> {
        let (Some(every), Some(next)) = (self.watchdog_every, self.next_ping) else {
            return timeout;
        };
        let now = Instant::now();
        let next = if now >= next {
            self.send(&[NotifyState::Watchdog]);
            let next = now + every;
            self.next_ping = Some(next);
            next
        } else {
            next
        };
        let until = next.saturating_duration_since(now);
        Some(timeout.map_or(until, |t| t.min(until)))
    }
}
