//! The reverse proxy and CGI in the simulation, opt-in through [`crate::Workload::proxy`]:
//! simulated upstreams that go down and come back on the plan's schedule, answering the
//! parent's probes with the truth; proxied requests that workers admit through the
//! broker's grants ([`servery_core::proxy_admission::GrantPool`], as the real worker) and
//! send to the upstream the core's [`servery_core::upstream_choice::Balancer`] picks; CGI
//! requests that take a CGI grant and run a simulated script in its own process group,
//! reported to the parent as the real worker reports it.
//!
//! The oracle records, for the scenarios' predicates ([`ProxyOutcome`]), the first
//! breaches it saw of the rules issue 40 states:
//!
//! - **health rule**: no worker sends a request to an upstream (of a group of several)
//!   after it learned the parent's verdict marking it down; every running worker holds
//!   the parent's verdict once it has had time to arrive; with probes, the verdict matches
//!   the upstreams' truth once the plan stops changing it;
//! - **route rule**: a worker of a committed generation sends only to the upstreams its
//!   generation's routes name (decision 0108: routes are reloadable);
//! - **health rule (a verdict is about the upstream it names)**: a worker is told an
//!   upstream is down only if that upstream (by its URL, whatever index it has in the
//!   worker's generation) was seen failing since it last entered the parent's table — a
//!   removed upstream's verdict never reaches a later generation under another's index;
//! - **policy rule** (decision 0118): once a reload commits, the parent judges by the
//!   committed configuration's health policy; without probes no upstream stays down
//!   past its fail timeout, counted from its marking or from the commit that changed
//!   the policy, whichever is later;
//! - **balance rule** (decision 0118): a worker of a committed generation picks among
//!   its upstreams by that generation's `proxy.balance`: round robin takes the first
//!   upstream it does not believe down in its turn, least in flight one with the fewest
//!   of its requests in flight;
//! - **timeout rule** (decision 0118): a worker of a committed generation gives up on an
//!   upstream by that generation's `proxy.connect_timeout` (a connection that does not
//!   finish) and `proxy.first_byte_timeout` (a response head that does not come);
//! - **admission rule**: upstream requests in flight from live workers never exceed
//!   `--proxy-max-inflight`; a worker killed holding grants loses them (after its death
//!   the service reaches the bound again);
//! - **CGI bound rule**: scripts running service-wide never exceed `--cgi-max-concurrent`;
//! - **CGI orphan rule**: no script outlives its worker (a script whose worker died runs
//!   on, as one sleeping in its own process group would, until the parent kills its
//!   group).

mod worker;

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use servery_core::ValidConfig;
use servery_core::parent::Parent;
use servery_core::upstream_choice::Balance;
use servery_core::upstream_health::HealthPolicy;
use servery_core::{Instant, WorkerId};

use crate::world::{SimEvent, SimWorld};

pub(crate) use worker::WorkerProxy;

/// How long a verdict may take to reach a running worker before the oracle calls it
/// lost (a channel's latency is under a millisecond).
const SETTLE: Duration = Duration::from_millis(200);
/// How long after its worker's death a script may still run (the parent hears of the
/// death within a channel's latency, and kills the groups in the same step).
const ORPHAN_BOUND: Duration = Duration::from_secs(1);
/// Breaches kept per rule.
const KEEP: usize = 4;

