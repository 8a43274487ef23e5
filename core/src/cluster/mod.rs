//! Several hosts sharing target leases, DAV locks and budgets through etcd (decision
//! 0096). [`ClusterHost`] is one host's side: a pure machine whose actions are store
//! operations (lease grant, keep-alive, transactions) and answers to the host's broker,
//! and whose events are the store's replies and time-outs. It decides when the host may
//! grant (until its grant deadline), what fences a publish, and when a budget is full;
//! a driver only carries the operations to etcd and back.

mod budget;
mod host;
mod keys;
mod names;
mod store;
mod timing;

pub use budget::BudgetLimits;
pub use host::{ClusterAction, ClusterAnswer, ClusterHost, ClusterRequest, HostStats, OpId};
pub use keys::{Budget, ClusterName, KeyError, KeyLayout, NameKind, SharedName};
pub use store::{
    Compare, CompareTarget, KeyValue, Revision, StoreCall, StoreLease, StoreReply, Txn, TxnOp,
    prefix_end,
};
pub use timing::{ClusterTiming, TimingError};

#[cfg(test)]
mod tests;
