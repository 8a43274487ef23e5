//! servery's lifecycle acceptance gates as named, seeded scenarios.
//!
//! A scenario is data plus predicates: a configuration, a workload, a fault plan drawn
//! from the seed, and what the run must reach. Every run ends with a liveness phase
//! (faults stop; within a bound the service has N ready workers or is explicitly
//! `failed` with a reason) and a graceful stop whose outcome is checked too. Scenarios
//! also report coverage goals that a sweep must reach.
#![forbid(unsafe_code)]

mod budget;
mod catalog;
mod catalog_apps;
mod catalog_basics;
mod catalog_bursts;
mod catalog_certs;
mod catalog_chaos;
mod catalog_chunks;
mod catalog_control;
mod catalog_dav;
mod catalog_dav_checks;
mod catalog_dav_tree;
mod catalog_io_faults;
mod catalog_listeners;
mod catalog_network;
mod catalog_pauses;
mod catalog_proxy;
mod catalog_rollouts;
mod catalog_startups;
mod catalog_writes;
mod checks;
pub mod cluster;
pub mod corpus;
mod goals;
mod heal;
pub mod research;
mod sweep;

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{FailureReason, Platform};
use servery_sim::rng::SimRng;
use servery_sim::{FaultKind, Outcome, SimSpec};

pub use budget::{BudgetEnd, RestartBudget, crashing_boots};
pub use catalog::{BENCH, COVERAGE_GOALS, SCENARIOS};
pub use heal::heal_bound;
pub use sweep::{KindStats, SweepReport, bench, sweep, sweep_seeds};

/// How the run must end its liveness phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `workers` ready workers in the committed generation.
    Ready,
    /// Explicitly failed with this reason.
    Failed(FailureReason),
    /// Ready, or failed with `restart_limit_exceeded`, as the faults that count against
    /// the restart limit decide: ready when at most `limit` can count, failed when more
    /// must, either only when the plan leaves it open ([`RestartBudget::end`]).
    Budget(RestartBudget),
    /// The parent was killed; its workers must drain and exit on their own.
    ParentDied,
    /// Ready, or failed for this reason, as the run's timing decides: the oracle's rules
    /// judge whether the end it took was allowed (for a start: the intake rule).
    ReadyOrFailed(FailureReason),
}

/// A scenario's own predicate; it may also record coverage goals.
pub type ExtraCheck = fn(&mut Outcome, &Expect) -> Result<(), String>;

/// What a scenario's run must satisfy, beyond the checks every run gets.
#[derive(Debug, Clone)]
pub struct Expect {
    pub end: End,
    /// Ready workers expected at the liveness point.
    pub workers: usize,
    /// Also acceptable (a reload that may or may not have committed).
    pub alt_workers: Option<usize>,
    /// The rule that sets `workers`, named when the count is wrong.
    pub workers_rule: Option<&'static str>,
    /// The rule an unexpected end breaks, named in the message when the service does not
    /// end as `end` says.
    pub end_rule: Option<&'static str>,
    /// The first spawn after the initial generation must fall in this window.
    pub first_recycle_within: Option<(Duration, Duration)>,
    /// Committed generation expected at the liveness point.
    pub generation: Option<u64>,
    /// The rule a wrong generation breaks, named in the failure (the reloads commit).
    pub generation_rule: Option<&'static str>,
    /// No request may fail at all (zero-downtime scenarios).
    pub zero_failed: bool,
    /// A healthy draining worker may be killed with work in flight.
    pub allow_forced: bool,
    /// The parent must exit within this long after the stop (or failure).
    pub exit_within: Duration,
    pub extra: Option<ExtraCheck>,
    /// What fixes the port in this plan, when it draws it (reload admission): the reason
    /// a refused move must give.
    pub port_fixed_by: Option<servery_core::supervisor::PortFixedBy>,
}

/// A run ready to go: the simulation spec and its expectations.
#[derive(Debug)]
pub struct Plan {
    pub spec: SimSpec,
    pub expect: Expect,
}