/// The proxy and CGI workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyPlan {
    /// The simulated upstreams, all up at the start: `http://up0`, `http://up1`, ...
    /// ([`upstream_url`]). Which of them a generation sends to is its configuration's
    /// routes ([`proxy_routes`]), which a reload may change.
    pub upstreams: u16,
    /// How each simulated upstream fails a request while it is down, by upstream
    /// ([`DownManner::Refuses`] for one not listed).
    pub down_manners: Vec<DownManner>,
    /// The health policy the run starts with. The parent judges by the configuration's
    /// (`proxy.max_fails`, ...), which [`judged_by`] writes from this.
    pub policy: HealthPolicy,
    /// Proxied requests per second (Poisson), from `start` until `until`.
    pub rate: f64,
    /// A proxied request's answer time from an up upstream (ms, uniform).
    pub service_ms: (u64, u64),
    /// How long a request to a down upstream takes to fail (ms, uniform).
    pub fail_ms: (u64, u64),
    /// How long a probe takes (ms, uniform); it reports the upstream's state when it ends.
    pub probe_ms: (u64, u64),
    /// When an upstream goes down (`false`) or comes back (`true`).
    pub flips: Vec<(Duration, u16, bool)>,
    /// CGI requests per second (Poisson), and how long a script runs (ms, uniform).
    pub cgi_rate: f64,
    pub script_ms: (u64, u64),
    pub start: Duration,
    pub until: Duration,
    /// With probes: when the parent's verdict must match the upstreams' truth.
    pub converged_by: Option<Duration>,
}

/// How a simulated upstream that is down fails a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DownManner {
    /// It refuses the connection, after [`ProxyPlan::fail_ms`].
    #[default]
    Refuses,
    /// Its connection never finishes (a host gone from the network): the worker gives
    /// up at its connect timeout.
    Unreachable,
    /// It accepts the connection and never answers: the worker gives up at its
    /// first-byte timeout.
    Silent,
}

/// What a simulated upstream does with one request, decided when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// Its response head comes after this long.
    Answers(Duration),
    /// Down: its connection is refused after this long.
    Refused(Duration),
    /// Down: the connection never finishes.
    Unreachable,
    /// Down: connected, never answered.
    Silent,
}

impl Exchange {
    /// When a worker with these timeouts is done with it, and whether a response head
    /// came back.
    pub(crate) fn ends(self, connect: Duration, first_byte: Duration) -> (Duration, bool) {
        match self {
            Exchange::Answers(d) if d <= first_byte => (d, true),
            Exchange::Answers(_) | Exchange::Silent => (first_byte, false),
            Exchange::Refused(d) => (d.min(connect), false),
            Exchange::Unreachable => (connect, false),
        }
    }
}

/// The settings of a committed generation's clients the oracle judges its workers by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clients {
    balance: Balance,
    connect: Duration,
    first_byte: Duration,
}

impl Clients {
    fn of(config: &ValidConfig) -> Self {
        let s = config.proxy().settings();
        Clients {
            balance: s.balance,
            connect: s.connect_timeout,
            first_byte: s.first_byte_timeout,
        }
    }
}

/// One upstream request in flight, as the oracle saw it sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flight {
    target: u16,
    /// Its index in the worker's numbering.
    upstream: usize,
    sent: Instant,
    exchange: Exchange,
}

/// What the proxy oracle saw, for the predicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyOutcome {
    /// Breaches of a rule: when (ms) and what, the message naming the rule.
    pub breaches: Vec<(u64, String)>,
    /// Proxied requests sent upstream, answered, failed at the upstream, refused 503 for
    /// want of a grant, answered 502 with every upstream down.
    pub sent: u64,
    pub answered: u64,
    pub failed: u64,
    pub refused: u64,
    pub all_down: u64,
    /// `--proxy-max-inflight` as the run started (0: none).
    pub bound: u32,
    /// The most upstream requests in flight at once from live workers.
    pub most_in_flight: u32,
    /// Workers killed holding grants: (worker, when in ms, grants held).
    pub killed_holding: Vec<(u64, u64, u32)>,
    /// The most upstream requests in flight at once, from a second after the last such
    /// death until the requests stopped.
    pub most_in_flight_after_kill: u32,
    /// Upstream verdict changes the parent made, and those the workers learned.
    pub verdict_changes: u64,
    pub verdicts_learned: u64,
    /// Probes answered.
    pub probes: u64,
    /// Scripts started, the most running at once, groups the parent killed for a dead
    /// worker, and scripts still running when the run ended.
    pub scripts: u64,
    pub most_scripts: u32,
    pub scripts_killed: u64,
    pub scripts_at_end: u64,
    /// CGI requests refused 503 for want of a grant.
    pub cgi_refused: u64,
}

