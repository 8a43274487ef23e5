//! The worker's side of the broker: request IDs, a bound on outstanding requests, reply
//! deadlines, and fail-closed behaviour when the parent is gone.
//!
//! A grant that arrives after its request timed out is given back at once, so a slow
//! parent can delay a write but never strand a lease.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::proto::{self, BrokerReply, BrokerRequest, WorkerMessage};
use crate::time::Instant;

/// Why a broker request did not get an answer. Every case fails the write closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("too many outstanding broker requests")]
    Saturated,
    #[error("the parent is gone")]
    ParentGone,
    #[error("the broker did not answer in time")]
    TimedOut,
    /// The request has a field (a name, a path) too long for any frame to the parent.
    #[error("the request is too large to send to the broker")]
    TooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    Reply { id: u64, reply: BrokerReply },
    Failed { id: u64, error: ClientError },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    Lease,
    Reservation,
    Partial,
    Dav,
    Proxy,
    Cgi,
    None,
}

impl Grant {
    fn of(request: &BrokerRequest) -> Grant {
        match request {
            BrokerRequest::AcquireLease { .. } => Grant::Lease,
            BrokerRequest::ReserveUpload { .. } => Grant::Reservation,
            BrokerRequest::ReservePartial { .. } | BrokerRequest::AdoptPartial { .. } => {
                Grant::Partial
            }
            BrokerRequest::DavLock { .. } => Grant::Dav,
            BrokerRequest::AcquireProxyGrants { .. } => Grant::Proxy,
            BrokerRequest::AcquireCgiGrants { .. } => Grant::Cgi,
            _ => Grant::None,
        }
    }
}

#[derive(Debug, Clone)]
struct Pending {
    grant: Grant,
    deadline: Instant,
    /// A compensating release: its answer matters to nobody.
    internal: bool,
}

#[derive(Debug, Clone)]
pub struct BrokerClient {
    next_id: u64,
    capacity: usize,
    reply_timeout: Duration,
    pending: BTreeMap<u64, Pending>,
    deadlines: BTreeSet<(Instant, u64)>,
    timed_out: BTreeMap<u64, Grant>,
    outgoing: VecDeque<WorkerMessage>,
    closed: bool,
}

impl BrokerClient {
    pub fn new(capacity: u32, reply_timeout: Duration) -> Self {
        BrokerClient {
            next_id: 1,
            capacity: capacity.max(1) as usize,
            reply_timeout,
            pending: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            timed_out: BTreeMap::new(),
            outgoing: VecDeque::new(),
            closed: false,
        }
    }

    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// Start a request. On success the message to send is queued in
    /// [`BrokerClient::poll_outgoing`] and the request's ID returned.
    pub fn request(&mut self, now: Instant, request: BrokerRequest) -> Result<u64, ClientError> {
        if self.closed {
            return Err(ClientError::ParentGone);
        }
        // Releases in flight do not count: they bypass the bound, and they must not take
        // a place a waiting request could have.
        if self.pending.values().filter(|p| !p.internal).count() >= self.capacity {
            return Err(ClientError::Saturated);
        }
        // Refused here, before it takes a place, rather than by the encoder later: every
        // queued message is one the channel can carry. (Releases carry only IDs.)
        if proto::check_request(&request).is_err() {
            return Err(ClientError::TooLarge);
        }
        Ok(self.send(now, request, false))
    }

    /// Give something back. Releases bypass the outstanding-request bound (refusing to
    /// free a lease because the queue is busy would hold it until its expiry) and nobody
    /// waits for their answer. After parent EOF there is nothing to release to: the
    /// parent's revocation already took everything back.
    pub fn release(&mut self, now: Instant, request: BrokerRequest) {
        if !self.closed {
            self.send(now, request, true);
        }
    }

    fn send(&mut self, now: Instant, request: BrokerRequest, internal: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let deadline = now + self.reply_timeout;
        self.pending.insert(
            id,
            Pending {
                grant: Grant::of(&request),
                deadline,
                internal,
            },
        );
        self.deadlines.insert((deadline, id));
        self.outgoing
            .push_back(WorkerMessage::Broker { id, request });
        id
    }

