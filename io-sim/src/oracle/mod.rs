//! The lifecycle oracle: rules about capacity, backoff and restart accounting, judged
//! after every step of every run from what the parent's driver sees — the spawns, COMMITs,
//! DRAINs, TERMs and KILLs the parent orders, the READYs and reaps it reads — and never
//! from the supervisor's own bookkeeping, so a supervisor that breaks a rule cannot also
//! vouch for it.
//!
//! - **capacity rule**: a ready worker of the committed generation is drained (outside a
//!   stop) only once what replaces it is ready: in a recycle, a newer worker of its slot
//!   whose READY the parent has read; in a reload, every worker of the new generation.
//! - **surge rule (N + 1)**: no generation ever has more than its N workers + 1 that the
//!   parent has not begun to end.
//! - **backoff rule**: a lost member's replacement is spawned no earlier than its reap +
//!   the policy's delay for that attempt, and no later than that + [`SLACK`] (unless the
//!   parent itself did not run meanwhile); a failed recycle replacement's retry likewise.
//! - **restart accounting rule**: every lost member (crash, startup failure, hang,
//!   malformed frame, exit) is one attempt against the restart window, counted once (a
//!   worker whose recycle replacement has sent READY is no longer a member: dying before
//!   its DRAIN goes out costs nothing); the
//!   service fails exactly when the policy says ([`restarts`]), and its status reports the
//!   same count.
//! - **readiness rule**: once a generation is committed, the readiness the supervisor
//!   reports (`/readyz`, `ctl status`) follows the workers whose READY the parent read and
//!   has not begun to end, at most N of them: `ready` with N, `degraded` from the
//!   configured minimum up, `unready` below it; before any commit it is `unready`.
//! - **answer rule** ([`answers`]): every operator request read is answered exactly once,
//!   as the service's state requires.
//! - **HTTP/3 steering rule** ([`quic`]): new QUIC connections never go to a worker told to
//!   drain, and every worker under `--http3` reads a socket of its own.
//! - **CPU affinity rule** ([`affinity`]): application workers under `auto` get disjoint
//!   shares of the host's CPUs that cover them (one CPU each when they outnumber the
//!   CPUs), a replacement its slot's share; nobody else is pinned.
//! - **reload rejection rule**: a reload rejected because a worker of its generation was
//!   lost carries that worker's startup failure (an application's reason) when the parent
//!   read one, and no worker of the rejected generation that was never committed is left
//!   unended (the parent ordered its KILL with the rejection).
//!
//! - **intake rule** ([`intake`]): the first generation fails to start only on a
//!   candidate's end found in a look before the one that completed its READYs.
//! - **commit rule**: no generation is committed after the parent read a startup failure
//!   from one of its workers (the first generation's or a reload's).
//! - **startup rule (first generation)**: once the parent read a startup failure before
//!   any commit, it spawns no more workers of that generation: the service fails with
//!   the reason instead of retrying a start that cannot succeed.
//!
//! (The **startup rule** — no connection reaches a worker before it reported PREPARED —
//! is judged where the simulated listener hands connections out.)

mod affinity;
mod answers;
mod intake;
mod quic;
mod restarts;

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use servery_core::config::{RecoveryPolicy, ValidConfig};
use servery_core::supervisor::{FailureReason, Readiness, Supervisor};
use servery_core::{Instant, WorkerId};

use restarts::{RestartModel, SlotRun, Verdict, delay};

/// How late after its due time a replacement may be spawned. The simulated parent wakes
/// at its deadline to the nanosecond; a millisecond allows for the order of events at one
/// instant without letting any real lateness through.
pub(crate) const SLACK: Duration = Duration::from_millis(1);

/// A worker as the parent's orders and reads show it.
#[derive(Debug, Clone)]
struct Tracked {
    generation: u64,
    slot: u64,
    commit_sent: bool,
    /// When the parent read its READY (after its COMMIT, before any drain).
    ready_at: Option<Instant>,
    /// The parent sent it DRAIN: retired politely.
    drained: bool,
    /// The parent sent it DRAIN, TERM or KILL.
    ended: bool,
}

