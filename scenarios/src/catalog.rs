//! The scenarios. Each builder draws its parameters from the seed, so a sweep explores
//! worker counts, fault times, jitter and policy variants, and a seed replays exactly.

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_sim::rng::SimRng;
use servery_sim::{Behavior, BehaviorFn, Fault, FaultKind, SimSpec, SpawnInfo, Workload};

use crate::catalog_apps as apps;
use crate::catalog_basics as basics;
pub(crate) use crate::catalog_basics::{capped_crash_loop, uploads};
use crate::catalog_bursts as bursts;
use crate::catalog_certs as certs;
use crate::catalog_chaos as chaos_;
use crate::catalog_chunks as chunks;
use crate::catalog_control as control;
use crate::catalog_dav as dav;
use crate::catalog_dav_checks as dav_checks;
use crate::catalog_dav_tree as dav_tree;
use crate::catalog_io_faults as io;
use crate::catalog_listeners as listeners;
use crate::catalog_network as network;
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
        build: basics::steady,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "crash",
        about: "kill -9 of workers under load, half the time with the control channels delayed around a crash: replaced after the reap and backoff",
        build: basics::crash,
        kinds: &[FaultKind::CrashWorker, FaultKind::ChannelDelay],
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
        about: "SIGSTOP of workers, other workers' clocks drifting meanwhile: heartbeat timeout on the parent's clock, terminate, kill, reap, replace",
        build: basics::hang,
        kinds: &[FaultKind::HangWorker, FaultKind::ClockDrift],
        no_swarm: None,
    },
    Scenario {
        name: "hang-during-drain",
        about: "SIGSTOP of a worker just before ctl recycle or its age recycle drains it: ended as drain_hang within heartbeat_timeout + force_timeout, not the drain deadline; the recycle completes",
        build: basics::hang_during_drain,
        kinds: &[FaultKind::HangWorker],
        no_swarm: Some(
            "its predicates judge how the one stopped worker ended; without the stop the run is manual-recycle or age-recycle",
        ),
    },
    Scenario {
        name: "crash-loop",
        about: "every worker crashes after a few requests: the restart limit fails the service",
        build: basics::crash_loop,
        kinds: &[FaultKind::CrashAfterRequests],
        no_swarm: None,
    },
    Scenario {
        name: "restart-limit-zero",
        about: "worker_restart_limit = 0: the first crash fails the service",
        build: basics::restart_limit_zero,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
    },
    Scenario {
        name: "backoff-at-cap-still-halts",
        about: "backoff pinned at its cap with a window too short to fill: the run of unstable restarts still halts",
        build: basics::backoff_at_cap,
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
        name: "cpu-affinity",
        about: "application workers under worker_cpu_affinity = auto on a host with a drawn set of CPUs: a crash, ctl recycle, a reload to another worker count and sometimes one to off; each generation's slots get disjoint shares covering the CPUs (one CPU each when they outnumber them), a replacement its slot's share, and nobody is pinned under off",
        build: apps::cpu_affinity,
        kinds: &[FaultKind::CrashWorker],
        no_swarm: None,
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
        about: "with --http3, --acme or the service manager's sockets the port is fixed (decision 0072): a reload that moves it is refused by the core with the reason of the fact that fixes it, one that keeps it commits",
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
        build: basics::shutdown_deadlines,
        kinds: &[FaultKind::WedgedDrain],
        no_swarm: None,
    },
    Scenario {
        name: "parent-death",
        about: "kill -9 of the parent mid-load: workers see EOF, fail writes closed, drain and exit",
        build: basics::parent_death,
        kinds: &[FaultKind::CrashParent],
        no_swarm: None,
    },
    Scenario {
        name: "parent-stall",
        about: "the parent stops for longer than the heartbeat timeout: on resuming it reads the beats that waited and replaces nobody",
        build: basics::parent_stall,
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
        build: basics::singleton_lifecycle,
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
        about: "uploads on a full file system (ENOSPC), with a failing fsync before the publish (EIO), a failing publish rename, a failing directory fsync after it, and the power lost between the rename and that fsync (a torn rename): 507 / 500, the name shows the old file or the whole new one and never part of one, temp files gone, grants released, later uploads succeed",
        build: io::upload_io_faults,
        kinds: &[
            FaultKind::DiskFull,
            FaultKind::RenameFails,
            FaultKind::FsyncFails,
            FaultKind::DirSyncFails,
            FaultKind::TornRename,
        ],
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
        name: "dav-lock-checks",
        about: "every WebDAV method's lock decision through the core's machines, on a writable share with a recycle: lock clients write under their lock with its token (PUT, DELETE, COPY, MOVE, MKCOL, PROPPATCH), refresh, send it where it does not apply and UNLOCK, while writers without a lock send every write, LOCKs of unmapped URLs, malformed If headers and PROPFINDs; the oracle judges each decision against the broker's lock table (let through only when every live lock protecting what it changes had its token submitted, If held or failed against its lock, a refresh or UNLOCK acting only on the lock named where it applies, lockdiscovery showing exactly the locks that apply)",
        build: dav_checks::lock_checks,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "dav-lock-checks-read-only",
        about: "the same clients on a read-only share: LOCK, refresh and UNLOCK as anywhere, every write refused with 403 before any lock decision, a LOCK of an unmapped URL (which would create it) included",
        build: dav_checks::lock_checks_read_only,
        kinds: &[],
        no_swarm: None,
    },
    Scenario {
        name: "dav-put-storage-faults",
        about: "WebDAV PUTs, with and without lock tokens, while the file system fills part-way through a body (507), the fsync of the written file or of its directory after the rename fails (500; the whole file in place after a directory fsync), or the power goes between the rename and that fsync: nothing partial under a public name, no temp file left, every grant back, and PUTs are written again once the faults end",
        build: dav_checks::put_storage_faults,
        kinds: &[
            FaultKind::DiskFull,
            FaultKind::FsyncFails,
            FaultKind::DirSyncFails,
            FaultKind::TornRename,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "dav-move-crash-between-steps",
        about: "MOVE, COPY (Depth infinity and 0), DELETE and MKCOL of small collections, the worker killed just before a seeded step of the core's tree flow, the file system full part-way through a copy, failing fsyncs of the copy and of the directory after placing, and the power lost between placing and that fsync: clients never see half a tree or a lost source, a success leaves the whole result, a failed directory fsync is answered 500 with the whole result in place, every lease is back once the parent lets the worker go, and its cleanup leaves no staging copy or trash",
        build: dav_tree::move_crash_between_steps,
        kinds: &[
            FaultKind::CrashDavTreeStep,
            FaultKind::DiskFull,
            FaultKind::FsyncFails,
            FaultKind::DirSyncFails,
            FaultKind::TornRename,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "resumable-chunk-crash-between-steps",
        about: "a client uploads files in chunks (Content-Range), resuming from the held range it asks for after a lost answer, and the worker carrying a chunk is killed just before a seeded step of the core's chunk flow (or inside the meta write or the append): the target is never seen half written, every held byte is the client's and the partial never goes back except by a documented discard, a Complete leaves the whole file byte-exact, no grant or temp file outlives its worker's cleanup, every upload completes and nothing is left; with the file system full part-way through a chunk (507, what reached the file kept), failing fsyncs of a chunk (500, the partial discarded) and of the directory after the last chunk's rename (500, never Complete), and the power lost between that rename and its fsync",
        build: chunks::resumable_chunk_crash_between_steps,
        kinds: &[
            FaultKind::CrashChunkStep,
            FaultKind::DiskFull,
            FaultKind::FsyncFails,
            FaultKind::DirSyncFails,
            FaultKind::TornRename,
        ],
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
        name: "proxy-reload-upstreams",
        about: "reloads change the proxy's upstream set (and their numbering) two or three times while upstreams flap and workers crash: every reload commits, a committed generation's worker sends only to its own generation's upstreams, a worker is told an upstream is down only if that upstream was seen failing since it entered the parent's table (a removed upstream's verdict never reaches a later generation), every running worker holds the parent's verdict on its own upstreams, and the admission bound holds across the generations' overlap",
        build: proxy::proxy_reload_upstreams,
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
    Scenario {
        name: "channel-delay",
        about: "control channels delay what they carry by up to 250 ms for seconds at a time, both ways, each channel in order but channels past one another, and a busy parent finds what arrived in one look: through the first rollout (a candidate dying around its READY), crashes, a recycle and a reload the parent judges the intake rule, capacity, backoff and restart accounting as without delays, and ends no worker for a late beat",
        build: network::channel_delay,
        kinds: &[
            FaultKind::ChannelDelay,
            FaultKind::CrashWorker,
            FaultKind::CrashAfterUptime,
        ],
        no_swarm: None,
    },
    Scenario {
        name: "clock-drift",
        about: "workers' clocks run up to 20 % fast or slow for seconds while they are recycled by age and by ctl recycle: their beats, drains and exits follow their own clocks, the parent decides every deadline on its own, and no worker is ended as unwell or fails a request",
        build: network::clock_drift,
        kinds: &[FaultKind::ClockDrift],
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
        // Four CPUs: application workers are pinned to shares of them (decision 0122).
        host_cpus: servery_core::cpu_affinity::CpuSet::new(0..4),
        liveness_at: liveness,
        stop_at: stop,
        end_by: end,
        trace: false,
        listeners_from_service_manager: false,
    }
}

pub(crate) fn expect(config: &RawConfig, end: End) -> Expect {
    let r = &config.recovery;
    Expect {
        end,
        workers: config.workers as usize,
        alt_workers: None,
        workers_rule: None,
        generation_rule: None,
        end_rule: None,
        first_recycle_within: None,
        generation: Some(1),
        zero_failed: false,
        allow_forced: false,
        exit_within: secs(r.drain_timeout + r.force_timeout + 1.0),
        extra: None,
        port_fixed_by: None,
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
