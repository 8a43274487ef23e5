//! The worker's resident memory, for its heartbeats (recycling by `--worker-max-rss`).
//!
//! RSS, not PSS: it is what `ps`, `top` and a container's per-process view show, and what
//! a limit is written against; workers are started afresh (not forked from a warmed
//! parent), so the pages they share are the executable's and the libraries', which RSS
//! counts in full (a limit errs towards recycling early, never late). Read from
//! `/proc/self/status` once a heartbeat: one small read, no walk of the mappings
//! (`smaps_rollup` walks them all, which costs a large process far more).

/// Resident bytes now, or 0 when the system does not say (not Linux, no `/proc`).
pub fn resident_bytes() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
