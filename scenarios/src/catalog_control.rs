//! The control socket's requests, decided and answered by the core (decisions 0071 and
//! 0072): the simulated driver relays them exactly as the real one does, and the
//! lifecycle oracle's answer rule judges every answer against the state the driver saw.

use servery_core::config::Listen;
use servery_core::control::{Answer, Refusal};
use servery_core::supervisor::PortFixedBy;
use servery_sim::SimCommand;

use crate::catalog::{at, expect, spec, workers};
use crate::{Ctx, End, Plan, fast_config};

/// The requests `control-answers` always makes: each must have exactly one answer.
const CONTROL_REQUESTS: usize = 8;

pub(crate) fn control_answers(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 8.0);
    let mut next = fast_config(workers(ctx, 1, 3));
    next.recovery.drain_timeout = config.recovery.drain_timeout;
    // Before the first commit: nothing serves, so the recycle is refused with why (the
    // core used to ignore it, and the real driver answered `ok`).
    let early = at(ctx, 0.0, 0.001);
    spec.commands.push((early, SimCommand::Recycle));
    // Serving: a recycle, then two reloads at once (the second is refused, the first
    // waits for the recycle and is answered by its commit).
    spec.commands.push((at(ctx, 1.0, 2.5), SimCommand::Recycle));
    let reload_at = at(ctx, 3.0, 4.0);
    spec.commands
        .push((reload_at, SimCommand::Reload(Box::new(next.clone()))));
    spec.commands
        .push((reload_at, SimCommand::Reload(Box::new(next.clone()))));
    // Closing: a stop, then at the same instant what would start work, and a second
    // stop. The run's own SIGTERM comes after them.
    let stop = spec.stop_at;
    spec.commands.push((stop, SimCommand::CtlStop));
    spec.commands.push((stop, SimCommand::Recycle));
    spec.commands
        .push((stop, SimCommand::Reload(Box::new(next.clone()))));
    spec.commands.push((stop, SimCommand::CtlStop));
    debug_assert_eq!(spec.commands.len(), CONTROL_REQUESTS);
    let mut e = expect(&config, End::Ready);
    e.workers = next.workers as usize;
    e.generation = Some(2);
    e.extra = Some(|o, _| {
        let mut ids: Vec<u64> = o.answers.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        if o.answers.len() != CONTROL_REQUESTS || ids.len() != CONTROL_REQUESTS {
            return Err(format!(
                "answer rule: {CONTROL_REQUESTS} requests, {} answers to {} of them: {:?}",
                o.answers.len(),
                ids.len(),
                o.answers
            ));
        }
        let closing = |id: u64| o.answers.iter().find(|(i, _)| *i == id).map(|(_, a)| a);
        let stopping = Answer::Refused(Refusal::Stopping);
        if closing(5) != Some(&stopping) || closing(6) != Some(&stopping) {
            return Err(format!(
                "answer rule: a recycle and a reload read while stopping were not refused with the stopping reason: {:?}",
                o.answers
            ));
        }
        if closing(7) != Some(&Answer::AlreadyStopping) {
            return Err(format!(
                "answer rule: a second stop was not answered `already stopping`: {:?}",
                o.answers
            ));
        }
        o.coverage.insert("every control request answered once");
        if closing(0) == Some(&Answer::Refused(Refusal::NotServing)) {
            o.coverage
                .insert("a recycle before the first commit refused");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// The port a fixed-port service starts on, and the one its reloads try to move to.
const STARTED: Listen = Listen { port: Some(8443) };
const ELSEWHERE: Listen = Listen { port: Some(8444) };

pub(crate) fn reload_port_fixed(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    config.listen = STARTED;
    // What fixes the port: HTTP/3, ACME, the service manager's sockets (a fact the
    // simulated driver reports to the core, as the real one does), or the service
    // manager's sockets under HTTP/3 (whose reason comes first).
    let (fixed_by, from_service_manager) = match ctx.rng.range(0, 3) {
        0 => {
            config.features.http3 = true;
            (PortFixedBy::Http3, false)
        }
        1 => {
            config.features.acme = true;
            (PortFixedBy::Acme, false)
        }
        2 => (PortFixedBy::ServiceManager, true),
        _ => {
            config.features.http3 = true;
            (PortFixedBy::ServiceManager, true)
        }
    };
    let mut spec = spec(ctx, config.clone(), 11.0);
    spec.listeners_from_service_manager = from_service_manager;
    let (mut generation, mut serving) = (1, config.workers as usize);
    for i in 0..3 {
        let mut next = fast_config(workers(ctx, 1, 3));
        next.features = config.features.clone();
        let moves = ctx.rng.range(0, 1) == 0;
        next.listen = if moves { ELSEWHERE } else { STARTED };
        if !moves {
            generation += 1;
            serving = next.workers as usize;
        }
        let when = at(ctx, 1.0 + 3.0 * i as f64, 2.0 + 3.0 * i as f64);
        spec.commands
            .push((when, SimCommand::Reload(Box::new(next))));
    }
    let mut e = expect(&config, End::Ready);
    e.workers = serving;
    e.generation = Some(generation);
    e.zero_failed = true;
    e.port_fixed_by = Some(fixed_by);
    e.extra = Some(|o, e| {
        let fixed_by = e.port_fixed_by.unwrap_or(PortFixedBy::Http3);
        let want = format!("port cannot change on reload {}", fixed_by.reason());
        if let Some(other) = o.reload_rejections.iter().find(|m| !m.starts_with(&want)) {
            return Err(format!(
                "fixed-port rule: a reload was rejected for another reason than `{want}`: {other}"
            ));
        }
        let refused = o
            .answers
            .iter()
            .filter(
                |(_, a)| matches!(a, Answer::Refused(Refusal::Reload(m)) if m.starts_with(&want)),
            )
            .count();
        if refused != o.reload_rejections.len() {
            return Err(format!(
                "fixed-port rule: {} rejections, {refused} answered with the reason",
                o.reload_rejections.len()
            ));
        }
        if refused > 0 {
            o.coverage.insert(match fixed_by {
                PortFixedBy::Http3 => "a reload that moves a port --http3 fixes refused",
                PortFixedBy::Acme => "a reload that moves a port --acme fixes refused",
                PortFixedBy::ServiceManager => {
                    "a reload that moves a service manager's port refused"
                }
            });
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// Certificate files read again on reload (decision 0093): their contents change between
/// reloads, good or broken, and each reload reads what they hold then.
pub(crate) fn reload_tls_files(ctx: &mut Ctx) -> Plan {
    use core::time::Duration;
    use servery_sim::tls_files::{TlsFilesHold, TlsFilesPlan};
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 11.0);
    let mut changes = vec![(Duration::ZERO, TlsFilesHold::Good { serial: 1 })];
    let mut serving = config.workers as usize;
    for i in 0..3u64 {
        // The files change (or not) a moment before each reload.
        let when = at(ctx, 1.0 + 3.0 * i as f64, 2.0 + 3.0 * i as f64);
        let holds = match ctx.rng.range(0, 2) {
            0 => TlsFilesHold::Broken,
            1 => TlsFilesHold::Good { serial: i + 2 },
            _ => changes.last().map_or(TlsFilesHold::Broken, |c| c.1),
        };
        changes.push((when.saturating_sub(Duration::from_millis(1)), holds));
        let next = fast_config(workers(ctx, 1, 3));
        if holds != TlsFilesHold::Broken {
            serving = next.workers as usize;
        }
        spec.commands
            .push((when, SimCommand::Reload(Box::new(next))));
    }
    spec.workload.tls_files = Some(TlsFilesPlan { changes });
    let mut e = expect(&config, End::Ready);
    e.workers = serving;
    e.workers_rule = Some("certificate reread rule");
    // The generation is judged by the rule below, which names it: one more per good read.
    e.generation = None;
    e.zero_failed = true;
    e.extra = Some(|o, _| {
        let t = &o.tls_files;
        let good = t.reads.iter().filter(|r| r.serial.is_some()).count();
        if o.generations_committed.len() != 1 + good {
            return Err(format!(
                "certificate reread rule: {} generations committed, but {good} reloads read good certificate files (one each, after the first)",
                o.generations_committed.len()
            ));
        }
        for (reload, committed) in &t.reloads {
            let reads: Vec<_> = t.reads.iter().filter(|r| r.reload == *reload).collect();
            let [read] = reads[..] else {
                return Err(format!(
                    "certificate reread rule: reload {reload} ended after {} reads of the certificate files, not one",
                    reads.len()
                ));
            };
            match read.serial {
                None if *committed => {
                    return Err(format!(
                        "certificate reread rule: reload {reload} read broken certificate files and committed"
                    ));
                }
                None => {
                    let message = t.rejections.iter().find(|(r, _)| r == reload);
                    if !message.is_some_and(|(_, m)| m.contains("were not reloaded")) {
                        return Err(format!(
                            "certificate reread rule: reload {reload} read broken files and was refused for another reason: {message:?}"
                        ));
                    }
                }
                Some(serial) => {
                    let served = t
                        .identities
                        .iter()
                        .rev()
                        .find(|(ms, _, _)| *ms <= read.at_ms)
                        .map(|i| i.2);
                    let last = t
                        .identities
                        .iter()
                        .take_while(|(ms, _, _)| *ms <= read.at_ms)
                        .last();
                    let taken = t
                        .identities
                        .iter()
                        .any(|(ms, _, s)| *s == serial && *ms >= read.at_ms)
                        || served == Some(serial);
                    if !taken {
                        return Err(format!(
                            "certificate reread rule: reload {reload} read certificate {serial}, which the parent never served (it served {last:?} then)"
                        ));
                    }
                }
            }
        }
        // Every change of identity is a good read's, at its instant or after it.
        for (ms, generation, serial) in t.identities.iter().skip(1) {
            if !t
                .reads
                .iter()
                .any(|r| r.serial == Some(*serial) && r.at_ms <= *ms)
            {
                return Err(format!(
                    "certificate reread rule: the parent took identity {generation} (certificate {serial}) at {ms} ms, which no reload read"
                ));
            }
        }
        if t.reads.iter().any(|r| r.serial.is_none()) {
            o.coverage
                .insert("a reload that read broken certificate files refused");
        }
        if t.identities.len() > 1 {
            o.coverage.insert("a reload's certificate files served");
        }
        Ok(())
    });
    Plan { spec, expect: e }
}
