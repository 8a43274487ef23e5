//! The scenarios. Each builder draws its parameters from the seed, so a sweep explores
//! worker counts, fault times, jitter and policy variants, and a seed replays exactly.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{ExitReason, FailureReason};
use servery_sim::rng::SimRng;
use servery_sim::{
    Behavior, BehaviorFn, Fault, FaultKind, Outcome, SimCommand, SimSpec, SpawnInfo, Workload,
};

use crate::catalog_apps as apps;
use crate::catalog_bursts as bursts;
use crate::catalog_certs as certs;
use crate::catalog_chaos as chaos_;
use crate::catalog_chunks as chunks;
use crate::catalog_control as control;
use crate::catalog_dav as dav;
use crate::catalog_dav_tree as dav_tree;
use crate::catalog_io_faults as io;
use crate::catalog_listeners as listeners;
use crate::catalog_pauses as pauses;
use crate::catalog_proxy as proxy;
use crate::catalog_rollouts as rollouts;
use crate::catalog_startups as startups;
use crate::catalog_writes as writes;
use crate::{Ctx, End, Expect, Kinds, Plan, Scenario, fast_config, recovery_bound};

pub use crate::goals::COVERAGE_GOALS;

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "steady",
        about: "no faults: N workers serve a minute of load with zero failures",
        build: steady,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "crash",
        about: "kill -9 of workers under load: replaced after the reap and backoff",
        build: crash,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "crash-during-startup",
        about: "a first-generation worker dies before or between PREPARED and COMMIT: the service fails before readiness",
        build: startups::crash_during_startup,
        kinds: &[
            FaultKind::CrashAtBoot,
            FaultKind::CrashBetweenPrepareAndCommit,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "ready-and-crash-in-one-look",
        about: "a first-generation candidate crashes around the first rollout while the parent stops for a moment: a READY found in one look with another candidate's end completes the rollout (the intake rule), and the crash is a member's",
        build: startups::ready_and_crash_in_one_look,
        kinds: &[
            FaultKind::CrashAfterUptime,
            FaultKind::StallParent,
            FaultKind::SlowBoot,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "startup-failure-initial",
        about: "a first-generation worker reports a startup error: the service fails with the worker's own text",
        build: startups::startup_failure_initial,
        kinds: &[FaultKind::FailStartup, FaultKind::HangAtBoot],
        no_swarm: None,
    },
    Scenario {
        name: "startup-failure-replacement",
        about: "crash replacements fail to start: recovered within the limit, failed beyond it",
        build: startups::startup_failure_replacement,
        kinds: &[FaultKind::CrashWorker, FaultKind::FailStartup],
        no_swarm: None,
    },
    Scenario {
        name: "hang",
        about: "SIGSTOP of workers: heartbeat timeout, terminate, kill, reap, replace",
        build: hang,
        kinds: &[FaultKind::HangWorker],
        no_swarm: None,
    },
    Scenario {
        name: "hang-during-drain",
        about: "SIGSTOP of a worker just before ctl recycle or its age recycle drains it: ended as drain_hang within heartbeat_timeout + force_timeout, not the drain deadline; the recycle completes",
        build: hang_during_drain,
        kinds: &[FaultKind::HangWorker],
        no_swarm: Some(
            "its predicates judge how the one stopped worker ended; without the stop the run is manual-recycle or age-recycle",
        ),
    },
    Scenario {
        name: "crash-loop",
        about: "every worker crashes after a few requests: the restart limit fails the service",
        build: crash_loop,
        kinds: &[FaultKind::CrashAfterRequests],
        no_swarm: None,
    },
    Scenario {
        name: "restart-limit-zero",
        about: "worker_restart_limit = 0: the first crash fails the service",
        build: restart_limit_zero,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "backoff-at-cap-still-halts",
        about: "backoff pinned at its cap with a window too short to fill: the run of unstable restarts still halts",
        build: backoff_at_cap,
        kinds: &[FaultKind::CrashWorker, FaultKind::CrashAfterRequests],
        no_swarm: None,
    },
    Scenario {
        name: "age-recycle",
        about: "age recycling with jitter under load: zero failed requests, never more than N + 1 workers",
        build: rollouts::age_recycle,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "request-recycle",
        about: "request-count recycling with jitter under load: zero failed requests",
        build: rollouts::request_recycle,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "memory-recycle",
        about: "an application leaking memory with passing peaks: recycled by worker_max_rss after two beats above it, never one; zero failed requests, never more than N + 1 workers",
        build: apps::memory_recycle,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "app-wedge",
        about: "an application's interpreter wedges holding its lock while the worker runs on: its beats stop and it is replaced as a hang",
        build: apps::app_wedge,
        kinds: &[FaultKind::AppWedge],
        no_swarm: None,
    },
    Scenario {
        name: "app-shutdown",
        about: "an application's shutdown (ASGI lifespan) on every drain, some overrunning it: it starts after the last request, the worker exits when it ends, or at the drain deadline, cut",
        build: apps::app_shutdown,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "app-reload-startup-failure",
        about: "under load, a reload whose application fails its import or lifespan startup (or overruns --lifespan-timeout) in some or all new workers: refused with the application's reason (or the timeout's, which comes first), the old generation keeps all its workers ready and serves every request, no request reaches a worker before PREPARED, the failed generation's workers are ended; a later good reload commits",
        build: apps::app_reload_startup_failure,
        kinds: &[FaultKind::AppStartupFails],
        no_swarm: Some(
            "its predicates judge the refused reload; without the failing application the run is the reload scenario",
        ),
    },
    Scenario {
        name: "app-first-start-failure",
        about: "the first generation's application fails its import or lifespan startup (or overruns --lifespan-timeout) in some or all workers: the service fails with the application's reason (or the timeout's) and exits, restarting nothing",
        build: apps::app_first_start_failure,
        kinds: &[FaultKind::AppStartupFails],
        no_swarm: Some(
            "its predicates judge the failed start; without the failing application the run is steady",
        ),
    },
    Scenario {
        name: "manual-recycle",
        about: "ctl recycle under load (with --http3): every worker replaced once, one at a time, zero failed requests, no new QUIC connection steered to a draining worker",
        build: rollouts::manual_recycle,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "resize",
        about: "SIGTTIN/SIGTTOU under load: each a reload to one worker more or fewer, none below one, zero failed requests",
        build: rollouts::resize,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "recycle-replacement-fails",
        about: "recycle replacements fail to start: the old worker keeps serving; recycling retries, then is suspended",
        build: rollouts::recycle_replacement_fails,
        kinds: &[
            FaultKind::FailStartup,
            FaultKind::CrashBetweenPrepareAndCommit,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "reload",
        about: "a valid reload under load: new generation committed, old drained, zero failed requests",
        build: rollouts::reload,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "reload-invalid",
        about: "an invalid or failing reload: the old generation keeps serving and the reason is reported",
        build: rollouts::reload_invalid,
        kinds: &[FaultKind::FailStartup, FaultKind::HangAtBoot],
        no_swarm: None,
    },
    Scenario {
        name: "reload-port-change",
        about: "reloads that move the listeners to another port: bound before any candidate, a busy port rejected with nothing started, a failed generation's set given back, no set held past its last use",
        build: listeners::reload_port_change,
        kinds: &[FaultKind::PortBusy, FaultKind::FailStartup],
        no_swarm: None,
    },
    Scenario {
        name: "reload-port-fixed",
        about: "with --http3 the port is fixed (decision 0072): a reload that moves it is refused by the core with the reason, one that keeps it commits",
        build: control::reload_port_fixed,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "reload-tls-files",
        about: "with certificate files, each reload reads them first (decision 0093): a broken pair refuses the reload with the read's reason and the old identity and generation stay; a good one is served from the reload on",
        build: control::reload_tls_files,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "control-answers",
        about: "ctl recycle, reload and stop before the first commit, while serving and while closing: each answered exactly once by the core, as the state requires (decision 0071)",
        build: control::control_answers,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "shutdown-deadlines",
        about: "a worker that ignores TERM and never finishes draining: stop still completes by drain + force",
        build: shutdown_deadlines,
        kinds: &[FaultKind::WedgedDrain],
        no_swarm: None,
    },
    Scenario {
        name: "parent-death",
        about: "kill -9 of the parent mid-load: workers see EOF, fail writes closed, drain and exit",
        build: parent_death,
        kinds: &[FaultKind::CrashParent],
        no_swarm: None,
    },
    Scenario {
        name: "parent-stall",
        about: "the parent stops for longer than the heartbeat timeout: on resuming it reads the beats that waited and replaces nobody",
        build: parent_stall,
        kinds: &[FaultKind::StallParent],
        no_swarm: None,
    },
    Scenario {
        name: "same-target-writes-serialize",
        about: "concurrent uploads to the same targets through different workers serialize; no torn file",
        build: writes::same_target,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "lease-holder-death",
        about: "kill -9 of a lease holder mid-upload: lease, reservation and temp file are revoked; later uploads to its targets succeed",
        build: writes::lease_holder_death,
        kinds: &[FaultKind::CrashLeaseHolder],
        no_swarm: None,
    },
    Scenario {
        name: "broker-saturation",
        about: "an upload burst saturates budgets, lease table and client queue: deterministic 503s; uploads after the burst succeed",
        build: writes::broker_saturation,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "log-queue-saturation",
        about: "access-log bursts outrun the writer: block loses nothing, drop counts what it drops",
        build: writes::log_queue_saturation,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "singleton-lifecycle",
        about: "parent-owned singletons start once, switch generation atomically on reload, stop once",
        build: singleton_lifecycle,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "malformed-frame",
        about: "a worker writes garbage on its control channel: reaped as protocol_error well inside the heartbeat timeout, and replaced",
        build: chaos_::malformed_frame,
        kinds: &[FaultKind::MalformedFrame],
        no_swarm: None,
    },
    Scenario {
        name: "chaos",
        about: "crashes, hangs, garbage frames, lease-holder deaths, uploads, logs, recycling and a reload at once: ready, or failed on the restart limit, as the plan's faults decide",
        build: chaos_::chaos,
        kinds: &[
            FaultKind::CrashWorker,
            FaultKind::HangWorker,
            FaultKind::MalformedFrame,
            FaultKind::CrashLeaseHolder,
            FaultKind::CrashBetweenPrepareAndCommit,
            FaultKind::SlowBoot,
            FaultKind::ExitDuringDrain,
            FaultKind::ShortWrites,
            FaultKind::ControlWriteFails,
            FaultKind::AcceptFails,
            FaultKind::DiskFull,
            FaultKind::RenameFails,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "spawn-failure",
        about: "the OS refuses to create workers (EAGAIN, ENOMEM), a few times or for a while: at first start the service fails naming the error; a crash replacement retries with backoff and recovers inside the restart limit or fails at it; a recycle keeps the old worker and is suspended",
        build: io::spawn_failure,
        kinds: &[FaultKind::SpawnFails, FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "control-channel",
        about: "control-channel writes arrive in pieces (both ways) and a parent write fails: pieces decode whole, no false protocol error; a broken channel ends and replaces only its worker",
        build: io::control_channel,
        kinds: &[FaultKind::ShortWrites, FaultKind::ControlWriteFails],
        no_swarm: None,
    },
    Scenario {
        name: "accept-emfile",
        about: "accept fails with EMFILE in one or every worker for a while: connections wait in the backlog and are all served, nobody is replaced",
        build: io::accept_emfile,
        kinds: &[FaultKind::AcceptFails],
        no_swarm: None,
    },
    Scenario {
        name: "clock-jump",
        about: "the whole machine stops and the clock jumps past the heartbeat timeout: no healthy worker is replaced, a hung one is still caught (decision 0017)",
        build: io::clock_jump,
        kinds: &[FaultKind::ClockJump, FaultKind::HangWorker],
        no_swarm: None,
    },
    Scenario {
        name: "upload-io-faults",
        about: "uploads on a full file system (ENOSPC) and with a failing publish rename: 507 / 500, nothing torn or partial visible, temp files gone, grants released, later uploads succeed",
        build: io::upload_io_faults,
        kinds: &[FaultKind::DiskFull, FaultKind::RenameFails],
        no_swarm: None,
    },
    Scenario {
        name: "dav-lock-survives-recycle",
        about: "a WebDAV lock taken through one worker, which is then killed, outlives it, a recycle and a reload: in the broker's table and enforced through every worker (a PUT without its token 423, with it written) until its timeout, gone at the first step after, never before",
        build: dav::lock_survives_recycle,
        kinds: &[FaultKind::CrashDavGranter],
        no_swarm: None,
    },
    Scenario {
        name: "dav-lock-table-saturation",
        about: "a burst of LOCKs beyond broker.max_dav_locks: the table never exceeds its limit, a LOCK is Saturated exactly when it is full, no lock is lost or outlives its UNLOCK or timeout, and once the burst's locks end the table grants up to its limit again",
        build: dav::lock_table_saturation,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "dav-journal-full",
        about: "LOCKs with the lock journal on while the disk under it fills for a while: no LOCK is granted while the journal cannot hold it, the table never holds a lock the journal on disk does not (decision 0084), and LOCKs are granted again once the disk has room",
        build: dav::journal_full,
        kinds: &[FaultKind::DiskFull],
        no_swarm: None,
    },
    Scenario {
        name: "dav-journal-full-quiet",
        about: "locks refreshed and unlocked while the disk under the journal is full, and nothing after: a refresh the journal cannot hold is refused and keeps the disk's time, and the journal's retry brings the UNLOCKs to the disk within a second of it having room (decision 0091)",
        build: dav::journal_full_quiet,
        kinds: &[FaultKind::DiskFull],
        no_swarm: None,
    },
    Scenario {
        name: "dav-move-crash-between-steps",
        about: "MOVE, COPY (Depth infinity and 0), DELETE and MKCOL of small collections, the worker killed just before a seeded step of the core's tree flow: clients never see half a tree or a lost source, a success leaves the whole result, every lease is back once the parent lets the worker go, and its cleanup leaves no staging copy or trash",
        build: dav_tree::move_crash_between_steps,
        kinds: &[FaultKind::CrashDavTreeStep],
        no_swarm: None,
    },
    Scenario {
        name: "resumable-chunk-crash-between-steps",
        about: "a client uploads files in chunks (Content-Range), resuming from the held range it asks for after a lost answer, and the worker carrying a chunk is killed just before a seeded step of the core's chunk flow (or inside the meta write or the append): the target is never seen half written, every held byte is the client's and the partial never goes back except by a documented discard, a Complete leaves the whole file byte-exact, no grant or temp file outlives its worker's cleanup, every upload completes and nothing is left",
        build: chunks::resumable_chunk_crash_between_steps,
        kinds: &[FaultKind::CrashChunkStep],
        no_swarm: None,
    },
    Scenario {
        name: "upstream-flapping",
        about: "a prefix's two to four upstreams go down and come back on a seeded schedule (passive health, or probes from the parent) while workers crash and recycle by age: no worker sends to an upstream after it learned the parent's verdict marking it down, every running worker holds the parent's verdict once it had time to arrive, and with probes the verdict matches the upstreams once they stop changing",
        build: proxy::upstream_flapping,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "proxy-admission-kill",
        about: "proxied requests offered far above --proxy-max-inflight while workers holding grants are killed: upstream requests in flight from live workers never pass the bound, saturation answers 503, and after a grant holder's death the service reaches the bound again (its grants came back)",
        build: proxy::proxy_admission_kill,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "cgi-scripts",
        about: "CGI requests run simulated scripts, each in its own process group reported to the parent, under --cgi-max-concurrent while workers are killed with scripts running: scripts running service-wide never pass the bound, and no script outlives its worker by more than a second (the parent kills the groups a dead worker reported)",
        build: proxy::cgi_scripts,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "acme-renewal-on-time",
        about: "the certificate manager renews at two thirds of the lifetime (or inside the CA's ARI window), twice, across a recycle: every live worker holds the new identity within 50 ms, a worker started later gets it first, no request fails or meets an expired certificate",
        build: certs::renewal_on_time,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "acme-ca-failures-retry",
        about: "the CA is unreachable, refuses, fails validation or goes silent across the renewal, and may then issue a wrong certificate: retries wait a jittered, capped backoff, the old certificate stays in service, a wrong one is never installed, and it is renewed before it expires",
        build: certs::ca_failures_retry,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "tls-handoff-worker-crash",
        about: "kill -9 of a worker around each of two forced renewals (ctl acme-renew): the replacement's first message is the current identity, every live worker holds each new one within 50 ms, no handshake fails",
        build: certs::handoff_worker_crash,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "acme-reload-during-renewal",
        about: "a reload to a new worker count lands while a slow CA handles a forced renewal: candidates start with the identity current at their spawn and get the renewed one within 50 ms; zero failed requests",
        build: certs::reload_during_renewal,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "pause",
        about: "SIGSTOP then SIGCONT of ready workers for 0.2-5 s around the 2 s heartbeat timeout: a pause that ends before its deadline is waited out (no restart, its requests answered late, none failed); a longer one is ended as hung and replaced",
        build: pauses::pause,
        kinds: &[FaultKind::PauseWorker],
        no_swarm: None,
    },
    Scenario {
        name: "correlated-crash-counted-once",
        about: "every worker killed at once, twice, with a restart limit below N: with restart_burst_window each wave counts once and the service stays ready; without it the limit fails the service",
        build: bursts::correlated_crash_counted_once,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "burst-window-still-halts-a-loop",
        about: "every worker killed at once and every replacement crashing, with restart_burst_window on and a window the capped backoff cannot fill: the per-slot run of unstable restarts still fails the service",
        build: bursts::burst_window_still_halts_a_loop,
        kinds: &[FaultKind::CrashWorker, FaultKind::CrashAfterRequests],
        no_swarm: None,
    },
];

pub(crate) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// A run of `run` seconds of fault phase, then liveness, then a stop.
pub(crate) fn spec(ctx: &mut Ctx, config: RawConfig, fault_phase: f64) -> SimSpec {
    let liveness = secs(fault_phase) + recovery_bound(&config);
    let stop = liveness + secs(0.5);
    let r = &config.recovery;
    let end = stop + secs(r.drain_timeout + r.force_timeout + 30.0);
    SimSpec {
        seed: ctx.seed,
        platform: ctx.platform,
        config,
        workload: Workload {
            until: stop + secs(0.2),
            ..Workload::default()
        },
        behavior: Box::new(|_, _| Behavior::Healthy),
        faults: Vec::new(),
        commands: Vec::new(),
        liveness_at: liveness,
        stop_at: stop,
        end_by: end,
        trace: false,
    }
}

pub(crate) fn expect(config: &RawConfig, end: End) -> Expect {
    let r = &config.recovery;
    Expect {
        end,
        workers: config.workers as usize,
        alt_workers: None,
        workers_rule: None,
        end_rule: None,
        first_recycle_within: None,
        generation: Some(1),
        zero_failed: false,
        allow_forced: false,
        exit_within: secs(r.drain_timeout + r.force_timeout + 1.0),
        extra: None,
    }
}

pub(crate) fn workers(ctx: &mut Ctx, lo: u64, hi: u64) -> i64 {
    ctx.rng.range(lo, hi) as i64
}

pub(crate) fn at(ctx: &mut Ctx, lo: f64, hi: f64) -> Duration {
    secs(lo + ctx.rng.unit() * (hi - lo))
}

/// Add `fault` at `t` when its kind is enabled. Returns whether it was added.
pub(crate) fn fault(kinds: Kinds, spec: &mut SimSpec, t: Duration, fault: Fault) -> bool {
    let on = kinds.has(fault.kind());
    if on {
        spec.faults.push((t, fault));
    }
    on
}

/// The behaviour model `f`, with the kinds that are not enabled turned healthy. `f`
/// draws as it always does, so with every kind enabled the run is unchanged.
pub(crate) fn behave(
    kinds: Kinds,
    f: impl Fn(&SpawnInfo, &mut SimRng) -> Behavior + 'static,
) -> BehaviorFn {
    if kinds == Kinds::ALL {
        return Box::new(f);
    }
    Box::new(move |info, rng| {
        let b = f(info, rng);
        match b.kind() {
            Some(kind) if !kinds.has(kind) => Behavior::Healthy,
            _ => b,
        }
    })
}

fn steady(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let spec = spec(ctx, config.clone(), 60.0);
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    Plan { spec, expect: e }
}

/// The throughput benchmark's run: four workers, a minute of virtual time under load.
pub const BENCH: Scenario = Scenario {
    name: "bench-steady-4",
    about: "four workers, 60 s of virtual time, 20 requests/s: the sweep benchmark's unit",
    build: |ctx| {
        let config = fast_config(4);
        let spec = spec(ctx, config.clone(), 60.0);
        let mut e = expect(&config, End::Ready);
        e.zero_failed = true;
        Plan { spec, expect: e }
    },
    kinds: &[],
    no_swarm: None,
};

fn crash(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 4);
    // Half the seeds run the seed document's own policy defaults.
    let config = if ctx.rng.chance(0.5) {
        RawConfig {
            workers: n,
            ..RawConfig::default()
        }
    } else {
        fast_config(n)
    };
    let mut spec = spec(ctx, config.clone(), 20.0);
    for _ in 0..ctx.rng.range(1, 3) {
        let t = at(ctx, 1.0, 20.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    Plan {
        spec,
        expect: expect(&config, End::Ready),
    }
}

fn hang(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 2, 4));
    let mut spec = spec(ctx, config.clone(), 15.0);
    for _ in 0..ctx.rng.range(1, 2) {
        let t = at(ctx, 1.0, 15.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::HangWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    e.extra = Some(|o, _| {
        if o.hangs_injected > 0 && !o.coverage.contains("hang killed") {
            return Err("a hung worker was never killed for its missed heartbeats".into());
        }
        Ok(())
    });
    Plan { spec, expect: e }
}

/// `hang-during-drain`'s timings: a heartbeat timeout long enough that the recycle of a
/// just-stopped worker (a real boot included, when real processes run the plan) drains it
/// before its heartbeat deadline, and a drain deadline far beyond the hang's bound.
const HANG_HEARTBEAT_TIMEOUT: f64 = 4.0;
const HANG_FORCE_TIMEOUT: f64 = 0.5;
const HANG_DRAIN_TIMEOUT: f64 = 15.0;
/// What the hung worker's end may take beyond `heartbeat_timeout + force_timeout` after
/// the stop: the reap, and a real run's polls.
const HANG_SLACK: f64 = 1.0;

fn hang_during_drain(ctx: &mut Ctx) -> Plan {
    let by_age = ctx.rng.chance(0.5);
    // Age recycling starts with the worker that became ready first, which the stop may
    // not pick; with one worker it is the one stopped.
    let n = if by_age { 1 } else { workers(ctx, 1, 2) };
    let mut config = fast_config(n);
    let r = &mut config.recovery;
    r.heartbeat_timeout = HANG_HEARTBEAT_TIMEOUT;
    r.force_timeout = HANG_FORCE_TIMEOUT;
    r.drain_timeout = HANG_DRAIN_TIMEOUT;
    let pick = ctx.rng.next_u64();
    let mut e;
    let spec = if by_age {
        // Stopped shortly before its age deadline (workers are ready within 50 ms of the
        // start): its heartbeat deadline has not passed when the recycle drains it.
        let age = 3.0 + ctx.rng.unit() * 3.0;
        config.recovery.worker_max_age = age;
        config.recovery.worker_max_age_jitter = 0.0;
        let mut spec = spec(ctx, config.clone(), 2.0 * age + 2.0);
        let before = 0.1 + ctx.rng.unit() * 0.7;
        spec.faults
            .push((secs(age - before), Fault::HangWorker { pick }));
        e = expect(&config, End::Ready);
        e.extra = Some(|o, e| {
            let reaped = hung_drain_ended(o, e)?;
            if !o.spawn_times_ms.iter().any(|&t| t > reaped) {
                return Err(format!(
                    "no recycle started after the hung worker was reaped at {reaped} ms"
                ));
            }
            Ok(())
        });
        spec
    } else {
        // Stopped, then `ctl recycle` before its heartbeat deadline: every worker is
        // recycled one at a time, the stopped one included.
        let mut spec = spec(ctx, config.clone(), 10.0);
        let stop = at(ctx, 1.5, 4.0);
        let recycle = stop + at(ctx, 0.05, 0.5);
        spec.faults.push((stop, Fault::HangWorker { pick }));
        spec.commands.push((recycle, SimCommand::Recycle));
        e = expect(&config, End::Ready);
        e.extra = Some(|o, e| {
            hung_drain_ended(o, e)?;
            if o.spawns != 2 * e.workers as u64 {
                return Err(format!(
                    "{} spawns for {} workers recycled once each (a drain hang replaces nobody)",
                    o.spawns, e.workers
                ));
            }
            match &o.liveness {
                Some(s) if s.recycle_in_flight => {
                    Err("a recycle is still in flight at the liveness point".into())
                }
                _ => Ok(()),
            }
        });
        spec
    };
    Plan { spec, expect: e }
}

/// The stopped worker was drained, not judged hung while ready, and ended as `drain_hang`
/// within `heartbeat_timeout + force_timeout` (+ slack) of its stop, far inside the drain
/// deadline. Returns when it was reaped (ms).
fn hung_drain_ended(o: &mut Outcome, _: &Expect) -> Result<u64, String> {
    let &[(worker, stopped)] = &o.hangs[..] else {
        return Err(format!("expected one stopped worker, got {:?}", o.hangs));
    };
    let exit = o
        .exits
        .iter()
        .find(|x| x.worker == worker)
        .ok_or_else(|| format!("w{worker}, stopped at {stopped} ms, was never reaped"))?;
    let reason = exit.reason.map_or("unknown", |r| r.code());
    let bound =
        stopped + ((HANG_HEARTBEAT_TIMEOUT + HANG_FORCE_TIMEOUT + HANG_SLACK) * 1000.0) as u64;
    if exit.at_ms > bound || exit.reason != Some(ExitReason::DrainHang) {
        return Err(format!(
            "w{worker}, stopped at {stopped} ms, was reaped at {} ms as {reason}; expected \
             drain_hang by {bound} ms (heartbeat_timeout {HANG_HEARTBEAT_TIMEOUT} s + \
             force_timeout {HANG_FORCE_TIMEOUT} s + {HANG_SLACK} s), drain_timeout is \
             {HANG_DRAIN_TIMEOUT} s",
            exit.at_ms
        ));
    }
    o.coverage.insert("hang while draining killed");
    Ok(exit.at_ms)
}

fn crash_loop(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 3));
    let mut spec = spec(ctx, config.clone(), 40.0);
    spec.workload.request_rate = 40.0;
    spec.behavior = behave(ctx.kinds, |_, rng| {
        Behavior::CrashAfterRequests(rng.range(1, 5))
    });
    if !ctx.kinds.has(FaultKind::CrashAfterRequests) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartLimit));
    e.extra = Some(|o, _| {
        let at = o.exit_at_ms.unwrap_or(u64::MAX);
        if at > 40_000 {
            return Err(format!("the crash loop ran until {at} ms"));
        }
        o.coverage.insert("crash loop reached failed");
        Ok(())
    });
    Plan { spec, expect: e }
}

