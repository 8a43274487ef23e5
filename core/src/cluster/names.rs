//! Shared exclusive names (target leases and DAV locks): put-if-absent under the host's
//! lease, the key's create revision as the fencing token, checked again at publish.

use super::host::{ClusterAnswer, ClusterHost, ClusterRequest, Purpose};
use super::keys::SharedName;
use super::store::{Compare, CompareTarget, Revision, StoreCall, StoreReply, Txn, TxnOp};
use crate::time::Instant;

impl ClusterHost {
    /// Asks for `name`: answered [`ClusterAnswer::Granted`] with its fencing token,
    /// `Busy`, or `Unavailable` (at once when the grant deadline has passed).
    pub fn acquire(&mut self, now: Instant, request: ClusterRequest, name: &SharedName) {
        let key = self.layout.name(name);
        let Some(lease) = self.live_lease().filter(|_| self.may_grant(now)) else {
            let a = self.unavailable();
            return self.answer(request, a);
        };
        // This host's own grants answer from its cache, with no round trip.
        if self.held.contains_key(&key)
            || self.acquiring.contains(&key)
            || self.releasing.contains_key(&key)
            || self.cleanups.contains_key(&key)
        {
            return self.answer(request, ClusterAnswer::Busy);
        }
        self.next_grant += 1;
        let value = format!("{} {}", self.layout.host(), self.next_grant);
        let call = StoreCall::Txn(Txn {
            compare: vec![Compare {
                key: key.clone(),
                range_end: None,
                target: CompareTarget::CreateRevisionIs(0),
            }],
            success: vec![TxnOp::Put {
                key: key.clone(),
                value: value.clone(),
                lease,
            }],
            failure: vec![],
        });
        self.acquiring.insert(key.clone());
        self.send(
            now,
            call,
            Purpose::Acquire {
                request,
                key,
                value,
            },
        );
    }

    pub(super) fn acquire_answered(
        &mut self,
        now: Instant,
        request: ClusterRequest,
        key: String,
        value: String,
        reply: StoreReply,
    ) {
        self.acquiring.remove(&key);
        match reply {
            StoreReply::Txn {
                succeeded: true,
                revision,
                ..
            } => {
                if self.may_grant(now) {
                    self.held.insert(key, revision);
                    self.answer(request, ClusterAnswer::Granted { fence: revision });
                } else {
                    // Created, but too late to be trusted: given back, and refused.
                    self.releasing.insert(key.clone(), revision);
                    self.send_release(now, key);
                    let a = self.unavailable();
                    self.answer(request, a);
                }
            }
            StoreReply::Txn {
                succeeded: false, ..
            } => self.answer(request, ClusterAnswer::Busy),
            _ => {
                // Refused by the store (a lease it no longer has): nothing was written,
                // but the value is cleaned up in case the store says otherwise later.
                self.cleanups.insert(key.clone(), value);
                let a = self.unavailable();
                self.answer(request, a);
            }
        }
    }

    /// Right before publishing under `name`: answered `MayPublish` only when the store
    /// still has this host's key at `fence` and the answer came before the grant
    /// deadline; `Fenced` when the key is someone else's or gone.
    pub fn check_fence(
        &mut self,
        now: Instant,
        request: ClusterRequest,
        name: &SharedName,
        fence: Revision,
    ) {
        let key = self.layout.name(name);
        if !self.may_grant(now) {
            let a = self.unavailable();
            return self.answer(request, a);
        }
        if self.held.get(&key) != Some(&fence) {
            return self.answer(request, ClusterAnswer::Fenced);
        }
        let call = StoreCall::Txn(Txn {
            compare: vec![Compare {
                key: key.clone(),
                range_end: None,
                target: CompareTarget::CreateRevisionIs(fence),
            }],
            success: vec![],
            failure: vec![],
        });
        self.send(
            now,
            call,
            Purpose::Fence {
                request,
                key,
                fence,
            },
        );
    }

    pub(super) fn fence_answered(
        &mut self,
        now: Instant,
        request: ClusterRequest,
        key: String,
        fence: Revision,
        reply: StoreReply,
    ) {
        match reply {
            StoreReply::Txn {
                succeeded: true, ..
            } if self.may_grant(now) => self.answer(request, ClusterAnswer::MayPublish),
            StoreReply::Txn {
                succeeded: false, ..
            } => {
                if self.held.get(&key) == Some(&fence) {
                    self.held.remove(&key);
                }
                self.answer(request, ClusterAnswer::Fenced);
            }
            _ => {
                let a = self.unavailable();
                self.answer(request, a);
            }
        }
    }

    /// Gives `name` back. The delete is sent again with every keep-alive until etcd
    /// acknowledges it or the lease is gone. A token that is not the one held is ignored.
    pub fn release(&mut self, now: Instant, name: &SharedName, fence: Revision) {
        let key = self.layout.name(name);
        if self.held.get(&key) != Some(&fence) {
            return;
        }
        self.held.remove(&key);
        self.releasing.insert(key.clone(), fence);
        if self.live_lease().is_some() {
            self.send_release(now, key);
        }
    }

    /// Whether this host still counts `name` at `fence` among its grants, whatever its
    /// grant deadline: false once released, fenced, or gone with a lost lease.
    pub fn holds_name(&self, name: &SharedName, fence: Revision) -> bool {
        self.held.get(&self.layout.name(name)) == Some(&fence)
    }

    /// Whether this host holds `name` at `fence` and may still act on it.
    pub fn holds(&self, now: Instant, name: &SharedName, fence: Revision) -> bool {
        self.may_grant(now) && self.held.get(&self.layout.name(name)) == Some(&fence)
    }
}
