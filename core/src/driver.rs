//! The driver loops, written once. `io-real` and `io-sim` implement [`ParentIo`]; the loop
//! that feeds events to the [`Parent`], carries out its actions and arms its timer is
//! [`run`], so the code the simulation proves is the code that runs. The same holds for a
//! worker: both implement [`WorkerIo`], and [`dispatch_worker`] carries out what its
//! [`WorkerLifecycle`] decides.

use crate::parent::{JournalWrite, Parent, ParentAction};
use crate::proto::{DavLockInfo, WorkerMessage};
use crate::supervisor::{Action, Event};
use crate::time::Instant;
use crate::worker::{WorkerAction, WorkerLifecycle};

/// What woke the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Wakeup {
    Event(Instant, Event),
    /// Everything one look at the host found at once (a poll that found several channels
    /// ready; a reap, with every channel read out first), each source's events in their
    /// own order and the sources in no order: the parent orders them
    /// ([`Parent::intake`]).
    Found(Instant, Vec<Event>),
    /// The deadline passed (or the I/O layer wants a timer check). The only wakeup after
    /// which deadlines are judged: see [`ParentIo::wait`].
    Timeout(Instant),
    /// The log writer finished a batch and can take another.
    LogWritten(Instant),
    /// The parent process is gone as if killed: nothing more is performed, and its workers
    /// learn of it when their control channels end. Only the simulator's parent-crash
    /// fault produces it.
    Crashed,
    /// The host cannot carry on: the real driver's poll or event channel failed, or a
    /// simulated run reached its bound or stopped making progress. `run` returns and the
    /// driver stops every worker it started.
    HostFailed,
}

/// How [`run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The parent finished and exits with this code.
    Exited(i32),
    /// [`Wakeup::Crashed`].
    Crashed,
    /// [`Wakeup::HostFailed`].
    HostFailed,
}

/// The host side of the parent: processes, channels, listeners, files and time.
pub trait ParentIo {
    /// Block until something happens or `deadline` passes.
    fn wait(&mut self, deadline: Option<Instant>) -> Wakeup;
    /// Everything that has already arrived, taken in without blocking and in arrival
    /// order, in one pass (what keeps arriving meanwhile waits for the next `wait`, so a
    /// flood cannot hold a deadline off). [`run`] calls it before it judges deadlines.
    fn arrived(&mut self) -> Vec<Wakeup>;
    /// Carry out one action. `Exit` is performed last, after which `run` returns; a
    /// journal goes to [`ParentIo::persist_dav_locks`] instead.
    fn perform(&mut self, now: Instant, action: ParentAction);
    /// Write the WebDAV lock journal (every live lock, replacing the last one) before the
    /// next action, and say whether it is on disk. What a failure means for the locks is
    /// the parent's to decide ([`Parent::dav_journal_written`]), before their answers go.
    fn persist_dav_locks(&mut self, now: Instant, locks: &[DavLockInfo]) -> JournalWrite;
    /// The parent refused these locks after a failed journal write (for the log).
    fn dav_locks_refused(&mut self, _now: Instant, _refused: &[crate::LeaseId]) {}
    /// Whether the sole log writer can take a batch now.
    fn log_writer_idle(&self) -> bool;
    /// Hand a batch of access-log records to the writer.
    fn write_log(&mut self, now: Instant, batch: Vec<String>);
    /// Called after every step, with the machine settled: the simulator checks
    /// invariants and traces here.
    fn observe(&mut self, _now: Instant, _parent: &Parent) {}
}

/// Largest access-log batch handed to the writer at once.
pub const LOG_BATCH: usize = 256;