fn restart_limit_zero(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 4));
    config.recovery.worker_restart_limit = 0;
    let mut spec = spec(ctx, config.clone(), 10.0);
    let crashed = fault(
        ctx.kinds,
        &mut spec,
        at(ctx, 1.0, 8.0),
        Fault::CrashWorker {
            pick: ctx.rng.next_u64(),
        },
    );
    if !crashed {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartsDisabled));
    e.extra = Some(|o, _| match &o.failure_message {
        Some(m) if m.contains("worker_restart_limit is 0") => Ok(()),
        m => Err(format!(
            "the failure does not name the disabled restarts: {m:?}"
        )),
    });
    Plan { spec, expect: e }
}

/// `n` workers whose replacements all crash after their first request, with a backoff
/// at a 1.5 s cap that a 2 s window of limit 3 can never fill: only the per-slot run of
/// unstable restarts can halt it. `tune` adjusts the recovery settings further.
pub(crate) fn capped_crash_loop(
    ctx: &mut Ctx,
    n: i64,
    tune: impl FnOnce(&mut servery_core::config::RawRecovery),
) -> (RawConfig, SimSpec) {
    let mut config = fast_config(n);
    let r = &mut config.recovery;
    r.restart_backoff_initial = 1.5;
    r.restart_backoff_max = 1.5;
    r.worker_restart_window = 2.0;
    r.worker_restart_limit = 3;
    tune(r);
    let mut spec = spec(ctx, config.clone(), 30.0);
    spec.workload.request_rate = 40.0;
    let first_replacement = n as u64;
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index >= first_replacement {
            Behavior::CrashAfterRequests(1)
        } else {
            Behavior::Healthy
        }
    });
    (config, spec)
}

