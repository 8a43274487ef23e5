//! The ACME HTTP-01 challenge table: token → key authorization, published by the
//! parent's certificate manager while an order is being validated, and read by whichever
//! worker receives `GET /.well-known/acme-challenge/TOKEN` (including one started after
//! the order began: it asks, it is not told). Bounded by the manager's own limit on
//! challenges per order; replaced as a whole, so a withdrawn order leaves nothing behind.

use std::collections::BTreeMap;

use crate::acme::{Challenge, MAX_CHALLENGES};

#[derive(Debug, Clone, Default)]
pub struct ChallengeTable {
    answers: BTreeMap<String, String>,
}

impl ChallengeTable {
    /// Publish one order's challenges, replacing whatever an earlier order published.
    pub fn publish(&mut self, challenges: Vec<Challenge>) {
        self.answers = challenges
            .into_iter()
            .take(MAX_CHALLENGES)
            .map(|c| (c.token, c.key_authorization))
            .collect();
    }

    pub fn withdraw(&mut self) {
        self.answers.clear();
    }

    /// The key authorization for `token`, if it is published.
    pub fn answer(&self, token: &str) -> Option<&str> {
        self.answers.get(token).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}