    pub fn poll_outgoing(&mut self) -> Option<WorkerMessage> {
        self.outgoing.pop_front()
    }

    /// An answer arrived. `None` when nobody waits for it any more.
    pub fn on_reply(&mut self, now: Instant, id: u64, reply: BrokerReply) -> Option<Completion> {
        if let Some(p) = self.pending.remove(&id) {
            self.deadlines.remove(&(p.deadline, id));
            return (!p.internal).then_some(Completion::Reply { id, reply });
        }
        let grant = self.timed_out.remove(&id)?;
        if let BrokerReply::Granted { id: granted, .. } = reply {
            let release = match grant {
                Grant::Lease => Some(BrokerRequest::ReleaseLease { id: granted }),
                Grant::Reservation => Some(BrokerRequest::ReleaseReservation { id: granted }),
                Grant::Partial => Some(BrokerRequest::ReleasePartial { id: granted }),
                Grant::Dav => Some(BrokerRequest::DavUnlock { token: granted }),
                Grant::Proxy | Grant::Cgi | Grant::None => None,
            };
            if let (Some(release), false) = (release, self.closed) {
                self.send(now, release, true);
            }
        }
        let give_back = match (reply, grant) {
            (BrokerReply::ProxyGrants { granted }, Grant::Proxy) => {
                Some(BrokerRequest::ReturnProxyGrants { count: granted })
            }
            (BrokerReply::CgiGrants { granted }, Grant::Cgi) => {
                Some(BrokerRequest::ReturnCgiGrants { count: granted })
            }
            _ => None,
        };
        if let (Some(give_back), false) = (give_back, self.closed) {
            self.send(now, give_back, true);
        }
        None
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if self.deadlines.len() != self.pending.len() {
            return Err(format!(
                "{} deadlines for {} pending requests",
                self.deadlines.len(),
                self.pending.len()
            ));
        }
        // (Mostly none pending: no walk of an empty tree.)
        let user = if self.pending.is_empty() {
            0
        } else {
            self.pending.values().filter(|p| !p.internal).count()
        };
        if user > self.capacity {
            return Err(format!(
                "{user} outstanding requests exceed capacity {}",
                self.capacity
            ));
        }
        if self.closed && !self.pending.is_empty() {
            return Err("requests pending on a closed channel".into());
        }
        Ok(())
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Completion> {
        let mut failed = Vec::new();
        while let Some(&(t, id)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.pending.remove(&id) {
                // Remember what it could still grant, to give it back if it arrives.
                if p.grant != Grant::None {
                    self.timed_out.insert(id, p.grant);
                }
                if !p.internal {
                    failed.push(Completion::Failed {
                        id,
                        error: ClientError::TimedOut,
                    });
                }
            }
        }
        failed
    }

    /// The control channel reached EOF: everything outstanding fails closed, and so
    /// will everything asked from now on.
    pub fn channel_closed(&mut self) -> Vec<Completion> {
        self.closed = true;
        self.deadlines.clear();
        self.timed_out.clear();
        self.outgoing.clear();
        core::mem::take(&mut self.pending)
            .into_iter()
            .filter(|(_, p)| !p.internal)
            .map(|(id, _)| Completion::Failed {
                id,
                error: ClientError::ParentGone,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::LeaseId;
    use crate::proto::TargetKey;

    fn key() -> TargetKey {
        TargetKey {
            dir_device: 1,
            dir_inode: 2,
            name: "f".into(),
        }
    }

    #[test]
    fn a_request_no_frame_can_carry_is_refused_before_it_takes_a_place() {
        let mut c = BrokerClient::new(1, Duration::from_secs(1));
        let long = TargetKey {
            name: "n".repeat(crate::proto::MAX_FRAME_DEFAULT),
            ..key()
        };
        let t0 = Instant::ZERO;
        assert_eq!(
            c.request(t0, BrokerRequest::AcquireLease { key: long }),
            Err(ClientError::TooLarge)
        );
        assert_eq!(c.outstanding(), 0);
        assert_eq!(c.poll_outgoing(), None);
        // A record is cut to fit instead.
        let record = "r".repeat(2 * crate::proto::MAX_FRAME_DEFAULT);
        assert!(c.request(t0, BrokerRequest::AppendLog { record }).is_ok());
        c.check_invariants().expect("invariants");
    }

    /// The client's own checker notices a request without its deadline, more user
    /// requests than the capacity, and a request left pending on a closed channel.
    #[test]
    fn the_invariant_check_notices_each_broken_rule() {
        let t0 = Instant::ZERO;
        let pending = || {
            let mut c = BrokerClient::new(2, Duration::from_secs(1));
            assert!(
                c.request(t0, BrokerRequest::AcquireLease { key: key() })
                    .is_ok()
            );
            c.check_invariants().expect("a sound client passes");
            c
        };
        let mut no_deadline = pending();
        no_deadline.deadlines.clear();
        let mut over_capacity = pending();
        over_capacity.capacity = 0;
        let mut closed = pending();
        closed.closed = true;
        for (what, c) in [
            ("a request without its deadline", no_deadline),
            ("more user requests than the capacity", over_capacity),
            ("a request pending on a closed channel", closed),
        ] {
            assert!(c.check_invariants().is_err(), "not noticed: {what}");
        }
    }

    #[test]
    fn a_late_grant_is_released_at_once() {
        let mut c = BrokerClient::new(4, Duration::from_secs(1));
        let t0 = Instant::ZERO;
        let id = c
            .request(t0, BrokerRequest::AcquireLease { key: key() })
            .expect("room");
        assert!(c.poll_outgoing().is_some());
        assert_eq!(
            c.handle_timeout(t0 + Duration::from_millis(999)),
            vec![],
            "not before its deadline"
        );
        assert_eq!(c.outstanding(), 1);
        let failed = c.handle_timeout(t0 + Duration::from_secs(1));
        assert_eq!(
            failed,
            vec![Completion::Failed {
                id,
                error: ClientError::TimedOut
            }]
        );
        let late = c.on_reply(
            t0 + Duration::from_secs(2),
            id,
            BrokerReply::Granted {
                id: LeaseId(7),
                expires_in_ms: 1,
            },
        );
        assert_eq!(late, None);
        match c.poll_outgoing() {
            Some(WorkerMessage::Broker {
                request: BrokerRequest::ReleaseLease { id },
                ..
            }) => assert_eq!(id, LeaseId(7)),
            other => panic!("expected a compensating release, got {other:?}"),
        }
    }

    #[test]
    fn a_release_in_flight_takes_no_place_from_a_request() {
        let mut c = BrokerClient::new(1, Duration::from_secs(1));
        let t0 = Instant::ZERO;
        c.release(t0, BrokerRequest::ReleaseLease { id: LeaseId(3) });
        c.release(t0, BrokerRequest::ReleaseLease { id: LeaseId(4) });
        c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 })
            .expect("releases do not fill the only place");
        assert_eq!(
            c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 }),
            Err(ClientError::Saturated)
        );
        c.check_invariants().expect("invariants");
    }

    #[test]
    fn saturation_and_parent_death_fail_closed() {
        let mut c = BrokerClient::new(2, Duration::from_secs(1));
        let t0 = Instant::ZERO;
        c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 })
            .expect("room");
        c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 })
            .expect("room");
        assert_eq!(
            c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 }),
            Err(ClientError::Saturated)
        );
        assert_eq!(c.outstanding(), 2);
        // Giving back is never refused for lack of room.
        c.release(t0, BrokerRequest::ReleaseLease { id: LeaseId(3) });
        assert_eq!(std::iter::from_fn(|| c.poll_outgoing()).count(), 3);
        c.check_invariants().expect("invariants");
        let failed = c.channel_closed();
        assert_eq!(failed.len(), 2, "the internal release completes nobody");
        assert_eq!(
            c.request(t0, BrokerRequest::ReserveUpload { bytes: 1 }),
            Err(ClientError::ParentGone)
        );
        assert_eq!(c.outstanding(), 0);
    }
}
