//! The parent's side of `--http3`: one `SO_REUSEPORT` UDP socket per worker slot on every
//! address the TCP listeners use, bound before any worker exists, each with a lock that
//! says which worker of the slot reads it.
//!
//! Why per slot, and why the parent holds them (decision 0027): the kernel picks a socket
//! of a reuseport group by a hash of the datagram's 4-tuple over the group's sockets. That
//! choice is stable for a connection only while the group does not change. The parent
//! keeps a slot's socket open across the recycle or reload of the workers that read it, so
//! the group does not change under them: a connection keeps landing on its slot's socket,
//! a worker's death loses only the connections its slot carried, and its replacement reads
//! the same socket. Sockets at the end of a group that no live worker holds (a rejected
//! reload's new slots) are closed ([`QuicSockets::worker_gone`]); slot 0's never is.
//!
//! Why a lock: a recycle or reload starts the replacement before the old worker drains.
//! Two processes reading one socket would each take the other's datagrams, so the old
//! worker holds the slot's lock (an exclusive `flock` on a memfd the parent made, through
//! an open file description of its own) until its QUIC connections have finished, and the
//! replacement starts reading only once it has the lock. The kernel releases it when the
//! holder dies, `kill -9` included.
//!
//! Steering (`super::steering`): each address's sockets form one reuseport group with a
//! classic-BPF program that sends a packet to the socket its connection ID names. The
//! socket's index in the group is written into its lock's memfd, so the worker that reads
//! it issues IDs naming it. Sockets are only ever added or removed at the group's end, so
//! an index keeps naming the same socket while anyone reads it.

use std::collections::BTreeSet;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{AddressFamily, SocketType, ipproto, sockopt};

