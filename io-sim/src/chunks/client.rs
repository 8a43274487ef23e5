//! The resumable-upload client (one request at a time, each a connection of its own) and
//! the oracle that looks at the file system after every step of a chunk and at the
//! broker and the private temp files after every parent step.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::parent::Parent;
use servery_core::{Instant, WorkerId};

use super::worker::ChunkRun;
use super::{ChunkEnd, ChunkRecord, ChunkRequest, ChunkStep, ResumablePlan, TARGET, content};
use crate::world::{ConnKind, SimEvent, SimWorld};
use servery_core::chunk_flow::{ChunkDone, ChunkFailure};

/// How many of each oracle finding are kept.
const KEEP: usize = 8;

/// The resumable workload's state: the client, what the oracle tracks, and the chunks
/// workers are carrying out.
#[derive(Debug)]
pub(crate) struct ChunkSim {
    pub(super) plan: ResumablePlan,
    pub(super) ttl: Duration,
    seed: u64,
    /// The upload the client is on (from 0), and its bytes (as many as its total).
    pub(super) upload: u32,
    pub(super) content: Vec<u8>,
    /// Where the client's next chunk starts: what it was last told is held.
    from: u64,
    /// Bytes the client was told are held of this upload, unless a discard the flow
    /// documents (a stale partial, a publication) has happened since.
    told: u64,
    /// What a GET of the target shows (`None`: nothing yet).
    pub(super) visible: Option<Vec<u8>>,
    requests_this_upload: u32,
    /// The last request was lost or refused: ask what is held before the next chunk.
    ask_next: bool,
    /// A kill drawn for a chunk the client holds back until the partial is stale (a kill
    /// before the discard needs one).
    held_back: Option<(ChunkStep, u32)>,
    pub(super) in_flight: Option<usize>,
    idle_since: Instant,
    pub(super) serving: BTreeMap<(WorkerId, u64), ChunkRun>,
    /// Workers the plan killed, until the parent has let them go and nothing of theirs
    /// is left.
    pub(super) killed: Vec<WorkerId>,
}

impl SimWorld {
    /// Sets up the client and schedules its first request (only with a resumable plan).
    pub(crate) fn chunks_start(&mut self) {
        let Some(plan) = self.spec.workload.resumable.clone() else {
            return;
        };
        let seed = self.spec.seed;
        let ttl = self.spec.config.broker.partial_ttl;
        self.out.chunks.planned = plan.totals.len() as u32;
        let start = crate::world::ms(plan.start);
        self.chunks = Some(ChunkSim {
            content: content(seed, 0, plan.totals.first().copied().unwrap_or(0)),
            plan,
            ttl: Duration::from_secs_f64(ttl.max(0.0)),
            seed,
            upload: 0,
            from: 0,
            told: 0,
            visible: None,
            requests_this_upload: 0,
            ask_next: false,
            held_back: None,
            in_flight: None,
            idle_since: Instant::ZERO,
            serving: BTreeMap::new(),
            killed: Vec::new(),
        });
        self.schedule_at(start, SimEvent::ChunkSend);
    }

    /// The client sends its next request: a query after a lost answer, else the next
    /// chunk (drawn: its length, an overlap or a gap, where to kill its worker).
    pub(crate) fn chunk_send(&mut self) {
        if Duration::from_nanos(self.now.as_nanos()) >= self.spec.workload.until {
            return;
        }
        let Some(c) = self.chunks.as_mut() else {
            return;
        };
        if c.upload as usize >= c.plan.totals.len() || c.requests_this_upload >= c.plan.max_requests
        {
            return;
        }
        let (upload, from, total) = (c.upload, c.from, c.content.len() as u64);
        let plan = c.plan.clone();
        let ask = c.ask_next;
        let held_back = c.held_back.take();
        let (request, kill_before) = if ask {
            (ChunkRequest::Query, None)
        } else {
            let (most, fewest) = plan.chunk_parts;
            let size = self
                .rng
                .range(total / most.max(1), total / fewest.max(1))
                .max(1);
            let (kill, step, nth) = match held_back {
                Some((step, nth)) => (true, step, nth),
                None => {
                    let kill = self.rng.chance(plan.kill_chance)
                        && !plan.kill_steps.is_empty()
                        && Duration::from_nanos(self.now.as_nanos()) < plan.faults_until;
                    let step = plan.kill_steps
                        [self.rng.range(0, plan.kill_steps.len() as u64 - 1) as usize];
                    let nth = match step {
                        ChunkStep::TakePartial | ChunkStep::OpenAt => self.rng.range(0, 1) as u32,
                        _ => 0,
                    };
                    (kill, step, nth)
                }
            };
            // A discard needs a stale partial: the chunk waits until the one held is.
            let wait = self.fs.partials.get(&TARGET).and_then(|p| {
                let age = p.age_at(self.now);
                (age <= plan_ttl(self)).then(|| plan_ttl(self) - age)
            });
            if kill
                && step == ChunkStep::DiscardStale
                && held_back.is_none()
                && let Some(wait) = wait
            {
                if let Some(c) = self.chunks.as_mut() {
                    c.held_back = Some((step, nth));
                }
                let d = wait + Duration::from_millis(self.rng.range(1, 300));
                self.schedule_in(d, SimEvent::ChunkSend);
                return;
            }
            let mut start = from;
            if from > 0 && self.rng.chance(plan.overlap_chance) {
                start = from - self.rng.range(1, from.min(size));
            } else if from + 1 < total && self.rng.chance(plan.gap_chance) {
                start = from + self.rng.range(1, total - 1 - from);
            }
            let mut end = (start + size - 1).min(total - 1);
            if kill && step.last_chunk_only() {
                end = total - 1;
            }
            (
                ChunkRequest::Chunk { start, end },
                kill.then_some((step, nth)),
            )
        };
        let rec = self.out.chunks.requests.len();
        if let Some(c) = self.chunks.as_mut() {
            c.in_flight = Some(rec);
            c.ask_next = false;
            c.requests_this_upload += 1;
        }
        self.out.chunks.requests.push(ChunkRecord {
            upload,
            request,
            kill_before,
            worker: None,
            sent_ns: self.now.as_nanos(),
            ended_ns: 0,
            end: None,
            killed_before: None,
        });
        self.arrive(ConnKind::Chunk { rec });
    }

