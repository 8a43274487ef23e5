//! How many files a process may have open (`RLIMIT_NOFILE`), and what that allows.
//!
//! Linux starts services with a soft limit of 1,024 (systemd's default, to spare
//! programs that still use `select`) and a hard limit far above it (524,288 under
//! systemd). servery never uses `select`, so the parent raises its soft limit to the hard
//! one at start, as Go programs do for themselves and Caddy's unit does, and its workers
//! inherit it. Each worker then admits no more connections at once than its limit allows:
//! a connection may hold its socket and a file it serves, and a worker keeps
//! [`RESERVED`] descriptors for everything else. Admitting more than the limit allows
//! would make `accept` fail with `EMFILE` while idle connections hold every descriptor,
//! which is how 1,100 silent clients starved real ones under the default limit
//! (issue 38); below the limit, a full worker closes an idle connection to admit a new one.

use rustix::process::{Resource, getrlimit, setrlimit};

/// Descriptors a worker keeps for what is not a connection: its listeners, control and
/// broker channels, log, runtime, blocking work, and a margin.
pub const RESERVED: u64 = 64;

/// Each connection may hold its socket and one open file it is sending.
const PER_CONNECTION: u64 = 2;

/// Raises the soft limit on open files to the hard limit; returns the soft limit now in
/// force (`None` when unlimited or unknown).
pub fn raise_to_hard_limit() -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            // Kept as it was: what is in force is reported below.
        }
    }
    soft_limit()
}

/// The soft limit on open files in force (`None` when unlimited or unknown).
pub fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// The most connections a worker with `limit` open files may hold at once.
pub fn connections_allowed(limit: u64) -> u32 {
    let allowed = limit.saturating_sub(RESERVED) / PER_CONNECTION;
    u32::try_from(allowed).unwrap_or(u32::MAX).max(1)
}

/// The open files `connections` need at most, by the same rule.
pub fn needed_for(connections: u32) -> u64 {
    u64::from(connections) * PER_CONNECTION + RESERVED
}

/// `configured`, lowered to what `limit` allows.
pub fn bounded_connections(configured: u32, limit: Option<u64>) -> u32 {
    match limit {
        Some(limit) => configured.min(connections_allowed(limit)),
        None => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_bounded_by_two_descriptors_each_after_the_reserve() {
        assert_eq!(bounded_connections(1024, Some(1024)), 480);
        assert_eq!(bounded_connections(1024, Some(524_288)), 1024);
        assert_eq!(bounded_connections(1024, None), 1024);
        assert_eq!(bounded_connections(1024, Some(10)), 1, "never none");
        assert!(needed_for(480) <= 1024 && needed_for(481) > 1024);
    }
}