/// The URL of simulated upstream `target`.
pub fn upstream_url(target: u16) -> String {
    format!("http://up{target}")
}

/// Routes under `/api` to each of `targets` (a configuration's `proxy.routes`).
pub fn proxy_routes(targets: impl IntoIterator<Item = u16>) -> Vec<String> {
    targets
        .into_iter()
        .map(|t| format!("/api={}", upstream_url(t)))
        .collect()
}

/// The configuration's health policy becomes `policy` (probes on `/health` when it
/// probes).
pub fn judged_by(proxy: &mut servery_core::config::RawProxy, policy: &HealthPolicy) {
    proxy.max_fails = i64::from(policy.max_fails);
    proxy.fail_timeout = policy.fail_timeout.as_secs_f64();
    proxy.health = policy.probe_interval.map(|_| "/health".to_owned());
    if let Some(interval) = policy.probe_interval {
        proxy.health_interval = interval.as_secs_f64();
    }
}

/// The simulated upstream a URL names.
pub(crate) fn target_of(url: &str) -> Option<u16> {
    url.strip_prefix("http://up")?.parse().ok()
}

/// One simulated script: its worker, and when that worker died (it runs on).
#[derive(Debug, Clone, Copy)]
struct Script {
    worker: WorkerId,
    orphaned: Option<Instant>,
}

/// The upstreams, the workers' knowledge and the oracle.
#[derive(Debug)]
pub(crate) struct ProxySim {
    pub(crate) plan: ProxyPlan,
    /// The truth: which upstreams are up.
    up: Vec<bool>,
    /// When an upstream last changed.
    last_flip: Instant,
    /// The verdict each worker last received, and when.
    learned: BTreeMap<WorkerId, (Vec<u16>, Instant)>,
    /// The parent's verdict (the simulated upstreams it marks down), and since when.
    verdict: Vec<u16>,
    /// The simulated upstreams some live generation (or the committed configuration)
    /// names, by the oracle's own account: the generations' routes as their spawns carried
    /// them, and the supervisor's live workers.
    named: BTreeSet<u16>,
    /// The simulated upstreams the parent's table holds.
    members: BTreeSet<u16>,
    /// Each generation's upstreams, as its first spawn carried them.
    spawned_targets: BTreeMap<u64, BTreeSet<u16>>,
    /// Upstreams seen failing (a request or a probe) since they last entered the table.
    failed_since_entered: BTreeSet<u16>,
    /// Each committed generation's upstreams, as its configuration's routes name them.
    generation_targets: BTreeMap<u64, BTreeSet<u16>>,
    /// Each committed generation's balance and timeouts, as its configuration gives them.
    generation_clients: BTreeMap<u64, Clients>,
    /// Each worker's choices among several upstreams so far (its round-robin turn).
    turns: BTreeMap<WorkerId, usize>,
    verdict_since: Instant,
    /// The committed configuration's health policy, and since when (the policy rule).
    policy: Option<HealthPolicy>,
    policy_since: Instant,
    /// When each simulated upstream in the parent's verdict was marked down.
    down_since: BTreeMap<u16, Instant>,
    /// When each worker was first seen connected.
    connected_since: BTreeMap<WorkerId, Instant>,
    /// Upstream requests in flight from live workers, by (worker, connection).
    in_flight: BTreeMap<(WorkerId, u64), Flight>,
    scripts: BTreeMap<u32, Script>,
    next_pgid: u32,
    converged_judged: bool,
    last_kill: Option<Instant>,
    breached: BTreeMap<&'static str, usize>,
}

