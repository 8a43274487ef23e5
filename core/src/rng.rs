//! The core's only source of randomness: a ChaCha8 generator seeded by the driver.
//!
//! In production the driver seeds it from OS entropy, so lease IDs are unguessable; in
//! simulation the scenario seed does, so a run replays bit-for-bit.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

#[derive(Debug, Clone)]
pub struct CoreRng(ChaCha8Rng);

impl CoreRng {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        CoreRng(ChaCha8Rng::from_seed(seed))
    }

    /// A seed for a sub-machine, so each machine has its own stream and adding draws in
    /// one does not shift the others.
    pub fn fork(&mut self) -> CoreRng {
        let mut seed = [0u8; 32];
        self.0.fill_bytes(&mut seed);
        CoreRng::from_seed(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn next_u128(&mut self) -> u128 {
        (u128::from(self.0.next_u64()) << 64) | u128::from(self.0.next_u64())
    }

    /// A uniform draw in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_sized_draws_use_all_128_bits() {
        let mut r = CoreRng::from_seed([3; 32]);
        let draws: Vec<u128> = (0..64).map(|_| r.next_u128()).collect();
        assert!(draws.iter().any(|d| d >> 64 != 0), "high half never set");
        assert!(
            draws.iter().any(|d| d & u128::from(u64::MAX) != 0),
            "low half never set"
        );
        let words: Vec<u64> = (0..64).map(|_| r.next_u64()).collect();
        assert!(
            words.windows(2).all(|w| w[0] != w[1]) && words.iter().any(|w| w >> 63 == 1),
            "64-bit draws vary over the whole word: {words:?}"
        );
        let mut twin = CoreRng::from_seed([3; 32]);
        let mut again = CoreRng::from_seed([3; 32]);
        assert_eq!(twin.next_u64(), again.next_u64(), "a seed replays");
        let units: Vec<f64> = (0..1000).map(|_| r.unit()).collect();
        assert!(units.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(units.iter().any(|u| *u > 0.9) && units.iter().any(|u| *u < 0.1));
    }
}
