//! Between a scenario's plan and the real binary: the flags and `SERVERY_TEST_FAULT` rules
//! a plan becomes, and the core's status read back from `ctl status --json`.

use super::*;

/// The configuration as the knob table names it, durations scaled to real time.
pub(super) fn knobs(c: &RawConfig) -> Vec<(String, Value)> {
    let r = &c.recovery;
    let secs = |v: f64| json!(v * SCALE);
    [
        ("workers", json!(c.workers)),
        ("restart_backoff_initial", secs(r.restart_backoff_initial)),
        ("restart_backoff_max", secs(r.restart_backoff_max)),
        ("restart_stable_period", secs(r.restart_stable_period)),
        ("worker_restart_limit", json!(r.worker_restart_limit)),
        ("worker_restart_window", secs(r.worker_restart_window)),
        ("restart_burst_window", secs(r.restart_burst_window)),
        ("worker_max_age", secs(r.worker_max_age)),
        ("worker_max_age_jitter", json!(r.worker_max_age_jitter)),
        ("max_requests_per_worker", json!(r.max_requests_per_worker)),
        ("max_requests_jitter", json!(r.max_requests_jitter)),
        ("recycle_retry_limit", json!(r.recycle_retry_limit)),
        ("heartbeat_interval", secs(r.heartbeat_interval)),
        ("heartbeat_timeout", secs(r.heartbeat_timeout)),
        ("worker_start_timeout", secs(r.worker_start_timeout)),
        ("drain_timeout", secs(r.drain_timeout)),
        ("force_timeout", secs(r.force_timeout)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A behaviour as a `SERVERY_TEST_FAULT` fault.
pub(super) fn fault_text(b: &Behavior) -> Option<String> {
    Some(match b {
        Behavior::Healthy => return None,
        Behavior::FailStartup(message) => format!("fail-startup={}", message.replace('\n', " ")),
        Behavior::CrashAtBoot => "exit-at-start".into(),
        Behavior::CrashBetweenPrepareAndCommit => "crash-after-prepare".into(),
        Behavior::HangAtBoot => "hang-at-boot".into(),
        Behavior::SlowBoot(d) => format!("slow-boot={}", d.mul_f64(SCALE).as_millis()),
        Behavior::CrashAfterRequests(k) => format!("crash-after-requests={k}"),
        Behavior::WedgedDrain => "wedged-drain".into(),
        Behavior::ExitDuringDrain => "exit-during-drain".into(),
        // The parent's fork fails: nothing a worker could do to itself.
        Behavior::SpawnFails(_) => panic!("a refused spawn cannot be driven (see NOT_DRIVEN)"),
        // Drawn lifetimes belong to the research workloads; no gate scenario uses them.
        Behavior::CrashAfter(_) | Behavior::SlowBootCrashAfter { .. } => {
            panic!("a drawn lifetime is no gate scenario's behaviour")
        }
        // A wedged interpreter needs an application: tests/apps.rs spins one holding the GIL.
        Behavior::AppWedgesAfterRequests(_) => {
            panic!("a wedged application cannot be driven on the file server (see NOT_DRIVEN)")
        }
        // An application's import and lifespan: tests/apps.rs and tests/apps_asgi.rs.
        Behavior::AppStartup(_) => {
            panic!("an application's startup cannot be driven on the file server (see NOT_DRIVEN)")
        }
    })
}

type Row = Vec<((u32, u64), Option<String>)>;

/// The scenario's behaviour function as `SERVERY_TEST_FAULT` rules: evaluated for every
/// (spawn index, slot, generation) the table covers, each index with its own random
/// stream, then folded into the fewest rules that say the same.
pub fn behavior_rules(behavior: &BehaviorFn, seed: u64) -> String {
    let table: Vec<Row> = (0..INDICES)
        .map(|index| {
            let rng = SimRng::new(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut row = Vec::new();
            for slot in 0..SLOTS {
                for generation in 1..=GENERATIONS {
                    let info = SpawnInfo {
                        index,
                        slot: Slot(slot),
                        generation: Generation(generation),
                        now: Duration::ZERO,
                    };
                    let b = behavior(&info, &mut rng.clone());
                    row.push(((slot, generation), fault_text(&b)));
                }
            }
            row
        })
        .collect();
    let uniform = |row: &Row| row.iter().all(|(_, f)| f == &row[0].1);
    let mut rules = Vec::new();
    let mut emit = |prefix: String, row: &Row| {
        if uniform(row) {
            if let Some(f) = &row[0].1 {
                rules.push(format!(
                    "{} {f}",
                    if prefix.is_empty() { "*" } else { &prefix }
                ));
            }
            return;
        }
        for ((slot, generation), f) in row {
            if let Some(f) = f {
                let sep = if prefix.is_empty() { "" } else { "," };
                rules.push(format!(
                    "{prefix}{sep}slot={slot},generation={generation} {f}"
                ));
            }
        }
    };
    if table.iter().all(|row| row == &table[0]) {
        emit(String::new(), &table[0]);
    } else {
        for (index, row) in table.iter().enumerate() {
            emit(format!("index={index}"), row);
        }
    }
    rules.join("\n")
}

/// The kind of misbehaviour `rules` (as [`behavior_rules`] wrote them) give the process
/// with this (spawn index, slot, generation), matched as the worker matches them.
pub(super) fn planned_kind(
    rules: &str,
    (index, slot, generation): (u64, u64, u64),
) -> Option<FaultKind> {
    let applies = |when: &str| {
        when == "*"
            || when.split(',').all(|term| match term.split_once('=') {
                Some(("index", v)) => v.parse() == Ok(index),
                Some(("slot", v)) => v.parse() == Ok(slot),
                Some(("generation", v)) => v.parse() == Ok(generation),
                _ => false,
            })
    };
    let fault = rules.lines().find_map(|line| {
        let (when, fault) = line.split_once(' ')?;
        applies(when).then_some(fault)
    })?;
    let name = fault.split_once('=').map_or(fault, |(name, _)| name);
    Some(match name {
        "exit-at-start" => FaultKind::CrashAtBoot,
        "fail-startup" => FaultKind::FailStartup,
        "hang-at-boot" => FaultKind::HangAtBoot,
        "slow-boot" => FaultKind::SlowBoot,
        "crash-after-prepare" => FaultKind::CrashBetweenPrepareAndCommit,
        "crash-after-requests" => FaultKind::CrashAfterRequests,
        "wedged-drain" => FaultKind::WedgedDrain,
        "exit-during-drain" => FaultKind::ExitDuringDrain,
        other => panic!("a behaviour rule names no fault kind: {other}"),
    })
}

/// The id of the worker with `pid` in `status`, and the parent's uptime then.
pub(super) fn worker_id(status: Option<&Value>, pid: u32) -> Option<(u64, Duration)> {
    let s = status?;
    let id = s["workers"]
        .as_array()?
        .iter()
        .find(|w| w["pid"].as_u64() == Some(u64::from(pid)))?["id"]
        .as_u64()?;
    Some((id, Duration::from_millis(s["uptime_ms"].as_u64()?)))
}

/// The pids of live workers (ready ones only if `ready`), by worker id.
pub(super) fn live_workers(status: Option<&Value>, ready: bool) -> Vec<u32> {
    let Some(workers) = status.and_then(|s| s["workers"].as_array()) else {
        return Vec::new();
    };
    workers
        .iter()
        .filter(|w| w["state"] != "exited" && (!ready || w["state"] == "ready"))
        .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
        .filter(|&p| alive(p))
        .collect()
}

pub(super) fn pick_one<T>(items: &[T], pick: u64) -> Option<&T> {
    (!items.is_empty()).then(|| &items[(pick % items.len() as u64) as usize])
}

/// `servery: service failed (CODE): MESSAGE` on the parent's stderr.
pub(super) fn failure_in(stderr: &str) -> Option<(FailureReason, String)> {
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("servery: service failed (").map(|(_, r)| r))?;
    let (code, message) = line.split_once("): ")?;
    let reason = FailureReason::from_code(code)?;
    Some((reason, message.to_owned()))
}

pub(super) fn temp_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                temp_files(&path)
            } else {
                usize::from(e.file_name().to_string_lossy().starts_with(".servery-tmp-"))
            }
        })
        .sum()
}