impl ProxySim {
    fn new(plan: ProxyPlan) -> Self {
        ProxySim {
            up: vec![true; usize::from(plan.upstreams)],
            plan,
            last_flip: Instant::ZERO,
            learned: BTreeMap::new(),
            verdict: Vec::new(),
            named: BTreeSet::new(),
            members: BTreeSet::new(),
            spawned_targets: BTreeMap::new(),
            failed_since_entered: BTreeSet::new(),
            generation_targets: BTreeMap::new(),
            generation_clients: BTreeMap::new(),
            turns: BTreeMap::new(),
            verdict_since: Instant::ZERO,
            policy: None,
            policy_since: Instant::ZERO,
            down_since: BTreeMap::new(),
            connected_since: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            scripts: BTreeMap::new(),
            next_pgid: 50_000,
            converged_judged: false,
            last_kill: None,
            breached: BTreeMap::new(),
        }
    }

    /// The members of the parent's table that are down.
    fn truth_down(&self) -> Vec<u16> {
        self.members
            .iter()
            .copied()
            .filter(|&u| !self.up.get(usize::from(u)).copied().unwrap_or(true))
            .collect()
    }
}

fn ms_of(t: Instant) -> u64 {
    t.as_nanos() / 1_000_000
}

impl SimWorld {
    /// The upstreams' schedule and the first arrivals.
    pub(crate) fn proxy_start(&mut self) {
        let Some(plan) = self.spec.workload.proxy.clone() else {
            return;
        };
        for (i, &(at, _, _)) in plan.flips.iter().enumerate() {
            self.schedule_at(crate::world::ms(at), SimEvent::UpstreamFlip { flip: i });
        }
        if plan.rate > 0.0 {
            self.schedule_at(
                crate::world::ms(plan.start),
                SimEvent::ProxyArrival { cgi: false },
            );
        }
        if plan.cgi_rate > 0.0 {
            self.schedule_at(
                crate::world::ms(plan.start),
                SimEvent::ProxyArrival { cgi: true },
            );
        }
        self.out.proxy.bound =
            u32::try_from(self.spec.config.broker.max_proxy_inflight).unwrap_or(0);
        self.proxy = Some(ProxySim::new(plan));
    }

    /// The parent's health judge, given the plan's upstreams before the first event (as
    /// the real parent's driver starts it from the routes).
    pub(crate) fn judges_upstreams(&self) -> bool {
        self.proxy.is_some()
    }

    pub(crate) fn breach(&mut self, rule: &'static str, what: String) {
        let at = ms_of(self.now);
        let (Some(sim), out) = (self.proxy.as_mut(), &mut self.out.proxy) else {
            return;
        };
        let n = sim.breached.entry(rule).or_default();
        *n += 1;
        if *n <= KEEP {
            out.breaches.push((at, format!("{rule}: {what}")));
        }
    }

    pub(crate) fn upstream_flip(&mut self, flip: usize) {
        let now = self.now;
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        let Some(&(_, upstream, up)) = sim.plan.flips.get(flip) else {
            return;
        };
        if let Some(u) = sim.up.get_mut(usize::from(upstream)) {
            if *u != up {
                sim.last_flip = now;
            }
            *u = up;
        }
    }

    pub(crate) fn proxy_arrival(&mut self, cgi: bool) {
        let Some(sim) = self.proxy.as_ref() else {
            return;
        };
        let rate = if cgi {
            sim.plan.cgi_rate
        } else {
            sim.plan.rate
        };
        let until = sim.plan.until;
        let now_d = Duration::from_nanos(self.now.as_nanos());
        if now_d < until {
            let d = self.rng.exp(1.0 / rate);
            self.schedule_in(Duration::from_secs_f64(d), SimEvent::ProxyArrival { cgi });
        }
        let arrived_ns = self.now.as_nanos();
        self.arrive(crate::world::ConnKind::Proxy { arrived_ns, cgi });
    }

    /// The parent asked for a probe of the upstream at `url` (its table's `upstream`): it
    /// answers after a while with what the upstream is then.
    pub(crate) fn probe_upstream(&mut self, upstream: u32, url: &str) {
        let (Some(sim), Some(target)) = (self.proxy.as_ref(), target_of(url)) else {
            self.violation(format!(
                "the parent probes {url}, but this run has no reverse proxy or no such upstream"
            ));
            return;
        };
        let (lo, hi) = sim.plan.probe_ms;
        let d = Duration::from_millis(self.rng.range(lo, hi));
        self.schedule_in(d, SimEvent::ProbeAnswered { upstream, target });
    }