/// What a scenario builder gets: the seed, the platform model, a random stream of its
/// own (independent of the simulation's), and the fault kinds it may inject.
#[derive(Debug)]
pub struct Ctx {
    pub seed: u64,
    pub platform: Platform,
    pub rng: SimRng,
    /// Every kind, except in swarm mode. A builder draws exactly as it would with all of
    /// them, leaves out what is disabled, and expects what its plan then contains.
    pub kinds: Kinds,
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub build: fn(&mut Ctx) -> Plan,
    /// The fault kinds its plans may use (a test holds every plan to this list).
    pub kinds: &'static [FaultKind],
    /// Why swarm mode leaves it out, when it does.
    pub no_swarm: Option<&'static str>,
}

impl Scenario {
    /// Why swarm sweeps leave this scenario out, or `None` when they run it.
    pub fn swarm_exclusion(&self) -> Option<&'static str> {
        if self.kinds.is_empty() {
            Some("draws no faults")
        } else {
            self.no_swarm
        }
    }
}

/// A set of [`FaultKind`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kinds(u64);

impl Kinds {
    pub const ALL: Kinds = Kinds((1 << FaultKind::ALL.len()) - 1);
    pub const NONE: Kinds = Kinds(0);

    pub fn of(kinds: &[FaultKind]) -> Kinds {
        Kinds(kinds.iter().fold(0, |m, k| m | 1 << k.index()))
    }

    pub fn has(self, kind: FaultKind) -> bool {
        self.0 & 1 << kind.index() != 0
    }

    pub fn and(self, other: Kinds) -> Kinds {
        Kinds(self.0 & other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL.into_iter().filter(move |k| self.has(*k))
    }

    /// The names, space-separated (`-` when empty).
    pub fn names(self) -> String {
        let names: Vec<&str> = self.iter().map(FaultKind::name).collect();
        if names.is_empty() {
            "-".into()
        } else {
            names.join(" ")
        }
    }
}

/// How a seed's plan is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// As the catalog writes it: every fault kind the scenario uses.
    #[default]
    Full,
    /// Swarm testing (Groce et al., ISSTA 2012): the seed also decides which of the
    /// scenario's fault kinds are enabled; the others are left out of the plan.
    Swarm,
}

impl Mode {
    /// The kinds `scenario`'s plan for `seed` may use in this mode.
    pub fn kinds(self, scenario: &Scenario, seed: u64) -> Kinds {
        match self {
            Mode::Full => Kinds::ALL,
            Mode::Swarm if scenario.swarm_exclusion().is_some() => Kinds::ALL,
            Mode::Swarm => swarm_kinds(scenario, seed),
        }
    }
}

/// The swarm subset of `scenario`'s fault kinds for `seed`: each kind independently with
/// probability ½, from a stream of the seed's own. A kind's bit does not depend on the
/// scenario, so adding a kind to one scenario leaves every other subset as it was.
pub fn swarm_kinds(scenario: &Scenario, seed: u64) -> Kinds {
    let mask = SimRng::new(seed ^ 0x5a7a_12d0_c0de_f00d).next_u64();
    Kinds::of(scenario.kinds).and(Kinds(mask))
}

impl core::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

pub fn platform_by_name(name: &str) -> Option<Platform> {
    match name {
        "posix" => Some(Platform::Posix),
        "windows" => Some(Platform::Windows),
        _ => None,
    }
}

/// The result of one run.
#[derive(Debug)]
pub struct RunResult {
    pub outcome: Outcome,
    pub verdict: Result<(), String>,
    /// The fault kinds the plan could use (all of the scenario's, outside swarm mode).
    pub kinds: Kinds,
}

/// What `scenario` plans for `seed` on `platform`: the same plan the simulator runs, for
/// drivers of real processes too.
pub fn plan(scenario: &Scenario, seed: u64, platform: Platform) -> Plan {
    plan_in(scenario, seed, platform, Mode::Full)
}

