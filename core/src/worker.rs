//! The worker's own lifecycle, shared by the real worker process and the simulated one:
//! HELLO → prepare → PREPARED → COMMIT → accept + READY → heartbeats → drain → exit.
//!
//! A worker drains on DRAIN, on TERM, and on control-channel EOF (its parent died): it
//! stops admission, lets in-flight work finish, and exits by its drain deadline. It never
//! keeps serving as an orphan.

use core::time::Duration;
use std::collections::VecDeque;

use crate::ids::{Generation, WorkerId};
use crate::proto::{ParentMessage, WorkerMessage};
use crate::request_stats::RequestStats;
use crate::time::{Instant, earliest};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for HELLO.
    Connecting,
    /// Building listeners, site, caches; not accepting.
    Preparing,
    /// PREPARED sent; waiting for COMMIT.
    Prepared,
    /// Accepting and serving.
    Serving,
    /// Not accepting; finishing in-flight work.
    Draining,
    /// Exit requested.
    Done,
}

/// What the worker's driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerAction {
    Send(WorkerMessage),
    /// Build everything needed to serve (HELLO arrived).
    Prepare,
    StartAccepting,
    /// Stop admission; tell open connections to finish (HTTP/1 `Connection: close`,
    /// HTTP/2 GOAWAY).
    StopAccepting,
    /// Every request of the drain is finished: run the application's shutdown (ASGI
    /// lifespan) and report `app_shut_down` when it has.
    ShutDownApp,
    Exit {
        code: i32,
    },
}

/// Where the application's shutdown is (for a worker whose application has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppShutdown {
    /// Due once the drain has finished every request.
    Pending,
    Running,
    Done,
}

#[derive(Debug, Clone)]
pub struct WorkerLifecycle {
    phase: Phase,
    worker: Option<WorkerId>,
    generation: Generation,
    heartbeat_interval: Duration,
    drain_timeout: Duration,
    next_beat: Option<Instant>,
    drain_deadline: Option<Instant>,
    channel_open: bool,
    in_flight: u32,
    /// Requests between head and end of response, as the driver last counted them.
    requests_in_progress: u32,
    requests: u64,
    /// The request counters the next heartbeat carries, as the driver last gave them.
    /// Shared with the heartbeats that carry them: a beat does not copy them.
    stats: Arc<RequestStats>,
    /// When the worker hosts an application: the last time its interpreter answered the
    /// driver's probe. A worker beats only while this is recent (see [`Self::watch_app`]).
    app_alive_at: Option<Instant>,
    /// Resident memory in bytes as the driver last measured it (0: not measured).
    memory: u64,
    /// Periodic heartbeats sent so far (for a simulator's oracle of what was reported).
    beats_sent: u64,
    /// The application's shutdown, when it has one.
    app_shutdown: Option<AppShutdown>,
    actions: VecDeque<WorkerAction>,
}

