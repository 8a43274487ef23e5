//! The store's API as the cluster machine uses it: etcd's v3 KV, transaction and lease
//! calls, reduced to what the machine sends. A driver maps each [`StoreCall`] onto one
//! etcd request and each answer onto a [`StoreReply`]; the simulator's model answers them
//! itself.

/// An etcd lease id (etcd's `int64`, never 0 for a granted lease).
pub type StoreLease = i64;

/// A store revision (etcd's `int64`; 0 means "no such key" in a comparison).
pub type Revision = i64;

/// One store operation the machine asks the driver to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreCall {
    /// `LeaseGrant(ttl)`.
    LeaseGrant { ttl_secs: i64 },
    /// One `LeaseKeepAlive` round (send one request, read one response).
    KeepAlive { lease: StoreLease },
    /// `Txn(compare, success, failure)`.
    Txn(Txn),
}

/// What a comparison reads of a key (or of every key in a range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's `create_revision` (0 when absent) equals this.
    CreateRevisionIs(Revision),
    /// Every key's `mod_revision` is at most this (true for an empty range).
    ModRevisionAtMost(Revision),
    /// The key's value is this (false when absent).
    ValueIs(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    pub key: String,
    /// `Some(end)`: the comparison holds for every key in `[key, end)`.
    pub range_end: Option<String>,
    pub target: CompareTarget,
}

/// One request inside a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    Put {
        key: String,
        value: String,
        lease: StoreLease,
    },
    Delete {
        key: String,
    },
    /// Read `[key, range_end)`, or one key.
    Get {
        key: String,
        range_end: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

/// A key as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
    pub create_revision: Revision,
    pub mod_revision: Revision,
}

/// The store's answer to one [`StoreCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreReply {
    LeaseGranted {
        lease: StoreLease,
    },
    /// The lease lives on (etcd answers a TTL > 0).
    KeptAlive,
    /// The lease is gone (etcd answers TTL ≤ 0, or "lease not found").
    LeaseNotFound,
    /// A transaction's outcome: whether the comparisons held, the store's revision after
    /// it (the header's), and every key its reads returned.
    Txn {
        succeeded: bool,
        revision: Revision,
        read: Vec<KeyValue>,
    },
    /// The store refused the call for a reason other than a comparison (a put naming a
    /// lease that has expired, permission denied): nothing was written.
    Failed,
}

/// The end of the range of every key starting with `prefix` (etcd's `prefix_end`).
pub fn prefix_end(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    // etcd's "to the end of the key space".
    "\0".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_last_byte_is_one_more() {
        assert_eq!(prefix_end("/servery/a/budget/"), "/servery/a/budget0");
        assert_eq!(prefix_end("ab"), "ac");
    }
}
