//! The oracle of the simulation's WebDAV: what the parent decided about each lock request
//! it read (the answers on the control channels), and which granted locks the broker's
//! table still holds after every step.

use servery_core::parent::Parent;
use servery_core::proto::{BrokerReply, Rejection};
use servery_core::{Instant, WorkerId};

use super::{Wire, ns};
use crate::labels;
use crate::outcome::{DavAnswer, DavLockDecision, DavLockRecord};
use crate::world::SimWorld;

impl SimWorld {
    /// The parent sends `reply` to `worker`'s request `id`: what it decided about a DAV
    /// request it read.
    pub(crate) fn dav_wiretap_reply(
        &mut self,
        now: Instant,
        worker: WorkerId,
        id: u64,
        reply: &BrokerReply,
    ) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let Some(wire) = dav.wire.remove(&(worker, id)) else {
            return;
        };
        let at = ns(now);
        let out = &mut self.out;
        match wire {
            Wire::Lock {
                resource,
                depth_infinity,
                exclusive,
            } => {
                let table_len = usize::try_from(dav.table_len as isize + dav.delta).unwrap_or(0);
                let answer = match reply {
                    BrokerReply::Granted { .. } => DavAnswer::Granted,
                    BrokerReply::Rejected(Rejection::Busy) => DavAnswer::Busy,
                    BrokerReply::Rejected(Rejection::Saturated) => DavAnswer::Saturated,
                    _ => DavAnswer::Other,
                };
                out.dav.decisions.push(DavLockDecision {
                    at_ns: at,
                    table_len,
                    limit: dav.limit,
                    answer,
                });
                match reply {
                    &BrokerReply::Granted { id, expires_in_ms } => {
                        dav.delta += 1;
                        out.dav.locks.push(DavLockRecord {
                            token: id.0,
                            resource,
                            depth_infinity,
                            exclusive,
                            granted_to: worker.0,
                            granted_ns: at,
                            promised_end_ns: at + expires_in_ms * 1_000_000,
                            refreshes: 0,
                            unlocked_ns: None,
                            last_seen_ns: at,
                            gone_ns: None,
                        });
                        let i = out.dav.locks.len() - 1;
                        dav.all.insert(id, i);
                        dav.live.insert(id, i);
                    }
                    BrokerReply::Rejected(Rejection::Busy) => {
                        out.coverage.insert(labels::DAV_LOCK_CONFLICT);
                    }
                    BrokerReply::Rejected(Rejection::Saturated) => {
                        out.coverage.insert(labels::DAV_TABLE_SATURATED);
                    }
                    _ => {}
                }
            }
            Wire::Refresh { token } => {
                if let (&BrokerReply::Granted { expires_in_ms, .. }, Some(&i)) =
                    (reply, dav.all.get(&token))
                {
                    let l = &mut out.dav.locks[i];
                    l.promised_end_ns = at + expires_in_ms * 1_000_000;
                    l.refreshes += 1;
                    out.coverage.insert(labels::DAV_LOCK_REFRESHED);
                }
            }
            Wire::Unlock { token } => {
                // An UNLOCK removes a lock the table held, answered `Released` — or
                // `NotFound` when its time was up but its expiry not yet handled.
                if dav.live.contains_key(&token) && !dav.unlocked.contains(&token) {
                    dav.unlocked.push(token);
                    dav.delta -= 1;
                }
                if *reply == BrokerReply::Released
                    && let Some(&i) = dav.all.get(&token)
                {
                    out.dav.locks[i].unlocked_ns.get_or_insert(at);
                }
            }
        }
    }

    /// After every step: which granted locks the broker's table still holds.
    pub(crate) fn dav_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let broker = parent.broker();
        let table = broker.dav();
        let at = ns(now);
        dav.limit = broker.limits().max_dav_locks() as usize;
        dav.table_len = table.len();
        dav.delta = 0;
        dav.unlocked.clear();
        let out = &mut self.out;
        out.dav.table_max = out.dav.table_max.max(table.len());
        let mut held = 0;
        dav.live.retain(|token, &mut i| {
            let l = &mut out.dav.locks[i];
            if table.contains(*token) {
                held += 1;
                l.last_seen_ns = at;
                return true;
            }
            l.gone_ns = Some(at);
            if l.unlocked_ns.is_some() {
                out.coverage.insert(labels::DAV_LOCK_UNLOCKED);
            } else if at >= l.promised_end_ns {
                out.coverage.insert(labels::DAV_LOCK_EXPIRED);
            }
            false
        });
        if held != table.len() && out.dav.untracked.len() < 8 {
            out.dav.untracked.push((at, table.len(), held));
        }
        let sup = parent.supervisor();
        dav.killed.retain(|&(worker, token)| {
            if sup.is_connected(worker) {
                return true;
            }
            // Let go (its grants revoked): the lock is the client's, still held.
            if table.contains(token) {
                out.coverage.insert(labels::DAV_LOCK_OUTLIVED_GRANTER);
            }
            false
        });
    }
}