    pub(crate) fn probe_answered(&mut self, upstream: u32, target: u16) {
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        let ok = sim.up.get(usize::from(target)).copied().unwrap_or(false);
        if !ok {
            sim.failed_since_entered.insert(target);
        }
        self.out.proxy.probes += 1;
        self.inbox
            .push_back(servery_core::supervisor::Event::UpstreamProbed { upstream, ok });
    }

    /// The parent's `KillScriptGroups`: each group must be a script of `worker`'s; it is
    /// killed.
    pub(crate) fn proxy_kill_groups(&mut self, worker: WorkerId, pgids: &[u32]) {
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        let mut wrong = Vec::new();
        let mut killed = 0;
        for pgid in pgids {
            match sim.scripts.get(pgid) {
                Some(s) if s.worker == worker => {
                    sim.scripts.remove(pgid);
                    killed += 1;
                }
                _ => wrong.push(*pgid),
            }
        }
        self.out.proxy.scripts_killed += killed;
        if killed > 0 {
            self.out
                .coverage
                .insert(crate::labels::SCRIPT_GROUP_KILLED_FOR_DEAD_WORKER);
        }
        if !wrong.is_empty() {
            self.breach(
                "CGI orphan rule",
                format!(
                    "the parent killed groups {wrong:?} for {worker}, which are not its scripts"
                ),
            );
        }
    }

