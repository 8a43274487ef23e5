//! Several servery hosts sharing their broker's tables through a model of etcd
//! (decision 0096): each host runs core's `ClusterHost` against [`EtcdModel`], over
//! links with latency, loss and partitions between each host and the store, with hosts
//! killed and the store's clock running fast by up to the skew bound. Clients on every
//! host write shared names and reserve from a service-wide budget; the oracle
//! (`oracle.rs`) judges every step.

mod clients;
mod etcd;
mod oracle;
mod world;

pub use etcd::EtcdModel;
pub use world::{ClusterOutcome, ClusterSpec, Cut, simulate_cluster};