impl Tracked {
    fn serving(&self) -> bool {
        self.ready_at.is_some() && !self.ended
    }
}

/// A spawn the policy calls for.
#[derive(Debug, Clone)]
struct Due {
    /// No earlier than this.
    at: Instant,
    /// Why, for the message.
    why: String,
    /// When the wait began (a gap in the parent's running after it excuses lateness).
    since: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct LifecycleOracle {
    workers: BTreeMap<u64, Tracked>,
    /// Each generation's worker count and recovery policy, from its first spawn.
    generations: BTreeMap<u64, (u32, RecoveryPolicy)>,
    committed: Option<u64>,
    /// The parent began to stop, or the policy says the service has failed.
    over: bool,
    model: RestartModel,
    runs: BTreeMap<u64, SlotRun>,
    /// Failed replacements of the recycle in flight, by slot.
    replacement_failures: BTreeMap<u64, u32>,
    /// By (generation, slot).
    due: BTreeMap<(u64, u64), Due>,
    /// The policy's verdict that the service must fail, not yet seen carried out.
    must_fail: Option<(Instant, String)>,
    /// A member was lost since the status was last compared.
    recount: bool,
    /// When the parent did not run: stalls and clock jumps (from, to).
    gaps: Vec<(Instant, Instant)>,
    violations: Vec<String>,
    /// Operator requests and their answers.
    pub(crate) answers: answers::AnswerBook,
    /// Where the parent steers HTTP/3 datagrams.
    pub(crate) quic: quic::QuicOracle,
    /// Which CPUs the parent starts each worker on.
    pub(crate) cpus: affinity::CpuOracle,
    /// The looks the host gave the parent, for the intake rule.
    pub(crate) intake: intake::IntakeOracle,
    /// Startup failures the parent read from workers of a generation not committed:
    /// (worker, its generation, its error).
    startup_failures: Vec<(WorkerId, u64, String)>,
    /// Reloads whose generation the parent began bringing up, by reload id: the
    /// generation, until the reload is answered.
    reloads_started: BTreeMap<u64, u64>,
    /// Before any commit, the first worker whose startup failure the parent read.
    first_start_failed: Option<(WorkerId, u64)>,
    /// Workers of a reload attempt the parent rejected: a later reload may bring up the
    /// same generation number, and their failures read after the rejection are not its.
    rejected_attempt: BTreeSet<u64>,
}

fn ms(t: Instant) -> u64 {
    t.as_nanos() / 1_000_000
}

impl LifecycleOracle {
    /// An oracle for a host whose parent may run on `host_cpus`.
    pub(crate) fn on_host(host_cpus: servery_core::cpu_affinity::CpuSet) -> Self {
        LifecycleOracle {
            cpus: affinity::CpuOracle::new(host_cpus),
            ..LifecycleOracle::default()
        }
    }

    /// Breaches found since the last call.
    pub(crate) fn take_violations(&mut self) -> Vec<String> {
        let mut all = core::mem::take(&mut self.violations);
        all.extend(self.answers.take_violations());
        all.extend(self.quic.take_violations());
        all.extend(self.cpus.take_violations());
        all
    }

    /// The parent did not run from `from` to `to` (a stall, a clock jump).
    pub(crate) fn parent_gap(&mut self, from: Instant, to: Instant) {
        self.gaps.push((from, to));
    }

    pub(crate) fn spawned(
        &mut self,
        now: Instant,
        id: WorkerId,
        slot: u64,
        generation: u64,
        c: &ValidConfig,
    ) {
        // The latest spawn's: a rejected reload's generation number is used again by
        // the next reload, perhaps with another worker count.
        let n = c.workers();
        if generation == 1 {
            self.intake.first_generation(n);
        }
        self.generations
            .insert(generation, (n, c.recovery().clone()));
        if let Some((failed, g)) = self.first_start_failed
            && g == generation
        {
            self.violations.push(format!(
                "startup rule (first generation): {id} spawned for slot {slot} at {} ms after {failed}'s startup failed; a first generation that cannot start fails the service, it is not retried",
                ms(now)
            ));
        }
        if !self.over && self.committed == Some(generation) {
            self.judge_spawn_time(now, id, generation, slot);
        }
        self.workers.insert(
            id.0,
            Tracked {
                generation,
                slot,
                commit_sent: false,
                ready_at: None,
                drained: false,
                ended: false,
            },
        );
        let unended = self
            .workers
            .values()
            .filter(|w| w.generation == generation && !w.ended)
            .count();
        if unended > n as usize + 1 {
            self.violations.push(format!(
                "surge rule (N + 1): spawning {id} at {} ms gives generation {generation} {unended} workers not being ended, more than its {n} + 1",
                ms(now)
            ));
        }
    }

