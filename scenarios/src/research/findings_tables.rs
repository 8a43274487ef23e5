//! Each finding's block: the figures it quotes and the claims its prose makes, checked.
//! (The experiments and the shared runs are in [`crate::research::findings`].)

use std::fmt::Write as _;

use crate::research::cli::VERDICT_SEED;
use crate::research::compare::{Cell, Summary, paired, summarize};
use crate::research::error::ResearchError;
use crate::research::findings::{
    AGING_POLICIES, BURST_POLICIES, BURST_WORKLOADS, Claims, GRID_LIMITS, GRID_SEEDS, GRID_WINDOWS,
    Lab, MAIN_POLICIES, MAIN_SEEDS, SHORT_SEEDS, SYSTEMD_SEEDS, SYSTEMD_SWEEP, cell,
};
use crate::research::stats::{Estimate, wilson};
use crate::research::{heatmap, ranking, verdict, verdict_report};

/// The policies of the main matrix that give up (a restart or start limit in reach).
const LIMITED: [&str; 4] = [
    "seed-defaults",
    "systemd-defaults",
    "erlang-1-5",
    "erlang-5-30",
];
/// The policies that never give up in practice (a limit of a million).
const UNLIMITED: [&str; 4] = [
    "systemd-restartsteps",
    "kubernetes-classic",
    "kubernetes-kep4603",
    "docker",
];
/// The policies with a 5 s heartbeat timeout (the others wait 30 s).
const FIVE_SECOND: [&str; 6] = [
    "seed-defaults",
    "systemd-defaults",
    "systemd-restartsteps",
    "erlang-1-5",
    "erlang-5-30",
    "docker",
];

fn metric(s: &Summary, name: &str) -> Estimate {
    s.estimate(name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

fn failures(c: &Cell) -> usize {
    c.runs.iter().filter(|r| r.failed).count()
}

fn p_failed(c: &Cell) -> Estimate {
    wilson(failures(c) as u64, c.runs.len() as u64)
}

fn always_fails(c: &Cell) -> bool {
    failures(c) == c.runs.len()
}

fn never_fails(c: &Cell) -> bool {
    failures(c) == 0
}

/// A share with its Wilson interval: `0.460 [0.366, 0.557]`.
fn share(e: Estimate) -> String {
    format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lo, e.hi)
}

/// A mean, or `-` where no run has the metric (NaN).
fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// The largest drawn parameter of a run that failed and the smallest of one that did
/// not: a clean threshold when the first is below the second.
fn threshold(c: &Cell) -> (Option<f64>, Option<f64>) {
    let xs = |failed: bool| c.runs.iter().filter(move |r| r.failed == failed);
    let max_failed = xs(true).filter_map(|r| r.x).reduce(f64::max);
    let min_survived = xs(false).filter_map(|r| r.x).reduce(f64::min);
    (max_failed, min_survived)
}

fn clean_threshold(c: &Cell) -> bool {
    match threshold(c) {
        (Some(f), Some(s)) => f < s,
        _ => true,
    }
}

fn threshold_words(c: &Cell) -> String {
    let (f, s) = threshold(c);
    let at = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.1}"));
    format!("{:>6} {:>6}", at(f), at(s))
}

