//! A model of etcd's linearizable v3 API as the cluster machine uses it: one revision
//! counter, keys with create and mod revisions, leases with a TTL measured on the
//! store's own clock, and transactions whose comparisons and requests apply at one
//! revision. A request takes effect the instant it reaches the store.

use core::time::Duration;
use std::collections::BTreeMap;

use servery_core::Instant;
use servery_core::cluster::{
    CompareTarget, KeyValue, Revision, StoreCall, StoreLease, StoreReply, Txn, TxnOp,
};

#[derive(Debug, Clone)]
struct Entry {
    value: String,
    create_revision: Revision,
    mod_revision: Revision,
    lease: StoreLease,
}

#[derive(Debug, Clone)]
struct LeaseEntry {
    ttl: Duration,
    expires_at: Instant,
}

/// The store. `rate` stretches its clock: a TTL of `t` lasts `t × rate` of simulated
/// time (below 1: the store's clock runs fast, the skew the timing rule allows).
#[derive(Debug, Clone)]
pub struct EtcdModel {
    revision: Revision,
    kv: BTreeMap<String, Entry>,
    leases: BTreeMap<StoreLease, LeaseEntry>,
    next_lease: StoreLease,
    rate: f64,
}

impl EtcdModel {
    pub fn new(rate: f64) -> Self {
        EtcdModel {
            revision: 1,
            kv: BTreeMap::new(),
            leases: BTreeMap::new(),
            next_lease: 0x1000,
            rate,
        }
    }

    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// A key as a read at `now` returns it.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.kv.get(key).map(|e| kv(key, e))
    }

    /// Every key in `[start, end)`.
    pub fn range(&self, start: &str, end: &str) -> Vec<KeyValue> {
        self.kv
            .range(start.to_owned()..end.to_owned())
            .map(|(k, e)| kv(k, e))
            .collect()
    }

    /// Every key starting with `prefix`.
    pub fn with_prefix(&self, prefix: &str) -> Vec<KeyValue> {
        self.kv
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| kv(k, e))
            .collect()
    }

    fn stretched(&self, ttl: Duration) -> Duration {
        Duration::from_secs_f64(ttl.as_secs_f64() * self.rate)
    }

    /// The earliest lease expiry, for the simulator's clock.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.leases.values().map(|l| l.expires_at).min()
    }

    /// Revokes every lease whose time is up, deleting its keys (one revision each, as
    /// etcd's lessor does).
    pub fn expire(&mut self, now: Instant) {
        let gone: Vec<StoreLease> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.leases.remove(&id);
            let keys: Vec<String> = self
                .kv
                .iter()
                .filter(|(_, e)| e.lease == id)
                .map(|(k, _)| k.clone())
                .collect();
            if !keys.is_empty() {
                self.revision += 1;
                for k in keys {
                    self.kv.remove(&k);
                }
            }
        }
    }

    pub fn apply(&mut self, now: Instant, call: &StoreCall) -> StoreReply {
        self.expire(now);
        match call {
            StoreCall::LeaseGrant { ttl_secs } => {
                self.next_lease += 1;
                let ttl = Duration::from_secs(*ttl_secs as u64);
                let expires_at = now + self.stretched(ttl);
                self.leases
                    .insert(self.next_lease, LeaseEntry { ttl, expires_at });
                StoreReply::LeaseGranted {
                    lease: self.next_lease,
                }
            }
            StoreCall::KeepAlive { lease } => {
                let stretched = self.leases.get(lease).map(|l| self.stretched(l.ttl));
                match (self.leases.get_mut(lease), stretched) {
                    (Some(l), Some(ttl)) => {
                        l.expires_at = now + ttl;
                        StoreReply::KeptAlive
                    }
                    _ => StoreReply::LeaseNotFound,
                }
            }
            StoreCall::Txn(t) => self.txn(t),
            _ => StoreReply::Failed,
        }
    }

    fn holds(&self, c: &servery_core::cluster::Compare) -> bool {
        match (&c.range_end, &c.target) {
            (None, CompareTarget::CreateRevisionIs(r)) => {
                self.kv.get(&c.key).map_or(0, |e| e.create_revision) == *r
            }
            (None, CompareTarget::ValueIs(v)) => self.kv.get(&c.key).is_some_and(|e| e.value == *v),
            (None, CompareTarget::ModRevisionAtMost(r)) => {
                self.kv.get(&c.key).map_or(0, |e| e.mod_revision) <= *r
            }
            (Some(end), CompareTarget::ModRevisionAtMost(r)) => self
                .kv
                .range(c.key.clone()..end.clone())
                .all(|(_, e)| e.mod_revision <= *r),
            (Some(end), CompareTarget::CreateRevisionIs(r)) => self
                .kv
                .range(c.key.clone()..end.clone())
                .all(|(_, e)| e.create_revision == *r),
            (Some(end), CompareTarget::ValueIs(v)) => self
                .kv
                .range(c.key.clone()..end.clone())
                .all(|(_, e)| e.value == *v),
        }
    }

    fn txn(&mut self, t: &Txn) -> StoreReply {
        let succeeded = t.compare.iter().all(|c| self.holds(c));
        let ops = if succeeded { &t.success } else { &t.failure };
        // A put naming a lease the store does not have fails the whole transaction.
        let bad_lease = ops.iter().any(|op| {
            matches!(op, TxnOp::Put { lease, .. } if *lease != 0 && !self.leases.contains_key(lease))
        });
        if bad_lease {
            return StoreReply::Failed;
        }
        let writes = ops.iter().any(|op| {
            matches!(op, TxnOp::Put { .. })
                || matches!(op, TxnOp::Delete { key } if self.kv.contains_key(key))
        });
        let rev = if writes {
            self.revision + 1
        } else {
            self.revision
        };
        let mut read = Vec::new();
        for op in ops {
            match op {
                TxnOp::Put { key, value, lease } => {
                    let create_revision = self.kv.get(key).map_or(rev, |e| e.create_revision);
                    self.kv.insert(
                        key.clone(),
                        Entry {
                            value: value.clone(),
                            create_revision,
                            mod_revision: rev,
                            lease: *lease,
                        },
                    );
                }
                TxnOp::Delete { key } => {
                    self.kv.remove(key);
                }
                TxnOp::Get { key, range_end } => match range_end {
                    Some(end) => read.extend(self.range(key, end)),
                    None => read.extend(self.get(key)),
                },
            }
        }
        self.revision = rev;
        StoreReply::Txn {
            succeeded,
            revision: rev,
            read,
        }
    }
}

