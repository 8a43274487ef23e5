//! The parent's HTTP/3 sockets as the real driver keeps them (`io-real/src/http3/sockets.rs`),
//! opened and closed only by the core's steering: a steering of `n` readers opens sockets
//! at the groups' end up to `n` (at least one) and closes those past it, and a worker is
//! handed, at its spawn, the socket at the index the steering gives it. A handed socket
//! is a copy the process holds until it dies, as a passed descriptor is.
//!
//! The host judges the core's decisions against them, the **HTTP/3 ownership rule**
//! (decision 0119):
//!
//! - a socket is never closed by the parent while a live process holds it (it would stay
//!   in the kernel's group, so the next socket opened at the end would take the index
//!   after it, and the steering's indices would name the wrong sockets);
//! - a socket a live process holds is the one the steering names it the reader of, at
//!   every steering (never handed on, freed or taken while it reads), and no socket is
//!   handed to a worker while another live process holds it (two readers of one socket);
//! - a worker reads one socket;
//! - the groups never end with a socket nobody reads (trailing sockets nobody reads are
//!   closed), socket 0 aside, which keeps the port.

use std::collections::BTreeMap;

use servery_core::WorkerId;
use servery_core::supervisor::QuicSteering;

#[derive(Debug, Default)]
pub(crate) struct QuicSockets {
    /// The parent's copies, by index: each socket's serial.
    open: Vec<u64>,
    next_serial: u64,
    /// The live processes holding a copy of each socket, by serial (the parent's own
    /// copy aside): a socket whose parent copy is closed lives on while one holds it.
    holders: BTreeMap<u64, Vec<WorkerId>>,
    steering: Option<QuicSteering>,
}

/// What one steering did to the sockets, for coverage.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Sockets closed at the groups' end.
    pub(crate) closed: usize,
    /// A socket stayed read by a process whose channel the parent had let go.
    pub(crate) kept_for_unreaped: bool,
}

impl QuicSockets {
    /// Carries out a steering as the real driver does; `gone` says which workers the
    /// parent has let go (their channel closed or untrusted).
    pub(crate) fn apply(
        &mut self,
        steering: &QuicSteering,
        gone: impl Fn(WorkerId) -> bool,
        violations: &mut Vec<String>,
    ) -> Applied {
        let mut applied = Applied::default();
        let want = steering.readers.len().max(1);
        while self.open.len() < want {
            self.next_serial += 1;
            self.open.push(self.next_serial);
        }
        while self.open.len() > want {
            let index = self.open.len() - 1;
            let Some(serial) = self.open.pop() else { break };
            applied.closed += 1;
            if let Some(&holder) = self.holders.get(&serial).and_then(|h| h.first()) {
                violations.push(format!(
                    "HTTP/3 ownership rule: the parent closed socket {index} while {holder}, \
                     alive, still holds it (it stays in the kernel's group until its last \
                     holder dies, so a socket opened at the end next would take index {} and \
                     the steering would name the wrong sockets)",
                    index + 1
                ));
            }
        }
        for (index, serial) in self.open.iter().enumerate() {
            let named = steering.readers.get(index).copied().flatten();
            for &holder in self.holders.get(serial).into_iter().flatten() {
                if named != Some(holder) {
                    violations.push(format!(
                        "HTTP/3 ownership rule: socket {index} is held by {holder}, alive, \
                         yet the steering names {} its reader (a worker's socket is its own \
                         until the parent reaps it)",
                        named.map_or_else(|| "nobody".to_string(), |w| w.to_string())
                    ));
                } else if gone(holder) {
                    applied.kept_for_unreaped = true;
                }
            }
        }
        for (index, reader) in steering.readers.iter().enumerate() {
            let Some(w) = reader else { continue };
            if let Some(first) = steering.readers[..index].iter().position(|r| r == reader) {
                violations.push(format!(
                    "HTTP/3 ownership rule: {w} is named the reader of sockets {first} and \
                     {index} (a worker reads one socket)"
                ));
            }
        }
        if steering.readers.len() > 1 && steering.readers.last().is_some_and(Option::is_none) {
            violations.push(format!(
                "HTTP/3 ownership rule: socket {} at the groups' end is read by nobody after \
                 the steering (trailing sockets nobody reads are closed)",
                steering.readers.len() - 1
            ));
        }
        self.steering = Some(steering.clone());
        applied
    }

