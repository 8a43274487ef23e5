//! WebDAV locks held by the parent's broker: a lock outlives the worker that granted it,
//! a recycle and a reload, and ends at its timeout; the lock table's limit.
//!
//! The predicates judge the simulator's record of the run (`Outcome::dav`): every DAV
//! request with the worker that served it and when the broker was asked and answered,
//! every lock the broker granted with the end it promised (grant or last refresh plus
//! the timeout it answered), whether the broker's table still held it after each step,
//! and every LOCK the broker decided with the table's size then.

use core::time::Duration;
use std::collections::BTreeSet;

use servery_core::config::RawConfig;
use servery_sim::{
    DAV_FILES, DavAnswer, DavClientPlan, DavDraw, DavEnd, DavLockRecord, DavOp, DavRecord,
    DavWorkload, Fault, FaultKind, Outcome, SimCommand,
};

use crate::catalog::{at, expect, fault, secs, spec, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

/// A service that speaks WebDAV and takes writes (PUT goes through the upload write flow).
pub(crate) fn dav_config(workers: i64) -> RawConfig {
    let mut c = fast_config(workers);
    c.features.uploads = true;
    c.features.webdav = true;
    c
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// Whether `a` is `b` or one of its ancestors.
fn covers(a: &str, b: &str) -> bool {
    a == b || a == "/" || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
}

/// Whether a lock rooted at `root` protects a PUT of `file` (RFC 4918 §7.4, §9.7): it is
/// rooted at the file, or above it with depth infinity, or at the collection whose
/// membership the PUT may change.
fn protects(root: &str, depth_infinity: bool, file: &str) -> bool {
    let parent = match file.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &file[..i],
    };
    file == root || (depth_infinity && covers(root, file)) || parent == root
}

// ----- dav-lock-survives-recycle -----------------------------------------------------------

/// The locked resource and the files PUT without its token: the ones it protects and one
/// it does not (the control, never refused).
const SURVIVE_LOCKS: [(&str, &[&str]); 3] = [
    ("/d", &["/d/a", "/d/b", "/f"]),
    ("/d/a", &["/d/a", "/d/b"]),
    ("/e", &["/e", "/f"]),
];
/// PUTs without the token per second, and how long they go on after the lock's end.
const SURVIVE_WRITES: f64 = 10.0;
const SURVIVE_AFTER_END: f64 = 3.5;

pub(crate) fn lock_survives_recycle(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    let config = dav_config(n);
    let (resource, writes) = SURVIVE_LOCKS[ctx.rng.range(0, 2) as usize];
    let depth_infinity = ctx.rng.chance(0.5);
    let exclusive = ctx.rng.chance(0.7);
    let timeout_ms = ctx.rng.range(9_000, 13_000);
    let timeout = Duration::from_millis(timeout_ms);
    let lock_at = at(ctx, 0.5, 1.0);
    let crash_at = lock_at + at(ctx, 0.4, 1.0);
    let recycle_at = crash_at + at(ctx, 0.8, 1.5);
    let reload_at = recycle_at + at(ctx, 1.5, 2.5);
    let mut next = dav_config(workers(ctx, 1, 4));
    next.features = config.features.clone();
    let n_next = next.workers as usize;
    let writes_until = lock_at + timeout + secs(SURVIVE_AFTER_END);
    let mut spec = spec(
        ctx,
        config.clone(),
        (writes_until + secs(0.5)).as_secs_f64(),
    );
    spec.workload.dav = Some(DavWorkload {
        clients: vec![(
            lock_at,
            DavClientPlan {
                resource,
                depth_infinity,
                exclusive,
                timeout_ms,
                // PUTs with the token every half second, past the lock's end.
                steps: (timeout_ms + 3_000) / 500,
                step_ms: (300, 700),
                refresh_chance: 0.0,
                write_chance: 0.0,
                stray_chance: 0.0,
                unlock: false,
            },
        )],
        write_rate: SURVIVE_WRITES,
        write_paths: writes.to_vec(),
        until: writes_until,
        ..DavWorkload::default()
    });
    let crashed = fault(ctx.kinds, &mut spec, crash_at, Fault::CrashDavGranter);
    spec.commands.push((recycle_at, SimCommand::Recycle));
    spec.commands
        .push((reload_at, SimCommand::Reload(Box::new(next))));
    let mut e = expect(&config, End::Ready);
    e.workers = n_next;
    e.generation = Some(2);
    e.extra = Some(if crashed {
        |o, e| {
            lock_survived(o, e, true)?;
            o.coverage
                .insert("dav lock survived crash, recycle, reload");
            Ok(())
        }
    } else {
        |o, e| lock_survived(o, e, false)
    });
    Plan { spec, expect: e }
}

fn end_name(end: Option<DavEnd>) -> String {
    end.map_or("unanswered".into(), |e| format!("{e:?}"))
}

fn describe(r: &DavRecord) -> String {
    format!(
        "a PUT of {} {} through w{} (generation {}), asked at {} ms",
        r.resource,
        if r.token.is_some() {
            "with the lock's token"
        } else {
            "without a token"
        },
        r.worker.unwrap_or_default(),
        r.generation,
        ms(r.asked_ns),
    )
}

/// The client's lock: granted, in the broker's table from its grant to the end it was
/// promised and gone at the first step after; every PUT of a file it protects refused
/// without its token and allowed with it, through any worker, until that end and not
/// after; the worker that granted it killed and reaped meanwhile (`crashed`), and every
/// worker recycled and then replaced by a reload.
fn lock_survived(o: &mut Outcome, e: &Expect, crashed: bool) -> Result<(), String> {
    let dav = &o.dav;
    let asked = dav
        .log
        .iter()
        .find(|r| matches!(r.op, DavOp::Lock { .. }))
        .ok_or("the lock client never sent its LOCK")?;
    if asked.end != Some(DavEnd::Granted) {
        return Err(format!(
            "the lock client's LOCK of {} ended {}, expected granted",
            asked.resource,
            end_name(asked.end)
        ));
    }
    let lock = dav
        .locks
        .iter()
        .find(|l| Some(l.token) == asked.token)
        .ok_or("the client holds a token the broker was never seen to grant")?;
    let end = lock.promised_end_ns;
    let granter = lock.granted_to;
    let killed = o
        .injected
        .iter()
        .find(|i| i.kind == FaultKind::CrashDavGranter);
    let reaped = o.exits.iter().find(|x| x.worker == granter);
    let context = match (killed, reaped) {
        (Some(k), Some(x)) => format!(
            "; w{granter}, which granted it, was killed at {} ms and reaped at {} ms",
            k.at_ms, x.at_ms
        ),
        _ => String::new(),
    };
    let name = format!(
        "the lock on {} (depth {}, {}), granted through w{granter} at {} ms until {} ms",
        lock.resource,
        if lock.depth_infinity { "infinity" } else { "0" },
        if lock.exclusive {
            "exclusive"
        } else {
            "shared"
        },
        ms(lock.granted_ns),
        ms(end)
    );
    // In the table until its end, never early: nobody unlocks it.
    if let Some(u) = lock.unlocked_ns {
        return Err(format!(
            "{name} was unlocked at {} ms by nobody's UNLOCK",
            ms(u)
        ));
    }
    match lock.gone_ns {
        Some(gone) if gone < end => {
            return Err(format!(
                "{name} left the broker's table at {} ms, {} ms before its end{context}",
                ms(gone),
                ms(end - gone)
            ));
        }
        None => return Err(format!("{name} never left the broker's table")),
        Some(_) => {}
    }
    // Gone by the first step after its end: the broker's expiry runs at its deadline.
    if lock.last_seen_ns > end {
        return Err(format!(
            "{name} was still in the broker's table at {} ms, after its end",
            ms(lock.last_seen_ns)
        ));
    }
    if crashed {
        let k = killed.ok_or("the granter was never killed")?;
        if k.worker != Some(granter) {
            return Err(format!(
                "the fault killed w{:?}, not w{granter}, which granted the lock",
                k.worker
            ));
        }
        match reaped {
            Some(x) if x.at_ms * 1_000_000 < end => {}
            _ => {
                return Err(format!(
                    "w{granter}, killed at {} ms, was not reaped before the lock's end at {} ms",
                    k.at_ms,
                    ms(end)
                ));
            }
        }
    }
    // A recycle replaced every worker, and a reload every one again.
    let initial = o
        .spawn_times_ms
        .iter()
        .filter(|&&t| t * 1_000_000 < lock.granted_ns)
        .count() as u64;
    let wanted = 2 * initial + u64::from(crashed) + e.workers as u64;
    if o.spawns < wanted {
        return Err(format!(
            "{} spawns, expected {wanted}: {initial} workers, a crash replacement, a recycle \
             of each and a reload's {}",
            o.spawns, e.workers
        ));
    }
    // Enforced through any worker until its end, with its token allowed; not after.
    let mut refused_by = BTreeSet::new();
    let mut token_ok_by = BTreeSet::new();
    let mut free_after = 0;
    for r in dav.log.iter().filter(|r| r.op == DavOp::Put) {
        let Some(allowed) = r.allowed else { continue };
        let guarded = protects(&lock.resource, lock.depth_infinity, &r.resource);
        // The broker judged it between asking and answer: the lock was live for it if
        // asked after the grant and answered before the end; certainly not if asked
        // after the end or answered before the grant.
        let before = r.asked_ns >= lock.granted_ns && r.answered_ns < end;
        let after = r.asked_ns >= end || r.answered_ns < lock.granted_ns;
        let worker = (r.worker.unwrap_or_default(), r.generation);
        match (r.token.is_some(), allowed) {
            (false, true) if guarded && before => {
                return Err(format!(
                    "{} was let through at {} ms while {name}{context}",
                    describe(r),
                    ms(r.answered_ns)
                ));
            }
            (false, false) if !guarded || after => {
                return Err(format!(
                    "{} was refused ({}) at {} ms, but {name} {}",
                    describe(r),
                    end_name(r.end),
                    ms(r.answered_ns),
                    if guarded {
                        "was not live then"
                    } else {
                        "does not protect it"
                    }
                ));
            }
            (true, false) if before => {
                return Err(format!(
                    "{} was refused ({}) at {} ms while {name}",
                    describe(r),
                    end_name(r.end),
                    ms(r.answered_ns)
                ));
            }
            (true, true) if after => {
                return Err(format!(
                    "{} was let through at {} ms: {name} still applied after its end",
                    describe(r),
                    ms(r.answered_ns)
                ));
            }
            (true, true)
                if r.ended_ns < end && !matches!(r.end, Some(DavEnd::Written | DavEnd::Lost)) =>
            {
                return Err(format!(
                    "{} passed its lock check but ended {}",
                    describe(r),
                    end_name(r.end)
                ));
            }
            (false, false) if before => {
                refused_by.insert(worker);
            }
            (true, true) if r.end == Some(DavEnd::Written) => {
                token_ok_by.insert(worker);
            }
            (false, true) if guarded && r.asked_ns >= end && r.end == Some(DavEnd::Written) => {
                free_after += 1;
            }
            _ => {}
        }
    }
    if !refused_by.iter().any(|&(w, _)| w != granter) {
        return Err(format!(
            "no PUT without the token was refused by a worker other than w{granter}, which \
             granted {name}: refused by {refused_by:?}"
        ));
    }
    if !refused_by.iter().any(|&(_, g)| g >= 2) {
        return Err(format!(
            "no PUT without the token was refused by a worker of the reloaded generation \
             before {name} ended: refused by {refused_by:?}"
        ));
    }
    if !token_ok_by.iter().any(|&(_, g)| g >= 2) {
        return Err(format!(
            "no PUT with the token succeeded through a worker of the reloaded generation \
             before {name} ended: succeeded through {token_ok_by:?}"
        ));
    }
    if free_after == 0 {
        return Err(format!(
            "no PUT without the token of a file it protected succeeded after {name} ended"
        ));
    }
    Ok(())
}

// ----- dav-lock-table-saturation -----------------------------------------------------------

/// The sweep's goal that the drawn burst, not only the calm rounds, filled the table.
pub(crate) const BURST_FILLED: &str = "dav lock table filled by the drawn burst";

/// Drawn lock clients arrive at this rate until this point, then none.
const SATURATION_RATE: f64 = 25.0;
const SATURATION_UNTIL: f64 = 4.0;
/// Drawn locks last at most 3 s after their grant or last refresh, which comes at most
/// 3 × 0.4 s after the grant: the burst's locks have all ended by then.
const CALM_AT: f64 = 9.0;
/// From then on, two rounds this far apart: `limit + 1` clients each lock `/f` (shared,
/// 2 s) 50 ms apart; every other one PUTs with its token and unlocks, the others walk
/// away and let their lock time out before the next round.
const ROUND_GAP: f64 = 2.5;
const ROUNDS: u64 = 2;
const ROUND_SPACING: f64 = 0.05;

pub(crate) fn lock_table_saturation(ctx: &mut Ctx) -> Plan {
    let mut config = dav_config(workers(ctx, 2, 4));
    let limit = ctx.rng.range(2, 5);
    config.broker.max_dav_locks = limit as i64;
    let mut spec = spec(ctx, config.clone(), CALM_AT + ROUND_GAP * ROUNDS as f64);
    let clients = (0..ROUNDS)
        .flat_map(|round| (0..=limit).map(move |i| (round, i)))
        .map(|(round, i)| {
            (
                secs(CALM_AT + ROUND_GAP * round as f64 + ROUND_SPACING * i as f64),
                DavClientPlan {
                    resource: "/f",
                    depth_infinity: false,
                    exclusive: false,
                    timeout_ms: 2_000,
                    steps: 1,
                    step_ms: (200, 300),
                    refresh_chance: 0.0,
                    write_chance: 0.0,
                    stray_chance: 0.0,
                    unlock: i % 2 == 0,
                },
            )
        })
        .collect();
    spec.workload.dav = Some(DavWorkload {
        clients,
        client_rate: 0.0,
        client_burst: Some((SATURATION_RATE, secs(SATURATION_UNTIL))),
        draw: DavDraw {
            exclusive_chance: 0.3,
            infinity_chance: 0.5,
            timeout_ms: (1000, 3000),
            steps: (0, 3),
            step_ms: (100, 400),
            refresh_chance: 0.3,
            unlock_chance: 0.6,
            ..DavDraw::default()
        },
        write_rate: 4.0,
        ..DavWorkload::default()
    });
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        table_bounded(o)?;
        o.coverage
            .insert("dav lock table saturated, then granted again");
        Ok(())
    });
    Plan { spec, expect: e }
}

