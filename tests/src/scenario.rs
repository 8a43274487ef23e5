//! The seeded lifecycle scenarios of `servery-scenarios`, driven against the real binary.
//!
//! A scenario's plan (configuration, fault plan, operator commands, per-process
//! behaviours, liveness and stop points) is exactly what the simulator runs. Here the same
//! plan runs on real processes and real clocks: the configuration becomes flags, every
//! duration and rate is scaled by [`SCALE`], behaviours become `SERVERY_TEST_FAULT` rules
//! the workers apply to themselves, faults are real `kill -9` and `SIGSTOP`, commands go
//! over the control socket, and a paced client plays the workload. What happened is
//! gathered into the simulator's own [`Outcome`] (times converted back to the scenario's
//! scale) and judged by the scenario's own predicates through
//! [`servery_scenarios::judge_as`], so simulation and reality answer to the same checks.
//!
//! What a real run cannot see exactly is approximated, and said so where it is done:
//! spawn times come from status polls (`uptime − age`), and a worker's death from the
//! polls around it (or from the `kill -9` the driver sent). A failed request is charged
//! to a misbehaving worker only when it was in flight as such a worker died — one the
//! driver killed or stopped, or one whose behaviour rule makes it fail requests it took
//! — and to that worker's misbehaviour; any other failure is a healthy worker's, which
//! the predicates forbid. A request counts as refused only if it started after the stop
//! (`SIGTERM`, the parent's kill, or the service's failure).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use servery_core::RawConfig;
use servery_core::supervisor::{
    ExitReason, FailureReason, FailureRecord, Platform, Role, ServiceState, Status, WorkerState,
    WorkerStatus,
};
use servery_core::{Generation, Slot, WorkerId};
use servery_scenarios::Scenario;
use servery_sim::rng::SimRng;
use servery_sim::{
    Behavior, BehaviorFn, Fault, FaultKind, Injected, Outcome, SimCommand, SpawnInfo, StatusAnswer,
    WorkerExit,
};

use crate::{Server, Sig, Tree, alive, http_get, processes_in_groups, signal_pid};

mod translate;
pub use translate::{behavior_rules, status_of};
use translate::{failure_in, knobs, live_workers, pick_one, planned_kind, temp_files, worker_id};

/// Real seconds per scenario second. The scenarios' fast timings (a beat every 0.5 s, a
/// hang declared after 2 s, 3 s drains) become 125 ms, 500 ms and 750 ms: tight enough to
/// run a scenario in seconds, loose enough for a debug build on a loaded 2-core machine.
pub const SCALE: f64 = 0.25;