    fn judge_spawn_time(&mut self, now: Instant, id: WorkerId, generation: u64, slot: u64) {
        let Some(due) = self.due.remove(&(generation, slot)) else {
            // A recycle's first replacement: its failures count from here.
            if self.other_unretired(id.0, generation, slot).is_some() {
                self.replacement_failures.insert(slot, 0);
            }
            return;
        };
        if now < due.at {
            self.violations.push(format!(
                "backoff rule: {id} (slot {slot}) spawned at {} ms, before {} ms: {}",
                ms(now),
                ms(due.at),
                due.why
            ));
        } else if now > due.at + SLACK && !self.gap_between(due.since, now) {
            self.violations.push(format!(
                "backoff rule: {id} (slot {slot}) spawned at {} ms, later than {} ms + {SLACK:?}: {}",
                ms(now),
                ms(due.at),
                due.why
            ));
        }
    }

    fn gap_between(&self, from: Instant, to: Instant) -> bool {
        self.gaps.iter().any(|&(a, b)| b >= from && a <= to)
    }

    /// A worker of (generation, slot) besides `id` that the parent has neither drained nor
    /// seen reaped: the oldest such.
    fn other_unretired(&self, id: u64, generation: u64, slot: u64) -> Option<u64> {
        self.workers
            .iter()
            .find(|&(&k, w)| k != id && w.generation == generation && w.slot == slot && !w.drained)
            .map(|(&k, _)| k)
    }

    pub(crate) fn commit_sent(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id.0) {
            w.commit_sent = true;
        }
    }

    /// The parent read `id`'s READY at `now`.
    pub(crate) fn ready_read(&mut self, now: Instant, id: WorkerId) {
        if let Some(w) = self.workers.get(&id.0) {
            self.intake.ready(id.0, w.generation);
        }
        if let Some(w) = self.workers.get_mut(&id.0)
            && w.commit_sent
            && !w.drained
            && w.ready_at.is_none()
        {
            w.ready_at = Some(now);
        }
    }

    /// The parent sent `id` TERM or KILL.
    pub(crate) fn ended(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get_mut(&id.0) {
            w.ended = true;
        }
    }

    /// The parent sent `id` DRAIN: judge the capacity rule.
    pub(crate) fn drain_sent(&mut self, now: Instant, id: WorkerId) {
        let Some(w) = self.workers.get(&id.0).cloned() else {
            return;
        };
        if !self.over && self.committed == Some(w.generation) && w.serving() {
            self.judge_capacity(now, id, &w);
        }
        if let Some(w) = self.workers.get_mut(&id.0) {
            w.drained = true;
            w.ended = true;
        }
    }

    fn judge_capacity(&mut self, now: Instant, id: WorkerId, w: &Tracked) {
        let serving_of = |generation: u64| {
            self.workers
                .iter()
                .filter(|&(&k, o)| k != id.0 && o.generation == generation && o.serving())
                .count()
        };
        let newer = self
            .workers
            .values()
            .filter(|o| o.generation > w.generation && !o.ended)
            .map(|o| o.generation)
            .max();
        if let Some(next) = newer {
            let need = self.generations.get(&next).map_or(0, |g| g.0) as usize;
            let ready = serving_of(next);
            if ready < need {
                self.violations.push(format!(
                    "capacity rule: {id} (generation {}, slot {}) was drained at {} ms while {ready} of generation {next}'s {need} workers had sent READY; a reload drains the old generation only after the new one is all ready",
                    w.generation,
                    w.slot,
                    ms(now)
                ));
            }
            return;
        }
        let replaced = self.workers.iter().any(|(&k, o)| {
            k > id.0 && o.generation == w.generation && o.slot == w.slot && o.serving()
        });
        if !replaced {
            let n = self.generations.get(&w.generation).map_or(0, |g| g.0);
            self.violations.push(format!(
                "capacity rule: {id} (generation {}, slot {}) was drained at {} ms before a replacement of its slot had sent READY, leaving {} of {n} workers ready; a recycle drains the old worker only after its replacement's READY",
                w.generation,
                w.slot,
                ms(now),
                serving_of(w.generation)
            ));
        }
    }

