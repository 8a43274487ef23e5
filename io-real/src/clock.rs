//! The real clock as the core sees it: nanoseconds since an epoch taken at start.

use std::time::Duration;

use servery_core::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The host instant of a core deadline, for timers.
    pub fn to_std(&self, t: Instant) -> std::time::Instant {
        self.epoch + Duration::from_nanos(t.as_nanos())
    }
}