/// The scenarios this adapter does not drive, and why. Every other scenario of the
/// catalog is driven; a new scenario must be added here or work with the adapter.
pub const NOT_DRIVEN: &[(&str, &str)] = &[
    (
        "reload-tls-files",
        "its plan changes the certificate files between reloads at instants this adapter cannot time from outside; the real reload with broken and then good files is tests/tls_resumption.rs",
    ),
    (
        "control-answers",
        "its predicate reads each control request's answer at the instant the plan asks, before the first commit and at the stop's instant, which this adapter cannot time from outside: the real answers while serving and while closing are tests/control_socket.rs",
    ),
    (
        "reload-port-fixed",
        "HTTP/3 and ACME need TLS, UDP sockets and a CA this adapter does not set up, and the service manager's sockets an activation it does not make: the real refusal of a port move is tests/http3.rs, and with the service manager's sockets tests/systemd.rs",
    ),
    (
        "memory-recycle",
        "an application's memory model: the real leaking application recycled by memory on one worker is tests/apps.rs",
    ),
    (
        "app-shutdown",
        "an application's lifespan shutdown: the real one completing and one cut at the drain deadline are tests/apps_asgi.rs",
    ),
    (
        "app-reload-startup-failure",
        "an application's import and lifespan startup: the real broken deploy leaving the old code serving is tests/apps.rs, and the real lifespan failing in a reload tests/apps_asgi.rs",
    ),
    (
        "app-first-start-failure",
        "an application's import and lifespan startup: the real first generation failing its lifespan with the application's traceback is tests/apps_asgi.rs",
    ),
    (
        "cpu-affinity",
        "pinning is for application workers on a drawn set of the host's CPUs: the real application workers' CPUs read from /proc after a start, a recycle and with `off` are tests/cpu_affinity.rs",
    ),
    (
        "app-wedge",
        "an application's interpreter wedged: the real request spinning in C while holding the GIL is tests/apps.rs",
    ),
    (
        "shutdown-deadlines",
        "needs requests that run for seconds inside a worker; a static file server has no such endpoint",
    ),
    (
        "same-target-writes-serialize",
        "an upload workload: the real binary's 1,000-round race is tests/uploads.rs",
    ),
    (
        "lease-holder-death",
        "an upload workload: killing the lease holder mid-upload is tests/uploads.rs",
    ),
    (
        "broker-saturation",
        "an upload workload: the real saturation cases are tests/uploads.rs",
    ),
    (
        "upstream-flapping",
        "simulated upstreams that go down and come back on the plan's schedule: the real verdict reaching every worker after one failure each, and probes taking an upstream out and back, are tests/proxy_health.rs",
    ),
    (
        "proxy-reload-upstreams",
        "simulated upstreams that flap on the plan's schedule under reloads that change the set: the real reload from one upstream to another under load, with no failed request and every request after the commit reaching the new upstream, is tests/proxy_reload.rs",
    ),
    (
        "proxy-admission-kill",
        "a proxied workload far above the bound: the real service-wide bound measured at the upstream, and a killed worker's grants coming back, are tests/proxy.rs",
    ),
    (
        "cgi-scripts",
        "simulated scripts: the real bound across two workers and no script outliving a worker killed with SIGKILL are tests/cgi.rs",
    ),
    (
        "log-queue-saturation",
        "an access-log workload with a writer stalled on purpose: the real cases (drop and block, a killed worker) are tests/access_log.rs",
    ),
    (
        "dav-lock-survives-recycle",
        "a WebDAV lock workload: the real lock-outlives-worker/recycle/reload case is tests/webdav.rs",
    ),
    (
        "dav-lock-table-saturation",
        "a WebDAV lock workload against a tiny table: the real lock table's limits are tests/webdav.rs and the broker's unit tests",
    ),
    (
        "dav-journal-full",
        "a WebDAV lock workload on a simulated disk that fills under the lock journal: the real counterpart is tests/state_dir.rs, a_lock_the_journal_cannot_hold_is_refused_and_a_restart_keeps_every_lock_granted (an 8 KiB tmpfs under --state-dir: every LOCK 200 or 503, the table holding exactly the granted ones, all of them back after kill -9 of the parent)",
    ),
    (
        "ready-and-crash-in-one-look",
        "a crash timed to milliseconds after PREPARED while the parent is stopped for milliseconds around the first rollout, so that one poll finds a READY with another candidate's end: a stop of the real parent cannot be placed that finely. The order is the core's (`Parent::intake`, driven by core/src/parent/tests/intake.rs in every order a poll allows), and the real driver hands each poll's and each reap's finds to it unordered, which every real-process scenario here runs through",
    ),
    (
        "dav-journal-full-quiet",
        "refreshes and UNLOCKs on a simulated disk that fills and then has room again with nothing else changing: the rules are the core's (core/src/parent/dav_journal.rs, whose unit tests drive the refusal and the one-second retry), and the real journal's writes are tests/state_dir.rs on an 8 KiB tmpfs; emptying a real full disk at a chosen moment under a quiet share is not driven here",
    ),
    (
        "dav-lock-checks",
        "a WebDAV workload of every method under drawn locks, judged per request against the simulator's record of the broker's lock table: the real counterparts are tests/webdav.rs (every_write_that_would_break_a_lock_is_423_until_the_token_is_submitted and a_move_over_a_locked_file_by_its_holder_keeps_the_holders_lock, and litmus's locks suite in litmus_passes_every_suite_with_four_workers)",
    ),
    (
        "dav-lock-checks-read-only",
        "the same WebDAV workload on a read-only share: the real refusals of writes and of a LOCK of an unmapped URL on a share without --upload are tests/webdav.rs, a_read_only_share_answers_dav_reads_and_refuses_writes",
    ),
    (
        "dav-move-crash-between-steps",
        "a tree-request workload whose client picks requests from the simulated tree: the real counterpart is tests/webdav_tree_crash.rs, which kills a real worker before six chosen steps of MOVE, COPY and DELETE (SERVERY_TEST_FAULT=kill-before-tree-step) and checks the tree, the cleanup, the broker's leases and the retry",
    ),
    (
        "resumable-chunk-crash-between-steps",
        "a resumable-upload workload whose worker is killed before a drawn step of the chunk flow: the real counterparts are tests/uploads.rs, an_interrupted_resumable_upload_resumes_from_the_308_range (a client cut off mid-chunk, a kill -9 of the worker writing the next chunk, the resume from the 308 range through another worker, byte-exact, nothing left) and a_partial_holding_every_byte_is_published_by_the_next_chunk",
    ),
    (
        "reload-port-change",
        "its clients keep dialling one address, and a real client of a moved port has to follow it (the old port stops accepting when its generation drains): the real counterparts are tests/recycle.rs, a_reload_to_another_port_moves_the_listeners_and_a_busy_port_is_refused (the new port serves after the commit, the old one closes once generation 1 has drained, a port another program holds is refused with no worker started or stopped), and tests/singletons.rs, whose mDNS browser sees the advertisement move to the new port with the new generation",
    ),
    (
        "singleton-lifecycle",
        "it counts the singleton machine's actions (each service started once, switched with each generation, stopped once), which only the simulator sees; the real services have their own tests: tests/singletons.rs (access log, QR, mDNS across reloads), tests/tftp.rs and tests/http3.rs",
    ),
    (
        "malformed-frame",
        "garbage on a live worker's control channel cannot be injected from outside the process",
    ),
    (
        "chaos",
        "mixes malformed frames and lease-holder crashes into its fault plan",
    ),
    (
        "channel-delay",
        "a kernel's Unix socket cannot be made to hold a frame for milliseconds from outside the two processes, nor a poll made to find chosen channels together; the order the parent takes a poll's finds in is the core's (core/src/parent/tests/intake.rs drives every order a poll allows)",
    ),
    (
        "clock-drift",
        "one process's monotonic clock cannot be slowed or sped up from outside it: on one host every process reads the same CLOCK_MONOTONIC, and nothing a worker sends carries a time",
    ),
    (
        "spawn-failure",
        "a refused fork is per spawn here; the real OS refuses by a per-user process limit: tests/io_faults.rs lowers RLIMIT_NPROC under a throwaway user",
    ),
    (
        "control-channel",
        "short writes and a failing write on a live worker's control channel cannot be injected from outside the processes",
    ),
    (
        "accept-emfile",
        "EMFILE is made for real in tests/io_faults.rs (a worker's descriptor limit lowered with prlimit)",
    ),
    (
        "dav-put-storage-faults",
        "WebDAV PUTs under storage faults: a disk filled by a DAV PUT, a resumable chunk and a COPY is tests/io_faults.rs (a small tmpfs); a failing fsync, a failing directory fsync and a power loss between a rename and its directory fsync cannot be made from outside without a faulty block device (decision 0131)",
    ),
    (
        "upload-io-faults",
        "an upload workload: a full tmpfs is tests/io_faults.rs; a failing rename cannot be made from outside",
    ),
    (
        "acme-renewal-on-time",
        "a simulated CA and clock run months of certificate life in seconds: the real renewal against pebble (issuance, a forced renewal under load, failures that keep the certificate) is tests/acme.rs",
    ),
    (
        "acme-ca-failures-retry",
        "CA outages drawn by the simulator: the real refused validation that keeps the certificate and retries is tests/acme.rs",
    ),
    (
        "tls-handoff-worker-crash",
        "a worker killed at a drawn instant of a hand-off: the real hand-off to running workers is tests/acme.rs and tests/tls_resumption.rs",
    ),
    (
        "acme-reload-during-renewal",
        "a reload at a drawn instant of a renewal: the real certificate re-read on reload is tests/tls_resumption.rs",
    ),
    (
        "pause",
        "its predicate reads each request's latency, which this adapter's outcome does not record; the real SIGSTOP past the heartbeat timeout is the driven `hang`",
    ),
];

