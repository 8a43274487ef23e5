//! The parent's side of `--http3`: reuseport groups of UDP sockets, one group per address
//! the TCP listeners use, each socket with a lock, grown, shrunk and steered as the core
//! decides (`servery_core::supervisor::QuicSteering`, decision 0079).
//!
//! Why the parent holds them (decision 0027): a socket the parent keeps open outlives the
//! worker that reads it, so the groups change only when the core says so, and a
//! crashed worker's replacement, given the same socket, answers its predecessor's
//! connections with stateless resets.
//!
//! Why every worker reads a socket of its own (decision 0079): a recycle or reload starts
//! the replacement before the old worker drains, and both must serve at once — the
//! draining one its open connections until their responses are delivered, the new one
//! every new connection. The steering program (`super::steering`) sends a connection's
//! packets to the socket its connection ID names and new connections only to the sockets
//! of workers that serve and are not draining. Sockets are only ever added or removed at
//! the group's end, so an index keeps naming the same socket while anyone reads it; the
//! socket's index is written into its lock's memfd, so the worker that reads it issues IDs
//! naming it.
//!
//! Who reads which socket, and when one is opened or closed, is the core's alone
//! (`servery_core::supervisor::QuicSteering`, decision 0119): this file opens and closes
//! sockets at the groups' end to the count it is given and hands each worker the socket
//! at its index. The core frees a socket only once its reader was reaped, so no process
//! still holds a socket the parent closes or hands on.
//!
//! Why a lock still: a second guard under that rule. The reader holds an exclusive
//! `flock` on the socket's memfd (through an open file description of its own) while it
//! reads, and a new reader starts only once it has the lock; the kernel releases it when
//! the holder dies, `kill -9` included.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{AddressFamily, SocketType, ipproto, sockopt};
use servery_core::ids::WorkerId;
use servery_core::supervisor::{QuicSteering, StrayConnection};

/// Where in a slot lock's memfd the byte saying what its reader does with a stray new
/// connection sits (1: leave it unanswered; 0 or absent: refuse it), after the index.
pub const STRAY_AT: u64 = 4;

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

/// One socket of a group and its lock.
#[derive(Debug)]
struct SlotSocket {
    socket: UdpSocket,
    lock: OwnedFd,
}

/// Every group's sockets, by index, and the steering they are under.
#[derive(Debug, Default)]
pub struct QuicSockets {
    /// The addresses bound, as bound (a port 0 resolved), in the order of each index's
    /// sockets.
    addrs: Vec<SocketAddr>,
    /// `sockets[i]` holds the socket at index `i` of every address's group.
    sockets: Vec<Vec<SlotSocket>>,
    /// The core's latest decision.
    steering: QuicSteering,
}

