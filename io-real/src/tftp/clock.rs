//! The core's [`Instant`] from tokio's clock, for the transfer machines.

use std::time::Duration;

use servery_core::Instant;

/// A transfer's clock: the core counts from this service's start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Epoch(tokio::time::Instant);

impl Epoch {
    pub(super) fn now() -> Self {
        Epoch(tokio::time::Instant::now())
    }

    pub(super) fn core_now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn tokio_at(&self, at: Instant) -> tokio::time::Instant {
        self.0 + Duration::from_nanos(at.as_nanos())
    }
}