    /// Request `rec` ended so (its connection is closed): the client learns what it can
    /// and goes on.
    pub(crate) fn chunk_ended(&mut self, rec: usize, end: ChunkEnd) {
        let now = self.now;
        let Some(r) = self.out.chunks.requests.get_mut(rec) else {
            return;
        };
        if r.end.is_some() {
            return;
        }
        r.end = Some(end);
        r.ended_ns = now.as_nanos();
        let what = r.describe();
        let Some(c) = self.chunks.as_mut() else {
            return;
        };
        c.in_flight = None;
        c.idle_since = now;
        let held = self.fs.partials.get(&TARGET);
        let have_now = held
            .and_then(|p| p.data.as_ref())
            .map_or(0, |d| d.len() as u64);
        let stale = held.is_some_and(|p| p.age_at(now) > c.ttl);
        let mut breach = None;
        match end {
            ChunkEnd::Done(ChunkDone::Complete(_)) => {
                let whole = self.fs.files.get(&TARGET).map(|(_, b)| b);
                if whole != Some(&c.content) {
                    breach = Some(format!(
                        "{what} was answered Complete, and the target holds {} bytes that are \
                         not the upload's {} (not byte-exact)",
                        whole.map_or(0, Vec::len),
                        c.content.len()
                    ));
                }
                self.out.chunks.completed += 1;
                c.upload += 1;
                let total = c.plan.totals.get(c.upload as usize).copied().unwrap_or(0);
                c.content = content(c.seed, c.upload, total);
                c.from = 0;
                c.told = 0;
                c.requests_this_upload = 0;
            }
            ChunkEnd::Done(ChunkDone::Incomplete { have }) | ChunkEnd::Held(have) => {
                // What the client is told is what is held: no more (it would resume past
                // a hole), no less (held bytes no one will be told of), unless a query
                // finds the partial stale (the next chunk discards it).
                let stale_query = matches!(end, ChunkEnd::Held(0)) && stale;
                if have != have_now && !stale_query {
                    breach = Some(format!(
                        "{what} told the client {have} bytes are held while the partial holds \
                         {have_now}"
                    ));
                }
                c.from = have;
                c.told = have;
            }
            ChunkEnd::Failed(ChunkFailure::RangeGap { have, .. }) => {
                // The 409 names the range held.
                c.from = have;
                c.told = have;
            }
            ChunkEnd::Failed(_) | ChunkEnd::Lost | ChunkEnd::Refused => c.ask_next = true,
        }
        let (lo, hi) = c.plan.gap_ms;
        let mut gap = Duration::from_micros(self.rng.range(lo * 1000, hi * 1000));
        let until = c.plan.faults_until;
        let c = self.chunks.as_ref().map(|c| (c.plan.stale_chance, c.ttl));
        if let Some((chance, ttl)) = c
            && self.rng.chance(chance)
            && Duration::from_nanos(now.as_nanos()) < until
        {
            // The client goes away for longer than the partial TTL.
            gap += ttl + Duration::from_millis(self.rng.range(1, 500));
        }
        if let Some(b) = breach {
            self.chunk_breach(b);
        }
        self.schedule_in(gap, SimEvent::ChunkSend);
    }

