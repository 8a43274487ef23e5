//! Every scenario (and the benchmark's) on both platform models, in full and swarm mode,
//! for seeds 0..N: one line per run with its trace hash and a hash of its whole outcome.
//! Two builds that print the same lines ran every one of those runs identically, so a
//! change meant to make the simulator faster without changing what it does can be shown
//! to be one:
//!
//! ```sh
//! cargo run --release -p servery-scenarios --example trace_digest -- 200 > before.txt
//! # (change, rebuild)
//! cargo run --release -p servery-scenarios --example trace_digest -- 200 > after.txt
//! cmp before.txt after.txt
//! ```
use std::hash::{DefaultHasher, Hash, Hasher};

use servery_core::supervisor::Platform;
use servery_scenarios::{BENCH, Mode, SCENARIOS, Scenario, run_in};

type Run = (usize, Platform, Mode, u64);

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut all: Vec<&Scenario> = SCENARIOS.iter().collect();
    all.push(&BENCH);
    let runs: Vec<Run> = (0..all.len())
        .flat_map(|i| {
            [Platform::Posix, Platform::Windows]
                .into_iter()
                .flat_map(move |p| {
                    [Mode::Full, Mode::Swarm]
                        .into_iter()
                        .flat_map(move |m| (0..n).map(move |s| (i, p, m, s)))
                })
        })
        .collect();
    let line = |&(i, p, m, s): &Run| {
        let r = run_in(all[i], s, p, m, false);
        // `DefaultHasher::new()` has fixed keys: the same text hashes the same in every
        // process built by one toolchain.
        let mut h = DefaultHasher::new();
        format!("{:?}", r.outcome).hash(&mut h);
        format!("{:?}", r.verdict).hash(&mut h);
        format!(
            "{} {} {m:?} {s} {:016x} {:016x} {}",
            all[i].name,
            p.name(),
            r.outcome.trace_hash,
            h.finish(),
            r.verdict.is_ok()
        )
    };
    let (first, second) = runs.split_at(runs.len() / 2);
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| first.iter().map(line).collect::<Vec<_>>());
        let b = second.iter().map(line).collect::<Vec<_>>();
        (a.join().unwrap_or_default(), b)
    });
    for l in a.into_iter().chain(b) {
        println!("{l}");
    }
}