/// The verdict over the main matrix: the one table, with its family's size.
pub fn verdict(main: &[Cell]) -> Result<String, ResearchError> {
    let verdicts = ranking::judge(main, MAIN_POLICIES.len(), VERDICT_SEED)?;
    let v = &verdicts[0];
    let mut s = format!(
        "{} policies, {MAIN_SEEDS} paired seeds; {} comparisons a workload, each interval at {:.2} %, \
         {} bootstrap resamples\n",
        v.policies.len(),
        v.comparisons,
        100.0 * v.level,
        v.resamples,
    );
    s.push_str(verdict_report::answer_text(&verdicts).trim_start());
    let mut claims = Claims::default();
    claims.check(
        "every interval rests on at least 2,000 resamples and ten beyond each corrected tail",
        verdicts.iter().all(|v| {
            // The tail's share from the family's alpha, not `1 - level`, which rounds below.
            let tail = verdict::FAMILY_ALPHA / v.comparisons as f64 / 2.0;
            v.resamples >= 2_000 && v.resamples as f64 * tail >= 10.0 - 1e-9
        }),
    );
    let hang = &verdicts[3];
    claims.check(
        "under hang both Kubernetes mappings are ranked first on every criterion",
        matches!(hang.answer(), ranking::Answer::Best(b)
            if hang.names(&b).iter().any(|n| n == "kubernetes-classic")
                && hang.names(&b).iter().any(|n| n == "kubernetes-kep4603")),
    );
    let storm = &verdicts[0];
    let restarts = |p: &str| {
        let i = storm
            .policies
            .iter()
            .position(|n| n == p)
            .unwrap_or_else(|| panic!("{p}"));
        storm.means[2][i]
    };
    claims.check(
        "under crash-storm kubernetes-classic restarts fewest of the policies without a limit",
        UNLIMITED
            .iter()
            .all(|&p| p == "kubernetes-classic" || restarts("kubernetes-classic") < restarts(p)),
    );
    claims.check(
        "under boot-loop all but at most two of the eight policies are on the Pareto front",
        verdicts[1].front.len() >= 6,
    );
    s.push_str(&claims.text());
    Ok(s)
}

/// Finding 1: a crash storm, and the outages short enough to survive.
pub fn crash_storm(lab: &mut Lab, main: &[Cell]) -> Result<String, ResearchError> {
    let w = "crash-storm";
    let mut s = format!(
        "crash-storm, {MAIN_SEEDS} seeds\npolicy                 P(failed) [95 %]     give-up s  availability  recover s  restarts  amplification\n"
    );
    for p in MAIN_POLICIES {
        let c = cell(main, p, w);
        let sm = summarize(c);
        let _ = writeln!(
            s,
            "{p:<22} {:<20} {:>9}  {:<12}  {:>9}  {:>8.1}  {:.2}",
            share(p_failed(c)),
            num(metric(&sm, "time_to_give_up_s").mean, 2),
            num(metric(&sm, "availability").mean, 4),
            num(metric(&sm, "time_to_recover_s").mean, 0),
            metric(&sm, "restarts").mean,
            metric(&sm, "amplification").mean,
        );
    }
    let short = lab.cells_named(
        &["seed-defaults", "kubernetes-kep4603"],
        &["crash-storm-short", "crash-blip-6"],
        SHORT_SEEDS,
    )?;
    let _ = writeln!(s, "{SHORT_SEEDS} seeds: P(failed), availability");
    for w in ["crash-storm-short", "crash-blip-6"] {
        for p in ["seed-defaults", "kubernetes-kep4603"] {
            let c = cell(&short, p, w);
            let _ = writeln!(
                s,
                "{w:<18} {p:<20} {:<20} {:.4}",
                share(p_failed(c)),
                metric(&summarize(c), "availability").mean
            );
        }
    }
    let storm = |p: &str| cell(main, p, w);
    let mut claims = Claims::default();
    claims.check(
        "every policy with a limit (seed-defaults, systemd-defaults, erlang-1-5, erlang-5-30) ends failed in every seed",
        LIMITED.iter().all(|p| always_fails(storm(p))),
    );
    claims.check(
        "the seed defaults give up within 0.5 s of the outage's start in every seed, whatever its length (1 to 240 s)",
        storm("seed-defaults")
            .runs
            .iter()
            .all(|r| r.give_up_s.is_some_and(|t| t < 0.5)),
    );
    claims.check(
        "the policies without a limit (systemd-restartsteps, both Kubernetes, docker) never fail",
        UNLIMITED.iter().all(|p| never_fails(storm(p))),
    );
    claims.check(
        "outages under 0.2 s (crash-storm-short) never fail the seed defaults",
        never_fails(cell(&short, "seed-defaults", "crash-storm-short")),
    );
    claims.check(
        "with six workers a blip fails the seed defaults in every seed and kubernetes-kep4603 in none",
        always_fails(cell(&short, "seed-defaults", "crash-blip-6"))
            && never_fails(cell(&short, "kubernetes-kep4603", "crash-blip-6")),
    );
    s.push_str(&claims.text());
    Ok(s)
}

