//! `servery-scenarios`: list, run, sweep and benchmark the lifecycle scenarios.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use servery_core::supervisor::Platform;
use servery_scenarios::{
    BENCH, COVERAGE_GOALS, SCENARIOS, bench, find, platform_by_name, replay_command, run, sweep,
};

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
    },
    /// Run every scenario on both platforms for every seed in A..B.
    Sweep {
        #[arg(long, value_parser = parse_range)]
        seeds: (u64, u64),
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
        #[arg(long)]
        json: bool,
        /// Only this scenario.
        #[arg(long)]
        only: Option<String>,
    },
    /// Sweep throughput: the four-worker, 60 s virtual-time scenario on fresh seeds.
    Bench {
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
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
        Cmd::List { about } => {
            for s in SCENARIOS {
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
        } => {
            let Some(scenario) = find(&name) else {
                eprintln!("unknown scenario {name:?}; `list` shows them");
                return ExitCode::from(2);
            };
            let Some(platform) = platform_by_name(&platform) else {
                eprintln!("unknown platform {platform:?}: posix or windows");
                return ExitCode::from(2);
            };
            run_one(scenario, seed, platform, trace)
        }
        Cmd::Bench { seconds, jobs } => run_bench(seconds, jobs),
        Cmd::Sweep {
            seeds,
            jobs,
            json,
            only,
        } => {
            if let Some(name) = &only
                && find(name).is_none()
            {
                eprintln!("unknown scenario {name:?}");
                return ExitCode::from(2);
            }
            let report = sweep(seeds.0..seeds.1, jobs, only.as_deref());
            if json {
                print_json(&report);
            } else {
                print_text(&report);
            }
            if report.holds() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
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
    scenario: &servery_scenarios::Scenario,
    seed: u64,
    platform: Platform,
    trace: bool,
) -> ExitCode {
    let result = run(scenario, seed, platform, trace);
    let o = &result.outcome;
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
    let code = match &result.verdict {
        Ok(()) => {
            println!("holds");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            println!("FAILED: {reason}");
            println!("replay: {}", replay_command(scenario.name, seed, platform));
            ExitCode::FAILURE
        }
    };
    if trace {
        println!("trace-hash: {:016x}", o.trace_hash);
    }
    code
}

fn print_text(r: &servery_scenarios::SweepReport) {
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
        println!(
            "FAILED {} {} seed={}: {}",
            f.scenario,
            f.platform.name(),
            f.seed,
            f.reason
        );
        println!("  replay: {}", f.replay());
    }
    let missing = r.missing_goals();
    if !missing.is_empty() {
        println!("coverage goals not reached: {missing:?}");
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

fn print_json(r: &servery_scenarios::SweepReport) {
    let value = serde_json::json!({
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
        "failures": r.failures.iter().map(|f| serde_json::json!({
            "scenario": f.scenario, "platform": f.platform.name(), "seed": f.seed,
            "reason": f.reason, "replay": f.replay(),
        })).collect::<Vec<_>>(),
    });
    println!("{value}");
}
