//! The worker's resident memory, for its heartbeats (recycling by `--worker-max-rss`).
//!
//! RSS, not PSS: it is what `ps`, `top` and a container's per-process view show, and what
//! a limit is written against; workers are started afresh (not forked from a warmed
//! parent), so the pages they share are the executable's and the libraries', which RSS
//! counts in full (a limit errs towards recycling early, never late). Read from
//! `/proc/self/status` once a heartbeat: one small read, no walk of the mappings
//! (`smaps_rollup` walks them all, which costs a large process far more).

/// Resident bytes now, or 0 when the system does not say (not Linux, no `/proc`).
pub(crate) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| vm_rss(&status))
        .unwrap_or(0)
}

/// `VmRSS:   12345 kB` as bytes.
pub(crate) fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// Connections a worker must have held at once before their closing is worth a trim.
const TRIM_AFTER_PEAK: u32 = 32;

/// When to give freed heap memory back to the system: once the open connections have
/// fallen to half of their peak since the last time (each connection's buffers are
/// freed when it closes, but the allocator keeps the pages). Without it a worker's
/// resident set stays at the peak of its busiest moment, which `--worker-max-rss` would
/// then recycle for memory the worker no longer uses. Rare by construction: a trim
/// needs the connections to halve after a peak of [`TRIM_AFTER_PEAK`] or more.
#[derive(Debug, Default)]
pub(crate) struct HeapTrim {
    peak: u32,
}

impl HeapTrim {
    /// A connection opened: `open` are held now.
    pub(crate) fn opened(&mut self, open: u32) {
        self.peak = self.peak.max(open);
    }

    /// Whether to trim now, with `open` connections held (asked once a heartbeat); a
    /// yes starts the next peak from here.
    pub(crate) fn due(&mut self, open: u32) -> bool {
        let due = self.peak >= TRIM_AFTER_PEAK && open <= self.peak / 2;
        if due {
            self.peak = open;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_the_connections_halve_after_a_peak() {
        let mut trim = HeapTrim::default();
        for open in 1..=10 {
            trim.opened(open);
        }
        assert!(!trim.due(0), "a peak of ten is not worth a trim");
        for open in 1..=100 {
            trim.opened(open);
        }
        assert!(!trim.due(51), "more than half still open");
        assert!(trim.due(50), "half closed");
        assert!(!trim.due(26), "the next peak starts at 50");
        assert!(trim.due(25), "and halves too");
        assert!(!trim.due(0), "a peak of 25 is below the floor");
        trim.opened(64);
        assert!(trim.due(32));
    }

    #[test]
    fn reads_the_resident_set_in_bytes() {
        let status = "Name:\tservery\nVmPeak:\t  100 kB\nVmRSS:\t    2048 kB\nThreads:\t3\n";
        assert_eq!(vm_rss(status), Some(2048 * 1024));
        assert_eq!(
            vm_rss("VmRSS:\t12 MB\n"),
            None,
            "an unknown unit is not guessed"
        );
        assert_eq!(vm_rss("Name:\tx\n"), None);
        assert_eq!(vm_rss("VmRSS:\tmany kB\n"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes() > 0);
        }
    }
}