fn backoff_at_cap(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 1, 2);
    let (config, mut spec) = capped_crash_loop(ctx, n, |_| {});
    let crashed = fault(
        ctx.kinds,
        &mut spec,
        at(ctx, 1.0, 3.0),
        Fault::CrashWorker {
            pick: ctx.rng.next_u64(),
        },
    );
    // The halt needs both: the crash that starts the replacements, and replacements
    // that crash in turn.
    if !crashed || !ctx.kinds.has(FaultKind::CrashAfterRequests) {
        return Plan {
            spec,
            expect: expect(&config, End::Ready),
        };
    }
    let mut e = expect(&config, End::Failed(FailureReason::RestartLimit));
    e.extra = Some(|o, _| {
        o.coverage.insert("backoff at cap halted");
        Ok(())
    });
    Plan { spec, expect: e }
}

fn shutdown_deadlines(ctx: &mut Ctx) -> Plan {
    let n = workers(ctx, 2, 3);
    let config = fast_config(n);
    let mut spec = spec(ctx, config.clone(), 5.0);
    spec.workload.service_ms = (100, 6000);
    let victim = ctx.rng.range(0, n as u64 - 1);
    spec.behavior = behave(ctx.kinds, move |info, _| {
        if info.index == victim {
            Behavior::WedgedDrain
        } else {
            Behavior::Healthy
        }
    });
    let wedged = ctx.kinds.has(FaultKind::WedgedDrain);
    let mut e = expect(&config, End::Ready);
    // Long requests on healthy workers may outlive the drain deadline: that is the
    // deadline doing its job.
    e.allow_forced = true;
    e.extra = Some(match ctx.platform {
        // Only a wedged worker is sure to reach the drain deadline.
        servery_core::supervisor::Platform::Posix if !wedged => |_, _| Ok(()),
        servery_core::supervisor::Platform::Posix => |o, _| {
            if o.terms_sent == 0 {
                return Err("POSIX must send TERM before KILL at the drain deadline".into());
            }
            Ok(())
        },
        servery_core::supervisor::Platform::Windows => |o, _| {
            if o.terms_sent != 0 {
                return Err("Windows has no TERM".into());
            }
            Ok(())
        },
    });
    Plan { spec, expect: e }
}