/// Spawns the behaviour table covers: later spawns, slots and generations are healthy
/// unless a rule applies to every process.
const INDICES: u64 = 96;
const SLOTS: u32 = 4;
const GENERATIONS: u64 = 3;

/// How often the driver looks at the service.
const POLL: Duration = Duration::from_millis(20);

/// One real run and its verdict.
#[derive(Debug)]
pub struct RealRun {
    pub outcome: Outcome,
    pub verdict: Result<(), String>,
    /// What the driver did, for a failing run's report.
    pub log: Vec<String>,
}

/// Drive `scenario` with `seed` on real processes and judge it.
pub fn drive(scenario: &Scenario, seed: u64) -> RealRun {
    let plan = servery_scenarios::plan(scenario, seed, Platform::Posix);
    let spec = plan.spec;
    let scale = |d: Duration| d.mul_f64(SCALE);
    let mut log = Vec::new();

    let rules = behavior_rules(&spec.behavior, seed);
    let misbehaving = !rules.is_empty();
    let tree = Tree::new(&format!("sc-{}", scenario.name));
    let mut args = vec!["--bind".to_owned(), "127.0.0.1".to_owned()];
    for (key, value) in knobs(&spec.config) {
        if key != "workers" {
            args.push(format!("--{}", key.replace('_', "-")));
            args.push(value.to_string());
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = if rules.is_empty() {
        Vec::new()
    } else {
        vec![("SERVERY_TEST_FAULT", rules.as_str())]
    };
    log.push(format!("flags {args:?}"));
    if misbehaving {
        log.push(format!("behaviours:\n{rules}"));
    }
    let mut server = Server::start(&tree, spec.config.workers as u32, &args, &env);
    let t0 = server.spawned;
    let virtual_ms = |real: Duration| (real.as_secs_f64() * 1000.0 / SCALE) as u64;

    let mut timeline: Vec<(Duration, Step)> = Vec::new();
    timeline.extend(
        spec.faults
            .iter()
            .map(|(t, f)| (scale(*t), Step::Fault(f.clone()))),
    );
    timeline.extend(
        spec.commands
            .iter()
            .map(|(t, c)| (scale(*t), Step::Command(c.clone()))),
    );
    timeline.push((scale(spec.liveness_at), Step::Liveness));
    timeline.push((scale(spec.stop_at), Step::Stop));
    timeline.sort_by_key(|(t, _)| *t);
    let mut timeline = timeline.into_iter().peekable();

    let w = &spec.workload;
    // Clients come once the first generation is committed (or the start has failed).
    // Sent earlier, they wait in the listener's backlog and reach the first worker to
    // accept the moment it does: a real worker can then serve its crash-after-requests
    // quota and die within a millisecond of its COMMIT, before a sibling slower to be
    // scheduled has sent its READY — a start that failed, by the seed's rule that a
    // first-generation worker lost before readiness fails the service, where the
    // simulator (whose READYs arrive within a message latency) sees a crash loop.
    let load_from = first_commit_or_failure(&mut server, t0, &mut log);
    log.push(format!("{load_from:?}: clients start"));
    let load = Paced::start(
        server.addr,
        t0,
        load_from,
        w.request_rate / SCALE,
        scale(w.until),
        seed,
    );
    let end_by = scale(spec.end_by);

    let mut o = Outcome {
        seed,
        ..Outcome::default()
    };
    let mut watch = Watch::default();
    let mut reloads: Vec<JoinHandle<Result<Value, String>>> = Vec::new();
    // Status requests in flight: when each was asked, and its answer with when it came.
    type Answer = (Result<Value, String>, Duration);
    let mut statuses: Vec<(Duration, JoinHandle<Answer>)> = Vec::new();
    // Workers a hang fault stopped: a clock jump's resume must not continue them.
    let mut hung: BTreeSet<u32> = BTreeSet::new();
    // Workers the driver killed (with when) or stopped.
    let mut killed: BTreeMap<u64, Duration> = BTreeMap::new();
    let mut stopped: BTreeSet<u64> = BTreeSet::new();
    let mut stop_sent: Option<Duration> = None;
    let mut parent_killed: Option<Duration> = None;
    loop {
        let now = t0.elapsed();
        while let Some((at, _)) = timeline.peek()
            && *at <= now
        {
            let Some((at, step)) = timeline.next() else {
                break;
            };
            if server.try_exit().is_some() {
                continue;
            }
            match step {
                Step::Fault(fault) => {
                    let status = server.ctl(&json!({"cmd": "status"})).ok();
                    let status = status.map(|mut s| s["status"].take());
                    let injected = |o: &mut Outcome, kind, worker: Option<u64>| {
                        o.injected.push(Injected {
                            at_ms: virtual_ms(at),
                            kind,
                            worker,
                            targets: Vec::new(),
                        });
                    };
                    match fault {
                        Fault::CrashWorker { pick } => {
                            let live = live_workers(status.as_ref(), false);
                            if let Some(&pid) = pick_one(&live, pick) {
                                let sent = t0.elapsed();
                                signal_pid(pid, Sig::KILL);
                                o.crash_faults += 1;
                                let id = worker_id(status.as_ref(), pid).map(|(id, _)| id);
                                if let Some(id) = id {
                                    killed.insert(id, sent);
                                }
                                injected(&mut o, FaultKind::CrashWorker, id);
                                log.push(format!("{now:?}: kill -9 worker {pid} ({id:?})"));
                            }
                        }
                        Fault::HangWorker { pick } => {
                            let ready = live_workers(status.as_ref(), true);
                            if let Some(&pid) = pick_one(&ready, pick) {
                                signal_pid(pid, Sig::STOP);
                                hung.insert(pid);
                                o.hangs_injected += 1;
                                let id = worker_id(status.as_ref(), pid);
                                // The parent's clock when it was last asked: no later
                                // than the stop, so a bound counted from it is strict.
                                if let Some((id, uptime)) = id {
                                    o.hangs.push((id, virtual_ms(uptime)));
                                    stopped.insert(id);
                                }
                                injected(&mut o, FaultKind::HangWorker, id.map(|(id, _)| id));
                                log.push(format!("{now:?}: SIGSTOP worker {pid}"));
                            }
                        }
                        Fault::StallParent(duration) => {
                            injected(&mut o, FaultKind::StallParent, None);
                            // The driver keeps polling status, which blocks while the
                            // parent is stopped; the resume comes from another thread.
                            signal_pid(server.pid, Sig::STOP);
                            let (pid, real) = (server.pid, scale(duration));
                            std::thread::spawn(move || {
                                std::thread::sleep(real);
                                signal_pid(pid, Sig::CONT);
                            });
                            log.push(format!("{now:?}: SIGSTOP parent for {real:?}"));
                        }
                        Fault::ClockJump(duration) => {
                            // The whole service stops, as in a VM pause: the parent and
                            // every worker. They continue together, the parent first
                            // (its deadlines long past, nothing to read yet); a worker a
                            // hang fault stopped stays stopped.
                            let frozen: Vec<u32> = live_workers(status.as_ref(), false)
                                .into_iter()
                                .filter(|p| !hung.contains(p))
                                .collect();
                            signal_pid(server.pid, Sig::STOP);
                            for &pid in &frozen {
                                signal_pid(pid, Sig::STOP);
                            }
                            let (parent, real) = (server.pid, scale(duration));
                            std::thread::spawn(move || {
                                std::thread::sleep(real);
                                signal_pid(parent, Sig::CONT);
                                for pid in frozen {
                                    signal_pid(pid, Sig::CONT);
                                }
                            });
                            o.clock_jumps
                                .push((virtual_ms(now), duration.as_millis() as u64));
                            log.push(format!(
                                "{now:?}: SIGSTOP the parent and its workers for {real:?}"
                            ));
                        }
                        Fault::CrashParent => {
                            injected(&mut o, FaultKind::CrashParent, None);
                            let live = live_workers(status.as_ref(), false);
                            watch.orphans = live.iter().copied().collect();
                            server.kill_parent();
                            parent_killed = Some(now);
                            log.push(format!("{now:?}: kill -9 parent, workers {live:?}"));
                        }
                        // A kernel socket cannot be made to hold a frame, nor one process's
                        // clock slowed, from outside: the real run goes on without them
                        // (they only make a plan harder), its predicates the same.
                        held @ (Fault::ChannelDelay { .. } | Fault::ClockDrift { .. }) => {
                            log.push(format!("{now:?}: {held:?} is not injected on a real host"));
                        }
                        other => panic!("{other:?} cannot be driven (see NOT_DRIVEN)"),
                    }
                }
                Step::Command(SimCommand::CtlStop) => {
                    log.push(format!("{now:?}: ctl stop"));
                    stop_sent.get_or_insert(now);
                    if let Err(e) = server.ctl(&json!({"cmd": "stop"})) {
                        log.push(format!("stop refused: {e}"));
                    }
                }
                Step::Command(SimCommand::Recycle) => {
                    log.push(format!("{now:?}: ctl recycle"));
                    if let Err(e) = server.ctl(&json!({"cmd": "recycle"})) {
                        log.push(format!("recycle refused: {e}"));
                    }
                }
                Step::Command(SimCommand::Reload(next)) => {
                    let set: Map<String, Value> = knobs(&next).into_iter().collect();
                    log.push(format!("{now:?}: ctl reload {set:?}"));
                    let socket = server.socket.clone();
                    let request = json!({"cmd": "reload", "set": set});
                    reloads.push(std::thread::spawn(move || crate::ctl_at(&socket, &request)));
                }
                Step::Command(SimCommand::Resize(by)) => {
                    // A signal has no answer: sent while a reload is still in flight (the
                    // real one runs late when the start did), it would be refused where the
                    // plan's was not. Sent once the service is ready and between reloads,
                    // as an operator would.
                    let settled = crate::wait_until_or(
                        Duration::from_secs(30),
                        || {
                            let s = server.ctl(&json!({"cmd": "status"})).ok()?;
                            let s = &s["status"];
                            (s["state"] == "ready" && s["reload_in_flight"] == false).then_some(())
                        },
                        || "a ready service with no reload in flight".into(),
                    );
                    let sig = if by > 0 { Sig::TTIN } else { Sig::TTOU };
                    log.push(format!("{now:?}: {sig:?} (settled after {:?})", settled.1));
                    server.signal(sig);
                }
                Step::Command(SimCommand::Status) => {
                    // Blocks while the parent is stopped: answered from its own thread.
                    log.push(format!("{now:?}: ctl status"));
                    let socket = server.socket.clone();
                    statuses.push((
                        now,
                        std::thread::spawn(move || {
                            let answer = crate::ctl_at(&socket, &json!({"cmd": "status"}));
                            (answer, t0.elapsed())
                        }),
                    ));
                }
                Step::Command(SimCommand::Stop) | Step::Stop => {
                    log.push(format!("{now:?}: SIGTERM"));
                    stop_sent = Some(now);
                    server.signal(Sig::TERM);
                }
                Step::Liveness => {
                    let status = server.ctl(&json!({"cmd": "status"}));
                    if let Ok(mut s) = status {
                        let s = s["status"].take();
                        log.push(format!("{now:?}: liveness {s}"));
                        watch.observe(&s, &mut o, (now, now), virtual_ms);
                        o.liveness = status_of(&s);
                    }
                }
            }
        }
        if server.try_exit().is_some() {
            break;
        }
        if now > end_by {
            o.stalled = Some(format!(
                "the parent still ran {end_by:?} after its start (the scenario's end_by)"
            ));
            break;
        }
        let asked = t0.elapsed();
        if let Ok(mut s) = server.ctl(&json!({"cmd": "status"})) {
            let polled = t0.elapsed();
            watch.observe(&s["status"].take(), &mut o, (asked, polled), virtual_ms);
        }
        std::thread::sleep(POLL);
    }
    let exited_at = t0.elapsed();
    let exit = server.try_exit();
    o.parent_gone_ms = virtual_ms(parent_killed.unwrap_or(exited_at));
    if let Some(killed) = parent_killed {
        o.parent_crashed = true;
        // Orphans drain on their own clock; wait for them (bounded by the run's end).
        let deadline = killed + scale(spec.end_by.saturating_sub(spec.stop_at));
        let mut last_exit = killed;
        let mut living = watch.orphans.len();
        loop {
            let now = t0.elapsed();
            let still = watch.orphans.iter().filter(|p| alive(**p)).count();
            if still < living {
                last_exit = now;
                living = still;
            }
            o.parent_eof_exits = (watch.orphans.len() - still) as u64;
            if still == 0 || now > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        o.last_process_exit_ms = virtual_ms(last_exit);
        log.push(format!("orphans gone by {last_exit:?}"));
    } else {
        o.exit_code = exit.and_then(|s| s.code());
        o.exit_at_ms = exit.map(|_| virtual_ms(exited_at));
        o.last_process_exit_ms = virtual_ms(exited_at);
    }
    let samples = load.stop();
    for handle in reloads {
        match handle.join() {
            Ok(Err(refusal)) => o.reload_rejections.push(refusal),
            Ok(Ok(_)) => {}
            Err(_) => o
                .reload_rejections
                .push("the reload request panicked".into()),
        }
    }
    o.reload_rejections
        .extend(watch.reload_errors.iter().cloned());
    for (asked, handle) in statuses {
        if let Ok((Ok(mut answer), answered)) = handle.join()
            && let Some(status) = status_of(&answer["status"].take())
        {
            o.status_answers.push(StatusAnswer {
                asked_ms: virtual_ms(asked),
                answered_ms: virtual_ms(answered),
                ready_workers: status
                    .workers
                    .iter()
                    .filter(|w| w.state == WorkerState::Ready)
                    .count(),
                restarts: status.restarts,
            });
        }
    }

    let stderr = server.stderr();
    if let Some((reason, message)) = failure_in(&stderr) {
        o.failure = Some(reason);
        o.failure_message = Some(message);
    }
    let groups: BTreeSet<u32> = watch.pids.iter().copied().collect();
    let survivors = processes_in_groups(&groups);
    o.processes_alive_at_end = survivors.len();
    for pid in survivors {
        signal_pid(pid, Sig::KILL);
    }
    o.temp_files_at_end = temp_files(&tree.root());
    o.spawns = watch.spawn_ms.keys().next_back().copied().unwrap_or(0);
    o.spawn_times_ms = (1..=o.spawns)
        .map(|id| {
            // A worker that lived less than a poll was never seen: its successor's spawn
            // time bounds it from above.
            watch.spawn_ms.range(id..).next().map_or(0, |(_, &ms)| ms)
        })
        .collect();
    if o.liveness.is_none() && o.failure.is_none() && !o.parent_crashed {
        log.push("no liveness snapshot was taken".into());
    }

    // The misbehaving workers, and when each died.
    let mut deaths = Vec::new();
    for (&id, seen) in &watch.seen {
        let kind = if killed.contains_key(&id) {
            Some(FaultKind::CrashWorker)
        } else if stopped.contains(&id) {
            Some(FaultKind::HangWorker)
        } else {
            let spawn = (id.saturating_sub(1), seen.slot, seen.generation);
            let planned = planned_kind(&rules, spawn);
            if let Some(kind) = planned {
                o.misbehaving.push((spawn.0, kind));
            }
            planned
        };
        let Some(kind) = kind.filter(|k| k.can_fail_requests()) else {
            continue;
        };
        let (from, to) = match killed.get(&id) {
            Some(&at) => (at, at),
            None => (seen.last_seen, seen.gone_at.unwrap_or(exited_at)),
        };
        deaths.push((id, kind, from, to));
    }
    // A worker that lived between two polls was never listed: it was spawned after the
    // newest older worker a poll listed, and was gone by the first poll listing a newer
    // one. Its slot and generation are unknown, so any rule its spawn index may match
    // counts.
    // The newest worker anything named: a poll, a poll's last failure, or the failure
    // the parent reported on its way out.
    let failed_worker = o.failure_message.as_deref().and_then(|m| {
        let digits = m.split_once("worker w")?.1;
        let end = digits.find(|c: char| !c.is_ascii_digit())?;
        digits[..end].parse::<u64>().ok()
    });
    let newest = [
        watch.seen.keys().next_back().copied(),
        watch.named,
        failed_worker,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0);
    for id in (1..=newest).filter(|id| !watch.seen.contains_key(id)) {
        let index = id - 1;
        let planned = (0..u64::from(SLOTS))
            .flat_map(|slot| (1..=GENERATIONS).map(move |g| (index, slot, g)))
            .filter_map(|spawn| planned_kind(&rules, spawn))
            .max_by_key(|k| k.can_fail_requests());
        let Some(kind) = planned else {
            continue;
        };
        o.misbehaving.push((index, kind));
        if kind.can_fail_requests() {
            let from = watch
                .spawn_ms
                .range(..id)
                .next_back()
                .map(|(_, &ms)| Duration::from_millis(ms).mul_f64(SCALE));
            // Gone by the first poll listing a newer worker; one named only by the
            // parent's failure, by the end of the run.
            let to = watch.polls.iter().find(|(_, max)| *max > id).map(|p| p.0);
            deaths.push((id, kind, from.unwrap_or_default(), to.unwrap_or(exited_at)));
        }
    }
    o.misbehaving.sort_unstable();
    log.push(format!(
        "misbehaving workers died (id, kind, between): {deaths:?}"
    ));
    let stopped_at = [stop_sent, parent_killed].into_iter().flatten().min();
    // The service's own failure closes its listeners too: no earlier than the parent's
    // record of the last failure (or, when no poll saw it failed, the last poll that saw
    // it running).
    let failed_at = o
        .failure
        .map(|_| watch.failed_real.unwrap_or(watch.last_running));
    for s in &samples {
        if s.ok {
            o.requests.ok += 1;
            continue;
        }
        // Made after the stop, or after the service failed: refused.
        if stopped_at
            .into_iter()
            .chain(failed_at)
            .any(|t| s.start >= t)
        {
            o.requests.refused += 1;
            continue;
        }
        // In flight as a misbehaving worker died (within a poll either side).
        let cause = deaths
            .iter()
            .find(|(_, _, from, to)| s.start <= *to + POLL && s.end + POLL >= *from);
        match cause {
            Some(&(_, kind, _, _)) => {
                o.requests.failed_fault += 1;
                *o.failed_by_cause.entry(kind).or_default() += 1;
            }
            // Still queued in the listener when the failed service closed it: refused, as
            // the simulator counts the backlog it closes. (A graceful stop's backlog gets
            // no such pass: a request made before the stop must be answered.)
            None if failed_at.is_some_and(|t| s.end >= t) => o.requests.refused += 1,
            None => {
                o.requests.failed_forced += 1;
                log.push(format!(
                    "request {:?}..{:?} failed on a healthy worker: {}",
                    s.start, s.end, s.what
                ));
            }
        }
    }
    log.push(format!(
        "requests {:?}, exit {:?} at {:?} ms, spawns {} at {:?}",
        o.requests, o.exit_code, o.exit_at_ms, o.spawns, o.spawn_times_ms
    ));
    let verdict = servery_scenarios::judge_as(scenario, seed, Platform::Posix, &mut o);
    RealRun {
        outcome: o,
        verdict,
        log,
    }
}

enum Step {
    Fault(Fault),
    Command(SimCommand),
    Liveness,
    Stop,
}

/// A worker the polls saw.
struct Seen {
    slot: u64,
    generation: u64,
    /// The last poll that listed it, and the first that did not (real time).
    last_seen: Duration,
    gone_at: Option<Duration>,
}

/// What the polls saw over the run.
#[derive(Default)]
struct Watch {
    /// Every worker a poll listed, by id.
    seen: BTreeMap<u64, Seen>,
    /// Each poll: when (real time), and the newest worker id listed so far.
    polls: Vec<(Duration, u64)>,
    /// The newest worker a poll's last failure named.
    named: Option<u64>,
    /// When the service failed, as near as the parent says: its last failure's time on
    /// its own clock (which started after the driver's, so this is no later than the
    /// failure), or else the last poll that saw it running.
    failed_real: Option<Duration>,
    last_running: Duration,
    /// Worker id → spawn time (scenario ms).
    spawn_ms: BTreeMap<u64, u64>,
    pids: BTreeSet<u32>,
    orphans: BTreeSet<u32>,
    generations: BTreeSet<u64>,
    reload_errors: BTreeSet<String>,
    /// Workers the last poll showed alive.
    live: BTreeSet<u64>,
}

impl Watch {
    /// `(asked, now)`: when the poll was sent and when its answer arrived. The parent
    /// wrote the answer somewhere in between, so what it saw running is known to run only
    /// at `asked` (a loaded parent may answer after it failed and closed its listeners).
    fn observe(
        &mut self,
        s: &Value,
        o: &mut Outcome,
        (asked, now): (Duration, Duration),
        virtual_ms: impl Fn(Duration) -> u64,
    ) {
        let uptime = s["uptime_ms"].as_u64().unwrap_or(0);
        let workers = s["workers"].as_array().cloned().unwrap_or_default();
        for w in &workers {
            let Some(id) = w["id"].as_u64() else {
                continue;
            };
            let seen = self.seen.entry(id).or_insert(Seen {
                slot: w["slot"].as_u64().unwrap_or(0),
                generation: w["generation"].as_u64().unwrap_or(0),
                last_seen: now,
                gone_at: None,
            });
            seen.last_seen = now;
        }
        if s["workers"].is_array() {
            let newest = workers.iter().filter_map(|w| w["id"].as_u64()).max();
            let before = self.polls.last().map_or(0, |p| p.1);
            self.polls.push((now, newest.unwrap_or(0).max(before)));
            for (id, seen) in &mut self.seen {
                if seen.gone_at.is_none() && !workers.iter().any(|w| w["id"].as_u64() == Some(*id))
                {
                    seen.gone_at = Some(now);
                }
            }
        }
        let mut live = 0;
        let mut members_by_slot: BTreeMap<u64, usize> = BTreeMap::new();
        for w in &workers {
            let (Some(id), Some(age)) = (w["id"].as_u64(), w["age_ms"].as_u64()) else {
                continue;
            };
            self.spawn_ms
                .entry(id)
                .or_insert_with(|| virtual_ms(Duration::from_millis(uptime.saturating_sub(age))));
            if let Some(pid) = w["pid"].as_u64() {
                self.pids.insert(pid as u32);
            }
            if w["state"] != "exited" && w["pid"].is_u64() {
                live += 1;
            }
            if w["role"] == "member" && w["state"] != "exited" {
                *members_by_slot
                    .entry(w["slot"].as_u64().unwrap_or(0))
                    .or_default() += 1;
            }
        }
        o.max_live_processes = o.max_live_processes.max(live);
        // The committed generation's ready workers, as the simulator records them: known
        // to the poll's answer, so a change is timed late by at most a poll.
        if s["workers"].is_array() {
            let ready = workers
                .iter()
                .filter(|w| w["role"] == "member" && w["state"] == "ready")
                .count() as u32;
            if o.ready_changes.last().map_or(0, |c| c.1) != ready {
                o.ready_changes.push((virtual_ms(now), ready));
            }
        }
        for (slot, n) in members_by_slot {
            if n > 1 {
                o.violations
                    .push(format!("{n} members serve slot {slot} at once: {s}"));
            }
        }
        if let Some(g) = s["generation"].as_u64()
            && g > 0
            && self.generations.insert(g)
        {
            o.generations_committed.push(g);
        }
        if s["recycling_suspended"].is_string() {
            o.recycling_suspended = true;
        }
        if let Some(e) = s["last_reload_error"].as_str() {
            self.reload_errors.insert(e.to_owned());
        }
        if let Some(id) = s["last_failure"]["worker"].as_u64() {
            self.named = self.named.max(Some(id));
        }
        if s["last_failure"]["reason"] == "health_failure" {
            o.coverage.insert("hang killed");
        }
        if s["last_failure"]["reason"] == "drain_hang" {
            o.coverage.insert("hang while draining killed");
        }
        // A worker gone since the last poll was reaped meanwhile: its reason is known when
        // it was the last failure, its time to within a poll (counted late: strict).
        if s["workers"].is_array() {
            let now_live: BTreeSet<u64> = workers.iter().filter_map(|w| w["id"].as_u64()).collect();
            for &id in self.live.difference(&now_live) {
                let failure = &s["last_failure"];
                let reason = (failure["worker"].as_u64() == Some(id))
                    .then(|| ExitReason::from_code(failure["reason"].as_str().unwrap_or("")))
                    .flatten();
                o.exits.push(WorkerExit {
                    worker: id,
                    reason,
                    at_ms: virtual_ms(Duration::from_millis(uptime)),
                });
            }
            self.live = now_live;
        }
        if s["state"] == "failed" {
            if self.failed_real.is_none() {
                let at = s["last_failure"]["at_ms"]
                    .as_u64()
                    .map(Duration::from_millis);
                self.failed_real = Some(at.unwrap_or(self.last_running));
            }
        } else if s["state"].is_string() {
            self.last_running = asked;
        }
    }
}

/// One request of the paced workload.
#[derive(Debug)]
struct Sample {
    start: Duration,
    end: Duration,
    ok: bool,
    what: String,
}

/// Clients sending GETs as a Poisson process at a total rate, each on a new connection
/// (as the simulator's requests are), until a point of the run.
struct Paced {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Sample>>>,
}

const CLIENTS: u64 = 4;

/// When (since `t0`) the first generation was committed or the service left `starting`
/// (failed, stopped, or the parent is gone), as far as a status poll can tell; bounded.
fn first_commit_or_failure(server: &mut Server, t0: Instant, log: &mut Vec<String>) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if server.try_exit().is_some() {
            break;
        }
        if Instant::now() >= deadline {
            log.push("still starting after 10 s: the clients start anyway".to_owned());
            break;
        }
        let answer = crate::ctl_at(&server.socket, &json!({"cmd": "status"}));
        match answer.as_ref().map(|a| a["status"]["state"].as_str()) {
            Ok(Some("starting")) | Err(_) => std::thread::sleep(Duration::from_millis(2)),
            Ok(Some(_)) => break,
            // Waiting on a field the answer does not have would wait on nothing.
            Ok(None) => panic!("a status answer without status.state: {answer:?}"),
        }
    }
    t0.elapsed()
}

impl Paced {
    fn start(
        addr: std::net::SocketAddr,
        t0: Instant,
        from: Duration,
        rate: f64,
        until: Duration,
        seed: u64,
    ) -> Paced {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..CLIENTS)
            .map(|client| {
                let stop = Arc::clone(&stop);
                let mut rng = SimRng::new(seed.wrapping_add(client) ^ 0x10ad);
                let mean_gap = CLIENTS as f64 / rate.max(0.001);
                std::thread::spawn(move || {
                    let mut samples = Vec::new();
                    let mut next = from + Duration::from_secs_f64(rng.exp(mean_gap));
                    while !stop.load(Ordering::Relaxed) && next < until {
                        let now = t0.elapsed();
                        if next > now {
                            std::thread::sleep((next - now).min(Duration::from_millis(50)));
                            continue;
                        }
                        let start = t0.elapsed();
                        let (ok, what) = match http_get(addr, "/hello.txt") {
                            Ok((200, body)) if body == crate::HELLO => (true, String::new()),
                            Ok((status, body)) => {
                                (false, format!("{status}, {} bytes", body.len()))
                            }
                            Err(e) => (false, e),
                        };
                        samples.push(Sample {
                            start,
                            end: t0.elapsed(),
                            ok,
                            what,
                        });
                        next += Duration::from_secs_f64(rng.exp(mean_gap));
                    }
                    samples
                })
            })
            .collect();
        Paced { stop, threads }
    }

    fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    }
}