fn kv(key: &str, e: &Entry) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: e.value.clone(),
        create_revision: e.create_revision,
        mod_revision: e.mod_revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servery_core::cluster::Compare;

    fn at(s: u64) -> Instant {
        Instant::from_nanos(s * 1_000_000_000)
    }

    fn put_if_absent(key: &str, lease: StoreLease) -> StoreCall {
        StoreCall::Txn(Txn {
            compare: vec![Compare {
                key: key.into(),
                range_end: None,
                target: CompareTarget::CreateRevisionIs(0),
            }],
            success: vec![TxnOp::Put {
                key: key.into(),
                value: "v".into(),
                lease,
            }],
            failure: vec![],
        })
    }

    #[test]
    fn a_put_if_absent_wins_once_and_its_keys_go_with_the_lease() {
        let mut e = EtcdModel::new(1.0);
        let StoreReply::LeaseGranted { lease } =
            e.apply(at(0), &StoreCall::LeaseGrant { ttl_secs: 15 })
        else {
            panic!()
        };
        let first = e.apply(at(1), &put_if_absent("/k", lease));
        assert!(matches!(
            first,
            StoreReply::Txn {
                succeeded: true,
                revision: 2,
                ..
            }
        ));
        let second = e.apply(at(2), &put_if_absent("/k", lease));
        assert!(matches!(
            second,
            StoreReply::Txn {
                succeeded: false,
                revision: 2,
                ..
            }
        ));
        assert_eq!(e.get("/k").map(|kv| kv.create_revision), Some(2));
        e.expire(at(15));
        assert!(e.get("/k").is_none());
        assert_eq!(
            e.apply(at(16), &StoreCall::KeepAlive { lease }),
            StoreReply::LeaseNotFound
        );
    }
}