/// Finding 2: slow boot loops and the limit's window.
pub fn boot_loop(main: &[Cell]) -> String {
    let w = "boot-loop";
    let mut s = format!(
        "boot-loop, {MAIN_SEEDS} seeds (b: the crash delay after each boot, 0.5 to 120 s)\npolicy                 P(failed) [95 %]     availability  boots  give-up s  failed at b <= / not at b >=\n"
    );
    for p in MAIN_POLICIES {
        let c = cell(main, p, w);
        let sm = summarize(c);
        let _ = writeln!(
            s,
            "{p:<22} {:<20} {:.4}        {:>5.1}  {:>9}  {}",
            share(p_failed(c)),
            metric(&sm, "availability").mean,
            metric(&sm, "boots").mean,
            num(metric(&sm, "time_to_give_up_s").mean, 0),
            threshold_words(c),
        );
    }
    let loop_ = |p: &str| cell(main, p, w);
    let mut claims = Claims::default();
    claims.check(
        "seed-defaults, systemd-defaults and erlang-5-30 each give up on every loop faster than a threshold and on none slower",
        ["seed-defaults", "systemd-defaults", "erlang-5-30"]
            .iter()
            .all(|p| clean_threshold(loop_(p))),
    );
    let near = |p: &str, lo: f64, hi: f64| {
        let (f, s) = threshold(loop_(p));
        f.is_some_and(|f| f >= lo) && s.is_some_and(|s| s <= hi)
    };
    claims.check(
        "the seed defaults' threshold is their 60 s window (failed at some b >= 55 s, survived at some b <= 62 s)",
        near("seed-defaults", 55.0, 62.0),
    );
    claims.check(
        "systemd's defaults give up only below about 10 s, its window (failed at some b >= 7 s, survived at some b <= 12 s)",
        near("systemd-defaults", 7.0, 12.0),
    );
    claims.check(
        "erlang-1-5 gives up in every seed, docker in none",
        always_fails(loop_("erlang-1-5")) && never_fails(loop_("docker")),
    );
    let avail = |p: &str| {
        let c = loop_(p);
        c.runs.iter().map(|r| r.availability).sum::<f64>() / c.runs.len() as f64
    };
    claims.check(
        "docker's uncapped restarts keep availability above 0.95 where the seed defaults' is below 0.6",
        avail("docker") > 0.95 && avail("seed-defaults") < 0.6,
    );
    s.push_str(&claims.text());
    s
}

/// Finding 3: a client retrying a poison request.
pub fn poison_request(main: &[Cell]) -> String {
    let w = "poison-request";
    let mut s = format!(
        "poison-request, {MAIN_SEEDS} seeds\npolicy                 P(failed) [95 %]     availability  capacity s lost\n"
    );
    for p in MAIN_POLICIES {
        let c = cell(main, p, w);
        let sm = summarize(c);
        let _ = writeln!(
            s,
            "{p:<22} {:<20} {:.4}        {:>8.1}",
            share(p_failed(c)),
            metric(&sm, "availability").mean,
            metric(&sm, "capacity_seconds_lost").mean,
        );
    }
    let c = |p: &str| cell(main, p, w);
    let lost = |p: &str| metric(&summarize(c(p)), "capacity_seconds_lost").mean;
    let mut claims = Claims::default();
    claims.check(
        "the seed defaults give up wrongly in some seeds and not in others",
        !always_fails(c("seed-defaults")) && !never_fails(c("seed-defaults")),
    );
    claims.check(
        "systemd's defaults (10 s window) give up less often than the seed defaults (60 s)",
        failures(c("systemd-defaults")) < failures(c("seed-defaults")),
    );
    claims.check(
        "erlang-1-5 gives up in every seed; the policies without a limit in none",
        always_fails(c("erlang-1-5")) && UNLIMITED.iter().all(|p| never_fails(c(p))),
    );
    claims.check(
        "kubernetes-classic (10 s first backoff) loses over ten times the capacity of docker and systemd-restartsteps",
        lost("kubernetes-classic") > 10.0 * lost("docker").max(lost("systemd-restartsteps")),
    );
    s.push_str(&claims.text());
    s
}