    /// `worker` is spawned: it is handed the socket at the index the steering gives it,
    /// if any (none without `--http3`).
    pub(crate) fn hand(&mut self, worker: WorkerId, violations: &mut Vec<String>) {
        let Some(index) = self.steering.as_ref().and_then(|s| s.socket_of(worker)) else {
            return;
        };
        let Some(&serial) = self.open.get(index as usize) else {
            violations.push(format!(
                "HTTP/3 ownership rule: {worker} is given socket {index}, which the parent \
                 does not hold"
            ));
            return;
        };
        let holders = self.holders.entry(serial).or_default();
        if let Some(&other) = holders.first() {
            violations.push(format!(
                "HTTP/3 ownership rule: socket {index} handed to {worker} while {other}, \
                 alive, still holds it (two readers of one socket)"
            ));
        }
        holders.push(worker);
    }

    /// `worker`'s process died: its copies are closed.
    pub(crate) fn died(&mut self, worker: WorkerId) {
        self.holders.retain(|_, holders| {
            holders.retain(|w| *w != worker);
            !holders.is_empty()
        });
    }

    /// How many sockets each group holds now.
    #[cfg(test)]
    pub(crate) fn sockets(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steering(readers: &[Option<u64>]) -> QuicSteering {
        QuicSteering {
            readers: readers.iter().map(|r| r.map(WorkerId)).collect(),
            accepting: Vec::new(),
        }
    }

    #[test]
    fn sockets_open_and_close_at_the_end_as_the_steering_says() {
        let mut s = QuicSockets::default();
        let mut v = Vec::new();
        s.apply(&steering(&[Some(1), Some(2)]), |_| false, &mut v);
        s.hand(WorkerId(1), &mut v);
        s.hand(WorkerId(2), &mut v);
        assert_eq!(s.sockets(), 2);
        s.died(WorkerId(2));
        let applied = s.apply(&steering(&[Some(1)]), |_| false, &mut v);
        assert_eq!((s.sockets(), applied.closed), (1, 1));
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_socket_closed_or_handed_on_while_its_holder_lives_breaks_the_rule() {
        let mut s = QuicSockets::default();
        let mut v = Vec::new();
        s.apply(&steering(&[Some(1), Some(2)]), |_| false, &mut v);
        s.hand(WorkerId(1), &mut v);
        s.hand(WorkerId(2), &mut v);
        // Worker 2's channel is gone but it lives: its socket is closed under it.
        s.apply(&steering(&[Some(1)]), |w| w == WorkerId(2), &mut v);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("HTTP/3 ownership rule: the parent closed socket 1"));
        // Worker 1's socket handed to worker 3 while 1 lives.
        v.clear();
        s.apply(&steering(&[Some(3)]), |_| false, &mut v);
        s.hand(WorkerId(3), &mut v);
        assert!(
            v.iter().any(|m| m.contains("yet the steering names w3")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|m| m.contains("two readers of one socket")),
            "{v:?}"
        );
    }

    #[test]
    fn a_trailing_socket_nobody_reads_and_a_worker_at_two_sockets_break_the_rule() {
        let mut s = QuicSockets::default();
        let mut v = Vec::new();
        s.apply(&steering(&[Some(1), None]), |_| false, &mut v);
        assert!(
            v[0].contains("trailing sockets nobody reads are closed"),
            "{v:?}"
        );
        v.clear();
        s.apply(&steering(&[Some(1), Some(1)]), |_| false, &mut v);
        assert!(v[0].contains("a worker reads one socket"), "{v:?}");
    }
}