/// Run the parent until it exits or its host gives out.
///
/// One rule lives here rather than in each driver: before deadlines are judged, every input
/// that has already arrived is handled. A heartbeat waiting unread in a channel after the
/// parent itself was stalled (stopped, swapped out, starved) proves its worker alive, and
/// judging deadlines first would kill healthy workers (the `parent-stall` scenario).
pub fn run<I: ParentIo>(parent: &mut Parent, io: &mut I, start: Instant) -> RunEnd {
    let mut now = start;
    parent.handle(now, Event::Start);
    loop {
        while let Some(action) = parent.poll_action() {
            if let ParentAction::Supervisor(Action::Exit { code }) = action {
                io.observe(now, parent);
                io.perform(now, action);
                return RunEnd::Exited(code);
            }
            if let ParentAction::PersistDavLocks(locks) = &action {
                let outcome = io.persist_dav_locks(now, locks);
                let refused = parent.dav_journal_written(outcome);
                if !refused.is_empty() {
                    io.dav_locks_refused(now, &refused);
                }
                continue;
            }
            io.perform(now, action);
        }
        if io.log_writer_idle() {
            let batch = parent.take_log_batch(LOG_BATCH);
            if !batch.is_empty() {
                io.write_log(now, batch);
                continue;
            }
        }
        io.observe(now, parent);
        let timer_check = match io.wait(parent.poll_timeout()) {
            Wakeup::Event(t, event) => {
                now = now.max(t);
                parent.handle(now, event);
                false
            }
            Wakeup::Found(t, found) => {
                now = now.max(t);
                parent.intake(now, found);
                false
            }
            Wakeup::Timeout(t) | Wakeup::LogWritten(t) => {
                now = now.max(t);
                true
            }
            Wakeup::Crashed => return RunEnd::Crashed,
            Wakeup::HostFailed => return RunEnd::HostFailed,
        };
        if timer_check && parent.poll_timeout().is_some_and(|d| d <= now) {
            for wakeup in io.arrived() {
                match wakeup {
                    Wakeup::Event(t, event) => {
                        now = now.max(t);
                        parent.handle(now, event);
                    }
                    Wakeup::Found(t, found) => {
                        now = now.max(t);
                        parent.intake(now, found);
                    }
                    Wakeup::Timeout(t) | Wakeup::LogWritten(t) => now = now.max(t),
                    Wakeup::Crashed => return RunEnd::Crashed,
                    Wakeup::HostFailed => return RunEnd::HostFailed,
                }
            }
            if parent.poll_timeout().is_some_and(|d| d <= now) {
                parent.handle_timeout(now);
            }
        }
    }
}

/// The host side of a worker process: its control channel, its listeners and whatever it
/// serves with.
pub trait WorkerIo {
    /// The worker's lifecycle machine, which the driver feeds with messages, timeouts and
    /// connection counts.
    fn lifecycle(&mut self) -> &mut WorkerLifecycle;
    /// Write `message` to the parent.
    fn send(&mut self, message: WorkerMessage);
    /// Start building what serving needs; the outcome goes back to the lifecycle as
    /// `prepared` or `startup_failed` (possibly later: preparing may take time).
    fn prepare(&mut self);
    /// Admit connections from the listeners.
    fn start_accepting(&mut self);
    /// Admit no more, and tell open connections to finish (HTTP/1 `Connection: close`,
    /// HTTP/2 GOAWAY).
    fn stop_accepting(&mut self);
    /// Run the application's shutdown (ASGI lifespan), then tell the lifecycle
    /// `app_shut_down` (possibly later: it takes the application's time).
    fn shut_down_app(&mut self);
}