/// Finding 4: pauses against the heartbeat timeout.
pub fn hang(main: &[Cell]) -> String {
    let w = "hang";
    let mut s = format!(
        "hang, {MAIN_SEEDS} seeds\npolicy                 P(failed) [95 %]     detect s  restarts  availability  within 1 s  capacity s lost\n"
    );
    for p in MAIN_POLICIES {
        let c = cell(main, p, w);
        let sm = summarize(c);
        let _ = writeln!(
            s,
            "{p:<22} {:<20} {:>8.1}  {:>8.1}  {:.4}        {:.4}      {:>8.1}",
            share(p_failed(c)),
            metric(&sm, "time_to_detect_s").mean,
            metric(&sm, "restarts").mean,
            metric(&sm, "availability").mean,
            metric(&sm, "served_within_bound").mean,
            metric(&sm, "capacity_seconds_lost").mean,
        );
    }
    let sm = |p: &str| summarize(cell(main, p, w));
    let mut claims = Claims::default();
    claims.check(
        "the 5 s policies detect a pause in 5 to 6.5 s on average (the timeout, then TERM and the 1 s force timeout)",
        FIVE_SECOND.iter().all(|p| {
            let d = metric(&sm(p), "time_to_detect_s").mean;
            (5.0..=6.5).contains(&d)
        }),
    );
    claims.check(
        "both Kubernetes mappings (30 s) restart fewer workers than every 5 s policy",
        ["kubernetes-classic", "kubernetes-kep4603"]
            .iter()
            .all(|k| {
                let mine = metric(&sm(k), "restarts").mean;
                FIVE_SECOND
                    .iter()
                    .all(|p| mine < metric(&sm(p), "restarts").mean)
            }),
    );
    let gap = |p: &str| {
        let s = sm(p);
        metric(&s, "availability").mean - metric(&s, "served_within_bound").mean
    };
    claims.check(
        "requests served within 1 s trail availability more under kubernetes-classic than under docker",
        gap("kubernetes-classic") > gap("docker"),
    );
    s.push_str(&claims.text());
    s
}

/// Finding 5: age recycling on an aging workload, and the published servers' recycling.
pub fn aging(lab: &mut Lab) -> Result<String, ResearchError> {
    let cells = lab.cells_named(&AGING_POLICIES, &["aging"], MAIN_SEEDS)?;
    let mut s = format!(
        "aging, {MAIN_SEEDS} seeds\npolicy                 crashes  recycles  capacity s lost  peak MB  boots  amplification\n"
    );
    for c in &cells {
        let sm = summarize(c);
        let _ = writeln!(
            s,
            "{:<22} {:>7.1}  {:>8.2}  {:>15.1}  {:>7.0}  {:>5.1}  {:.2}",
            c.policy,
            metric(&sm, "restarts").mean,
            metric(&sm, "recycles").mean,
            metric(&sm, "capacity_seconds_lost").mean,
            metric(&sm, "peak_memory_mb").mean,
            metric(&sm, "boots").mean,
            metric(&sm, "amplification").mean,
        );
    }
    let base = cell(&cells, "seed-defaults", "aging");
    let diff = |p: &str, m: &str| {
        paired(base, cell(&cells, p, "aging"))
            .into_iter()
            .find(|(n, _)| *n == m)
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("no metric {m}"))
    };
    let mut claims = Claims::default();
    claims.check(
        "recycling at 120 s cuts crashes, capacity lost and peak memory, for more boots (paired 95 % intervals clear of zero)",
        diff("seed-defaults-max-age", "restarts").hi < 0.0
            && diff("seed-defaults-max-age", "capacity_seconds_lost").hi < 0.0
            && diff("seed-defaults-max-age", "peak_memory_mb").hi < 0.0
            && diff("seed-defaults-max-age", "boots").lo > 0.0,
    );
    let recycles = |p: &str| metric(&summarize(cell(&cells, p, "aging")), "recycles").mean;
    claims.check(
        "gunicorn's and uvicorn's request limits recycle under 3 times a run, granian's 120 s lifetime over 20",
        recycles("gunicorn-recycling") < 3.0
            && recycles("uvicorn") < 3.0
            && recycles("granian") > 20.0,
    );
    s.push_str(&claims.text());
    Ok(s)
}