/// Errors binding the HTTP/3 sockets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicBindError {
    #[error("cannot listen for HTTP/3 on udp {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot listen for HTTP/3 on udp {addr}: the port is already in use by another program"
    )]
    InUse { addr: SocketAddr },
    #[error("cannot make the HTTP/3 slot lock: {0}")]
    Lock(#[source] io::Error),
    #[error("cannot attach the HTTP/3 steering program on udp {addr}: {source}")]
    Steering {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// One slot's socket and its lock.
#[derive(Debug)]
struct SlotSocket {
    socket: UdpSocket,
    lock: OwnedFd,
}

/// One slot's sockets (one per address), and the workers they were handed to that the
/// core has not yet said are gone.
#[derive(Debug)]
struct Slot {
    sockets: Vec<SlotSocket>,
    holders: BTreeSet<u64>,
}

/// Every slot's sockets, in slot order per address.
#[derive(Debug, Default)]
pub struct QuicSockets {
    /// The addresses bound, as bound (a port 0 resolved), in the order of each slot's
    /// sockets.
    addrs: Vec<SocketAddr>,
    /// `slots[i]` holds slot `i`'s socket on every address: the `i`-th of each group.
    slots: Vec<Slot>,
}

impl QuicSockets {
    /// Binds `slots` sockets on each of `addrs` (the TCP listeners' addresses, so the same
    /// ports). A UDP port another program already uses is an error rather than a share:
    /// with `SO_REUSEPORT` set by the same user the kernel would otherwise let us join its
    /// group and split its datagrams with it.
    pub fn bind(addrs: &[SocketAddr], slots: u32) -> Result<Self, QuicBindError> {
        for &addr in addrs {
            // Nobody may be there: a plain bind (no SO_REUSEPORT) succeeds only on a free
            // port, and is closed again before ours are bound.
            match UdpSocket::bind(addr) {
                Ok(probe) => drop(probe),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(QuicBindError::InUse { addr });
                }
                Err(source) => return Err(QuicBindError::Bind { addr, source }),
            }
        }
        let mut sockets = QuicSockets {
            addrs: addrs.to_vec(),
            slots: Vec::new(),
        };
        sockets.grow(slots.max(1))?;
        Ok(sockets)
    }

    /// Binds sockets for slots up to `slots` (a reload that raised `--workers`): each new
    /// one joins the end of its address's group, so the indices the running workers'
    /// connection IDs name stay theirs. Nothing happens when there are enough already.
    pub fn grow(&mut self, slots: u32) -> Result<(), QuicBindError> {
        while self.slots.len() < slots as usize {
            let index = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
            let mut slot = Vec::with_capacity(self.addrs.len());
            for &addr in &self.addrs {
                let socket =
                    bind_reuseport(addr).map_err(|source| QuicBindError::Bind { addr, source })?;
                if index == 0 {
                    // The group exists once its first socket is bound; its program then
                    // serves every socket that joins later.
                    crate::os::attach_reuseport_cbpf(&socket, &super::steering::program())
                        .map_err(|source| QuicBindError::Steering { addr, source })?;
                }
                let lock =
                    rustix::fs::memfd_create("servery-quic-slot", rustix::fs::MemfdFlags::CLOEXEC)
                        .map_err(|e| QuicBindError::Lock(e.into()))?;
                rustix::io::pwrite(&lock, &index.to_le_bytes(), 0)
                    .map_err(|e| QuicBindError::Lock(e.into()))?;
                slot.push(SlotSocket { socket, lock });
            }
            self.slots.push(Slot {
                sockets: slot,
                holders: BTreeSet::new(),
            });
        }
        Ok(())
    }

    /// How many slots have sockets.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The local addresses of slot 0's sockets (one per address bound).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.slots
            .first()
            .into_iter()
            .flat_map(|slot| &slot.sockets)
            .filter_map(|s| s.socket.local_addr().ok())
            .collect()
    }

    /// The descriptors `worker` of `slot` is handed, socket then lock for each, when its
    /// generation runs `workers` workers: its own slot's, and those of the slots beyond
    /// `workers` that map onto it (a reload to fewer workers must leave no socket
    /// unread, or the kernel would keep hashing connections to it). The worker holds
    /// them until [`QuicSockets::worker_gone`].
    pub fn for_worker(&mut self, worker: u64, slot: u64, workers: u32) -> Vec<BorrowedFd<'_>> {
        let workers = u64::from(workers.max(1));
        let mine = |i: usize| i as u64 % workers == slot;
        for (_, s) in self.slots.iter_mut().enumerate().filter(|(i, _)| mine(*i)) {
            s.holders.insert(worker);
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, _)| mine(*i))
            .flat_map(|(_, slot)| slot.sockets.iter())
            .flat_map(|s| [s.socket.as_fd(), s.lock.as_fd()])
            .collect()
    }

    /// The core let `worker` go: it holds its sockets no more. Sockets at the end of the
    /// groups that no live worker holds are closed (all but slot 0's, which keeps the
    /// port and the steering program). A socket nobody reads would still get its share of
    /// new connections from the kernel's hash, and they would go unanswered: after a
    /// reload that raised `--workers` was rejected, its new slots' sockets were exactly
    /// that. Only the end of a group is ever removed, so every other socket keeps its
    /// index (the kernel fills a gap with the last socket), and a slot whose worker is
    /// being replaced gets its socket back, at the same index, when it is spawned.
    pub fn worker_gone(&mut self, worker: u64) {
        for slot in &mut self.slots {
            slot.holders.remove(&worker);
        }
        while self.slots.len() > 1 && self.slots.last().is_some_and(|s| s.holders.is_empty()) {
            self.slots.pop();
        }
    }
}