/// [`plan`] in `mode`.
pub fn plan_in(scenario: &Scenario, seed: u64, platform: Platform, mode: Mode) -> Plan {
    let mut ctx = Ctx {
        seed,
        platform,
        rng: SimRng::new(seed ^ 0x5ce9_a210_0f00_d1e5),
        kinds: mode.kinds(scenario, seed),
    };
    (scenario.build)(&mut ctx)
}

/// Build, simulate and judge one scenario for one seed and platform.
pub fn run(scenario: &Scenario, seed: u64, platform: Platform, trace: bool) -> RunResult {
    run_in(scenario, seed, platform, Mode::Full, trace)
}

/// [`run`] in `mode`.
pub fn run_in(
    scenario: &Scenario,
    seed: u64,
    platform: Platform,
    mode: Mode,
    trace: bool,
) -> RunResult {
    let kinds = Kinds::of(scenario.kinds).and(mode.kinds(scenario, seed));
    let mut plan = plan_in(scenario, seed, platform, mode);
    plan.spec.seed = seed;
    plan.spec.platform = platform;
    plan.spec.trace = trace;
    let spec_stop = plan.spec.stop_at;
    let heal = heal::HealPlan::of(&plan.spec);
    match servery_sim::simulate(plan.spec) {
        Err(e) => RunResult {
            outcome: Outcome::default(),
            verdict: Err(format!("scenario built an invalid configuration: {e}")),
            kinds,
        },
        Ok(mut outcome) => {
            let mut verdict = checks::judge(&mut outcome, &plan.expect, spec_stop);
            // Only simulated runs: a real run's boots take what the machine gives them.
            if verdict.is_ok() && outcome.failure.is_none() && plan.expect.end != End::ParentDied {
                verdict = heal::judge(&outcome, &plan.expect, &heal);
            }
            RunResult {
                outcome,
                verdict,
                kinds,
            }
        }
    }
}

/// The command that replays one run.
pub fn replay_command(name: &str, seed: u64, platform: Platform) -> String {
    replay_command_in(name, seed, platform, Mode::Full)
}

/// The command that replays one run in `mode`.
pub fn replay_command_in(name: &str, seed: u64, platform: Platform, mode: Mode) -> String {
    format!(
        "cargo run --release -p servery-scenarios -- run {name} --seed {seed} --platform {} --trace{}",
        platform.name(),
        if mode == Mode::Swarm { " --swarm" } else { "" }
    )
}

/// Timings for simulated services: the seed's policy shapes, scaled down so a run
/// covers many lifecycles in a minute of virtual time.
pub fn fast_config(workers: i64) -> RawConfig {
    let mut c = RawConfig {
        workers,
        ..RawConfig::default()
    };
    let r = &mut c.recovery;
    r.restart_backoff_initial = 0.1;
    r.restart_backoff_max = 2.0;
    r.restart_stable_period = 5.0;
    r.worker_restart_limit = 5;
    r.worker_restart_window = 30.0;
    r.heartbeat_interval = 0.5;
    r.heartbeat_timeout = 2.0;
    r.worker_start_timeout = 5.0;
    r.drain_timeout = 3.0;
    r.force_timeout = 0.5;
    c
}

/// Longest a single fault can keep a slot empty under `c`: detection, escalation,
/// backoff and a boot.
pub fn recovery_bound(c: &RawConfig) -> Duration {
    let r = &c.recovery;
    Duration::from_secs_f64(
        r.heartbeat_timeout
            + r.force_timeout
            + r.restart_backoff_max
            + r.worker_start_timeout.min(3.0)
            + 1.0,
    )
}

/// Judge `outcome` against what `scenario` expects for `seed`: how runs of real processes
/// are held to the simulator's predicates (and how the gates show that the predicates
/// reject outcomes that break them).
pub fn judge_as(
    scenario: &Scenario,
    seed: u64,
    platform: Platform,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let plan = plan(scenario, seed, platform);
    checks::judge(outcome, &plan.expect, plan.spec.stop_at)
}