    /// `worker` died with these chunk requests in flight.
    pub(crate) fn chunks_lost(&mut self, worker: WorkerId, recs: Vec<usize>) {
        if let Some(c) = self.chunks.as_mut() {
            c.serving.retain(|(w, _), _| *w != worker);
        }
        for rec in recs {
            self.chunk_ended(rec, ChunkEnd::Lost);
        }
    }

    pub(super) fn chunk_breach(&mut self, what: String) {
        let at = self.now.as_nanos();
        let b = &mut self.out.chunks.file_breaches;
        if b.len() < KEEP {
            b.push((at, what));
        }
    }

    /// After a step that changed the file system: every held byte is the client's, the
    /// partial never shrinks below what the client was told unless the step was one the
    /// flow documents as a discard (`reset`), and the target shows nothing, the old file
    /// or the whole new one.
    pub(super) fn chunk_check_files(&mut self, step: ChunkStep, reset: bool) {
        let Some(c) = self.chunks.as_mut() else {
            return;
        };
        let mut breaches = Vec::new();
        let data = self.fs.partials.get(&TARGET).and_then(|p| p.data.as_ref());
        let have = data.map_or(0, |d| d.len() as u64);
        if let Some(d) = data
            && c.content.get(..d.len()) != Some(&d[..])
        {
            let wrong = d
                .iter()
                .zip(&c.content)
                .position(|(a, b)| a != b)
                .unwrap_or(c.content.len());
            breaches.push(format!(
                "after {step:?} the partial holds {have} bytes, and byte {wrong} is not the \
                 client's (upload {})",
                c.upload
            ));
        }
        if reset {
            c.told = c.told.min(have);
        } else if have < c.told {
            breaches.push(format!(
                "after {step:?} the partial holds {have} bytes, fewer than the {} the client \
                 was told are kept, and no discard was documented",
                c.told
            ));
        }
        let shown = self.fs.files.get(&TARGET).map(|(_, b)| b);
        if shown != c.visible.as_ref() {
            if shown == Some(&c.content) {
                c.visible = shown.cloned();
            } else {
                breaches.push(format!(
                    "after {step:?} the target shows {} bytes: neither what it showed before \
                     nor the whole of upload {} (partially written)",
                    shown.map_or(0, Vec::len),
                    c.upload
                ));
                c.visible = shown.cloned();
            }
        }
        for b in breaches {
            self.chunk_breach(b);
        }
    }

    /// After every parent step: grants and temp files of workers the parent has let go,
    /// and leases or reservations held while the client is idle.
    pub(crate) fn chunks_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(c) = self.chunks.as_mut() else {
            return;
        };
        let sup = parent.supervisor();
        let broker = parent.broker();
        let at = now.as_nanos();
        let owners: Vec<WorkerId> = self.fs.temp_owners().collect();
        let coverage = &mut self.out.coverage;
        c.killed.retain(|&w| {
            let left = owners.contains(&w);
            let held = broker.leases().any(|(_, l)| l.owner.worker == w)
                || broker.reservations().any(|(_, r)| r.owner.worker == w);
            let swept = !sup.is_connected(w) && !left && !held;
            if swept {
                coverage.insert(crate::labels::CHUNK_KILL_SWEPT);
            }
            !swept
        });
        let out = &mut self.out.chunks;
        let mut stale = Vec::new();
        for (_, l) in broker.leases() {
            stale.push(("lease", l.owner.worker));
        }
        for (_, r) in broker.reservations() {
            stale.push(("reservation", r.owner.worker));
        }
        for (_, p) in broker.partials() {
            if let Some(o) = p.owner {
                stale.push(("partial reservation", o.worker));
            }
        }
        for (what, w) in stale {
            if !sup.is_connected(w) && out.stale_grants.len() < KEEP {
                out.stale_grants.push((at, what, w.0));
            }
        }
        for w in owners {
            if !sup.is_connected(w) && out.stale_temps.len() < KEEP {
                out.stale_temps.push((at, w.0));
            }
        }
        let held = broker.leases().count() + broker.reservation_count();
        if c.in_flight.is_none() && now >= c.idle_since + c.plan.idle_grace {
            out.idle_observations += 1;
            if held > 0 && out.idle_grants.len() < KEEP {
                out.idle_grants.push((at, held));
            }
        }
        out.grants_at_end = held;
        out.partials_at_end = broker.partial_count();
    }

    /// At the run's end: what is left on the file system.
    pub(crate) fn chunks_finish(&mut self) {
        if self.chunks.is_some() {
            self.out.chunks.temps_at_end = self.fs.temp_count();
            self.out.chunks.partial_files_at_end = self.fs.partials.len();
        }
    }
}

/// The partial TTL of the run.
fn plan_ttl(w: &SimWorld) -> Duration {
    w.chunks.as_ref().map_or(Duration::ZERO, |c| c.ttl)
}
