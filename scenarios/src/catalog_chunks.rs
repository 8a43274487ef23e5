//! Resumable uploads under crashes: a client uploads files in chunks (each names its
//! offset; after a lost answer it asks what is held and resumes from there), and the
//! worker carrying a chunk out is killed just before a step of the core's chunk flow that
//! the simulator draws from the seed — or inside the meta file's write or the append.
//!
//! The predicates judge the simulator's record (`Outcome::chunks`): the breaches its
//! oracle saw after every step (the target half written, a held byte that is not the
//! client's, a partial that went backwards without a documented discard, a `have` that is
//! not what is held, a Complete without the whole file), the grants the broker still
//! listed for a worker the parent had let go or held while the client was idle, the
//! private temp files of let-go workers, and what was left when the run ended.

use servery_sim::{ChunkOutcome, ChunkStep, Fault, FaultKind, Outcome, ResumablePlan, SimSpec};

use crate::catalog::{at, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

/// The chance a chunk's worker is killed before a step.
const KILL_CHANCE: f64 = 0.5;
/// No kill and no wait past the TTL after this point (s): the client then has the rest of the run to finish.
const FAULTS_UNTIL: f64 = 12.0;
/// The partial TTL (s): short, so a client that goes away outlives it within a run.
const PARTIAL_TTL: f64 = 2.0;

pub(crate) fn resumable_chunk_crash_between_steps(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 4));
    config.features.uploads = true;
    config.broker.partial_ttl = PARTIAL_TTL;
    // Every chunk may cost a worker: the restart limit is not what this scenario tests.
    config.recovery.worker_restart_limit = 60;
    let kill_on = ctx.kinds.has(FaultKind::CrashChunkStep);
    // Each upload its own length: a partial or meta file another upload left is met by
    // one of a different total.
    let totals: Vec<u64> = (0..3).map(|_| ctx.rng.range(64, 512)).collect();
    let mut spec = spec(ctx, config.clone(), 16.0);
    spec.workload.request_rate = 0.0;
    spec.workload.resumable = Some(ResumablePlan {
        chunk_parts: (6, 2),
        totals,
        kill_chance: if kill_on { KILL_CHANCE } else { 0.0 },
        kill_steps: ChunkStep::ALL.to_vec(),
        faults_until: secs(FAULTS_UNTIL),
        overlap_chance: 0.2,
        gap_chance: 0.05,
        stale_chance: 0.06,
        start: secs(0.5),
        gap_ms: (20, 200),
        copy_ms: (1, 30),
        idle_grace: secs(0.1),
        max_requests: 60,
    });
    storage_faults(ctx, &mut spec, FAULTS_UNTIL);
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        chunks_held(o)?;
        o.coverage
            .insert("resumable chunks killed between steps stayed whole and resumable");
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Storage faults on the write path (decision 0131), drawn after everything else so a
/// seed's older plan stays as it was, all before `until` (s): a full file system, failing
/// fsyncs of the written bytes and of the directory after a rename, each for a while, and
/// a torn rename (the power lost between a rename and its directory's fsync).
pub(crate) fn storage_faults(ctx: &mut Ctx, spec: &mut SimSpec, until: f64) {
    for _ in 0..ctx.rng.range(0, 2) {
        let t = at(ctx, 0.5, until * 0.8);
        let d = secs(0.2 + ctx.rng.unit() * 1.3);
        let f = match ctx.rng.range(0, 2) {
            0 => Fault::DiskFull(d),
            1 => Fault::FsyncFails(d),
            _ => Fault::DirSyncFails(d),
        };
        fault(ctx.kinds, spec, t, f);
    }
    if ctx.rng.chance(0.3) {
        let t = at(ctx, 0.5, until * 0.8);
        fault(ctx.kinds, spec, t, Fault::TornRename);
    }
}

/// Every upload completes byte-exact; no breach of the file predicates was seen; every
/// grant of a killed worker is back once the parent has let it go and none is held while
/// the client is idle; no private temp file outlives its worker's cleanup; nothing is
/// left at the end.
pub(crate) fn chunks_held(o: &mut Outcome) -> Result<(), String> {
    let c: &ChunkOutcome = &o.chunks;
    if c.requests.is_empty() {
        return Err("the resumable client sent no request".into());
    }
    if let Some((at, what)) = c.file_breaches.first() {
        return Err(format!("at {} ms {what}", at / 1_000_000));
    }
    if let Some((at, what, w)) = c.stale_grants.first() {
        return Err(format!(
            "at {} ms the broker still listed a {what} of w{w}, which the parent had let go \
             (leaked)",
            at / 1_000_000
        ));
    }
    if let Some((at, n)) = c.idle_grants.first() {
        return Err(format!(
            "at {} ms the broker held {n} lease(s) or reservation(s) while no chunk was in \
             flight (leaked)",
            at / 1_000_000
        ));
    }
    if c.idle_observations == 0 {
        return Err("the broker was never observed with the resumable client idle".into());
    }
    if let Some((at, w)) = c.stale_temps.first() {
        return Err(format!(
            "at {} ms a private temp file of w{w} was still there after the parent let w{w} \
             go (its cleanup missed it)",
            at / 1_000_000
        ));
    }
    if c.completed != c.planned {
        let last = c.requests.last().map_or(String::new(), |r| {
            format!("; the last request: {} → {:?}", r.describe(), r.end)
        });
        return Err(format!(
            "{} of {} resumable uploads completed{last}",
            c.completed, c.planned
        ));
    }
    let left = [
        (c.grants_at_end, "leases or reservations in the broker"),
        (c.partials_at_end, "partial reservations in the broker"),
        (c.temps_at_end, "private temp files"),
        (c.partial_files_at_end, "partial or meta files"),
    ];
    if let Some((n, what)) = left.iter().find(|(n, _)| *n > 0) {
        return Err(format!(
            "{n} {what} left when the run ended, every upload complete"
        ));
    }
    Ok(())
}