/// Finding 6: the seed defaults' limit × window grid.
pub fn grid(lab: &mut Lab) -> Result<String, ResearchError> {
    let base = lab.policies(&["seed-defaults"])?.remove(0);
    let workloads = lab.workloads(&["poison-request", "boot-loop"])?;
    let mut s =
        format!("P(failed), {GRID_SEEDS} seeds a point; rows: limit, columns: window (s)\n");
    let mut grids = Vec::new();
    for w in &workloads {
        let g = heatmap::run(
            &base,
            w,
            &GRID_LIMITS,
            &GRID_WINDOWS,
            GRID_SEEDS,
            lab.jobs(),
            servery_core::supervisor::Platform::Posix,
        );
        let _ = write!(s, "{:<16}", g.workload);
        for win in &GRID_WINDOWS {
            let _ = write!(s, " {win:>5.0}");
        }
        s.push('\n');
        for (l, row) in GRID_LIMITS.iter().zip(&g.cells) {
            let _ = write!(s, "  limit {l:<8}");
            for e in row {
                let _ = write!(s, " {:>5.2}", e.mean);
            }
            s.push('\n');
        }
        grids.push(g);
    }
    let (poison, boot) = (&grids[0], &grids[1]);
    let row = |g: &heatmap::Grid, l: i64| {
        let i = GRID_LIMITS
            .iter()
            .position(|&x| x == l)
            .unwrap_or_else(|| panic!("limit {l}"));
        g.cells[i].iter().map(|e| e.mean).collect::<Vec<_>>()
    };
    let mut claims = Claims::default();
    claims.check(
        "limits 1 and 3 (below N + 1 = 5) fail every seed at every window under both workloads",
        [poison, boot]
            .iter()
            .all(|g| [1, 3].iter().all(|&l| row(g, l).iter().all(|&p| p == 1.0))),
    );
    claims.check(
        "limits 10 and 20 never give up on the poison requests at any window",
        [10, 20]
            .iter()
            .all(|&l| row(poison, l).iter().all(|&p| p == 0.0)),
    );
    claims.check(
        "at limit 5, P(failed) on the poison requests rises with the window",
        row(poison, 5).windows(2).all(|w| w[0] <= w[1]),
    );
    claims.check(
        "limit 10 still gives up on some boot loops at every window",
        row(boot, 10).iter().all(|&p| p > 0.0),
    );
    claims.check(
        "a 300 s window gives up on every boot loop and every poison request alike at limit 5",
        row(boot, 5)[GRID_WINDOWS.len() - 1] == 1.0
            && row(poison, 5)[GRID_WINDOWS.len() - 1] == 1.0,
    );
    s.push_str(&claims.text());
    Ok(s)
}

