//! Workloads from files: how many workers, for how long, under what load, and which
//! fault model. A seed's fault trace is drawn from a stream of the seed and the workload
//! alone, never from the policy or the simulation's own stream, so every policy meets
//! the same faults at the same times (paired seeds).

use core::time::Duration;
use std::path::Path;

use servery_core::supervisor::Platform;
use servery_sim::rng::SimRng;
use servery_sim::{AppModel, Behavior, Fault, SimSpec, Workload as SimWorkload};

use crate::research::clock::weibull_from_unit;
use crate::research::error::{ResearchError, parse, read};
use crate::research::policy::Policy;

/// Whether ending `failed` is right (permanent: the boots were wasted) or wrong
/// (transient: the fault would have passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    None,
    Transient,
    Permanent,
}

impl FaultClass {
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::None => "none",
            FaultClass::Transient => "transient",
            FaultClass::Permanent => "permanent",
        }
    }
}

/// The fault model, by `kind`. Ranges are `[lo, hi]`, drawn uniformly per seed.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FaultModel {
    Steady,
    /// A dependency outage of `outage_s` seconds from `start_s`: every worker crashes
    /// when it begins and every boot inside it crashes.
    CrashStorm {
        start_s: f64,
        outage_s: [f64; 2],
    },
    /// From `start_s` on, every worker crashes `crash_after_s` seconds after its boot
    /// (or after `start_s`, if it was already running).
    BootLoop {
        start_s: f64,
        crash_after_s: [f64; 2],
    },
    /// Worker lifetimes are Weibull(`shape`, `scale_s`) from the end of each boot.
    Aging {
        shape: f64,
        scale_s: f64,
    },
    /// A Markov aging chain: each worker passes through phases of exponential length
    /// with these means (seconds from the end of its boot) and crashes at the end of the
    /// last: a hypoexponential lifetime. Huang et al. 1995's robust → failure-probable →
    /// failed chain is `phase_means_s = [1/r2, 1/λ]`.
    MarkovAging {
        phase_means_s: Vec<f64>,
    },
    /// Lifetimes resampled from observed failure times: `trace_file` (relative to the
    /// workload file) holds one failure time in seconds from the end of a boot per line;
    /// `#` starts a comment. Each worker's lifetime is one of them, drawn uniformly (the
    /// empirical distribution).
    FailureTrace {
        trace_file: String,
        /// A robust period before the trace's times (seconds): each lifetime is
        /// `robust_s` plus a drawn time, the deterministic robust state of Dohi et al.
        /// 2000 (decision 0111). 0 by default.
        #[serde(default, skip_serializing_if = "is_zero")]
        robust_s: f64,
        #[serde(skip)]
        times_s: Vec<f64>,
    },
    /// `requests` poison requests at uniform times in `window_s`; each is tried
    /// `retries` more times, `retry_gap_s` apart, and every try kills the worker that
    /// takes it.
    PoisonRequest {
        requests: u32,
        window_s: [f64; 2],
        retries: u32,
        retry_gap_s: f64,
    },
    /// Pauses arrive at `rate_per_s` (Poisson) in live ready workers, lengths
    /// exponential with mean `pause_mean_s`: each a `SIGSTOP` and, that long after, a
    /// `SIGCONT`. A pause shorter than the policy's heartbeat timeout costs the requests
    /// the worker holds their latency; a longer one gets the worker killed first.
    Hang {
        rate_per_s: f64,
        pause_mean_s: f64,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    #[serde(default)]
    pub about: String,
    pub fault_class: FaultClass,
    #[serde(default = "default_workers")]
    pub workers: i64,
    /// Length of the measured run (the simulation then stops the service).
    pub duration_s: f64,
    #[serde(default = "default_rate")]
    pub request_rate: f64,
    /// Time-varying load: `[from_s, rate]` pairs in time order; from each point on,
    /// requests arrive at that rate instead of `request_rate` (Poisson throughout).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_steps: Vec<[f64; 2]>,
    /// CPU-seconds one boot costs, for the amplification factor.
    #[serde(default = "default_boot_cost")]
    pub boot_cost_s: f64,
    /// Modelled resident memory of a worker: `memory_base_mb + memory_growth_mb_per_s`
    /// times its age.
    #[serde(default = "default_memory")]
    pub memory_base_mb: f64,
    #[serde(default)]
    pub memory_growth_mb_per_s: f64,
    /// Resident memory each served request adds for good (a leak), reported to the
    /// supervisor at each heartbeat so an RSS limit (`worker_max_rss`, granian's
    /// `workers_max_rss`) acts on it; 0: the supervisor is told nothing.
    #[serde(default)]
    pub memory_growth_mb_per_request: f64,
    /// The kernel's memory limit a worker is killed at (MiB; the OOM killer, a crash the
    /// supervisor sees), checked against `memory_base_mb` + the per-request leak; only
    /// with `memory_growth_mb_per_request`. `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_limit_mb: Option<f64>,
    /// A request answered within this long of its arrival counts as served within the
    /// bound (`served_within_bound`).
    #[serde(default = "default_latency_bound")]
    pub latency_bound_s: f64,
    /// How long each worker's boot takes (seconds); by default the simulator's 2–20 ms.
    /// The published rejuvenation models give repair and rejuvenation times a boot
    /// must take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_s: Option<f64>,
    pub faults: FaultModel,
    /// Further fault models acting in the same run (`[[also_faults]]` tables, each like
    /// `[faults]`): their injected faults are merged, and a process's behaviour is the
    /// worst each model gives it (a crash at boot over a lifetime, the shorter of two
    /// lifetimes). At most one model may set a worker's lifetime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_faults: Vec<FaultModel>,
}

