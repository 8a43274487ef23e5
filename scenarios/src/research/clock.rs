//! The virtual clock and random stream the published-model reproductions run on: the
//! simulator's own [`Instant`] and [`SimRng`], so a model run is seeded and replays
//! bit-for-bit like every scenario.

use core::time::Duration;

use servery_core::Instant;
use servery_sim::rng::SimRng;

/// One model run: a clock that starts at zero and a stream drawn from the seed.
#[derive(Debug)]
pub struct ModelRun {
    pub now: Instant,
    pub rng: SimRng,
}

impl ModelRun {
    /// `salt` keeps each model's stream apart from every other use of the same seed.
    pub fn new(seed: u64, salt: u64) -> Self {
        ModelRun {
            now: Instant::ZERO,
            rng: SimRng::new(seed ^ salt),
        }
    }

    /// Seconds since the start.
    pub fn secs(&self) -> f64 {
        self.now.as_nanos() as f64 / 1e9
    }

    /// Move the clock on by `secs`.
    pub fn advance(&mut self, secs: f64) {
        self.now = self.now + Duration::from_secs_f64(secs.max(0.0));
    }

    /// An exponential holding time with this rate (per second); infinite at rate 0.
    pub fn exp_rate(&mut self, rate: f64) -> f64 {
        if rate <= 0.0 {
            f64::INFINITY
        } else {
            self.rng.exp(1.0 / rate)
        }
    }

    /// A Weibull(`shape`, `scale`) draw by inversion.
    pub fn weibull(&mut self, shape: f64, scale: f64) -> f64 {
        weibull_from_unit(self.rng.unit(), shape, scale)
    }
}

/// The Weibull(`shape`, `scale`) quantile at `1 - u` (inversion: `u` uniform in [0, 1)).
pub fn weibull_from_unit(u: f64, shape: f64, scale: f64) -> f64 {
    scale * (-(1.0 - u).ln()).powf(1.0 / shape)
}
