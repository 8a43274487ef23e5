//! Scenarios of the write flow and the broker's tables: uploads to shared targets, a lease
//! holder's death, saturated budgets, and the access-log queue.

use servery_core::config::LogPolicy;
use servery_sim::{Fault, FaultKind, Outcome, UploadEnd};

use crate::catalog::{at, expect, fault, secs, spec, uploads, workers};
use crate::{Ctx, End, Expect, Plan, fast_config};

pub(crate) fn same_target(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 2, 4));
    let mut spec = spec(ctx, config.clone(), 20.0);
    let targets = ctx.rng.range(1, 2) as u8;
    uploads(&mut spec, 30.0, targets);
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        if o.uploads.ok == 0 {
            return Err("no upload succeeded".into());
        }
        if o.uploads.conflict > 0 {
            o.coverage.insert("same-target conflict");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn lease_holder_death(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 2, 4));
    let mut spec = spec(ctx, config.clone(), 12.0);
    uploads(&mut spec, 25.0, 2);
    spec.workload.chunk_ms = (20, 80);
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 2.0, 10.0);
        fault(ctx.kinds, &mut spec, t, Fault::CrashLeaseHolder);
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(writes_recover_after_holder_deaths);
    Plan { spec, expect: e }
}

/// Uploads that must succeed after a lease holder's death: of those that arrived after
/// it, to each target it held, and to any target after the last death. (Seeds 0..2000
/// on both platforms: at least 29 per held target.)
const UPLOADS_AFTER_DEATH: usize = 10;

/// A dead holder's targets are writable again: its lease was revoked, not left to
/// block them. Judged on uploads that arrived after the death, per target it held.
pub(crate) fn writes_recover_after_holder_deaths(
    o: &mut Outcome,
    _: &Expect,
) -> Result<(), String> {
    let ok_after = |at_ms: u64, target: Option<u8>| {
        let after = o
            .upload_log
            .iter()
            .filter(|u| u.started_ms > at_ms && target.is_none_or(|t| u.target == t));
        let (mut ok, mut total, mut conflict) = (0, 0, 0);
        for u in after {
            total += 1;
            ok += usize::from(u.end == UploadEnd::Ok);
            conflict += usize::from(u.end == UploadEnd::Conflict);
        }
        (ok, total, conflict)
    };
    let deaths = o
        .injected
        .iter()
        .filter(|i| i.kind == FaultKind::CrashLeaseHolder);
    let mut last = 0;
    for death in deaths {
        let worker = death.worker.unwrap_or_default();
        last = death.at_ms;
        for &target in &death.targets {
            let (ok, total, conflict) = ok_after(death.at_ms, Some(target));
            if ok < UPLOADS_AFTER_DEATH {
                return Err(format!(
                    "w{worker} died holding target-{target} at {} ms: {ok} of the {total} \
                     uploads to it that arrived later succeeded ({conflict} found it busy), \
                     expected at least {UPLOADS_AFTER_DEATH}",
                    death.at_ms
                ));
            }
        }
    }
    let (ok, total, _) = ok_after(last, None);
    if ok < UPLOADS_AFTER_DEATH {
        return Err(format!(
            "{ok} of the {total} uploads that arrived after {last} ms succeeded, expected at \
             least {UPLOADS_AFTER_DEATH}"
        ));
    }
    Ok(())
}

/// broker-saturation's burst: uploads arrive at its rate until its end, then at the
/// calm rate, at which the broker must grant again.
const SATURATION_RATE: f64 = 60.0;
const SATURATION_UNTIL: f64 = 6.0;
const CALM_RATE: f64 = 4.0;
/// Uploads still in flight when the burst ends are done by then.
const SATURATION_SETTLES: f64 = 1.0;
/// Uploads that arrived after the burst settled and must succeed. (Seeds 0..2000 on
/// both platforms: at least 22.)
const UPLOADS_AFTER_SATURATION: usize = 10;

pub(crate) fn broker_saturation(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 2, 4));
    config.broker.max_active_uploads = ctx.rng.range(1, 2) as i64;
    config.broker.max_leases = ctx.rng.range(1, 2) as i64;
    config.broker.max_upload_bytes = ctx.rng.range(16, 40) as i64;
    config.broker.queue_capacity = ctx.rng.range(1, 3) as i64;
    let mut spec = spec(ctx, config.clone(), 10.0);
    uploads(&mut spec, CALM_RATE, 3);
    spec.workload.upload_burst = Some((SATURATION_RATE, secs(SATURATION_UNTIL)));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        let burst_ms = (SATURATION_UNTIL * 1000.0) as u64;
        if !o
            .upload_log
            .iter()
            .any(|u| u.end == UploadEnd::Saturated && u.started_ms < burst_ms)
        {
            return Err("the broker never saturated during the burst".into());
        }
        // Once the burst's uploads are done, budgets, tables and queues are free again.
        let calm_ms = ((SATURATION_UNTIL + SATURATION_SETTLES) * 1000.0) as u64;
        let after: Vec<UploadEnd> = o
            .upload_log
            .iter()
            .filter(|u| u.started_ms >= calm_ms)
            .map(|u| u.end)
            .collect();
        let ok = after.iter().filter(|e| **e == UploadEnd::Ok).count();
        if ok < UPLOADS_AFTER_SATURATION {
            let saturated = after.iter().filter(|e| **e == UploadEnd::Saturated).count();
            return Err(format!(
                "{ok} of the {} uploads that arrived after the burst settled ({calm_ms} ms) \
                 succeeded ({saturated} saturated), expected at least {UPLOADS_AFTER_SATURATION}",
                after.len()
            ));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

pub(crate) fn log_queue_saturation(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    config.features.access_log = true;
    config.broker.log_queue_capacity = ctx.rng.range(4, 16) as i64;
    config.broker.queue_capacity = ctx.rng.range(2, 8) as i64;
    let drop = ctx.rng.chance(0.5);
    config.broker.log_policy = if drop {
        LogPolicy::Drop
    } else {
        LogPolicy::Block
    };
    let mut spec = spec(ctx, config.clone(), 10.0);
    spec.workload.access_log = true;
    spec.workload.request_rate = 150.0;
    spec.workload.until = secs(3.0);
    spec.workload.log_write_rate = 100.0 + ctx.rng.unit() * 100.0;
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    e.extra = Some(if drop {
        |o, _| {
            let l = &o.log;
            if l.written + l.dropped + l.dropped_local + l.lost_with_worker != l.produced {
                return Err(format!("log records unaccounted for: {l:?}"));
            }
            Ok(())
        }
    } else {
        |o, _| {
            let l = &o.log;
            if l.written != l.produced || l.dropped + l.dropped_local + l.lost_with_worker > 0 {
                return Err(format!("the block policy lost records: {l:?}"));
            }
            Ok(())
        }
    });
    Plan { spec, expect: e }
}