/// Carries out, in order, every action the worker's lifecycle has queued. Returns the exit
/// code when the lifecycle is done; nothing queued after `Exit` is carried out, and ending
/// the process is the driver's own business.
pub fn dispatch_worker<I: WorkerIo>(io: &mut I) -> Option<i32> {
    while let Some(action) = io.lifecycle().poll_action() {
        match action {
            WorkerAction::Send(message) => io.send(message),
            WorkerAction::Prepare => io.prepare(),
            WorkerAction::StartAccepting => io.start_accepting(),
            WorkerAction::StopAccepting => io.stop_accepting(),
            WorkerAction::ShutDownApp => io.shut_down_app(),
            WorkerAction::Exit { code } => return Some(code),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Generation, WorkerId};
    use crate::proto::ParentMessage;

    /// A worker host that records what the driver asked of it.
    struct Recorder {
        life: WorkerLifecycle,
        done: Vec<String>,
    }

    impl WorkerIo for Recorder {
        fn lifecycle(&mut self) -> &mut WorkerLifecycle {
            &mut self.life
        }
        fn send(&mut self, message: WorkerMessage) {
            self.done.push(format!("send {message:?}"));
        }
        fn prepare(&mut self) {
            self.done.push("prepare".into());
        }
        fn start_accepting(&mut self) {
            self.done.push("start accepting".into());
        }
        fn stop_accepting(&mut self) {
            self.done.push("stop accepting".into());
        }
        fn shut_down_app(&mut self) {
            self.done.push("shut down the application".into());
        }
    }

    /// A parent host that answers each `wait` at the deadline it was given, first with an
    /// event, then with the timer, and records what the loop asked of it.
    struct AtTheDeadline {
        waits: usize,
        calls: Vec<&'static str>,
    }

    impl ParentIo for AtTheDeadline {
        fn wait(&mut self, deadline: Option<Instant>) -> Wakeup {
            self.calls.push("wait");
            self.waits += 1;
            let Some(at) = deadline else {
                return Wakeup::HostFailed;
            };
            match self.waits {
                // Nobody has this id: handling it changes nothing.
                1 => Wakeup::Event(
                    at,
                    Event::ChannelClosed {
                        worker: crate::ids::WorkerId(999),
                    },
                ),
                2 => Wakeup::Timeout(at),
                _ => Wakeup::HostFailed,
            }
        }
        fn arrived(&mut self) -> Vec<Wakeup> {
            self.calls.push("arrived");
            Vec::new()
        }
        fn perform(&mut self, _now: Instant, _action: ParentAction) {}
        fn persist_dav_locks(&mut self, _now: Instant, _locks: &[DavLockInfo]) -> JournalWrite {
            JournalWrite::Written
        }
        fn log_writer_idle(&self) -> bool {
            true
        }
        fn write_log(&mut self, _now: Instant, _batch: Vec<String>) {}
    }

    /// Deadlines are judged after a timer wakeup only, once what arrived is read: an event
    /// that comes in at a deadline is handled and its actions carried out, and the deadline
    /// waits for the timer wakeup that the next `wait` gives at once.
    #[test]
    fn a_deadline_is_judged_after_the_timer_wakeup_not_on_an_event() {
        // The start deadline (1 s) comes before the first watch-period wakeup (29.5 s),
        // so the first `wait` is given a deadline the supervisor judges.
        let mut raw = crate::config::RawConfig::default();
        raw.recovery.worker_start_timeout = 1.0;
        raw.recovery.heartbeat_timeout = 60.0;
        let config = raw.validate().expect("valid");
        let mut parent = Parent::new(config, crate::supervisor::Platform::Posix, [1; 32]);
        let mut io = AtTheDeadline {
            waits: 0,
            calls: Vec::new(),
        };
        assert_eq!(run(&mut parent, &mut io, Instant::ZERO), RunEnd::HostFailed);
        assert_eq!(io.calls, ["wait", "wait", "arrived", "wait"]);
    }

    #[test]
    fn the_worker_driver_carries_out_each_action_in_order_and_returns_the_exit_code() {
        let t = Instant::ZERO;
        let mut io = Recorder {
            life: WorkerLifecycle::new(),
            done: Vec::new(),
        };
        io.life.on_message(
            t,
            &ParentMessage::Hello {
                worker: WorkerId(1),
                generation: Generation(1),
                heartbeat_interval_ms: 100,
                drain_timeout_ms: 1000,
            },
        );
        assert_eq!(dispatch_worker(&mut io), None);
        io.life.prepared(t);
        io.life.on_message(t, &ParentMessage::Commit);
        assert_eq!(dispatch_worker(&mut io), None);
        assert_eq!(
            io.done,
            ["prepare", "send Prepared", "start accepting", "send Ready"]
        );
        // The parent is gone and nothing is open: the worker stops accepting and exits.
        io.done.clear();
        io.life.channel_closed(t);
        let code = dispatch_worker(&mut io);
        assert_eq!(io.done.first().map(String::as_str), Some("stop accepting"));
        assert_eq!(code, Some(0), "{:?}", io.done);
        assert_eq!(
            dispatch_worker(&mut io),
            None,
            "nothing is left to carry out"
        );
    }
}
