//! Monotonic time as the core sees it: a count of nanoseconds since the driver's epoch.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point on the driver's monotonic clock. The core never reads a clock; every event
/// carries the `Instant` at which the driver observed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is in the future.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// `d` in nanoseconds, saturating at `u64::MAX`: the same as converting `as_nanos()`,
/// in 64-bit arithmetic (every deadline is a sum like this, and the 128-bit product
/// was most of what computing the next one cost). If the seconds alone overflow, so
/// does the whole.
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(rhs)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.0 / 1_000_000_000,
            (self.0 % 1_000_000_000) / 1_000
        )
    }
}

/// The earliest of two optional deadlines.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_duration_saturates_exactly_where_its_nanoseconds_leave_u64() {
        let max = u64::MAX;
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::new(1, 999_999_999),
            Duration::from_nanos(max),
            Duration::from_nanos(max) + Duration::from_nanos(1),
            Duration::new(max / 1_000_000_000, 0),
            Duration::new(max / 1_000_000_000 + 1, 0),
            Duration::MAX,
        ];
        for d in cases {
            let wide = u64::try_from(d.as_nanos()).unwrap_or(max);
            assert_eq!(nanos(d), wide, "{d:?}");
            assert_eq!(Instant::ZERO + d, Instant(wide), "{d:?}");
        }
        assert_eq!(Instant(max - 1) + Duration::from_nanos(5), Instant(max));
    }

    /// Traces and predicate messages print instants as seconds with microseconds.
    #[test]
    fn an_instant_prints_as_seconds_with_microseconds() {
        assert_eq!(Instant(1_234_567_891).to_string(), "1.234567s");
        assert_eq!(Instant::ZERO.to_string(), "0.000000s");
    }
}