fn parent_death(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let mut spec = spec(ctx, config.clone(), 10.0);
    spec.workload.upload_rate = 10.0;
    spec.workload.upload_targets = 3;
    if !fault(ctx.kinds, &mut spec, at(ctx, 2.0, 10.0), Fault::CrashParent) {
        let mut e = expect(&config, End::Ready);
        e.allow_forced = true;
        return Plan { spec, expect: e };
    }
    let mut e = expect(&config, End::ParentDied);
    e.allow_forced = true;
    // The drain, then a second for the processes to end (as a stop allows): on real
    // processes a worker notices the EOF and exits on a loaded machine's schedule.
    e.exit_within = secs(config.recovery.drain_timeout + 1.0);
    e.extra = Some(|o, e| {
        if o.parent_eof_exits as usize != e.workers {
            return Err(format!(
                "{} of {} workers exited on parent EOF",
                o.parent_eof_exits, e.workers
            ));
        }
        o.coverage.insert("parent death drained workers");
        Ok(())
    });
    Plan { spec, expect: e }
}

fn parent_stall(ctx: &mut Ctx) -> Plan {
    let config = fast_config(workers(ctx, 1, 4));
    let mut spec = spec(ctx, config.clone(), 10.0);
    // Longer than the heartbeat timeout: every worker's deadline passes while the parent
    // is stopped, and its beats wait unread.
    let timeout = config.recovery.heartbeat_timeout;
    let stall = secs(timeout * (1.25 + ctx.rng.unit() * 1.75));
    let stalled_at = at(ctx, 1.0, 6.0);
    let stalled = fault(ctx.kinds, &mut spec, stalled_at, Fault::StallParent(stall));
    let mut e = expect(&config, End::Ready);
    e.zero_failed = true;
    if !stalled {
        return Plan { spec, expect: e };
    }
    // `ctl status` while the parent is stopped (answered only once it runs again, after
    // the beats that waited) and after it resumed.
    spec.commands.push((
        stalled_at + stall.mul_f64(ctx.rng.unit()),
        SimCommand::Status,
    ));
    spec.commands
        .push((stalled_at + stall + secs(0.5), SimCommand::Status));
    e.extra = Some(|o, _| {
        if o.status_answers.len() != 2 {
            return Err(format!(
                "2 status requests, {} answered: {:?}",
                o.status_answers.len(),
                o.status_answers
            ));
        }
        if let Some(a) = o.status_answers.iter().find(|a| a.restarts > 0) {
            return Err(format!(
                "a status asked at {} ms during or after the stall reported {} restarts",
                a.asked_ms, a.restarts
            ));
        }
        match &o.liveness {
            Some(s) if s.restarts == 0 => {
                o.coverage.insert("parent stall survived");
                Ok(())
            }
            Some(s) => Err(format!(
                "a stalled parent replaced healthy workers: {:?}",
                s.last_failure
            )),
            None => Err("no liveness snapshot".into()),
        }
    });
    Plan { spec, expect: e }
}