    /// A generation was committed: slots start afresh (the window does not).
    pub(crate) fn generation_committed(&mut self, now: Instant, generation: u64) {
        if let Some((id, _, error)) = self.startup_failures.iter().find(|f| f.1 == generation) {
            self.violations.push(format!(
                "commit rule: generation {generation} was committed at {} ms though its worker {id} failed its startup ({error:?}); a generation commits only when every worker of it prepared",
                ms(now)
            ));
        }
        self.committed = Some(generation);
        // Workers of a rejected attempt at the same generation number, being ended: they
        // were never members, and their reaps are no losses.
        for w in self.workers.values_mut() {
            if w.generation == generation && w.ended {
                w.drained = true;
            }
        }
        self.runs.clear();
        self.replacement_failures.clear();
        self.startup_failures.clear();
        self.reloads_started.retain(|_, g| *g > generation);
        self.due.retain(|&(g, _), _| g >= generation);
    }

    /// The parent read `id`'s startup failure.
    pub(crate) fn startup_failure_read(&mut self, id: WorkerId, error: &str) {
        if let Some(w) = self.workers.get(&id.0)
            && self.committed.is_none_or(|c| w.generation > c)
            && !self.rejected_attempt.contains(&id.0)
        {
            self.startup_failures
                .push((id, w.generation, error.to_owned()));
        }
        if self.committed.is_none()
            && let Some(w) = self.workers.get(&id.0)
        {
            self.first_start_failed.get_or_insert((id, w.generation));
        }
    }

    /// The parent began bringing up `generation` for reload `reload`.
    pub(crate) fn reload_started(&mut self, reload: u64, generation: u64) {
        self.reloads_started.insert(reload, generation);
    }

    /// The parent rejected reload `reload` with `message`: judge the reload rejection
    /// rule.
    pub(crate) fn reload_rejected(&mut self, now: Instant, reload: u64, message: &str) {
        let failures = core::mem::take(&mut self.startup_failures);
        // A reload refused before it started (not ready yet, another in progress, a busy
        // port) started nobody.
        let Some(generation) = self.reloads_started.remove(&reload) else {
            self.startup_failures = failures;
            return;
        };
        self.rejected_attempt.extend(
            self.workers
                .iter()
                .filter(|(_, w)| w.generation == generation && !w.commit_sent)
                .map(|(&id, _)| id),
        );
        if self.over {
            return;
        }
        for (id, _, error) in &failures {
            // The loss that aborted the attempt is the worker the message names.
            if message.contains(&format!("worker {id} ")) && !message.contains(error.as_str()) {
                self.violations.push(format!(
                    "reload rejection rule: the reload rejected at {} ms names {id}, whose startup failed with {error:?}, but does not carry that reason: {message:?}",
                    ms(now)
                ));
            }
        }
        for (&id, w) in &self.workers {
            if w.generation == generation && !w.commit_sent && !w.ended {
                self.violations.push(format!(
                    "reload rejection rule: the reload of generation {generation} was rejected at {} ms while its worker w{id} (slot {}) was left running: a rejected generation's workers are ended with it",
                    ms(now),
                    w.slot
                ));
            }
        }
    }

    /// The parent began to stop (it closed its listeners).
    pub(crate) fn stopping(&mut self) {
        self.answers.stopping();
        self.over = true;
        self.due.clear();
    }

    /// The parent read that `id` was reaped (or that its spawn failed) at `now`.
    /// The parent read `id`'s channel end (EOF or a malformed frame).
    pub(crate) fn channel_end_read(&mut self, id: WorkerId) {
        if let Some(w) = self.workers.get(&id.0) {
            self.intake.ended(id.0, w.generation);
        }
    }