fn lock_name(l: &DavLockRecord) -> String {
    format!(
        "the lock on {} granted at {} ms until {} ms",
        l.resource,
        ms(l.granted_ns),
        ms(l.promised_end_ns)
    )
}

/// The table never holds more than its limit; a LOCK is `Saturated` exactly when the
/// table is full; no lock leaves it before its UNLOCK or end, none stays after; and once
/// the burst's locks have ended, the table grants up to its limit again.
fn table_bounded(o: &mut Outcome) -> Result<(), String> {
    let dav = &o.dav;
    let limit = dav
        .decisions
        .first()
        .map(|d| d.limit)
        .ok_or("the broker decided no LOCK")?;
    if dav.table_max > limit {
        return Err(format!(
            "the lock table held {} locks, over its limit of {limit}",
            dav.table_max
        ));
    }
    for d in &dav.decisions {
        let full = d.table_len >= d.limit;
        match d.answer {
            DavAnswer::Saturated if !full => {
                return Err(format!(
                    "a LOCK at {} ms was answered Saturated with {} of {} locks held",
                    ms(d.at_ns),
                    d.table_len,
                    d.limit
                ));
            }
            DavAnswer::Granted | DavAnswer::Busy if full => {
                return Err(format!(
                    "a LOCK at {} ms was answered {:?} with the table full ({} of {})",
                    ms(d.at_ns),
                    d.answer,
                    d.table_len,
                    d.limit
                ));
            }
            DavAnswer::Other => {
                return Err(format!(
                    "a LOCK at {} ms got neither a grant, nor Busy, nor Saturated",
                    ms(d.at_ns)
                ));
            }
            _ => {}
        }
    }
    // The drawn burst fills the table on almost every seed, but not on all: drawn
    // exclusive and depth-infinity locks can keep the others out (`Locked`) for the whole
    // burst. So a full table under the burst is a goal of the sweep, and the calm rounds
    // below, which fill it on every seed, are each seed's requirement.
    let burst_ns = (SATURATION_UNTIL * 1e9) as u64;
    let burst_filled = dav
        .decisions
        .iter()
        .any(|d| d.answer == DavAnswer::Saturated && d.at_ns < burst_ns);
    for l in &dav.locks {
        let name = lock_name(l);
        match (l.gone_ns, l.unlocked_ns) {
            (Some(gone), None) if gone < l.promised_end_ns => {
                return Err(format!(
                    "{name} left the table at {} ms, before its end, and nobody unlocked it \
                     (lost)",
                    ms(gone)
                ));
            }
            (Some(gone), Some(u)) if gone < u.min(l.promised_end_ns) => {
                return Err(format!(
                    "{name} left the table at {} ms, before its end and before its UNLOCK \
                     at {} ms (lost)",
                    ms(gone),
                    ms(u)
                ));
            }
            _ => {}
        }
        if l.last_seen_ns > l.promised_end_ns {
            return Err(format!(
                "{name} was still in the table at {} ms, after its end (leaked)",
                ms(l.last_seen_ns)
            ));
        }
        if let Some(u) = l.unlocked_ns
            && l.last_seen_ns > u
        {
            return Err(format!(
                "{name} was still in the table at {} ms, after its UNLOCK was answered at {} \
                 ms (leaked)",
                ms(l.last_seen_ns),
                ms(u)
            ));
        }
    }
    if let Some(&(at, held, known)) = dav.untracked.first() {
        return Err(format!(
            "at {} ms the lock table held {held} locks, {known} of them grants anyone was \
             answered (leaked)",
            ms(at)
        ));
    }
    // Each calm round finds the table empty, fills it to its limit and is refused once.
    for round in 0..ROUNDS {
        let from = ((CALM_AT + ROUND_GAP * round as f64) * 1e9) as u64;
        let to = from + (ROUND_GAP * 1e9) as u64;
        let calm: Vec<_> = dav
            .decisions
            .iter()
            .filter(|d| (from..to).contains(&d.at_ns))
            .collect();
        if calm.len() != limit + 1 {
            return Err(format!(
                "{} LOCKs decided in [{} ms, {} ms), expected the round's {}",
                calm.len(),
                ms(from),
                ms(to),
                limit + 1
            ));
        }
        if calm[0].table_len != 0 {
            return Err(format!(
                "{} locks were still held at {} ms, after every earlier lock had ended \
                 (leaked)",
                calm[0].table_len,
                ms(calm[0].at_ns)
            ));
        }
        for (i, d) in calm.iter().enumerate() {
            let want = if i < limit {
                DavAnswer::Granted
            } else {
                DavAnswer::Saturated
            };
            if d.answer != want {
                return Err(format!(
                    "LOCK {} of {} at {} ms, once earlier locks had ended, was answered {:?} \
                     with {} of {limit} locks held, expected {want:?}",
                    i + 1,
                    limit + 1,
                    ms(d.at_ns),
                    d.answer,
                    d.table_len
                ));
            }
        }
    }
    if burst_filled {
        o.coverage.insert(BURST_FILLED);
    }
    Ok(())
}