fn default_workers() -> i64 {
    4
}
fn default_rate() -> f64 {
    10.0
}
fn default_boot_cost() -> f64 {
    0.5
}
fn default_memory() -> f64 {
    50.0
}
/// One second: far above a healthy answer (1–20 ms), well below a client's patience.
fn default_latency_bound() -> f64 {
    1.0
}

/// A mebibyte, as the RSS limits count it.
const MB: f64 = 1024.0 * 1024.0;

/// Mean service time of a simulated request (the simulator's default 1–20 ms).
pub const SERVICE_S: f64 = 0.0105;

/// One seed's draw of the workload: the fault plan and the parameter plotted against.
#[derive(Debug, Clone, PartialEq)]
pub struct Draw {
    pub faults: Vec<(Duration, Fault)>,
    /// The drawn parameter (outage length, crash delay), when the model has one.
    pub x: Option<f64>,
    /// When the first fault strikes (for the time to give up).
    pub onset_s: f64,
    /// Each fault model's drawn parameter, `[faults]` first.
    pub xs: Vec<Option<f64>>,
}

fn uniform(rng: &mut SimRng, [lo, hi]: [f64; 2]) -> f64 {
    lo + rng.unit() * (hi - lo)
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl Workload {
    /// One worker, no requests, whose every boot takes `boot_s` and whose lifetimes
    /// `faults` draws: how the published rejuvenation models run on the supervisor (a
    /// boot takes the repair or rejuvenation time, decision 0104).
    pub fn one_aging_worker(name: &str, about: &str, boot_s: f64, faults: FaultModel) -> Self {
        Workload {
            name: name.into(),
            about: about.into(),
            fault_class: FaultClass::Transient,
            workers: 1,
            duration_s: 1.0,
            request_rate: 0.0,
            load_steps: Vec::new(),
            boot_cost_s: 0.0,
            memory_base_mb: 50.0,
            memory_growth_mb_per_s: 0.0,
            memory_growth_mb_per_request: 0.0,
            oom_limit_mb: None,
            latency_bound_s: 1.0,
            boot_s: Some(boot_s),
            faults,
            also_faults: Vec::new(),
        }
    }

    /// The seed's own stream for this workload (independent of the policy).
    fn stream(&self, seed: u64, salt: u64) -> SimRng {
        let name = self.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        SimRng::new(seed ^ name ^ salt)
    }

    /// The drawn parameter's name and unit, for plot axes.
    pub fn parameter(&self) -> &'static str {
        match self.faults {
            FaultModel::CrashStorm { .. } => "outage length d (seconds)",
            FaultModel::BootLoop { .. } => "crash delay after each boot b (seconds)",
            _ => "drawn parameter (seconds)",
        }
    }

    /// `[faults]` then each of `[[also_faults]]`.
    pub fn models(&self) -> impl Iterator<Item = &FaultModel> {
        core::iter::once(&self.faults).chain(&self.also_faults)
    }

    pub fn draw(&self, seed: u64) -> Draw {
        let mut rng = self.stream(seed, 0xfa17);
        let mut faults = Vec::new();
        let (mut xs, mut onset_s) = (Vec::new(), f64::INFINITY);
        // `[faults]` draws first, from the same stream as before there were others.
        for model in self.models() {
            let (x, onset) = self.draw_one(model, &mut rng, &mut faults);
            xs.push(x);
            onset_s = onset_s.min(onset);
        }
        faults.sort_by_key(|(at, _)| *at);
        Draw {
            faults,
            x: xs.first().copied().flatten(),
            onset_s,
            xs,
        }
    }

    fn draw_one(
        &self,
        model: &FaultModel,
        rng: &mut SimRng,
        faults: &mut Vec<(Duration, Fault)>,
    ) -> (Option<f64>, f64) {
        let rng = &mut *rng;
        match model {
            FaultModel::Steady => (None, self.duration_s),
            FaultModel::CrashStorm { start_s, outage_s } => {
                for _ in 0..self.workers {
                    faults.push((
                        secs(*start_s),
                        Fault::CrashWorker {
                            pick: rng.next_u64(),
                        },
                    ));
                }
                (Some(uniform(rng, *outage_s)), *start_s)
            }
            FaultModel::BootLoop {
                start_s,
                crash_after_s,
            } => (Some(uniform(rng, *crash_after_s)), *start_s),
            FaultModel::Aging { .. }
            | FaultModel::MarkovAging { .. }
            | FaultModel::FailureTrace { .. } => (None, 0.0),
            FaultModel::PoisonRequest {
                requests,
                window_s,
                retries,
                retry_gap_s,
            } => {
                let mut first = f64::INFINITY;
                for _ in 0..*requests {
                    let t = uniform(rng, *window_s);
                    first = first.min(t);
                    for k in 0..=*retries {
                        let at = t + f64::from(k) * retry_gap_s;
                        faults.push((
                            secs(at),
                            Fault::CrashWorker {
                                pick: rng.next_u64(),
                            },
                        ));
                    }
                }
                (None, first)
            }
            FaultModel::Hang {
                rate_per_s,
                pause_mean_s,
            } => {
                let mut t = rng.exp(1.0 / rate_per_s);
                let mut first = f64::INFINITY;
                while t < self.duration_s {
                    let duration = secs(rng.exp(*pause_mean_s));
                    let pick = rng.next_u64();
                    first = first.min(t);
                    faults.push((secs(t), Fault::PauseWorker { pick, duration }));
                    t += rng.exp(1.0 / rate_per_s);
                }
                (None, first)
            }
        }
    }

    /// The simulation of `policy` under this workload for `seed`.
    pub fn spec(&self, policy: &Policy, seed: u64, platform: Platform, draw: &Draw) -> SimSpec {
        let config = policy.config(self.workers);
        let r = &config.recovery;
        let stop = secs(self.duration_s);
        let end_by = stop + secs(r.drain_timeout + r.force_timeout + 30.0);
        let behavior = self.behavior(seed, draw);
        SimSpec {
            seed,
            platform,
            workload: SimWorkload {
                request_rate: self.request_rate,
                request_rate_steps: self
                    .load_steps
                    .iter()
                    .map(|[from, rate]| (secs(*from), *rate))
                    .collect(),
                until: stop,
                app: (self.memory_growth_mb_per_request > 0.0).then_some(AppModel {
                    memory_base: (self.memory_base_mb * MB) as u64,
                    memory_per_request: (self.memory_growth_mb_per_request * MB) as u64,
                    peak_chance: 0.0,
                    peak_bytes: 0,
                    shutdown_ms: None,
                    oom_limit: self.oom_limit_mb.map(|limit| (limit * MB) as u64),
                }),
                ..SimWorkload::default()
            },
            behavior,
            faults: draw.faults.clone(),
            commands: Vec::new(),
            host_cpus: servery_core::cpu_affinity::CpuSet::default(),
            liveness_at: stop,
            stop_at: stop + secs(0.001),
            end_by,
            trace: false,
            listeners_from_service_manager: false,
            config,
        }
    }

    /// The request rate at `t` seconds into the run.
    pub fn rate_at(&self, t: f64) -> f64 {
        self.load_steps
            .iter()
            .rev()
            .find(|[from, _]| *from <= t)
            .map_or(self.request_rate, |[_, rate]| *rate)
    }

    /// Requests offered (expected) from `a` to `b` seconds into the run.
    pub fn offered_between(&self, a: f64, b: f64) -> f64 {
        if b <= a {
            return 0.0;
        }
        let mut edges: Vec<f64> = self
            .load_steps
            .iter()
            .map(|[from, _]| *from)
            .filter(|t| *t > a && *t < b)
            .collect();
        edges.insert(0, a);
        edges.push(b);
        edges
            .windows(2)
            .map(|w| self.rate_at(w[0]) * (w[1] - w[0]))
            .sum()
    }

    /// The `index`-th process's lifetime (seconds from the end of its boot) under an
    /// aging model, the same under every policy; `None` for the other fault models.
    pub fn lifetime(&self, seed: u64, index: u64) -> Option<f64> {
        let key = self.stream(seed, 0xbe4a).next_u64();
        self.models().find_map(|m| lifetime(m, key, index))
    }

    /// How each process behaves: drawn from the seed and the spawn's index and time only.
    fn behavior(&self, seed: u64, draw: &Draw) -> servery_sim::BehaviorFn {
        // The k-th process's lifetime is the same under every policy.
        let key = self.stream(seed, 0xbe4a).next_u64();
        let mut each: Vec<servery_sim::BehaviorFn> = self
            .models()
            .enumerate()
            .filter_map(|(i, m)| behavior_of(m, key, draw.xs.get(i).copied().flatten()))
            .collect();
        let boot = self.boot_s.map(secs);
        if boot.is_none() && each.len() <= 1 {
            return each
                .pop()
                .unwrap_or_else(|| Box::new(|_, _| Behavior::Healthy));
        }
        Box::new(move |info, rng| {
            let b = each
                .iter()
                .map(|f| f(info, rng))
                .fold(Behavior::Healthy, worse);
            match (boot, b) {
                (Some(boot), Behavior::Healthy) => Behavior::SlowBoot(boot),
                (Some(boot), Behavior::CrashAfter(lifetime)) => {
                    Behavior::SlowBootCrashAfter { boot, lifetime }
                }
                (_, b) => b,
            }
        })
    }

    /// Check the parameters (the recovery policy is checked by its own loader).
    pub fn check(&self, path: &Path) -> Result<(), ResearchError> {
        let bad = |field: &'static str, rule: &str| {
            Err(ResearchError::InvalidWorkload {
                path: path.to_owned(),
                field,
                rule: rule.to_string(),
            })
        };
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !(1..=64).contains(&self.workers) {
            return bad("workers", "must be in [1, 64]");
        }
        if !positive(self.duration_s) || self.duration_s > 86_400.0 {
            return bad("duration_s", "must be in (0, 86400]");
        }
        if !(self.request_rate.is_finite() && self.request_rate >= 0.0) {
            return bad("request_rate", "must be >= 0");
        }
        if !(self.boot_cost_s.is_finite() && self.boot_cost_s >= 0.0) {
            return bad("boot_cost_s", "must be >= 0");
        }
        if !(self.memory_base_mb >= 0.0
            && self.memory_growth_mb_per_s >= 0.0
            && self.memory_growth_mb_per_request >= 0.0
            && self.memory_base_mb.is_finite()
            && self.memory_growth_mb_per_request.is_finite())
        {
            return bad("memory_base_mb", "memory sizes and growth must be >= 0");
        }
        if let Some(limit) = self.oom_limit_mb {
            if !(limit.is_finite() && limit > self.memory_base_mb) {
                return bad("oom_limit_mb", "must be above memory_base_mb");
            }
            if self.memory_growth_mb_per_request <= 0.0 {
                return bad(
                    "oom_limit_mb",
                    "acts on the per-request leak: set memory_growth_mb_per_request",
                );
            }
        }
        let steps_ok = self.load_steps.iter().all(|[from, rate]| {
            from.is_finite() && *from >= 0.0 && rate.is_finite() && *rate >= 0.0
        }) && self.load_steps.windows(2).all(|w| w[0][0] < w[1][0]);
        if !steps_ok {
            return bad(
                "load_steps",
                "must be [from_s, rate] pairs with from_s >= 0 rising and rate >= 0",
            );
        }
        if !positive(self.latency_bound_s) {
            return bad("latency_bound_s", "must be > 0");
        }
        if self.boot_s.is_some_and(|b| !positive(b) || b > 3600.0) {
            return bad("boot_s", "must be in (0, 3600]");
        }
        let lifetimes = self
            .models()
            .filter(|m| {
                matches!(
                    m,
                    FaultModel::Aging { .. }
                        | FaultModel::MarkovAging { .. }
                        | FaultModel::FailureTrace { .. }
                        | FaultModel::BootLoop { .. }
                )
            })
            .count();
        if lifetimes > 1 {
            return bad(
                "also_faults",
                "at most one fault model may set a worker's lifetime (aging, markov-aging, failure-trace, boot-loop)",
            );
        }
        for model in self.models() {
            self.check_model(path, model)?;
        }
        Ok(())
    }

    fn check_model(&self, path: &Path, model: &FaultModel) -> Result<(), ResearchError> {
        let bad = |field: &'static str, rule: &str| {
            Err(ResearchError::InvalidWorkload {
                path: path.to_owned(),
                field,
                rule: rule.to_string(),
            })
        };
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let range = |[lo, hi]: [f64; 2]| lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi;
        match model {
            FaultModel::CrashStorm { outage_s, start_s } if !range(*outage_s) || *start_s < 0.0 => {
                bad(
                    "faults.outage_s",
                    "must be [lo, hi] with 0 <= lo <= hi, start_s >= 0",
                )
            }
            FaultModel::BootLoop { crash_after_s, .. }
                if !range(*crash_after_s) || crash_after_s[0] <= 0.0 =>
            {
                bad("faults.crash_after_s", "must be [lo, hi] with 0 < lo <= hi")
            }
            FaultModel::Aging { shape, scale_s } if !positive(*shape) || !positive(*scale_s) => {
                bad("faults.shape", "shape and scale_s must be > 0")
            }
            FaultModel::MarkovAging { phase_means_s }
                if phase_means_s.is_empty() || !phase_means_s.iter().all(|m| positive(*m)) =>
            {
                bad(
                    "faults.phase_means_s",
                    "must list at least one phase, every mean > 0",
                )
            }
            FaultModel::FailureTrace { times_s, .. } if times_s.len() < 2 => {
                bad("faults.trace_file", "must hold at least two failure times")
            }
            FaultModel::FailureTrace { robust_s, .. }
                if !(robust_s.is_finite() && *robust_s >= 0.0) =>
            {
                bad("faults.robust_s", "must be a finite number of seconds >= 0")
            }
            FaultModel::PoisonRequest {
                window_s,
                retry_gap_s,
                ..
            } if !range(*window_s) || !positive(*retry_gap_s) => bad(
                "faults.window_s",
                "window_s must be [lo, hi] and retry_gap_s > 0",
            ),
            FaultModel::Hang {
                rate_per_s,
                pause_mean_s,
                ..
            } if !positive(*rate_per_s) || !positive(*pause_mean_s) => bad(
                "faults.rate_per_s",
                "rate_per_s and pause_mean_s must be > 0",
            ),
            _ => Ok(()),
        }
    }
}

