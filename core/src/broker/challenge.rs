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

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(token: &str) -> Challenge {
        Challenge {
            token: token.into(),
            key_authorization: format!("{token}.thumb"),
        }
    }

    #[test]
    fn an_order_replaces_the_last_one_whole_and_a_withdrawal_leaves_nothing() {
        let mut t = ChallengeTable::default();
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        t.publish(vec![challenge("a"), challenge("b")]);
        assert_eq!(t.len(), 2);
        assert!(!t.is_empty(), "a published order is not empty");
        assert_eq!(t.answer("a"), Some("a.thumb"));
        t.publish(vec![challenge("c")]);
        assert_eq!(
            (t.len(), t.answer("a")),
            (1, None),
            "replaced, not added to"
        );
        let many = (0..MAX_CHALLENGES + 3)
            .map(|i| challenge(&format!("t{i}")))
            .collect();
        t.publish(many);
        assert_eq!(t.len(), MAX_CHALLENGES, "bounded");
        t.withdraw();
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
    }
}
