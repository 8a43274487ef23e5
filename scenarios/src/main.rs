//! `servery-scenarios`: list, run, sweep and benchmark the lifecycle scenarios.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use servery_core::supervisor::Platform;
use servery_scenarios::{
    BENCH, COVERAGE_GOALS, Mode, SCENARIOS, Scenario, bench, corpus, find, plan_in,
    platform_by_name, replay_command_in, run_in, sweep_seeds,
};
use servery_sim::FaultKind;

#[derive(Parser, Debug)]
#[command(
    name = "servery-scenarios",
    about = "servery's lifecycle gates as seeded simulations"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print one scenario name per line.
    List {
        /// Also print what each scenario proves.
        #[arg(long)]
        about: bool,
    },
    /// Run one scenario for one seed.
    Run {
        name: String,
        #[arg(long)]
        seed: u64,
        #[arg(long, default_value = "posix")]
        platform: String,
        /// Print the event trace; its last line is `trace-hash: <hex>`.
        #[arg(long)]
        trace: bool,
        /// Swarm mode: only the fault kinds the seed enables (as `sweep --swarm` ran it).
        #[arg(long)]
        swarm: bool,
    },
    /// Run every scenario on both platforms for every seed in A..B, or for N fresh seeds.
    Sweep {
        #[arg(long, value_parser = parse_range, required_unless_present = "random", conflicts_with = "random")]
        seeds: Option<(u64, u64)>,
        /// N seeds drawn from OS entropy, printed first (`random seeds: …`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        random: Option<u64>,
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
        #[arg(long)]
        json: bool,
        /// Only this scenario (coverage is then reported, not required).
        #[arg(long)]
        only: Option<String>,
        /// Swarm testing: each seed also enables a random subset of each scenario's fault
        /// kinds; reports coverage per fault kind.
        #[arg(long)]
        swarm: bool,
    },
    /// What a seed exercises, as a regression-corpus entry; or, with --search, seeds that
    /// reach given coverage labels (to re-pin an entry that drifted).
    Pin {
        name: String,
        #[arg(long, required_unless_present = "search", conflicts_with = "search")]
        seed: Option<u64>,
        #[arg(long, default_value = "posix")]
        platform: String,
        #[arg(long)]
        swarm: bool,
        /// Seeds to search, A..B.
        #[arg(long, value_parser = parse_range, requires = "reaches")]
        search: Option<(u64, u64)>,
        /// A coverage label the run must reach (repeatable).
        #[arg(long)]
        reaches: Vec<String>,
        /// Stop after this many seeds.
        #[arg(long, default_value_t = 5)]
        limit: usize,
    },
    /// Sweep throughput: the four-worker, 60 s virtual-time scenario on fresh seeds.
    Bench {
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
    },
    /// Compare recovery policies (files of `[recovery]` fields and a name) under
    /// workloads (files), over the same seeds and fault traces for every policy.
    Compare {
        /// A policy file, or the name of one in scenarios/policies/ (repeatable; the
        /// first is the baseline of the paired differences).
        #[arg(long = "policy", required = true)]
        policies: Vec<String>,
        /// A workload file, or the name of one in scenarios/workloads/ (repeatable).
        #[arg(long = "workload", required = true)]
        workloads: Vec<String>,
        /// Paired seeds per policy and workload (0..N).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(2..))]
        seeds: u64,
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
        /// Write runs.csv, summary.csv, verdict.csv, ranks.csv, answer.csv and the plots
        /// (each as SVG and PDF) here.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Print one JSON object: {"policies", "differences", "verdict", "provenance"}.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = "posix")]
        platform: String,
        /// With --out: also vary the first policy's worker_restart_limit over these
        /// values (comma-separated) for the P(failed) heat map…
        #[arg(long, value_delimiter = ',', requires_all = ["out", "grid_windows"])]
        grid_limits: Vec<i64>,
        /// …and its worker_restart_window over these (seconds, comma-separated).
        #[arg(long, value_delimiter = ',', requires = "grid_limits")]
        grid_windows: Vec<f64>,
    },
    /// Reproduce a published lifecycle model (huang-1995, age-replacement, garg-1995,
    /// dohi-2000): its closed form against the simulated estimate with a 95 % interval;
    /// garg-1995, dohi-2000 and age-replacement's last table run on the supervisor.
    Reproduce {
        /// huang-1995, age-replacement, garg-1995 or dohi-2000.
        model: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Seeds to simulate (default: 4,000 years for huang-1995, 400 hours per grid
        /// age for age-replacement, 2,000 supervisor cycles a row for garg-1995 and
        /// dohi-2000).
        #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
        seeds: Option<u64>,
        /// Write the model's plots here, each as SVG and PDF (dohi-2000: the TTT plot
        /// and the tangent that picks the estimate, `ttt-plot.svg`).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// The figures and checked claims of docs/policy-research.md's "Findings", as the
    /// document quotes them (every block, each under its key).
    Findings {
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
    },
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once("..").ok_or("expected A..B")?;
    let a: u64 = a.parse().map_err(|e| format!("{a}: {e}"))?;
    let b: u64 = b.parse().map_err(|e| format!("{b}: {e}"))?;
    if b <= a {
        return Err("the range is empty".into());
    }
    Ok((a, b))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Compare {
            policies,
            workloads,
            seeds,
            jobs,
            out,
            json,
            platform,
            grid_limits,
            grid_windows,
        } => {
            let Some(platform) = platform_by_name(&platform) else {
                eprintln!("unknown platform {platform:?}: expected posix or windows");
                return ExitCode::from(2);
            };
            let args = servery_scenarios::research::cli::CompareArgs {
                policies,
                workloads,
                seeds,
                jobs,
                out,
                json,
                platform,
                grid: (!grid_limits.is_empty()).then_some((grid_limits, grid_windows)),
            };
            match servery_scenarios::research::cli::compare(&args) {
                Ok(report) => {
                    println!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Findings { jobs } => match servery_scenarios::research::findings::print(jobs) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Cmd::Reproduce {
            model,
            json,
            seeds,
            out,
        } => {
            if let Some(dir) = &out
                && let Err(e) = servery_scenarios::research::reproduce::write_plots(&model, dir)
            {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
            match servery_scenarios::research::reproduce::reproduce(&model, seeds, json) {
                Ok(report) => {
                    println!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::List { about } => {
            for s in SCENARIOS {
                if about {
                    println!("{:<30} {}", s.name, s.about);
                } else {
                    println!("{}", s.name);
                }
            }
            for s in servery_scenarios::cluster::CLUSTER_SCENARIOS {
                if about {
                    println!("{:<30} {}", s.name, s.about);
                } else {
                    println!("{}", s.name);
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Run {
            name,
            seed,
            platform,
            trace,
            swarm,
        } => {
            if let Some(s) = servery_scenarios::cluster::find_cluster(&name) {
                return cluster_run(s, seed);
            }
            let (scenario, platform, mode) = match target(&name, &platform, swarm) {
                Ok(t) => t,
                Err(code) => return code,
            };
            run_one(scenario, seed, platform, mode, trace)
        }
        Cmd::Bench { seconds, jobs } => run_bench(seconds, jobs),
        Cmd::Sweep {
            seeds,
            random,
            jobs,
            json,
            only,
            swarm,
        } => {
            let mode = if swarm { Mode::Swarm } else { Mode::Full };
            if let Some(name) = &only
                && servery_scenarios::cluster::find_cluster(name).is_some()
            {
                return cluster_sweep(seeds, random, jobs, name);
            }
            if let Some(name) = &only {
                let Some(scenario) = find(name) else {
                    eprintln!("unknown scenario {name:?}");
                    return ExitCode::from(2);
                };
                if let (Mode::Swarm, Some(reason)) = (mode, scenario.swarm_exclusion()) {
                    eprintln!("swarm mode leaves {name} out: {reason}");
                    return ExitCode::from(2);
                }
            }
            let seeds: Vec<u64> = match (seeds, random) {
                (Some((a, b)), _) => (a..b).collect(),
                (None, Some(n)) => {
                    let seeds = random_seeds(n as usize);
                    let line = random_seeds_line(&seeds);
                    // First, so a run cut short still says what it ran.
                    if json {
                        eprintln!("{line}");
                    } else {
                        println!("{line}");
                    }
                    seeds
                }
                (None, None) => unreachable!("clap requires --seeds or --random"),
            };
            let report = sweep_seeds(&seeds, jobs, only.as_deref(), mode);
            if json {
                print_json(&report, random.map(|_| &seeds[..]));
            } else {
                print_text(&report);
            }
            if report.holds() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Pin {
            name,
            seed,
            platform,
            swarm,
            search,
            reaches,
            limit,
        } => {
            let (scenario, platform, mode) = match target(&name, &platform, swarm) {
                Ok(t) => t,
                Err(code) => return code,
            };
            if let Some(bad) = reaches.iter().find(|l| !corpus::known_label(l)) {
                eprintln!(
                    "{bad:?} is no coverage label (see io-sim/src/labels.rs and COVERAGE_GOALS)"
                );
                return ExitCode::from(2);
            }
            match (seed, search) {
                (Some(seed), _) => {
                    print!("{}", corpus::entry_text(scenario, seed, platform, mode));
                    ExitCode::SUCCESS
                }
                (None, Some((a, b))) => {
                    let found = corpus::search(scenario, platform, mode, a..b, &reaches, limit);
                    for (seed, digest) in &found {
                        println!("seed {seed}: {digest}");
                    }
                    println!(
                        "{} seeds of {a}..{b} hold and reach {reaches:?} on {}{}",
                        found.len(),
                        platform.name(),
                        if found.len() >= limit {
                            " (limit reached)"
                        } else {
                            ""
                        }
                    );
                    if found.is_empty() {
                        ExitCode::FAILURE
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                (None, None) => unreachable!("clap requires --seed or --search"),
            }
        }
    }
}

/// The scenario, platform and mode a command names, or the exit code of a usage error.
fn target(
    name: &str,
    platform: &str,
    swarm: bool,
) -> Result<(&'static Scenario, Platform, Mode), ExitCode> {
    let Some(scenario) = find(name) else {
        eprintln!("unknown scenario {name:?}; `list` shows them");
        return Err(ExitCode::from(2));
    };
    let Some(platform) = platform_by_name(platform) else {
        eprintln!("unknown platform {platform:?}: posix or windows");
        return Err(ExitCode::from(2));
    };
    if swarm && let Some(reason) = scenario.swarm_exclusion() {
        eprintln!("swarm mode leaves {name} out: {reason}");
        return Err(ExitCode::from(2));
    }
    let mode = if swarm { Mode::Swarm } else { Mode::Full };
    Ok((scenario, platform, mode))
}

/// `n` distinct seeds nobody chose. std's `RandomState` takes its keys from the OS's
/// entropy (once per thread, then a fresh key per state); hashing a counter with them,
/// the clock and the process id gives independent 64-bit seeds. Only this binary draws
/// entropy: the seeds are then replayed like any other.
fn random_seeds(n: usize) -> Vec<u64> {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut seen = std::collections::BTreeSet::new();
    let mut seeds = Vec::with_capacity(n);
    let mut i = 0u64;
    while seeds.len() < n {
        let seed = state.hash_one((clock, std::process::id(), i));
        i += 1;
        if seen.insert(seed) {
            seeds.push(seed);
        }
    }
    seeds
}

fn random_seeds_line(seeds: &[u64]) -> String {
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    format!("random seeds: {}", list.join(" "))
}

fn run_bench(seconds: f64, jobs: usize) -> ExitCode {
    let (runs, failed, elapsed) = bench(seconds, jobs);
    println!(
        "{}: {runs} seeds in {elapsed:.2}s with {jobs} jobs = {:.0} seeds/s ({failed} failed)",
        BENCH.name,
        runs as f64 / elapsed
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_one(
    scenario: &Scenario,
    seed: u64,
    platform: Platform,
    mode: Mode,
    trace: bool,
) -> ExitCode {
    let result = run_in(scenario, seed, platform, mode, trace);
    let o = &result.outcome;
    if mode == Mode::Swarm {
        let all = servery_scenarios::Kinds::of(scenario.kinds);
        let off: Vec<&str> = all
            .iter()
            .filter(|k| !result.kinds.has(*k))
            .map(FaultKind::name)
            .collect();
        println!(
            "swarm: enabled {}; disabled {}",
            result.kinds.names(),
            if off.is_empty() {
                "-".into()
            } else {
                off.join(" ")
            }
        );
    }
    if trace {
        for line in &o.trace {
            println!("{line}");
        }
    }
    println!(
        "{} seed={seed} platform={}: exit={:?} failure={:?} requests ok={} failed={} refused={} uploads ok={} conflict={} saturated={} spawns={} max_processes={} events={}",
        scenario.name,
        platform.name(),
        o.exit_code,
        o.failure,
        o.requests.ok,
        o.failed_requests(),
        o.requests.refused,
        o.uploads.ok,
        o.uploads.conflict,
        o.uploads.saturated,
        o.spawns,
        o.max_live_processes,
        o.events,
    );
    if o.proxy != servery_sim::ProxyOutcome::default() {
        let x = &o.proxy;
        println!(
            "proxy: sent={} answered={} failed={} refused={} all_down={} most_in_flight={} (bound {}, after a grant holder's death {}) killed_holding={:?} verdict_changes={} learned={} probes={}; cgi: scripts={} most={} refused={} killed_by_parent={} at_end={}",
            x.sent,
            x.answered,
            x.failed,
            x.refused,
            x.all_down,
            x.most_in_flight,
            x.bound,
            x.most_in_flight_after_kill,
            x.killed_holding,
            x.verdict_changes,
            x.verdicts_learned,
            x.probes,
            x.scripts,
            x.most_scripts,
            x.cgi_refused,
            x.scripts_killed,
            x.scripts_at_end,
        );
    }
    if !o.dav.log.is_empty() {
        let mut ends = std::collections::BTreeMap::new();
        for r in &o.dav.log {
            let end = r.end.map_or("unanswered".into(), |e| format!("{e:?}"));
            *ends.entry(end).or_insert(0u64) += 1;
        }
        let ends: Vec<String> = ends.iter().map(|(e, n)| format!("{e}={n}")).collect();
        println!(
            "dav: {} requests ({}), {} locks granted, table max {}",
            o.dav.log.len(),
            ends.join(" "),
            o.dav.locks.len(),
            o.dav.table_max
        );
    }
    if let servery_scenarios::End::Budget(budget) =
        plan_in(scenario, seed, platform, mode).expect.end
    {
        println!("{}", budget.describe(servery_scenarios::crashing_boots(o)));
    }
    let code = match &result.verdict {
        Ok(()) => {
            println!("holds");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            println!("FAILED: {reason}");
            println!(
                "replay: {}",
                replay_command_in(scenario.name, seed, platform, mode)
            );
            ExitCode::FAILURE
        }
    };
    if trace {
        println!("trace-hash: {:016x}", o.trace_hash);
    }
    code
}

fn print_text(r: &servery_scenarios::SweepReport) {
    for (name, reason) in &r.skipped {
        println!("{name:<30} left out of swarm mode: {reason}");
    }
    for ((name, platform), (runs, failed)) in &r.per_scenario {
        println!("{name:<30} {platform:<8} runs={runs:<6} failed={failed}");
    }
    println!("coverage:");
    for goal in COVERAGE_GOALS {
        println!(
            "  {:<45} {}",
            goal,
            r.coverage.get(goal).copied().unwrap_or(0)
        );
    }
    for f in &r.failures {
        println!("{f}");
    }
    println!(
        "fault kinds ({}, then runs that reached the kind's goal):",
        match r.mode {
            Mode::Full => "runs whose scenario uses the kind",
            Mode::Swarm => "runs that enabled the kind",
        }
    );
    for (kind, s) in &r.kinds {
        println!(
            "  {:<34} runs={:<7} reached={:<7} goal: {}{}",
            kind.name(),
            s.runs,
            s.reached,
            kind.goal(),
            if s.leaked > 0 {
                format!("  LEAKED into {} runs without the kind", s.leaked)
            } else {
                String::new()
            }
        );
    }
    let required = if r.filtered {
        " (reported, not required, with --only)"
    } else {
        ""
    };
    let missing = r.missing_goals();
    if !missing.is_empty() {
        match r.mode {
            Mode::Full => println!("coverage goals not reached{required}: {missing:?}"),
            Mode::Swarm => println!(
                "coverage goals not reached (swarm sweeps leave scenarios and kinds out; not required): {missing:?}"
            ),
        }
    }
    let unreached: Vec<&str> = r
        .unreached_kinds()
        .into_iter()
        .map(FaultKind::name)
        .collect();
    if r.mode == Mode::Swarm && !unreached.is_empty() {
        println!("fault kinds enabled but never reached{required}: {unreached:?}");
    }
    let leaked: Vec<&str> = r.leaked_kinds().into_iter().map(FaultKind::name).collect();
    if !leaked.is_empty() {
        println!(
            "fault kinds whose goal was reached without the kind (undeclared, or a swarm subset that leaked): {leaked:?}"
        );
    }
    println!(
        "{} runs, {} failed, {:.0} seeds/s ({} seeds in {:.2}s)",
        r.runs,
        r.failed,
        r.seeds_per_second(),
        r.seeds,
        r.seconds
    );
}

fn print_json(r: &servery_scenarios::SweepReport, random: Option<&[u64]>) {
    let value = serde_json::json!({
        "mode": match r.mode { Mode::Full => "full", Mode::Swarm => "swarm" },
        "holds": r.holds(),
        "random_seeds": random,
        "runs": r.runs,
        "failed": r.failed,
        "seeds_per_second": r.seeds_per_second(),
        "runs_per_second": r.runs as f64 / r.seconds.max(1e-9),
        "scenarios": r.per_scenario.iter().map(|((name, platform), (runs, failed))| serde_json::json!({
            "name": name, "platform": platform, "runs": runs, "failed": failed,
        })).collect::<Vec<_>>(),
        "coverage": COVERAGE_GOALS.iter().map(|g| serde_json::json!({
            "goal": g, "hits": r.coverage.get(g).copied().unwrap_or(0),
        })).collect::<Vec<_>>(),
        "fault_kinds": r.kinds.iter().map(|(k, s)| serde_json::json!({
            "kind": k.name(), "goal": k.goal(), "runs": s.runs, "reached": s.reached,
            "leaked": s.leaked,
        })).collect::<Vec<_>>(),
        "left_out": r.skipped.iter().map(|(name, reason)| serde_json::json!({
            "name": name, "reason": reason,
        })).collect::<Vec<_>>(),
        "failures": r.failures.iter().map(|f| serde_json::json!({
            "scenario": f.scenario, "platform": f.platform.name(), "seed": f.seed,
            "reason": f.reason, "replay": f.replay(),
        })).collect::<Vec<_>>(),
    });
    println!("{value}");
}

/// `run` of a cluster scenario: its verdict and what the hosts answered.
fn cluster_run(s: &servery_scenarios::cluster::ClusterScenario, seed: u64) -> ExitCode {
    let (o, verdict) = servery_scenarios::cluster::run_cluster(s, seed);
    println!(
        "{} seed={seed}: {} publishes, {} fenced, {} busy, {} unavailable, {} reserved, {} saturated, {} leases lost; trace-hash: {:016x}",
        s.name,
        o.publishes,
        o.total(|h| h.fenced),
        o.total(|h| h.busy),
        o.total(|h| h.unavailable),
        o.total(|h| h.reserved),
        o.total(|h| h.saturated),
        o.total(|h| h.leases_lost),
        o.trace_hash
    );
    match verdict {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sweep --only` of a cluster scenario (the cluster world has hosts, not worker
/// processes, so it has no platform model and no swarm of fault kinds).
fn cluster_sweep(
    seeds: Option<(u64, u64)>,
    random: Option<u64>,
    jobs: usize,
    name: &str,
) -> ExitCode {
    let seeds: Vec<u64> = match (seeds, random) {
        (Some((a, b)), _) => (a..b).collect(),
        (None, Some(n)) => {
            let seeds = random_seeds(n as usize);
            println!("{}", random_seeds_line(&seeds));
            seeds
        }
        (None, None) => unreachable!("clap requires --seeds or --random"),
    };
    let r = servery_scenarios::cluster::sweep_cluster(&seeds, jobs, Some(name));
    for (n, seed, e) in r.failures.iter().take(20) {
        println!("FAILED {n} seed={seed}: {e}\n  replay: servery-scenarios run {n} --seed {seed}");
    }
    println!(
        "{name}: {} runs, {} failed, in {:.1}s; {} publishes, {} fenced, {} busy, {} unavailable, {} saturated, {} leases lost, {} names regained from a dead host",
        r.runs,
        r.failures.len(),
        r.seconds,
        r.publishes,
        r.fenced,
        r.busy,
        r.unavailable,
        r.saturated,
        r.leases_lost,
        r.regained_after_death
    );
    if r.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::{random_seeds, random_seeds_line};

    #[test]
    fn two_draws_of_random_seeds_differ_and_print_on_one_line() {
        let a = random_seeds(16);
        let b = random_seeds(16);
        assert_eq!(a.len(), 16);
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), 16, "seeds within a draw are distinct");
        assert!(
            a.iter().all(|s| !b.contains(s)),
            "two draws share a seed: {a:?} {b:?}"
        );
        let line = random_seeds_line(&a);
        let listed: Vec<u64> = line
            .strip_prefix("random seeds: ")
            .expect("prefix")
            .split(' ')
            .map(|s| s.parse().expect("a seed"))
            .collect();
        assert_eq!(listed, a);
        assert!(!line.contains('\n'));
    }
}