/// The core's status from its JSON form (the parts the predicates read).
pub fn status_of(s: &Value) -> Option<Status> {
    let name = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let state = ServiceState::from_name(&name(&s["state"]))?;
    let workers = s["workers"]
        .as_array()?
        .iter()
        .map(|w| {
            Some(WorkerStatus {
                id: WorkerId(w["id"].as_u64()?),
                slot: Slot(w["slot"].as_u64()? as u32),
                pid: w["pid"].as_u64().map(|p| p as u32),
                cpus: w["cpus"]
                    .as_str()
                    .and_then(|l| servery_core::cpu_affinity::CpuSet::parse_list(l).ok()),
                generation: Generation(w["generation"].as_u64()?),
                state: WorkerState::from_name(&name(&w["state"]))?,
                role: Role::from_name(&name(&w["role"]))?,
                requests: w["requests"].as_u64()?,
                memory: w["rss_bytes"].as_u64().unwrap_or(0),
                connections: w["connections"]
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .unwrap_or(0),
                requests_in_progress: w["requests_in_progress"]
                    .as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .unwrap_or(0),
                age: Duration::from_millis(w["age_ms"].as_u64()?),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let last_failure = match &s["last_failure"] {
        Value::Null => None,
        f => Some(FailureRecord {
            worker: WorkerId(f["worker"].as_u64()?),
            slot: Slot(f["slot"].as_u64()? as u32),
            generation: Generation(f["generation"].as_u64()?),
            reason: ExitReason::from_code(&name(&f["reason"]))?,
            message: f["message"].as_str()?.to_owned(),
            at: servery_core::Instant::from_nanos(f["at_ms"].as_u64()? * 1_000_000),
        }),
    };
    let capacity = &s["capacity"];
    let count = |k: &str| capacity[k].as_u64().map(|n| n as u32);
    Some(Status {
        state,
        readiness: servery_core::supervisor::Readiness::ALL
            .into_iter()
            .find(|r| s["readiness"] == r.name())?,
        capacity: servery_core::supervisor::Capacity {
            ready: count("ready_workers")?,
            wanted: count("workers")?,
            minimum: count("min_ready_workers")?,
        },
        generation: Generation(s["generation"].as_u64()?),
        workers,
        restarts: s["restarts"].as_u64()?,
        recent_restarts: s["recent_restarts"].as_u64()? as usize,
        last_failure,
        recent_exits: Vec::new(),
        failure: FailureReason::from_code(&name(&s["failure"]["reason"]))
            .map(|reason| (reason, name(&s["failure"]["message"]))),
        recycling_suspended: s["recycling_suspended"].as_str().map(str::to_owned),
        recycle_in_flight: s["recycle_in_flight"].as_bool()?,
        reload_in_flight: s["reload_in_flight"].as_bool()?,
        last_reload_error: s["last_reload_error"].as_str().map(str::to_owned),
        // The predicates read nothing of it.
        http3: None,
    })
}
