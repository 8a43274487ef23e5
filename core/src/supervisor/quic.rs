//! HTTP/3 socket ownership and steering (decision 0079): which of the parent's UDP
//! sockets each worker reads, and which of them receive new QUIC connections.
//!
//! The parent's sockets on an address form one reuseport group, each at a fixed index
//! (the driver only ever adds or removes at the group's end, so an index names the same
//! socket while anyone reads it). Every worker gets a socket of its own: the lowest index
//! nobody reads. So a recycle's replacement reads a different socket from the worker it
//! replaces, and both serve at once: the draining one its open connections, whose
//! connection IDs name its socket, the new one every new connection.
//!
//! A socket is its reader's from the worker's spawn until the parent reaps it (decision
//! 0119), not only until its channel closes: a process whose channel is gone (a garbage
//! frame, a closed pipe) may still read its copy of the socket until it dies, and a
//! socket leaves the kernel's group only when its last copy closes. Handing it on
//! earlier would give one socket two readers; closing the parent's copy of a trailing
//! one earlier would leave it in the group, so the next socket opened at the end would
//! take the index after it and the steering's indices would name the wrong sockets.
//! Once reaped, the socket is free: the lowest free index goes to the next worker, and
//! trailing sockets nobody reads are closed (index 0 stays, keeping the port).
//!
//! New connections (a client's first packets, which name no socket) go only to the
//! sockets of workers that serve and are not draining, [`QuicSteering::accepting`]. The
//! supervisor works the steering out again at every step that changes it, and emits it
//! *before* it tells a worker to drain, so no new connection is sent to a worker after
//! it was told to drain, and it never has to refuse one's handshake.

use crate::ids::WorkerId;

/// Where QUIC datagrams go, as the supervisor decided it at one lifecycle step. The
/// driver binds or closes sockets at the groups' end to `sockets`, hands each worker the
/// socket at its index, and steers by [`QuicSteering::accepting`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuicSteering {
    /// Who reads the socket at each index (`None`: nobody). Its length is the number of
    /// sockets each address's group holds, never less than one (index 0 keeps the port).
    pub readers: Vec<Option<WorkerId>>,
    /// The indices that receive new connections, ascending: those of workers that serve
    /// (ready, or committed and on their way to ready) and are not draining. Empty when
    /// none does (before the first commit, during a stop): the kernel's hash decides.
    pub accepting: Vec<u32>,
}

impl QuicSteering {
    /// How many sockets each group holds.
    pub fn sockets(&self) -> u32 {
        u32::try_from(self.readers.len()).unwrap_or(u32::MAX)
    }

    /// The index of the socket `worker` reads.
    pub fn socket_of(&self, worker: WorkerId) -> Option<u32> {
        self.readers
            .iter()
            .position(|r| *r == Some(worker))
            .and_then(|i| u32::try_from(i).ok())
    }

    /// What the reader of the socket at `index` does with a new connection that reaches it
    /// while the socket takes none (its worker drains): a handshake whose first packets
    /// were queued on the socket before the steering moved new connections off it
    /// (decision 0084). When another socket takes new connections it is left unanswered:
    /// its client sends its first flight again, unchanged, and the steering sends that to
    /// a serving worker; refusing it would fail that attempt outright. When none does (a
    /// stop), nothing would ever answer it: it is refused at once, so its client stops
    /// waiting.
    pub fn stray_connection(&self, index: u32) -> StrayConnection {
        if self.accepting.is_empty() || self.accepting.contains(&index) {
            StrayConnection::Refuse
        } else {
            StrayConnection::Ignore
        }
    }

    /// The indices somebody reads, ascending: where packets of an open connection may go.
    pub fn read(&self) -> impl Iterator<Item = u32> + '_ {
        self.readers
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .filter_map(|(i, _)| u32::try_from(i).ok())
    }
}

/// See [`QuicSteering::stray_connection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrayConnection {
    /// Leave it unanswered: its client's next first flight reaches a serving worker.
    Ignore,
    /// Refuse it (CONNECTION_REFUSED): nothing else takes new connections.
    Refuse,
}

/// The supervisor's record of who reads which socket, and the steering it last emitted.
#[derive(Debug, Clone, Default)]
pub(super) struct QuicSockets {
    readers: Vec<Option<WorkerId>>,
    emitted: Option<QuicSteering>,
}

impl QuicSockets {
    /// Whether any worker was ever given a socket (`--http3`).
    pub(super) fn in_use(&self) -> bool {
        !self.readers.is_empty()
    }

    /// The steering last emitted (what the driver carries out now), under `--http3`.
    pub(super) fn steering(&self) -> Option<&QuicSteering> {
        self.emitted.as_ref()
    }

