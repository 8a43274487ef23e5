//! servery's lifecycle acceptance gates as named, seeded scenarios.
//!
//! A scenario is data plus predicates: a configuration, a workload, a fault plan drawn
//! from the seed, and what the run must reach. Every run ends with a liveness phase
//! (faults stop; within a bound the service has N ready workers or is explicitly
//! `failed` with a reason) and a graceful stop whose outcome is checked too. Scenarios
//! also report coverage goals that a sweep must reach.
#![forbid(unsafe_code)]

mod catalog;
mod checks;
mod sweep;

use core::time::Duration;

use servery_core::config::RawConfig;
use servery_core::supervisor::{FailureReason, Platform};
use servery_sim::rng::SimRng;
use servery_sim::{Outcome, SimSpec};

pub use catalog::{BENCH, COVERAGE_GOALS, SCENARIOS};
pub use sweep::{SweepReport, bench, sweep};

/// How the run must end its liveness phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `workers` ready workers in the committed generation.
    Ready,
    /// Explicitly failed with this reason.
    Failed(FailureReason),
    /// Either, depending on how many faults the seed drew.
    ReadyOrFailed(FailureReason),
    /// The parent was killed; its workers must drain and exit on their own.
    ParentDied,
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
    /// The first spawn after the initial generation must fall in this window.
    pub first_recycle_within: Option<(Duration, Duration)>,
    /// Committed generation expected at the liveness point.
    pub generation: Option<u64>,
    /// No request may fail at all (zero-downtime scenarios).
    pub zero_failed: bool,
    /// A healthy draining worker may be killed with work in flight.
    pub allow_forced: bool,
    /// The parent must exit within this long after the stop (or failure).
    pub exit_within: Duration,
    pub extra: Option<ExtraCheck>,
}

/// A run ready to go: the simulation spec and its expectations.
#[derive(Debug)]
pub struct Plan {
    pub spec: SimSpec,
    pub expect: Expect,
}

/// What a scenario builder gets: the seed, the platform model, and a random stream of
/// its own (independent of the simulation's).
#[derive(Debug)]
pub struct Ctx {
    pub seed: u64,
    pub platform: Platform,
    pub rng: SimRng,
}

pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub build: fn(&mut Ctx) -> Plan,
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
}

/// What `scenario` plans for `seed` on `platform`: the same plan the simulator runs, for
/// drivers of real processes too.
pub fn plan(scenario: &Scenario, seed: u64, platform: Platform) -> Plan {
    let mut ctx = Ctx {
        seed,
        platform,
        rng: SimRng::new(seed ^ 0x5ce9_a210_0f00_d1e5),
    };
    (scenario.build)(&mut ctx)
}

/// Build, simulate and judge one scenario for one seed and platform.
pub fn run(scenario: &Scenario, seed: u64, platform: Platform, trace: bool) -> RunResult {
    let mut plan = plan(scenario, seed, platform);
    plan.spec.seed = seed;
    plan.spec.platform = platform;
    plan.spec.trace = trace;
    let spec_stop = plan.spec.stop_at;
    match servery_sim::simulate(plan.spec) {
        Err(e) => RunResult {
            outcome: Outcome::default(),
            verdict: Err(format!("scenario built an invalid configuration: {e}")),
        },
        Ok(mut outcome) => {
            let verdict = checks::judge(&mut outcome, &plan.expect, spec_stop);
            RunResult { outcome, verdict }
        }
    }
}

/// The command that replays one run.
pub fn replay_command(name: &str, seed: u64, platform: Platform) -> String {
    format!(
        "cargo run --release -p servery-scenarios -- run {name} --seed {seed} --platform {} --trace",
        platform.name()
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