/// One fault model's behaviour of each process, `None` when it gives none.
fn behavior_of(model: &FaultModel, key: u64, x: Option<f64>) -> Option<servery_sim::BehaviorFn> {
    Some(match model.clone() {
        FaultModel::CrashStorm { start_s, .. } => {
            let end = start_s + x.unwrap_or(0.0);
            Box::new(move |info, _| {
                let t = info.now.as_secs_f64();
                if t >= start_s && t < end {
                    Behavior::CrashAtBoot
                } else {
                    Behavior::Healthy
                }
            })
        }
        FaultModel::BootLoop { start_s, .. } => {
            let after = x.unwrap_or(1.0);
            // A process already running when the fault begins crashes `after` seconds
            // into it; its boot took a few ms, which this leaves out.
            Box::new(move |info, _| {
                let late = (start_s - info.now.as_secs_f64()).max(0.0);
                Behavior::CrashAfter(secs(late + after))
            })
        }
        FaultModel::Aging { shape, scale_s } => Box::new(move |info, _| {
            let mut per_spawn = SimRng::new(key ^ info.index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            Behavior::CrashAfter(secs(weibull_from_unit(per_spawn.unit(), shape, scale_s)))
        }),
        faults @ (FaultModel::MarkovAging { .. } | FaultModel::FailureTrace { .. }) => {
            Box::new(move |info, _| {
                let life = lifetime(&faults, key, info.index).unwrap_or(f64::INFINITY);
                Behavior::CrashAfter(secs(life))
            })
        }
        _ => return None,
    })
}

/// The worse of two behaviours of one process: a crash at boot over anything, the shorter
/// of two lifetimes, a slow boot kept with a lifetime.
fn worse(a: Behavior, b: Behavior) -> Behavior {
    use Behavior::{CrashAfter, CrashAtBoot, Healthy, SlowBoot, SlowBootCrashAfter};
    match (a, b) {
        (Healthy, x) | (x, Healthy) => x,
        (CrashAtBoot, _) | (_, CrashAtBoot) => CrashAtBoot,
        (CrashAfter(p), CrashAfter(q)) => CrashAfter(p.min(q)),
        (SlowBoot(boot), CrashAfter(lifetime)) | (CrashAfter(lifetime), SlowBoot(boot)) => {
            SlowBootCrashAfter { boot, lifetime }
        }
        (SlowBootCrashAfter { boot, lifetime }, CrashAfter(l))
        | (CrashAfter(l), SlowBootCrashAfter { boot, lifetime }) => SlowBootCrashAfter {
            boot,
            lifetime: lifetime.min(l),
        },
        (x, _) => x,
    }
}

/// A process's lifetime under an aging model, from the workload's key and the spawn's
/// index alone (the Weibull draw is the one `Aging` always made).
fn lifetime(faults: &FaultModel, key: u64, index: u64) -> Option<f64> {
    let mut per_spawn = SimRng::new(key ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    match faults {
        FaultModel::Aging { shape, scale_s } => {
            Some(weibull_from_unit(per_spawn.unit(), *shape, *scale_s))
        }
        FaultModel::MarkovAging { phase_means_s } => {
            Some(phase_means_s.iter().map(|m| per_spawn.exp(*m)).sum())
        }
        FaultModel::FailureTrace {
            times_s, robust_s, ..
        } if !times_s.is_empty() => {
            let k = (per_spawn.unit() * times_s.len() as f64) as usize;
            Some(robust_s + times_s[k.min(times_s.len() - 1)])
        }
        _ => None,
    }
}

/// Parse a failure-time trace: one time in seconds per line, `#` comments, blank lines
/// skipped; every time finite and > 0, at least two of them.
pub fn parse_trace(path: &Path, text: &str) -> Result<Vec<f64>, ResearchError> {
    let bad = |rule: String| ResearchError::InvalidWorkload {
        path: path.to_owned(),
        field: "faults.trace_file",
        rule,
    };
    let mut times = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let t: f64 = line.parse().map_err(|_| {
            bad(format!(
                "line {}: {line:?} is not a number of seconds",
                n + 1
            ))
        })?;
        if !(t.is_finite() && t > 0.0) {
            return Err(bad(format!(
                "line {}: a failure time must be finite and > 0 (got {t})",
                n + 1
            )));
        }
        times.push(t);
    }
    if times.len() < 2 {
        return Err(bad(format!(
            "must hold at least two failure times (got {})",
            times.len()
        )));
    }
    Ok(times)
}

/// Read and check a workload file.
pub fn load(path: &Path) -> Result<Workload, ResearchError> {
    from_text(path, &read(path)?)
}

pub fn from_text(path: &Path, text: &str) -> Result<Workload, ResearchError> {
    finish(path, parse(path, text)?)
}

/// Read and check a workload given as a TOML table (a sweep's point), as its file would be.
pub(crate) fn from_table(path: &Path, table: toml::Table) -> Result<Workload, ResearchError> {
    let w: Workload = table
        .try_into()
        .map_err(|e: toml::de::Error| ResearchError::Parse {
            path: path.to_owned(),
            message: e.message().to_string(),
        })?;
    finish(path, w)
}

/// A parsed workload's trace files read (relative to `path`) and its rules checked.
fn finish(path: &Path, mut w: Workload) -> Result<Workload, ResearchError> {
    for model in core::iter::once(&mut w.faults).chain(&mut w.also_faults) {
        if let FaultModel::FailureTrace {
            trace_file,
            times_s,
            ..
        } = model
        {
            let file = path
                .parent()
                .unwrap_or_else(|| Path::new(""))
                .join(trace_file.as_str());
            *times_s = parse_trace(&file, &read(&file)?)?;
        }
    }
    w.check(path)?;
    Ok(w)
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