/// Finding 7: availability counts late answers, the latency bound does not.
pub fn latency(main: &[Cell]) -> String {
    let mut s = String::from(
        "availability / served within 1 s (means)\npolicy                 crash-storm      boot-loop        poison-request   hang\n",
    );
    let both = |c: &Cell| {
        let sm = summarize(c);
        (
            metric(&sm, "availability").mean,
            metric(&sm, "served_within_bound").mean,
        )
    };
    for p in MAIN_POLICIES {
        let _ = write!(s, "{p:<22}");
        for w in ["crash-storm", "boot-loop", "poison-request", "hang"] {
            let (a, b) = both(cell(main, p, w));
            let _ = write!(s, " {a:.4}/{b:.4}  ");
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
    }
    let mut claims = Claims::default();
    claims.check(
        "under crash-storm the policies without a limit answer above 0.999 of requests but under 0.9 within 1 s",
        UNLIMITED.iter().all(|p| {
            let (a, b) = both(cell(main, p, "crash-storm"));
            a > 0.999 && b < 0.9
        }),
    );
    claims.check(
        "where a policy fails the service in every seed the two measures differ by under 0.002",
        main.iter().filter(|c| always_fails(c)).all(|c| {
            let (a, b) = both(c);
            (a - b).abs() < 0.002
        }),
    );
    s.push_str(&claims.text());
    s
}

/// Finding 8: counting a burst of correlated crashes once.
pub fn burst(lab: &mut Lab) -> Result<String, ResearchError> {
    let cells = lab.cells_named(&BURST_POLICIES, &BURST_WORKLOADS, MAIN_SEEDS)?;
    let mut s = format!(
        "{MAIN_SEEDS} paired seeds\nworkload        policy                  P(failed) [95 %]     availability  give-up s  boots  failed at b <= / not at b >=\n"
    );
    for w in BURST_WORKLOADS {
        for p in BURST_POLICIES {
            let c = cell(&cells, p, w);
            let sm = summarize(c);
            let th = if w == "boot-loop" {
                threshold_words(c)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "{w:<15} {p:<23} {:<20} {:.4}        {:>9}  {:>5.1}  {th}",
                share(p_failed(c)),
                metric(&sm, "availability").mean,
                num(metric(&sm, "time_to_give_up_s").mean, 2),
                metric(&sm, "boots").mean,
            );
        }
    }
    let diff = |w: &str, m: &str| {
        paired(
            cell(&cells, "seed-defaults", w),
            cell(&cells, "seed-defaults-burst-5", w),
        )
        .into_iter()
        .find(|(n, _)| *n == m)
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no metric {m}"))
    };
    s.push_str("paired differences, burst 5 s - seed defaults [95 %]:\n");
    let rows = [
        ("poison-request", "p_failed"),
        ("boot-loop", "p_failed"),
        ("boot-loop", "availability"),
    ];
    for (w, m) in rows {
        let e = diff(w, m);
        let _ = writeln!(
            s,
            "  {w:<15} {m:<13} {:+.2} [{:+.2}, {:+.2}]",
            e.mean, e.lo, e.hi
        );
    }
    let c = |p: &str, w: &str| cell(&cells, p, w);
    let mut claims = Claims::default();
    claims.check(
        "with either burst window the six-worker blip never fails the service",
        never_fails(c("seed-defaults-burst-1", "crash-blip-6"))
            && never_fails(c("seed-defaults-burst-5", "crash-blip-6")),
    );
    claims.check(
        "a crash storm then fails the seed defaults only after several seconds (time to give up over 5 s), not one backoff",
        ["seed-defaults-burst-1", "seed-defaults-burst-5"].iter().all(|p| {
            metric(&summarize(c(p, "crash-storm")), "time_to_give_up_s").mean > 5.0
        }),
    );
    claims.check(
        "a 5 s window cuts wrong give-ups on the poison requests (paired interval below zero); a 1 s window, under the retry gap, less",
        diff("poison-request", "p_failed").hi < 0.0
            && failures(c("seed-defaults-burst-1", "poison-request"))
                > failures(c("seed-defaults-burst-5", "poison-request")),
    );
    let (f5, s5) = threshold(c("seed-defaults-burst-5", "boot-loop"));
    claims.check(
        "on boot-loop the 5 s window gives up on every loop faster than the 30 s stable period and on none slower (failed b all < 31 s, surviving b all > 29 s)",
        f5.is_some_and(|f| f < 31.0) && s5.is_some_and(|s| s > 29.0),
    );
    claims.check(
        "and so fails fewer boot loops, at higher availability (paired intervals clear of zero)",
        diff("boot-loop", "p_failed").hi < 0.0 && diff("boot-loop", "availability").lo > 0.0,
    );
    s.push_str(&claims.text());
    Ok(s)
}

/// Finding 9: systemd's start limit swept.
pub fn systemd_sweep(lab: &mut Lab) -> Result<String, ResearchError> {
    let policies = lab.policies(&[SYSTEMD_SWEEP])?;
    let workloads = lab.workloads(&["poison-request", "boot-loop"])?;
    let cells = lab.cells(&policies, &workloads, SYSTEMD_SEEDS);
    let mut s = format!(
        "{SYSTEMD_SEEDS} seeds a point\nburst  interval  poison-request P(failed)  boot-loop P(failed)   boot-loop availability\n"
    );
    let mut points = Vec::new();
    for p in &policies {
        let limit = p
            .start_limit()
            .unwrap_or_else(|| panic!("{} has no start limit", p.name));
        let poison = p_failed(cell(&cells, &p.name, "poison-request"));
        let boot = cell(&cells, &p.name, "boot-loop");
        let _ = writeln!(
            s,
            "{:<6} {:<9} {:<25} {:<21} {:.3}",
            limit.burst,
            format!("{:.0} s", limit.interval_s),
            share(poison),
            share(p_failed(boot)),
            metric(&summarize(boot), "availability").mean,
        );
        points.push((
            limit.burst,
            limit.interval_s,
            poison.mean,
            p_failed(boot).mean,
        ));
    }
    let at = |burst: u32, interval: f64| {
        points
            .iter()
            .find(|p| p.0 == burst && p.1 == interval)
            .map(|p| (p.2, p.3))
            .unwrap_or_else(|| panic!("no point {burst}, {interval}"))
    };
    let mut claims = Claims::default();
    claims.check(
        "a burst of 10 or 20 never gave up on the poison requests",
        points.iter().filter(|p| p.0 >= 10).all(|p| p.2 == 0.0),
    );
    claims.check(
        "at the default burst of 5, a 60 s interval gives up on the transient fault more often than 10 s",
        at(5, 60.0).0 > at(5, 10.0).0,
    );
    claims.check(
        "at every burst a 60 s interval catches more boot loops than 10 s",
        [5, 10, 20].iter().all(|&b| at(b, 60.0).1 > at(b, 10.0).1),
    );
    s.push_str(&claims.text());
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::metrics::RunMetrics;
    use crate::research::workload::FaultClass;

    fn run(x: f64, failed: bool) -> RunMetrics {
        RunMetrics {
            seed: 0,
            x: Some(x),
            availability: 1.0,
            served_within_bound: 1.0,
            capacity_seconds_lost: 0.0,
            detect_s: Vec::new(),
            recover_s: Vec::new(),
            restarts: 0.0,
            recycles: 0.0,
            boots: 0.0,
            failed,
            give_up_s: None,
            peak_processes: 0.0,
            peak_memory_mb: 0.0,
            peak_worker_rss_mb: None,
            amplification: 1.0,
            ready: Vec::new(),
            boot_times: Vec::new(),
        }
    }

    fn cell_of(runs: Vec<RunMetrics>) -> Cell {
        Cell {
            policy: "p".into(),
            workload: "w".into(),
            class: FaultClass::Permanent,
            runs,
        }
    }

    #[test]
    fn a_threshold_is_the_slowest_failed_run_and_the_fastest_survivor() {
        let c = cell_of(vec![
            run(3.0, true),
            run(9.0, false),
            run(5.0, true),
            run(7.0, false),
        ]);
        assert_eq!(
            threshold(&c),
            (Some(5.0), Some(7.0)),
            "threshold rule: the slowest failed run's b, then the fastest survivor's"
        );
        assert!(
            clean_threshold(&c),
            "threshold rule: failed below survivors is clean"
        );
        let mixed = cell_of(vec![run(3.0, true), run(4.0, false), run(5.0, true)]);
        assert!(
            !clean_threshold(&mixed),
            "threshold rule: a survivor faster than a failed run is no threshold"
        );
    }
}