    pub(crate) fn reaped_read(&mut self, now: Instant, id: WorkerId) {
        if let Some(w) = self.workers.get(&id.0) {
            self.intake.ended(id.0, w.generation);
        }
        let Some(w) = self.workers.remove(&id.0) else {
            return;
        };
        if self.over
            || self.committed != Some(w.generation)
            || w.drained
            || self.superseded(w.generation)
        {
            return;
        }
        match self.other_unretired(id.0, w.generation, w.slot) {
            Some(other) if other < id.0 => self.replacement_failed(now, id, &w),
            Some(other) if self.workers.get(&other).is_some_and(Tracked::serving) => {
                // Its recycle's replacement had sent READY, so the slot was already the
                // replacement's and this worker was retiring, its DRAIN not sent yet: it
                // ended with nothing to replace, so no attempt against the window.
                self.replacement_failures.remove(&w.slot);
            }
            other => self.member_lost(now, id, &w, other.is_none()),
        }
    }

    /// Whether a newer generation has had every READY read: the core commits it at the
    /// last of them, ahead of any end found in the same look (decision 0094), though the
    /// commit is carried out, and seen here, only once the look is taken in. A worker of
    /// the older generation whose exit that look also found is then a retiring worker's,
    /// no member lost.
    fn superseded(&self, generation: u64) -> bool {
        self.generations
            .range(generation + 1..)
            .any(|(&newer, &(workers, _))| {
                let ready = self
                    .workers
                    .values()
                    .filter(|w| w.generation == newer && w.ready_at.is_some() && !w.ended)
                    .count();
                workers > 0 && ready >= workers as usize
            })
    }

    fn member_lost(&mut self, now: Instant, id: WorkerId, w: &Tracked, empty: bool) {
        let Some((_, policy)) = self.generations.get(&w.generation).cloned() else {
            return;
        };
        let stable = w
            .ready_at
            .is_some_and(|r| now.saturating_since(r) >= policy.restart_stable_period());
        let run = self.runs.entry(w.slot).or_default();
        let in_a_row = run.in_a_row;
        let verdict = self.model.lost(now, &policy, run, stable);
        self.recount = true;
        self.replacement_failures.remove(&w.slot);
        match verdict {
            Verdict::Replace(wait) => {
                if empty {
                    let why = format!(
                        "{id} was lost at {} ms, replacement {} of slot {} in a row, so the policy waits {wait:?}",
                        ms(now),
                        if stable { 1 } else { in_a_row + 1 },
                        w.slot
                    );
                    self.due.insert(
                        (w.generation, w.slot),
                        Due {
                            at: now + wait,
                            why,
                            since: now,
                        },
                    );
                } else {
                    // Its recycle's replacement takes the slot.
                    self.due.remove(&(w.generation, w.slot));
                }
            }
            Verdict::Disabled | Verdict::LimitReached { .. } => {
                let why = match verdict {
                    Verdict::LimitReached {
                        in_window,
                        in_a_row,
                    } => format!(
                        "{id} lost at {} ms with {in_window} attempts in the restart window and {in_a_row} unstable replacements of slot {} in a row, at a limit of {}",
                        ms(now),
                        w.slot,
                        policy.worker_restart_limit()
                    ),
                    _ => format!("{id} lost at {} ms with worker_restart_limit 0", ms(now)),
                };
                self.must_fail = Some((now, why));
                self.over = true;
                self.due.clear();
            }
        }
    }

    fn replacement_failed(&mut self, now: Instant, id: WorkerId, w: &Tracked) {
        let Some((_, policy)) = self.generations.get(&w.generation).cloned() else {
            return;
        };
        let failures = self.replacement_failures.entry(w.slot).or_default();
        *failures += 1;
        let failures = *failures;
        if failures >= policy.recycle_retry_limit() {
            self.due.remove(&(w.generation, w.slot));
            return;
        }
        let wait = delay(&policy, failures - 1);
        self.due.insert(
            (w.generation, w.slot),
            Due {
                at: now + wait,
                why: format!(
                    "recycle replacement {id} failed at {} ms, failure {failures} of this recycle, so the retry waits {wait:?}",
                    ms(now)
                ),
                since: now,
            },
        );
    }

