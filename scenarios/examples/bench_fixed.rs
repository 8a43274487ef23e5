//! The sweep benchmark's run (`bench-steady-4`) on seeds 0..N on one thread: a fixed
//! amount of work, for measurements that a busy machine's wall clock would blur — CPU
//! time (`perf stat -e task-clock`) or executed instructions (`valgrind --tool=cachegrind
//! --cache-sim=no`), which do not depend on what else runs.
//!
//! ```sh
//! cargo build --release -p servery-scenarios --example bench_fixed
//! valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!     target/release/examples/bench_fixed 200
//! ```
use servery_core::supervisor::Platform;
use servery_scenarios::{BENCH, run};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let started = std::time::Instant::now();
    let mut failed = 0u64;
    let mut events = 0u64;
    for seed in 0..n {
        let r = run(&BENCH, seed, Platform::Posix, false);
        failed += u64::from(r.verdict.is_err());
        events += r.outcome.events;
    }
    let s = started.elapsed().as_secs_f64();
    eprintln!(
        "{n} seeds in {s:.3}s = {:.0} seeds/s, {failed} failed, {events} events",
        n as f64 / s
    );
}
