//! `/metrics`' process series: the parent's own, under the names Prometheus' process
//! collector gives the scraped process (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`), the workers' summed under `servery_worker_*`, and
//! `servery_build_info` (decision 0054). Read from `/proc` when a scrape renders, on the
//! admin listener's runtime; a figure `/proc` does not give is left out, never made up.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The kernel reports `/proc/*/stat` times in USER_HZ, which is 100 on every Linux
/// architecture servery builds for (what `sysconf(_SC_CLK_TCK)` answers).
const TICKS_PER_SECOND: f64 = 100.0;

/// One process, as `/proc/PID` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sample {
    /// User and system CPU seconds of the process itself.
    cpu: f64,
    /// User and system CPU seconds of its children it has reaped.
    reaped_children_cpu: f64,
    /// Ticks after boot at which it started.
    start_ticks: u64,
    resident_bytes: u64,
    open_fds: u64,
}

/// The fields of `/proc/PID/stat` this needs. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted from the
/// last `)`.
fn parse_stat(stat: &str) -> Option<(f64, f64, u64)> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime is field 14, cstime 17, starttime 22.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let ticks = |a: usize, b: usize| Some((field(a)? + field(b)?) as f64 / TICKS_PER_SECOND);
    Some((ticks(14, 15)?, ticks(16, 17)?, field(22)?))
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

fn sample(pid: &str) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (cpu, reaped_children_cpu, start_ticks) = parse_stat(&stat)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        cpu,
        reaped_children_cpu,
        start_ticks,
        resident_bytes: crate::worker::memory::vm_rss(&status)?,
        open_fds,
    })
}

/// The highest worker CPU total shown so far, as the bits of an `f64` (non-negative
/// `f64`s order as their bits do).
static WORKER_CPU_SHOWN: AtomicU64 = AtomicU64::new(0);

/// The workers' CPU seconds to show, all of them since the parent started: `total` is the
/// reaped ones' (the parent's `cutime + cstime`) plus each live one's. A worker reaped
/// between the two reads is briefly in neither; the counter then holds its last value
/// instead of going down (a counter that decreases reads as a reset), and catches up on
/// the next scrape.
fn worker_cpu_shown(total: f64) -> f64 {
    let bits = total.max(0.0).to_bits();
    f64::from_bits(
        WORKER_CPU_SHOWN
            .fetch_max(bits, Ordering::Relaxed)
            .max(bits),
    )
}

/// What one scrape shows of the processes.
#[derive(Debug)]
pub(super) struct Figures {
    parent: Option<Sample>,
    /// The CPU seconds of every worker since the parent started.
    worker_cpu: f64,
    live: Vec<Sample>,
}

impl Figures {
    /// Reads `/proc` for the parent and the live workers `workers`.
    pub(super) fn read(workers: &[u32]) -> Figures {
        // The reaped children first, then the live ones: see [`worker_cpu_shown`].
        let parent = sample("self");
        let reaped = parent.map_or(0.0, |p| p.reaped_children_cpu);
        let live: Vec<Sample> = workers
            .iter()
            .filter_map(|pid| sample(&pid.to_string()))
            .collect();
        let worker_cpu = worker_cpu_shown(reaped + live.iter().map(|w| w.cpu).sum::<f64>());
        Figures {
            parent,
            worker_cpu,
            live,
        }
    }

    /// The parent's `process_*` series, on a registry without a prefix.
    pub(super) fn register_parent(&self, root: &mut Registry) {
        if let Some(p) = self.parent {
            register_parent(root, p);
        }
    }

    /// The workers' sums and the build information, on the `servery` registry.
    pub(super) fn register_service(&self, servery: &mut Registry) {
        let cpu = Counter::<f64, AtomicU64>::default();
        cpu.inc_by(self.worker_cpu);
        servery.register_with_unit(
            "worker_cpu",
            "User and system CPU time of every worker since the parent started (live and exited)",
            Unit::Seconds,
            cpu,
        );
        servery.register_with_unit(
            "worker_resident_memory",
            "Resident memory of the live workers, summed (pages they share count in each)",
            Unit::Bytes,
            gauge(self.live.iter().map(|w| w.resident_bytes).sum()),
        );
        servery.register(
            "worker_open_fds",
            "Open file descriptors of the live workers, summed",
            gauge(self.live.iter().map(|w| w.open_fds).sum()),
        );
        let info = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        info.get_or_create(&vec![
            ("version", crate::build_info::VERSION),
            ("commit", crate::build_info::COMMIT),
            ("features", crate::build_info::FEATURES),
        ])
        .set(1);
        servery.register(
            "build_info",
            "1, labelled with the version, commit and build features of the running binary",
            info,
        );
    }
}

fn register_parent(root: &mut Registry, p: Sample) {
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(p.cpu);
    root.register_with_unit(
        "process_cpu",
        "Total user and system CPU time spent in seconds (the parent)",
        Unit::Seconds,
        cpu,
    );
    root.register_with_unit(
        "process_resident_memory",
        "Resident memory size in bytes (the parent)",
        Unit::Bytes,
        gauge(p.resident_bytes),
    );
    root.register(
        "process_open_fds",
        "Number of open file descriptors (the parent)",
        gauge(p.open_fds),
    );
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    if let Some(limit) = limit {
        root.register(
            "process_max_fds",
            "Maximum number of open file descriptors (the parent's soft limit)",
            gauge(limit),
        );
    }
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| boot_time(&s));
    if let Some(boot) = boot {
        let start = Gauge::<f64, AtomicU64>::default();
        start.set(boot as f64 + p.start_ticks as f64 / TICKS_PER_SECOND);
        root.register_with_unit(
            "process_start_time",
            "Start time of the process since unix epoch in seconds (the parent)",
            Unit::Seconds,
            start,
        );
    }
}

fn gauge(n: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(n).unwrap_or(i64::MAX));
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis, as `prctl` may set one.
        let stat = "4242 (serv (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    250 50 30 20 20 0 3 0 123456 1000000 300 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((3.0, 0.5, 123456)));
        assert_eq!(parse_stat("4242 (cut short) S 1"), None);
    }

    #[test]
    fn boot_time_is_btime() {
        let s = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(boot_time(s), Some(1_700_000_000));
        assert_eq!(boot_time("cpu 1\n"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let me = sample("self").expect("/proc/self");
        assert!(me.open_fds > 0 && me.resident_bytes > 0 && me.start_ticks > 0);
    }

    #[test]
    fn the_worker_cpu_counter_never_goes_down() {
        let first = worker_cpu_shown(5.0);
        assert!(first >= 5.0);
        assert_eq!(worker_cpu_shown(first - 1.0), first);
        assert_eq!(worker_cpu_shown(first + 2.0), first + 2.0);
    }
}