    /// The parent declared the service failed for `reason`.
    pub(crate) fn service_failed(&mut self, now: Instant, reason: FailureReason) {
        if reason == FailureReason::StartupFailure
            && let Some(breach) = self.intake.start_failed()
        {
            self.violations.push(breach);
        }
        let restarts = matches!(
            reason,
            FailureReason::RestartLimit | FailureReason::RestartsDisabled
        );
        match (self.must_fail.take(), restarts) {
            (Some(_), true) | (None, false) => {}
            (None, true) => self.violations.push(format!(
                "restart accounting rule: the service failed at {} ms for {reason:?}, but the policy allows the restart: {} attempts in the window, {} replacements granted",
                ms(now),
                self.model.in_window(),
                self.model.granted
            )),
            (Some((_, why)), false) => self.violations.push(format!(
                "restart accounting rule: the service failed at {} ms for {reason:?}, where the restart limit should have failed it: {why}",
                ms(now)
            )),
        }
        self.over = true;
        self.due.clear();
    }

    /// After a step: the supervisor's count against the policy's, and spawns now overdue.
    pub(crate) fn judge_step(&mut self, now: Instant, sup: &Supervisor) {
        self.answers.step_done();
        if let Some((at, why)) = self.must_fail.take_if(|(at, _)| *at <= now)
            && sup.failure().is_none()
        {
            self.violations.push(format!(
                "restart accounting rule: the service still runs at {} ms, but the policy gives up at {} ms: {why}",
                ms(now),
                ms(at)
            ));
        }
        if core::mem::take(&mut self.recount) {
            let status = sup.status(now);
            let tallied: u64 = sup.tally().restarts.iter().sum();
            let granted = self.model.granted;
            if status.restarts != granted
                || tallied != granted
                || status.recent_restarts != self.model.in_window()
            {
                self.violations.push(format!(
                    "restart accounting rule: at {} ms the status counts {} restarts ({} by reason, {} in the window); the members lost so far call for {granted} ({} in the window)",
                    ms(now),
                    status.restarts,
                    tallied,
                    status.recent_restarts,
                    self.model.in_window()
                ));
            }
        }
        self.judge_readiness(now, sup);
        let overdue: Vec<(u64, u64)> = self
            .due
            .iter()
            .filter(|(_, d)| now > d.at + SLACK && !self.gap_between(d.since, now))
            .map(|(k, _)| *k)
            .collect();
        for key in overdue {
            if let Some(d) = self.due.remove(&key) {
                self.violations.push(format!(
                    "backoff rule: slot {} still has no replacement at {} ms, due at {} ms + {SLACK:?}: {}",
                    key.1,
                    ms(now),
                    ms(d.at),
                    d.why
                ));
            }
        }
    }
}

impl LifecycleOracle {
    fn judge_readiness(&mut self, now: Instant, sup: &Supervisor) {
        if self.over {
            return;
        }
        let reported = sup.readiness();
        let Some(generation) = self.committed else {
            if reported != Readiness::Unready {
                self.violations.push(format!(
                    "readiness rule: at {} ms the service reports {} before any generation committed",
                    ms(now),
                    reported.name()
                ));
            }
            return;
        };
        let Some((n, policy)) = self.generations.get(&generation) else {
            return;
        };
        let serving = self.workers.values().filter(|w| w.serving()).count();
        let ready = u32::try_from(serving).unwrap_or(u32::MAX).min(*n);
        let minimum = policy.min_ready_workers();
        let expected = if ready < minimum {
            Readiness::Unready
        } else if ready < *n {
            Readiness::Degraded
        } else {
            Readiness::Ready
        };
        if reported != expected {
            self.violations.push(format!(
                "readiness rule: at {} ms the service reports {} with {ready} of {n} workers ready (minimum {minimum}); that is {}",
                ms(now),
                reported.name(),
                expected.name()
            ));
        }
    }
}

#[cfg(test)]
mod tests;