    /// Gives `worker` the lowest index nobody reads, growing the groups by one if every
    /// socket is read.
    pub(super) fn take(&mut self, worker: WorkerId) -> u32 {
        let index = match self.readers.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.readers.push(None);
                self.readers.len() - 1
            }
        };
        self.readers[index] = Some(worker);
        u32::try_from(index).unwrap_or(u32::MAX)
    }

    /// `worker` was reaped: it reads its socket no more. Trailing sockets nobody reads
    /// leave the groups (index 0 stays, keeping the port); one before a socket still read
    /// stays, unread and never steered to, as closing it would move the last socket into
    /// its index.
    pub(super) fn release(&mut self, worker: WorkerId) {
        for reader in &mut self.readers {
            if *reader == Some(worker) {
                *reader = None;
            }
        }
        while self.readers.len() > 1 && self.readers.last().is_some_and(Option::is_none) {
            self.readers.pop();
        }
    }

    /// The **HTTP/3 ownership rule** on the record, under `--http3`: every worker not yet
    /// reaped (`tracked`, counted by `workers`) reads exactly one socket, nobody else
    /// reads one, and the groups end with a socket somebody reads (or are socket 0
    /// alone).
    pub(super) fn check(
        &self,
        workers: usize,
        tracked: impl Fn(WorkerId) -> bool,
    ) -> Result<(), String> {
        if !self.in_use() {
            return Ok(());
        }
        let mut read = 0usize;
        for (i, reader) in self.readers.iter().enumerate() {
            let Some(w) = *reader else { continue };
            read += 1;
            if !tracked(w) {
                return Err(format!(
                    "HTTP/3 ownership rule: socket {i} is still read by {w}, which was reaped"
                ));
            }
            if let Some(j) = self.readers[..i].iter().position(|r| *r == Some(w)) {
                return Err(format!(
                    "HTTP/3 ownership rule: {w} reads sockets {j} and {i} (a worker reads one)"
                ));
            }
        }
        if read != workers {
            return Err(format!(
                "HTTP/3 ownership rule: {workers} workers not yet reaped, {read} sockets read \
                 (each worker reads its own from its spawn to its reap)"
            ));
        }
        if self.readers.len() > 1 && self.readers.last().is_some_and(Option::is_none) {
            return Err(format!(
                "HTTP/3 ownership rule: socket {} at the groups' end is read by nobody \
                 (trailing sockets nobody reads are closed)",
                self.readers.len() - 1
            ));
        }
        Ok(())
    }

    /// The steering now, `accepts` saying which readers take new connections; `Some` only
    /// when it differs from what was last emitted.
    pub(super) fn changed(&mut self, accepts: impl Fn(WorkerId) -> bool) -> Option<QuicSteering> {
        let mut readers = self.readers.clone();
        if readers.is_empty() {
            readers.push(None);
        }
        let accepting = readers
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some_and(&accepts))
            .filter_map(|(i, _)| u32::try_from(i).ok())
            .collect();
        let now = QuicSteering { readers, accepting };
        if self.emitted.as_ref() == Some(&now) {
            return None;
        }
        self.emitted = Some(now.clone());
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_new_connection_is_refused_only_when_no_other_socket_takes_new_ones() {
        let steering = |accepting: &[u32]| QuicSteering {
            readers: vec![Some(WorkerId(1)), Some(WorkerId(2))],
            accepting: accepting.to_vec(),
        };
        // w1 drains, w2 serves: a handshake queued on w1's socket goes unanswered, and
        // its client's next first flight is steered to w2.
        assert_eq!(
            steering(&[1]).stray_connection(0),
            StrayConnection::Ignore,
            "HTTP/3 stray rule: a handshake left on a draining socket is refused while \
             another takes new connections"
        );
        // A stop: nothing serves, so nothing would ever answer it.
        assert_eq!(steering(&[]).stray_connection(0), StrayConnection::Refuse);
        assert_eq!(
            steering(&[0, 1]).stray_connection(0),
            StrayConnection::Refuse
        );
    }

    #[test]
    fn each_worker_reads_the_lowest_free_socket_and_only_the_end_is_ever_removed() {
        let mut s = QuicSockets::default();
        assert_eq!(s.take(WorkerId(1)), 0);
        assert_eq!(s.take(WorkerId(2)), 1);
        // A recycle's replacement does not share its predecessor's socket.
        assert_eq!(s.take(WorkerId(3)), 2);
        s.release(WorkerId(2));
        assert_eq!(s.readers.len(), 3, "a socket before a read one stays");
        assert_eq!(s.take(WorkerId(4)), 1, "the gap is filled first");
        s.release(WorkerId(3));
        s.release(WorkerId(4));
        assert_eq!(s.readers, vec![Some(WorkerId(1))]);
        s.release(WorkerId(1));
        let steering = s.changed(|_| true).expect("first");
        assert_eq!(steering.sockets(), 1, "index 0 keeps the port");
        assert!(steering.accepting.is_empty());
    }

    #[test]
    fn steering_is_emitted_only_when_it_changes_and_names_only_accepting_readers() {
        let mut s = QuicSockets::default();
        let (old, new) = (WorkerId(1), WorkerId(2));
        s.take(old);
        let first = s.changed(|w| w == old).expect("first");
        assert_eq!(first.accepting, vec![0]);
        assert_eq!(s.changed(|w| w == old), None, "unchanged: nothing to emit");
        s.take(new);
        // The replacement reads a socket of its own before it accepts.
        let spawned = s.changed(|w| w == old).expect("grown");
        assert_eq!((spawned.sockets(), spawned.socket_of(new)), (2, Some(1)));
        assert_eq!(spawned.accepting, vec![0]);
        // The old one drains: new connections go to the new one's socket only, while the
        // old one's stays read for the connections it has.
        let drained = s.changed(|w| w == new).expect("drain");
        assert_eq!(drained.accepting, vec![1]);
        assert_eq!(drained.read().collect::<Vec<_>>(), vec![0, 1]);
    }
}