impl QuicSockets {
    /// Binds the first socket of a group on each of `addrs` (the TCP listeners'
    /// addresses, so the same ports), under a program that leaves every choice to the
    /// kernel's hash until the core steers. A UDP port another program already uses is an
    /// error rather than a share: with `SO_REUSEPORT` set by the same user the kernel
    /// would otherwise let us join its group and split its datagrams with it.
    pub fn bind(addrs: &[SocketAddr]) -> Result<Self, QuicBindError> {
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
            sockets: Vec::new(),
            steering: QuicSteering::default(),
        };
        sockets.apply(&QuicSteering {
            readers: vec![None],
            accepting: Vec::new(),
        })?;
        Ok(sockets)
    }

    /// Carries out the core's steering: binds sockets at the groups' end up to its count
    /// (each joins as the next index), closes those past it (only ever at the end, so
    /// every other keeps its index), and attaches the program that steers by it.
    pub fn apply(&mut self, steering: &QuicSteering) -> Result<(), QuicBindError> {
        let want = steering.readers.len().max(1);
        while self.sockets.len() < want {
            let index = u32::try_from(self.sockets.len()).unwrap_or(u32::MAX);
            let mut group = Vec::with_capacity(self.addrs.len());
            for &addr in &self.addrs {
                let socket =
                    bind_reuseport(addr).map_err(|source| QuicBindError::Bind { addr, source })?;
                let lock =
                    rustix::fs::memfd_create("servery-quic-slot", rustix::fs::MemfdFlags::CLOEXEC)
                        .map_err(|e| QuicBindError::Lock(e.into()))?;
                rustix::io::pwrite(&lock, &index.to_le_bytes(), 0)
                    .map_err(|e| QuicBindError::Lock(e.into()))?;
                group.push(SlotSocket { socket, lock });
            }
            self.sockets.push(group);
        }
        self.sockets.truncate(want);
        self.steering = steering.clone();
        // What each socket's reader does with a new connection once it drains, as the
        // core says (`QuicSteering::stray_connection`): written before the drain that
        // follows this steering is sent, so the reader finds it when it needs it.
        for (index, group) in self.sockets.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            let stray = [u8::from(
                steering.stray_connection(index) == StrayConnection::Ignore,
            )];
            for slot in group {
                rustix::io::pwrite(&slot.lock, &stray, STRAY_AT)
                    .map_err(|e| QuicBindError::Lock(e.into()))?;
            }
        }
        // Attached through index 0's socket, which every group keeps: the program is the
        // group's, and attaching again replaces it at once.
        let program = super::steering::program(steering);
        for (i, first) in self.sockets[0].iter().enumerate() {
            crate::os::attach_reuseport_cbpf(&first.socket, &program).map_err(|source| {
                QuicBindError::Steering {
                    addr: self.addrs[i],
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// How many sockets each group holds.
    pub fn sockets(&self) -> usize {
        self.sockets.len()
    }

    /// The local addresses of index 0's sockets (one per address bound).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .first()
            .into_iter()
            .flatten()
            .filter_map(|s| s.socket.local_addr().ok())
            .collect()
    }

    /// The descriptors `worker` is handed, socket then lock for each address: those at
    /// the index the core gave it (none if it gave none: the worker serves TCP only).
    pub fn for_worker(&self, worker: WorkerId) -> Vec<BorrowedFd<'_>> {
        let Some(index) = self.steering.socket_of(worker) else {
            return Vec::new();
        };
        self.sockets
            .get(index as usize)
            .into_iter()
            .flatten()
            .flat_map(|s| [s.socket.as_fd(), s.lock.as_fd()])
            .collect()
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

    /// `n` sockets, read by workers 1..=n, those at `accepting` taking new connections.
    fn steering(n: u64, accepting: &[u32]) -> QuicSteering {
        QuicSteering {
            readers: (1..=n).map(|w| Some(WorkerId(w))).collect(),
            accepting: accepting.to_vec(),
        }
    }

    #[test]
    fn every_socket_is_on_the_same_port_and_a_taken_port_is_refused() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr]).expect("bind");
        sockets.apply(&steering(3, &[0, 1, 2])).expect("apply");
        assert_eq!(sockets.sockets(), 3);
        for group in &sockets.sockets {
            assert_eq!(group[0].socket.local_addr().expect("addr"), addr);
            assert!(sockopt::socket_reuseport(&group[0].socket).expect("getsockopt"));
        }
        // Another program (no SO_REUSEPORT) cannot join; and we refuse to join theirs.
        assert!(UdpSocket::bind(addr).is_err());
        let err = QuicSockets::bind(&[addr]).expect_err("in use");
        assert!(matches!(err, QuicBindError::InUse { .. }), "{err}");
    }

    /// Which of the sockets on `addr` receives `payload`, sent from `from`.
    fn receiver(sockets: &QuicSockets, from: &UdpSocket, payload: &[u8]) -> usize {
        let addr = sockets.local_addrs()[0];
        from.send_to(payload, addr).expect("send");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut buf = [0u8; 1500];
        loop {
            for (i, group) in sockets.sockets.iter().enumerate() {
                group[0].socket.set_nonblocking(true).expect("nonblocking");
                if let Ok((n, _)) = group[0].socket.recv_from(&mut buf) {
                    assert_eq!(&buf[..n], payload);
                    return i;
                }
            }
            assert!(std::time::Instant::now() < deadline, "nothing received");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    use crate::http3::steering::{CID_LEN, INDEX_BYTE, UNSTEERED};

    fn short(index: u8) -> Vec<u8> {
        let mut packet = vec![0x40; 24];
        packet[1 + INDEX_BYTE] = index;
        packet
    }

    /// A long-header packet of `kind` (0 Initial, 2 Handshake) with a `cid_len`-byte
    /// destination ID whose first byte is `first` and the rest `seed`.
    fn long(kind: u8, cid_len: u8, first: u8, seed: u8) -> Vec<u8> {
        let mut packet = vec![0xc0 | (kind << 4), 0, 0, 0, 1, cid_len];
        packet.push(first);
        packet.extend(std::iter::repeat_n(seed, usize::from(cid_len) - 1));
        packet.extend([0u8; 16]);
        packet
    }

    #[test]
    fn packets_of_a_connection_reach_the_socket_their_connection_id_names_draining_or_not() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr]).expect("bind");
        // Socket 1's worker drains: it takes no new connections but keeps its own.
        sockets.apply(&steering(3, &[0, 2])).expect("apply");
        for _ in 0..4 {
            let client = UdpSocket::bind(lo()).expect("client");
            for index in [2u8, 0, 1, 2, 1, 0] {
                let named = usize::from(index);
                assert_eq!(receiver(&sockets, &client, &short(index)), named);
                let handshake = long(2, CID_LEN as u8, index, 7);
                assert_eq!(receiver(&sockets, &client, &handshake), named);
                let second_initial = long(0, CID_LEN as u8, index, 9);
                assert_eq!(receiver(&sockets, &client, &second_initial), named);
            }
            // IDs naming no socket read go where new connections go.
            for other in [short(3), short(UNSTEERED), long(2, CID_LEN as u8, 5, 1)] {
                assert_ne!(receiver(&sockets, &client, &other), 1);
            }
        }
    }

    /// The heart of decision 0079: a draining worker's socket gets no new connection, from
    /// any client, whatever ID it chose; they spread over the sockets that accept.
    #[test]
    fn new_connections_reach_only_the_sockets_that_accept() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr]).expect("bind");
        sockets.apply(&steering(3, &[0, 2])).expect("apply");
        let mut seen = [0u32; 3];
        for seed in 0..64u8 {
            let client = UdpSocket::bind(lo()).expect("client");
            let initial = long(0, 20, seed.wrapping_mul(37), seed);
            seen[receiver(&sockets, &client, &initial)] += 1;
        }
        assert_eq!(
            seen[1], 0,
            "a draining worker's socket got new connections: {seen:?}"
        );
        assert!(seen[0] > 0 && seen[2] > 0, "spread over both: {seen:?}");
        // The steering changes (the next recycle): at once, only the new one.
        sockets.apply(&steering(3, &[1])).expect("apply");
        for seed in 0..16u8 {
            let client = UdpSocket::bind(lo()).expect("client");
            assert_eq!(receiver(&sockets, &client, &long(0, 8, seed, seed)), 1);
        }
    }

    /// The core's stray-connection rule reaches each socket's reader through its lock: a
    /// draining socket's reader leaves a new connection unanswered while another socket
    /// takes new ones, and refuses it during a stop.
    #[test]
    fn each_lock_says_what_its_reader_does_with_a_stray_new_connection() {
        let mut sockets = QuicSockets::bind(&[free_addr()]).expect("bind");
        let stray = |sockets: &QuicSockets, i: usize| {
            let mut byte = [9u8; 1];
            let n =
                rustix::io::pread(&sockets.sockets[i][0].lock, &mut byte, STRAY_AT).expect("read");
            (n == 1).then_some(byte[0])
        };
        sockets.apply(&steering(3, &[0, 2])).expect("apply");
        assert_eq!(
            [stray(&sockets, 0), stray(&sockets, 1), stray(&sockets, 2)],
            [Some(0), Some(1), Some(0)],
            "HTTP/3 stray rule: only the socket that takes no new connections, while others \
             do, leaves a new connection unanswered"
        );
        sockets.apply(&steering(3, &[])).expect("a stop");
        assert_eq!(
            [stray(&sockets, 0), stray(&sockets, 1), stray(&sockets, 2)],
            [Some(0), Some(0), Some(0)]
        );
    }

    /// The core frees a socket when its reader is gone: trailing ones leave the groups,
    /// index 0 never does, and a socket that joins again gets back its index.
    #[test]
    fn sockets_past_the_cores_count_leave_the_end_of_the_group() {
        let addr = free_addr();
        let mut sockets = QuicSockets::bind(&[addr]).expect("bind");
        sockets.apply(&steering(4, &[0, 1, 2, 3])).expect("apply");
        assert_eq!(sockets.for_worker(WorkerId(3)).len(), 2);
        let two = QuicSteering {
            readers: vec![Some(WorkerId(1)), None],
            accepting: vec![0],
        };
        sockets.apply(&two).expect("apply");
        assert_eq!(sockets.sockets(), 2);
        assert!(
            sockets.for_worker(WorkerId(3)).is_empty(),
            "not its socket any more"
        );
        for seed in 0..8u8 {
            let client = UdpSocket::bind(lo()).expect("client");
            assert_eq!(receiver(&sockets, &client, &long(0, 8, seed, seed)), 0);
        }
        sockets.apply(&QuicSteering::default()).expect("apply");
        assert_eq!(sockets.sockets(), 1, "index 0 keeps the port");
        sockets.apply(&steering(2, &[0, 1])).expect("apply");
        assert_eq!(sockets.for_worker(WorkerId(2)).len(), 2);
        let mut index = [0u8; 4];
        rustix::io::pread(&sockets.sockets[1][0].lock, &mut index, 0).expect("index");
        assert_eq!(u32::from_le_bytes(index), 1);
    }
}