// ----- dav-journal-full ----------------------------------------------------------------------

/// A burst of LOCKs with the lock journal on (`features.dav_persistent_locks`) while the
/// disk fills for a while (decision 0084): the simulator's oracle holds the table to the
/// journal on its disk after every step (`journal rule:`); here, no LOCK is granted while
/// the disk is full, and LOCKs are granted again once it has room.
pub(crate) fn journal_full(ctx: &mut Ctx) -> Plan {
    let mut config = dav_config(workers(ctx, 1, 3));
    config.features.dav_persistent_locks = true;
    let mut spec = spec(ctx, config.clone(), 10.0);
    spec.workload.dav = Some(DavWorkload {
        client_rate: 0.0,
        client_burst: Some((SATURATION_RATE, secs(8.0))),
        draw: DavDraw {
            exclusive_chance: 0.3,
            infinity_chance: 0.5,
            timeout_ms: (500, 2000),
            steps: (0, 2),
            step_ms: (100, 300),
            refresh_chance: 0.3,
            unlock_chance: 0.6,
            ..DavDraw::default()
        },
        ..DavWorkload::default()
    });
    for _ in 0..ctx.rng.range(1, 2) {
        let t = at(ctx, 1.0, 5.0);
        let d = secs(0.5 + ctx.rng.unit() * 1.5);
        fault(ctx.kinds, &mut spec, t, Fault::DiskFull(d));
    }
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        let full: Vec<(u64, u64)> = o
            .fault_windows
            .iter()
            .filter(|(k, _, _)| *k == FaultKind::DiskFull)
            .map(|&(_, from, until)| (from, until))
            .collect();
        let inside = |t: u64| full.iter().any(|&(from, until)| from < t && t < until);
        if let Some(d) = o
            .dav
            .decisions
            .iter()
            .find(|d| d.answer == DavAnswer::Granted && inside(ms(d.at_ns)))
        {
            return Err(format!(
                "journal rule: a LOCK was granted at {} ms while the disk under the journal was full ({full:?} ms)",
                ms(d.at_ns)
            ));
        }
        let last = full.iter().map(|&(_, until)| until).max().unwrap_or(0);
        if !o
            .dav
            .decisions
            .iter()
            .any(|d| d.answer == DavAnswer::Granted && ms(d.at_ns) > last)
        {
            return Err(format!(
                "no LOCK was granted after the disk had room again at {last} ms"
            ));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

// ----- dav-journal-full-quiet ----------------------------------------------------------------

/// Locks taken before the disk under the journal fills, then refreshed and unlocked while
/// it is full, and nothing after (decision 0091): every refresh the journal cannot hold is
/// refused and its lock keeps the disk's time, and since no later change writes the
/// journal, only its retry brings the UNLOCKs to the disk once it has room (the oracle's
/// `journal retry rule:` after every step).
pub(crate) fn journal_full_quiet(ctx: &mut Ctx) -> Plan {
    let mut config = dav_config(workers(ctx, 1, 3));
    config.features.dav_persistent_locks = true;
    let mut spec = spec(ctx, config.clone(), 8.0);
    let clients = DAV_FILES
        .iter()
        .enumerate()
        .map(|(i, resource)| {
            (
                secs(0.8 + 0.1 * i as f64),
                DavClientPlan {
                    resource,
                    depth_infinity: false,
                    exclusive: true,
                    // Long enough that no lock expires in the run: nothing but the retry
                    // writes the journal once the disk has room.
                    timeout_ms: 60_000,
                    steps: 2,
                    step_ms: (500, 700),
                    refresh_chance: 0.5,
                    write_chance: 0.0,
                    stray_chance: 0.0,
                    unlock: true,
                },
            )
        })
        .collect();
    spec.workload.dav = Some(DavWorkload {
        clients,
        client_rate: 0.0,
        draw: DavDraw::default(),
        ..DavWorkload::default()
    });
    let from = at(ctx, 1.3, 1.6);
    let d = secs(1.5 + ctx.rng.unit());
    fault(ctx.kinds, &mut spec, from, Fault::DiskFull(d));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    Plan { spec, expect: e }
}