pub(crate) fn uploads(spec: &mut SimSpec, rate: f64, targets: u8) {
    spec.workload.upload_rate = rate;
    spec.workload.upload_targets = targets;
    spec.config.features.uploads = true;
}

fn singleton_lifecycle(ctx: &mut Ctx) -> Plan {
    let mut config = fast_config(workers(ctx, 1, 3));
    let f = &mut config.features;
    f.access_log = ctx.rng.chance(0.5);
    f.mdns = ctx.rng.chance(0.5);
    f.qr = ctx.rng.chance(0.5);
    f.tftp = ctx.rng.chance(0.5);
    // HTTP/3 is not a singleton (decision 0077) but rides along: its sockets follow the
    // same reload and crash. At least one singleton is always on.
    f.http3 = ctx.rng.chance(0.3);
    if !(f.access_log || f.mdns || f.qr || f.tftp) {
        f.access_log = true;
    }
    let mut spec = spec(ctx, config.clone(), 10.0);
    let mut next = config.clone();
    next.workers = workers(ctx, 1, 3);
    let n_next = next.workers as usize;
    spec.commands
        .push((at(ctx, 2.0, 6.0), SimCommand::Reload(Box::new(next))));
    if ctx.rng.chance(0.5) {
        let t = at(ctx, 1.0, 9.0);
        let pick = ctx.rng.next_u64();
        fault(ctx.kinds, &mut spec, t, Fault::CrashWorker { pick });
    }
    let mut e = expect(&config, End::Ready);
    // A crash may hit a reload candidate, which rejects the reload: then the first
    // generation serves on and the singletons never switch.
    e.alt_workers = Some(e.workers);
    e.workers = n_next;
    e.generation = None;
    e.extra = Some(|o, _| {
        let (a, b, c) = (o.singleton_starts, o.singleton_stops, o.singleton_switches);
        let committed = o.generations_committed.len() as u32;
        if a == 0 || a != b || c != a * (committed - 1) {
            return Err(format!(
                "singletons: {a} starts, {c} switches, {b} stops over {committed} generations"
            ));
        }
        let generation = o.liveness.as_ref().map_or(0, |s| s.generation.0);
        if generation != u64::from(committed) {
            return Err(format!(
                "liveness generation {generation}, {committed} committed"
            ));
        }
        Ok(())
    });
    Plan { spec, expect: e }
}