impl Default for WorkerLifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerLifecycle {
    pub fn new() -> Self {
        WorkerLifecycle {
            phase: Phase::Connecting,
            worker: None,
            generation: Generation(0),
            heartbeat_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            next_beat: None,
            drain_deadline: None,
            channel_open: true,
            in_flight: 0,
            requests_in_progress: 0,
            requests: 0,
            stats: Arc::default(),
            app_alive_at: None,
            memory: 0,
            beats_sent: 0,
            app_shutdown: None,
            actions: VecDeque::new(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn worker(&self) -> Option<WorkerId> {
        self.worker
    }

    pub fn generation(&self) -> Generation {
        self.generation
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The periodic heartbeats sent so far (not the final one).
    pub fn beats_sent(&self) -> u64 {
        self.beats_sent
    }

    pub fn accepting(&self) -> bool {
        self.phase == Phase::Serving
    }

    pub fn poll_action(&mut self) -> Option<WorkerAction> {
        self.actions.pop_front()
    }

    pub fn on_message(&mut self, now: Instant, message: &ParentMessage) {
        match *message {
            ParentMessage::Hello {
                worker,
                generation,
                heartbeat_interval_ms,
                drain_timeout_ms,
            } if self.phase == Phase::Connecting => {
                self.worker = Some(worker);
                self.generation = generation;
                self.heartbeat_interval = Duration::from_millis(heartbeat_interval_ms.max(1));
                self.drain_timeout = Duration::from_millis(drain_timeout_ms);
                self.phase = Phase::Preparing;
                self.actions.push_back(WorkerAction::Prepare);
            }
            ParentMessage::Commit if self.phase == Phase::Prepared => {
                self.phase = Phase::Serving;
                self.actions.push_back(WorkerAction::StartAccepting);
                self.send(WorkerMessage::Ready);
                self.next_beat = Some(now + self.heartbeat_interval);
            }
            ParentMessage::Drain { deadline_ms } => {
                self.drain(now, Duration::from_millis(deadline_ms));
            }
            _ => {}
        }
    }

    /// Preparation finished.
    pub fn prepared(&mut self, now: Instant) {
        if self.phase == Phase::Preparing {
            self.phase = Phase::Prepared;
            self.send(WorkerMessage::Prepared);
            // Beat while waiting for the quorum too, so a slow barrier is not a hang.
            self.next_beat = Some(now + self.heartbeat_interval);
        }
    }

    /// Preparation failed: say why, then exit.
    pub fn startup_failed(&mut self, error: String) {
        if matches!(
            self.phase,
            Phase::Connecting | Phase::Preparing | Phase::Prepared
        ) {
            self.send(WorkerMessage::StartupFailed { error });
            self.exit(1);
        }
    }

    /// The worker hosts an application (Python code) from `now` on. Its interpreter can
    /// be wedged while the worker's own threads run on: a request stuck in C code holding
    /// the GIL stops every Python thread of the worker, yet the event loop would go on
    /// beating. So from now on the worker beats only while the interpreter has answered
    /// (`app_alive`) within the last heartbeat interval; a wedged interpreter then goes
    /// silent, and the parent's heartbeat timeout replaces the worker as any hang.
    pub fn watch_app(&mut self, now: Instant) {
        self.app_alive_at = Some(now);
    }

    /// The application has a shutdown to run when the worker drains (ASGI lifespan). It
    /// runs once every request of the drain is finished, while the worker still beats, and
    /// the worker exits when it is done, or at the drain deadline, whichever comes first:
    /// a shutdown that overruns is cut with the drain.
    pub fn app_has_shutdown(&mut self) {
        self.app_shutdown = Some(AppShutdown::Pending);
    }

    /// Whether the application's shutdown was running when the worker ended: it was cut
    /// at the drain deadline.
    pub fn app_shutdown_cut(&self) -> bool {
        self.phase == Phase::Done && self.app_shutdown == Some(AppShutdown::Running)
    }

    /// The application's shutdown finished (or failed: either way it is over).
    pub fn app_shut_down(&mut self, now: Instant) {
        if self.app_shutdown == Some(AppShutdown::Running) {
            self.app_shutdown = Some(AppShutdown::Done);
            self.maybe_finish(now);
        }
    }

    /// The application's interpreter answered the driver's probe at `at`.
    pub fn app_alive(&mut self, at: Instant) {
        if let Some(last) = &mut self.app_alive_at
            && at > *last
        {
            *last = at;
        }
    }

    /// Whether the application (when there is one) has answered recently enough for the
    /// worker to say it is alive at `now`: within two heartbeat intervals, so a probe that
    /// answered just after the previous beat is not a miss.
    fn app_answering(&self, now: Instant) -> bool {
        self.app_alive_at
            .is_none_or(|t| now.saturating_since(t) <= self.heartbeat_interval * 2)
    }

    pub fn connection_opened(&mut self) {
        self.in_flight += 1;
    }

    pub fn connection_closed(&mut self, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.maybe_finish(now);
    }

    pub fn request_served(&mut self) {
        self.requests += 1;
    }

    /// The worker's request counters since it started, for the heartbeats from now on.
    pub fn set_stats(&mut self, stats: RequestStats) {
        self.stats = Arc::new(stats);
    }

    /// The worker's resident memory in bytes, measured by the driver, for the heartbeats
    /// from now on (the parent recycles by it: `worker_max_rss`).
    pub fn set_memory(&mut self, bytes: u64) {
        self.memory = bytes;
    }

    /// A heartbeat with what the worker knows now, for a driver that sends one last
    /// beat as it exits, so the parent counts the requests served since the last one.
    pub fn final_heartbeat(&self) -> WorkerMessage {
        WorkerMessage::Heartbeat {
            requests: self.requests,
            connections: self.in_flight,
            requests_in_progress: self.requests_in_progress,
            memory: self.memory,
            stats: Arc::clone(&self.stats),
        }
    }

    /// The parent is gone (EOF on the control channel): drain on our own clock.
    pub fn channel_closed(&mut self, now: Instant) {
        self.channel_open = false;
        self.next_beat = None;
        if matches!(
            self.phase,
            Phase::Connecting | Phase::Preparing | Phase::Prepared
        ) {
            return self.exit(1);
        }
        self.drain(now, self.drain_timeout);
    }

    /// TERM: drain, but the parent's KILL follows soon, so do not dawdle.
    pub fn terminate(&mut self, now: Instant) {
        if matches!(
            self.phase,
            Phase::Connecting | Phase::Preparing | Phase::Prepared
        ) {
            return self.exit(0);
        }
        self.drain(now, Duration::ZERO);
    }

    fn drain(&mut self, now: Instant, within: Duration) {
        match self.phase {
            Phase::Serving => {
                self.phase = Phase::Draining;
                self.actions.push_back(WorkerAction::StopAccepting);
                self.drain_deadline = Some(now + within);
                self.maybe_finish(now);
            }
            Phase::Draining => {
                let deadline = now + within;
                if self.drain_deadline.is_none_or(|d| deadline < d) {
                    self.drain_deadline = Some(deadline);
                }
                self.maybe_finish(now);
            }
            Phase::Connecting | Phase::Preparing | Phase::Prepared => self.exit(0),
            Phase::Done => {}
        }
    }

    fn maybe_finish(&mut self, now: Instant) {
        if self.phase != Phase::Draining {
            return;
        }
        if self.drain_deadline.is_some_and(|d| d <= now) {
            // Time is up, for the requests and the application's shutdown alike.
            return self.exit(0);
        }
        if self.in_flight > 0 {
            return;
        }
        match self.app_shutdown {
            Some(AppShutdown::Pending) => {
                self.app_shutdown = Some(AppShutdown::Running);
                self.actions.push_back(WorkerAction::ShutDownApp);
            }
            Some(AppShutdown::Running) => {}
            Some(AppShutdown::Done) | None => self.exit(0),
        }
    }

    fn exit(&mut self, code: i32) {
        if self.phase != Phase::Done {
            self.phase = Phase::Done;
            self.next_beat = None;
            self.actions.push_back(WorkerAction::Exit { code });
        }
    }

    fn send(&mut self, message: WorkerMessage) {
        if self.channel_open {
            self.actions.push_back(WorkerAction::Send(message));
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if self.phase == Phase::Done && self.next_beat.is_some() {
            return Err("a finished worker still schedules heartbeats".into());
        }
        if !self.channel_open && self.next_beat.is_some() {
            return Err("heartbeats scheduled on a closed channel".into());
        }
        if self.phase == Phase::Draining && self.drain_deadline.is_none() {
            return Err("draining without a deadline".into());
        }
        if matches!(self.phase, Phase::Connecting | Phase::Preparing)
            && self.worker.is_none() != (self.phase == Phase::Connecting)
        {
            return Err("identity and phase disagree".into());
        }
        Ok(())
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        earliest(
            self.next_beat,
            (self.phase == Phase::Draining)
                .then_some(self.drain_deadline)
                .flatten(),
        )
    }

    /// Time passed: beat when one is due, finish a drain when it may. `connections` and
    /// `requests_in_progress` are the driver's counts now, for the beat.
    pub fn handle_timeout(&mut self, now: Instant, connections: u32, requests_in_progress: u32) {
        self.requests_in_progress = requests_in_progress;
        if let Some(t) = self.next_beat
            && t <= now
            && self.channel_open
        {
            // A wedged application withholds the beat (the next one is still scheduled,
            // so an interpreter that comes back beats again at once).
            if self.app_answering(now) {
                self.beats_sent += 1;
                self.send(WorkerMessage::Heartbeat {
                    requests: self.requests,
                    connections,
                    requests_in_progress,
                    memory: self.memory,
                    stats: Arc::clone(&self.stats),
                });
            }
            self.next_beat = Some(now + self.heartbeat_interval);
        }
        self.maybe_finish(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain_actions(w: &mut WorkerLifecycle) -> Vec<WorkerAction> {
        std::iter::from_fn(|| w.poll_action()).collect()
    }

    fn hello() -> ParentMessage {
        ParentMessage::Hello {
            worker: WorkerId(3),
            generation: Generation(1),
            heartbeat_interval_ms: 100,
            drain_timeout_ms: 1000,
        }
    }

    #[test]
    fn barrier_then_beats_then_drain_on_parent_death() {
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        w.on_message(t, &ParentMessage::Commit);
        assert!(
            drain_actions(&mut w).is_empty(),
            "COMMIT before HELLO means nothing"
        );
        w.on_message(t, &hello());
        assert_eq!(drain_actions(&mut w), [WorkerAction::Prepare]);
        w.on_message(t, &hello());
        assert!(
            drain_actions(&mut w).is_empty(),
            "a second HELLO changes nothing"
        );
        assert_eq!(w.worker(), Some(WorkerId(3)));
        w.prepared(t);
        assert_eq!(
            drain_actions(&mut w),
            [WorkerAction::Send(WorkerMessage::Prepared)]
        );
        w.on_message(t, &ParentMessage::Commit);
        assert_eq!(
            drain_actions(&mut w),
            [
                WorkerAction::StartAccepting,
                WorkerAction::Send(WorkerMessage::Ready)
            ]
        );
        assert!(w.accepting(), "a committed worker accepts");
        w.request_served();
        w.request_served();
        assert_eq!(w.requests(), 2);
        w.connection_opened();
        let t1 = t + Duration::from_millis(100);
        assert_eq!(w.poll_timeout(), Some(t1));
        w.handle_timeout(t1, 1, 0);
        assert!(matches!(
            drain_actions(&mut w)[..],
            [WorkerAction::Send(WorkerMessage::Heartbeat { .. })]
        ));
        w.channel_closed(t1);
        assert_eq!(drain_actions(&mut w), [WorkerAction::StopAccepting]);
        assert!(!w.accepting());
        let deadline = t1 + Duration::from_millis(1000);
        assert_eq!(w.poll_timeout(), Some(deadline));
        w.handle_timeout(deadline, 1, 0);
        assert_eq!(drain_actions(&mut w), [WorkerAction::Exit { code: 0 }]);
    }

    fn beats(w: &mut WorkerLifecycle) -> usize {
        drain_actions(w)
            .iter()
            .filter(|a| matches!(a, WorkerAction::Send(WorkerMessage::Heartbeat { .. })))
            .count()
    }

    #[test]
    fn a_wedged_application_withholds_heartbeats_until_it_answers_again() {
        // heartbeat interval 100 ms (hello): the app must have answered within 200 ms.
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        w.on_message(t, &hello());
        w.watch_app(t);
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        drain_actions(&mut w);
        let ms = |n| t + Duration::from_millis(n);
        w.app_alive(ms(150));
        w.handle_timeout(ms(100), 0, 0);
        assert_eq!(beats(&mut w), 1, "an answering app beats");
        w.handle_timeout(ms(200), 0, 0);
        w.handle_timeout(ms(300), 0, 0);
        assert_eq!(
            beats(&mut w),
            2,
            "answered 150 ms ago at most: still beating"
        );
        w.handle_timeout(ms(400), 0, 0);
        w.handle_timeout(ms(500), 0, 0);
        assert_eq!(
            beats(&mut w),
            0,
            "app-liveness rule: an interpreter silent for over two heartbeat intervals must withhold the worker's heartbeats"
        );
        assert_eq!(
            w.poll_timeout(),
            Some(ms(600)),
            "the next beat stays scheduled"
        );
        w.app_alive(ms(550));
        w.app_alive(ms(120));
        w.handle_timeout(ms(600), 0, 0);
        assert_eq!(
            beats(&mut w),
            1,
            "an interpreter that answers again beats again"
        );
        // Without an application nothing is withheld.
        let mut plain = WorkerLifecycle::new();
        plain.on_message(t, &hello());
        plain.prepared(t);
        plain.on_message(t, &ParentMessage::Commit);
        drain_actions(&mut plain);
        plain.handle_timeout(ms(5_000), 0, 0);
        assert_eq!(beats(&mut plain), 1, "a worker without an app always beats");
    }

    #[test]
    fn the_application_shuts_down_after_the_last_request_and_before_the_exit() {
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        let ms = |n| t + Duration::from_millis(n);
        w.on_message(t, &hello());
        w.app_has_shutdown();
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        w.connection_opened();
        drain_actions(&mut w);
        w.on_message(ms(10), &ParentMessage::Drain { deadline_ms: 1000 });
        assert_eq!(drain_actions(&mut w), [WorkerAction::StopAccepting]);
        assert_eq!(
            drain_actions(&mut w),
            [],
            "shutdown rule: the application's shutdown must wait for the requests in flight"
        );
        w.connection_closed(ms(20));
        assert_eq!(
            drain_actions(&mut w),
            [WorkerAction::ShutDownApp],
            "shutdown rule: the last request's end starts the application's shutdown, not the exit"
        );
        // Still draining, so still beating while the shutdown runs.
        w.handle_timeout(ms(110), 0, 0);
        let acts = drain_actions(&mut w);
        assert!(
            !acts.contains(&WorkerAction::Exit { code: 0 }),
            "shutdown rule: the worker must not exit while its application shuts down"
        );
        assert!(
            matches!(
                acts[..],
                [WorkerAction::Send(WorkerMessage::Heartbeat { .. })]
            ),
            "a worker shutting its application down beats: {acts:?}"
        );
        w.app_shut_down(ms(150));
        assert_eq!(
            drain_actions(&mut w),
            [WorkerAction::Exit { code: 0 }],
            "shutdown rule: the end of the application's shutdown ends the worker"
        );

        // One that overruns is cut at the drain deadline.
        let mut w = WorkerLifecycle::new();
        w.on_message(t, &hello());
        w.app_has_shutdown();
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        drain_actions(&mut w);
        w.on_message(ms(10), &ParentMessage::Drain { deadline_ms: 1000 });
        assert_eq!(
            drain_actions(&mut w),
            [WorkerAction::StopAccepting, WorkerAction::ShutDownApp]
        );
        assert_eq!(w.poll_timeout(), Some(ms(100)), "beats go on");
        w.handle_timeout(ms(500), 0, 0);
        assert!(
            !drain_actions(&mut w).contains(&WorkerAction::Exit { code: 0 }),
            "shutdown rule: the worker must not exit while its application shuts down"
        );
        assert!(!w.app_shutdown_cut());
        w.handle_timeout(ms(1010), 0, 0);
        assert!(
            drain_actions(&mut w).contains(&WorkerAction::Exit { code: 0 }),
            "shutdown rule: a shutdown past the drain deadline is cut"
        );
        assert!(w.app_shutdown_cut(), "the cut is reported");
        w.app_shut_down(ms(1020));
        assert_eq!(drain_actions(&mut w), [], "nothing after the exit");
    }

    #[test]
    fn term_during_a_long_drain_shortens_it() {
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        w.on_message(t, &hello());
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        w.connection_opened();
        w.on_message(t, &ParentMessage::Drain { deadline_ms: 5000 });
        drain_actions(&mut w);
        let t1 = t + Duration::from_secs(1);
        w.handle_timeout(t1, 1, 0);
        assert!(
            !drain_actions(&mut w).contains(&WorkerAction::Exit { code: 0 }),
            "still inside the 5 s drain"
        );
        w.terminate(t1);
        assert_eq!(
            drain_actions(&mut w),
            [WorkerAction::Exit { code: 0 }],
            "TERM ends the drain now"
        );
        w.check_invariants().expect("invariants");
    }

    #[test]
    fn drain_finishes_when_the_last_connection_closes() {
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        w.on_message(t, &hello());
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        w.connection_opened();
        drain_actions(&mut w);
        w.on_message(t, &ParentMessage::Drain { deadline_ms: 5000 });
        assert_eq!(drain_actions(&mut w), [WorkerAction::StopAccepting]);
        assert_eq!(w.in_flight(), 1);
        w.connection_closed(t);
        assert_eq!(w.in_flight(), 0);
        assert_eq!(drain_actions(&mut w), [WorkerAction::Exit { code: 0 }]);
    }

    #[test]
    fn a_draining_worker_keeps_beating_until_it_exits() {
        // The parent judges a draining worker by its heartbeats too: a slow drain that is
        // healthy must keep proving it.
        let mut w = WorkerLifecycle::new();
        let t = Instant::ZERO;
        w.on_message(t, &hello());
        w.prepared(t);
        w.on_message(t, &ParentMessage::Commit);
        w.connection_opened();
        drain_actions(&mut w);
        w.on_message(t, &ParentMessage::Drain { deadline_ms: 1000 });
        assert_eq!(drain_actions(&mut w), [WorkerAction::StopAccepting]);
        let mut beats = 0;
        let mut now = t;
        while let Some(next) = w.poll_timeout()
            && next < t + Duration::from_millis(1000)
        {
            now = next;
            w.handle_timeout(now, 1, 0);
            for a in drain_actions(&mut w) {
                assert!(
                    matches!(a, WorkerAction::Send(WorkerMessage::Heartbeat { .. })),
                    "{a:?}"
                );
                beats += 1;
            }
        }
        assert_eq!(beats, 9, "a beat every 100 ms through the 1 s drain");
        assert_eq!(w.phase(), Phase::Draining);
        w.connection_closed(now);
        assert_eq!(drain_actions(&mut w), [WorkerAction::Exit { code: 0 }]);
        assert_eq!(w.poll_timeout(), None, "no beat after the exit");
    }

    #[test]
    fn broken_states_are_reported() {
        let mut w = WorkerLifecycle::new();
        w.check_invariants().expect("a new worker is consistent");
        w.phase = Phase::Draining;
        assert!(w.check_invariants().is_err(), "draining without a deadline");
        let mut w = WorkerLifecycle::new();
        w.phase = Phase::Done;
        w.next_beat = Some(Instant::ZERO);
        assert!(w.check_invariants().is_err(), "beats after exit");
    }
}