    /// After every parent step: the verdict reaching every worker, the verdict matching
    /// the truth, scripts outliving their worker.
    pub(crate) fn proxy_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        let sup = parent.supervisor();
        let health = parent.upstream_health();
        let members: BTreeSet<u16> = health
            .map(|h| h.members().filter_map(target_of).collect())
            .unwrap_or_default();
        // An upstream no live generation named before starts with no failure seen.
        let mut named: BTreeSet<u16> = sup
            .config()
            .proxy()
            .upstreams()
            .filter_map(target_of)
            .collect();
        for g in sup.live_generations() {
            if let Some(targets) = sim.spawned_targets.get(&g.0) {
                named.extend(targets.iter().copied());
            }
        }
        for entered in named.difference(&sim.named) {
            sim.failed_since_entered.remove(entered);
        }
        sim.named = named;
        let left = sim.members.difference(&members).next().is_some();
        sim.members = members;
        let mut verdict: Vec<u16> = health
            .map(|h| h.down_urls().into_iter().filter_map(target_of).collect())
            .unwrap_or_default();
        verdict.sort_unstable();
        let committed = sup.generation().0;
        let mut moved = false;
        if committed > 0 && !sim.generation_targets.contains_key(&committed) {
            let targets: BTreeSet<u16> = sup
                .config()
                .proxy()
                .upstreams()
                .filter_map(target_of)
                .collect();
            moved = sim
                .generation_targets
                .last_key_value()
                .is_some_and(|(_, before)| *before != targets);
            sim.generation_targets.insert(committed, targets);
            sim.generation_clients
                .insert(committed, Clients::of(sup.config()));
        }
        if moved {
            self.out
                .coverage
                .insert(crate::labels::PROXY_ROUTES_RELOADED);
        }
        if left {
            self.out
                .coverage
                .insert(crate::labels::UPSTREAM_LEFT_THE_TABLE);
        }
        // The policy rule: the judge holds the committed configuration's policy once the
        // step that committed it ends, and without probes no upstream stays down past
        // its fail timeout (from its marking, or from the commit that changed the policy).
        let committed_policy = sup.config().proxy().settings().health;
        let mut policy_breaches = Vec::new();
        let mut policy_changed = false;
        if sim.policy != Some(committed_policy) {
            if sim.policy.is_some() {
                sim.policy_since = now;
                policy_changed = true;
            }
            sim.policy = Some(committed_policy);
        }
        if let Some(judged) = health.map(|h| h.policy())
            && judged != committed_policy
        {
            policy_breaches.push(format!(
                "the parent judges by {judged:?}, not the committed generation {}'s {committed_policy:?}",
                sup.generation().0
            ));
        }
        sim.down_since.retain(|t, _| verdict.contains(t));
        for &t in &verdict {
            sim.down_since.entry(t).or_insert(now);
        }
        if committed_policy.probe_interval.is_none() {
            for (&t, &since) in &sim.down_since {
                let due = since.max(sim.policy_since) + committed_policy.fail_timeout + SETTLE;
                if now > due {
                    policy_breaches.push(format!(
                        "{} is still down at {} ms: marked at {} ms, policy committed at {} ms, fail timeout {:?}",
                        upstream_url(t),
                        ms_of(now),
                        ms_of(since),
                        ms_of(sim.policy_since),
                        committed_policy.fail_timeout
                    ));
                }
            }
        }
        if verdict != sim.verdict {
            sim.verdict = verdict;
            sim.verdict_since = now;
            self.out.proxy.verdict_changes += 1;
            if !sim.verdict.is_empty() {
                self.out
                    .coverage
                    .insert(crate::labels::UPSTREAM_MARKED_DOWN);
            }
        }
        sim.connected_since.retain(|w, _| sup.is_connected(*w));
        let mut lost = Vec::new();
        for w in sup.connected_workers() {
            let since = *sim.connected_since.entry(w).or_insert(now);
            let Some(p) = self.procs.get(&w) else {
                continue;
            };
            if !p.runnable() || p.wedged || p.eof_seen || p.channel_broken {
                continue;
            }
            let settled = now >= sim.verdict_since + SETTLE && now >= since + SETTLE;
            let Some(targets) = p.proxy.as_ref().map(|wp| &wp.targets) else {
                continue;
            };
            // What it believes and what the parent holds, about its own upstreams.
            let believed: BTreeSet<u16> = sim
                .learned
                .get(&w)
                .map(|(d, _)| {
                    d.iter()
                        .filter_map(|&i| targets.get(usize::from(i)).copied())
                        .collect()
                })
                .unwrap_or_default();
            let held: BTreeSet<u16> = sim
                .verdict
                .iter()
                .copied()
                .filter(|t| targets.contains(t))
                .collect();
            if settled && believed != held {
                lost.push(format!(
                    "at {} ms {w} believes {:?} down, {} ms after the parent's verdict {:?}",
                    ms_of(now),
                    believed
                        .iter()
                        .map(|&t| upstream_url(t))
                        .collect::<Vec<_>>(),
                    (now - sim.verdict_since).as_millis(),
                    held.iter().map(|&t| upstream_url(t)).collect::<Vec<_>>()
                ));
            }
        }
        let mut wrong_verdict = None;
        if let Some(by) = sim.plan.converged_by
            && !sim.converged_judged
            && now >= crate::world::ms(by)
        {
            sim.converged_judged = true;
            let truth = sim.truth_down();
            if truth != sim.verdict {
                wrong_verdict = Some(format!(
                    "at {} ms, {} ms after an upstream last changed, the parent marks {:?} down; the upstreams down are {truth:?}",
                    ms_of(now),
                    (now - sim.last_flip).as_millis(),
                    sim.verdict
                ));
            } else {
                self.out
                    .coverage
                    .insert(crate::labels::UPSTREAM_VERDICT_CONVERGED);
            }
        }
        let orphans: Vec<String> = sim
            .scripts
            .iter()
            .filter_map(|(pgid, s)| {
                let died = s.orphaned?;
                (now >= died + ORPHAN_BOUND).then(|| {
                    format!(
                        "group {pgid} of {}, which died at {} ms, still runs at {} ms",
                        s.worker,
                        ms_of(died),
                        ms_of(now)
                    )
                })
            })
            .collect();
        for what in lost {
            self.breach(
                "health rule (every worker holds the parent's verdict)",
                what,
            );
        }
        if policy_changed {
            self.out
                .coverage
                .insert(crate::labels::UPSTREAM_POLICY_RELOADED);
        }
        for what in policy_breaches {
            self.breach(
                "policy rule (the parent judges by the committed generation's health policy)",
                what,
            );
        }
        if let Some(what) = wrong_verdict {
            self.breach(
                "health rule (the verdict converges to the upstreams' state)",
                what,
            );
        }
        for what in orphans {
            self.breach("CGI orphan rule (no script outlives its worker)", what);
        }
    }

    /// At the run's end: scripts still running.
    pub(crate) fn proxy_finish(&mut self) {
        let Some(sim) = self.proxy.as_ref() else {
            return;
        };
        let left: Vec<(u32, Script)> = sim.scripts.iter().map(|(p, s)| (*p, *s)).collect();
        self.out.proxy.scripts_at_end = left.len() as u64;
        for (pgid, s) in left {
            self.breach(
                "CGI orphan rule (no script outlives its worker)",
                format!("group {pgid} of {} still runs when the run ended", s.worker),
            );
        }
    }

    /// A worker of `generation` was spawned: its generation's upstreams are the ones its
    /// spawn's routes name.
    pub(crate) fn proxy_spawned(&mut self, generation: u64, wp: &WorkerProxy) {
        if let Some(sim) = self.proxy.as_mut() {
            sim.spawned_targets
                .entry(generation)
                .or_insert_with(|| wp.targets.iter().copied().collect());
        }
    }

    /// A worker learned the parent's verdict.
    pub(crate) fn proxy_learned(&mut self, worker: WorkerId, down: &[u16]) {
        let now = self.now;
        let targets = self
            .procs
            .get(&worker)
            .and_then(|p| p.proxy.as_ref())
            .map(|wp| (wp.targets.clone(), wp.generation));
        let mut unseen = Vec::new();
        if let Some(sim) = self.proxy.as_mut() {
            sim.learned.insert(worker, (down.to_vec(), now));
            self.out.proxy.verdicts_learned += 1;
            if let Some((targets, generation)) = &targets {
                for &i in down {
                    match targets.get(usize::from(i)) {
                        Some(t) if sim.failed_since_entered.contains(t) => {}
                        Some(&t) => unseen.push(format!(
                            "{worker} of generation {generation} was told its upstream {i} ({}) is down at {} ms, and no request or probe saw it fail since a live generation last named it",
                            upstream_url(t),
                            ms_of(now)
                        )),
                        None => unseen.push(format!(
                            "{worker} of generation {generation} was told its upstream {i} is down at {} ms; it has {} upstreams",
                            ms_of(now),
                            targets.len()
                        )),
                    }
                }
            }
        }
        for what in unseen {
            self.breach(
                "health rule (a verdict reaches only the upstream it is about)",
                what,
            );
        }
        if let Some(wp) = self.procs.get_mut(&worker).and_then(|p| p.proxy.as_mut()) {
            wp.learn(down);
        }
    }

    /// The balance rule, for one choice of `worker` (of `generation`, `len` upstreams,
    /// believing `learned` down): the choice its committed generation's balance makes.
    /// Every choice among several counts for the worker's turn; those of a generation
    /// not yet committed are not judged.
    pub(crate) fn judge_choice(
        &mut self,
        worker: WorkerId,
        generation: u64,
        len: usize,
        learned: &BTreeSet<u16>,
        choice: Option<usize>,
    ) {
        let now = self.now;
        let Some(sim) = self.proxy.as_mut() else {
            return;
        };
        if len < 2 {
            return;
        }
        let turn = sim.turns.entry(worker).or_default();
        let mine = *turn;
        *turn += 1;
        let Some(clients) = sim.generation_clients.get(&generation).copied() else {
            return;
        };
        let mut flying = vec![0u32; len];
        for f in sim
            .in_flight
            .iter()
            .filter(|((w, _), _)| *w == worker)
            .map(|(_, f)| f)
        {
            if let Some(n) = flying.get_mut(f.upstream) {
                *n += 1;
            }
        }
        // Its upstreams it does not believe down, in its turn's order.
        let believed_up: Vec<usize> = (0..len)
            .map(|k| (mine + k) % len)
            .filter(|&i| u16::try_from(i).is_ok_and(|i| !learned.contains(&i)))
            .collect();
        let (kept, expected) = match clients.balance {
            Balance::LeastInflight => {
                let fewest = believed_up.iter().map(|&i| flying[i]).min();
                let kept = match choice {
                    None => believed_up.is_empty(),
                    Some(c) => believed_up.contains(&c) && Some(flying[c]) == fewest,
                };
                let fewest = fewest.map_or_else(|| "none".to_owned(), |n| n.to_string());
                (
                    kept,
                    format!("one with the fewest of its requests in flight ({fewest})"),
                )
            }
            _ => {
                let first = believed_up.first().copied();
                (choice == first, format!("{first:?}"))
            }
        };
        let reloaded = sim
            .generation_clients
            .range(..generation)
            .next_back()
            .is_some_and(|(_, before)| before.balance != clients.balance);
        if !kept {
            self.breach(
                "balance rule (a committed generation's workers balance by its proxy.balance)",
                format!(
                    "{worker} of generation {generation} chose upstream {choice:?} at {} ms; by {} it takes {expected} (turn {mine}, believed down {learned:?}, its requests in flight {flying:?})",
                    ms_of(now),
                    clients.balance.name()
                ),
            );
        } else if reloaded {
            self.out
                .coverage
                .insert(crate::labels::PROXY_BALANCE_RELOADED);
        }
    }

    /// The timeout rule, for one upstream request of `worker` that just ended (`ok`:
    /// the worker got a response head): it ends when its committed generation's
    /// timeouts say, given what the upstream did.
    pub(crate) fn judge_exchange(&mut self, worker: WorkerId, flight: Flight, ok: bool) {
        let now = self.now;
        let Some(generation) = self
            .procs
            .get(&worker)
            .and_then(|p| p.proxy.as_ref())
            .map(|wp| wp.generation)
        else {
            return;
        };
        let Some(sim) = self.proxy.as_ref() else {
            return;
        };
        let Some(clients) = sim.generation_clients.get(&generation).copied() else {
            return;
        };
        let (due, answered) = flight.exchange.ends(clients.connect, clients.first_byte);
        let took = now.saturating_since(flight.sent);
        let timed_out =
            !answered && !matches!(flight.exchange, Exchange::Refused(d) if d < clients.connect);
        let reloaded = sim
            .generation_clients
            .range(..generation)
            .next_back()
            .is_some_and(|(_, before)| {
                (before.connect, before.first_byte) != (clients.connect, clients.first_byte)
            });
        if took != due || ok != answered {
            self.breach(
                "timeout rule (a committed generation's workers time out by its proxy.connect_timeout and proxy.first_byte_timeout)",
                format!(
                    "{worker} of generation {generation} was done with {} after {took:?} ({}) at {} ms; the upstream {:?}, and generation {generation}'s connect timeout {:?} and first-byte timeout {:?} end it after {due:?} ({})",
                    upstream_url(flight.target),
                    if ok { "answered" } else { "failed" },
                    ms_of(now),
                    flight.exchange,
                    clients.connect,
                    clients.first_byte,
                    if answered { "answered" } else { "failed" },
                ),
            );
        } else if timed_out && reloaded {
            self.out
                .coverage
                .insert(crate::labels::PROXY_TIMEOUT_RELOADED);
        }
    }

    /// Upstreams a worker learned are down.
    fn learned_down(&self, worker: WorkerId) -> BTreeSet<u16> {
        self.proxy
            .as_ref()
            .and_then(|s| s.learned.get(&worker))
            .map(|(d, _)| d.iter().copied().collect())
            .unwrap_or_default()
    }
}