/// A non-blocking UDP socket with `SO_REUSEPORT`, bound to `addr`.
fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        Some(ipproto::UDP),
    )?;
    sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    Ok(UdpSocket::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lo() -> SocketAddr {
        "127.0.0.1:0".parse().expect("addr")
    }

    /// A UDP port of our own to bind on (port 0 would give each socket a different one).
    fn free_addr() -> SocketAddr {
        let free = UdpSocket::bind(lo()).expect("probe");
        free.local_addr().expect("addr")
    }

    #[test]
    fn every_slot_gets_a_socket_on_the_same_port_and_a_taken_port_is_refused() {
        let addr = free_addr();
        let sockets = QuicSockets::bind(&[addr], 3).expect("bind");
        assert_eq!(sockets.slots(), 3);
        for slot in &sockets.slots {
            assert_eq!(slot.sockets[0].socket.local_addr().expect("addr"), addr);
            assert!(sockopt::socket_reuseport(&slot.sockets[0].socket).expect("getsockopt"));
        }
        // Another program (no SO_REUSEPORT) cannot join; and we refuse to join theirs.
        assert!(UdpSocket::bind(addr).is_err());
        let err = QuicSockets::bind(&[addr], 1).expect_err("in use");
        assert!(matches!(err, QuicBindError::InUse { .. }), "{err}");
    }

    /// Which of the slot sockets on `addr` receives `payload`, sent from `from`.
    fn receiver(sockets: &QuicSockets, from: &UdpSocket, payload: &[u8]) -> usize {
        let addr = sockets.local_addrs()[0];
        from.send_to(payload, addr).expect("send");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut buf = [0u8; 64];
        loop {
            for (i, slot) in sockets.slots.iter().enumerate() {
                slot.sockets[0]
                    .socket
                    .set_nonblocking(true)
                    .expect("nonblocking");
                if let Ok((n, _)) = slot.sockets[0].socket.recv_from(&mut buf) {
                    assert_eq!(&buf[..n], payload);
                    return i;
                }
            }
            assert!(std::time::Instant::now() < deadline, "nothing received");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    #[test]
    fn short_header_packets_reach_the_socket_their_connection_id_names() {
        use crate::http3::steering::{INDEX_BYTE, UNSTEERED};
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr], 2).expect("bind");
        // A reload's new slot joins the group as the next index, under the same program.
        sockets.grow(3).expect("grow");
        let short = |index: u8| {
            let mut packet = vec![0x40; 24];
            packet[1 + INDEX_BYTE] = index;
            packet
        };
        // Several client addresses: the 4-tuple hash alone would send each to one socket
        // whatever its packets say.
        for _ in 0..4 {
            let client = UdpSocket::bind(lo()).expect("client");
            for index in [2u8, 0, 1, 2, 1, 0] {
                assert_eq!(
                    receiver(&sockets, &client, &short(index)),
                    usize::from(index)
                );
            }
            // Long headers, IDs naming no socket and runts go by the hash: one socket
            // for everything one client sends.
            let by_hash = receiver(&sockets, &client, &[0xc0; 24]);
            for other in [short(3), short(UNSTEERED), vec![0x40]] {
                assert_eq!(receiver(&sockets, &client, &other), by_hash);
            }
        }
    }

    #[test]
    fn slots_beyond_the_worker_count_are_shared_out_so_none_is_left_unread() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr], 4).expect("bind");
        // Four slots, a generation of four: one socket (and its lock) each.
        for slot in 0..4 {
            assert_eq!(sockets.for_worker(slot + 1, slot, 4).len(), 2);
        }
        // A generation of three: slot 0 also reads slot 3's socket.
        assert_eq!(sockets.for_worker(10, 0, 3).len(), 4);
        assert_eq!(sockets.for_worker(11, 1, 3).len(), 2);
        let total: usize = (0..3).map(|s| sockets.for_worker(20 + s, s, 3).len()).sum();
        assert_eq!(total, 8, "every socket handed to exactly one slot");
        // A generation of six: the slots without a socket serve TCP only.
        assert!(sockets.for_worker(30, 5, 6).is_empty());
    }

    /// A reload from two workers to four is rejected: its new slots' workers are gone and
    /// nobody else holds their sockets, which leave the groups, so the kernel spreads new
    /// connections over the sockets read. A socket before one still held stays (removing
    /// it would move the last socket into its index), and so does slot 0's.
    #[test]
    fn sockets_nobody_holds_leave_the_end_of_the_group() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr], 2).expect("bind");
        let _ = sockets.for_worker(1, 0, 2);
        let _ = sockets.for_worker(2, 1, 2);
        sockets.grow(4).expect("grow");
        let _ = sockets.for_worker(3, 2, 4);
        let _ = sockets.for_worker(4, 3, 4);
        // Slot 2's candidate goes first: slot 3's still holds the end, so nothing moves.
        sockets.worker_gone(3);
        assert_eq!(sockets.slots(), 4);
        sockets.worker_gone(4);
        assert_eq!(sockets.slots(), 2);
        for _ in 0..8 {
            let client = UdpSocket::bind(lo()).expect("client");
            assert!(receiver(&sockets, &client, &[0xc0; 24]) < 2);
        }
        // Slot 1's worker dies: its socket, now at the end, is closed while it has no
        // reader and comes back, at its index, for the replacement.
        sockets.worker_gone(2);
        assert_eq!(sockets.slots(), 1);
        sockets.worker_gone(1);
        assert_eq!(sockets.slots(), 1, "slot 0's socket keeps the port");
        sockets.grow(2).expect("grow");
        assert_eq!(sockets.for_worker(5, 1, 2).len(), 2);
        assert_eq!(sockets.slots(), 2);
    }
}
