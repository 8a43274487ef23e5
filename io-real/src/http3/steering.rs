//! Steering by connection ID (decisions 0027 and 0079): every connection ID a worker's
//! endpoint issues carries, in a fixed byte, the index of the socket it reads, and a
//! classic-BPF program on each reuseport group sends a packet naming a socket to that
//! socket. A client whose address changes (NAT rebinding, migration) then still reaches
//! the worker that knows its connection, and a draining worker keeps its connections
//! while new ones go elsewhere.
//!
//! - **Which socket a number names.** A reuseport program returns an index into the
//!   group's sockets in the order they joined it. The parent only ever adds or removes
//!   sockets at the group's end (closing another would move the last socket into the
//!   gap), so an index names the same socket while anyone reads it.
//! - **New connections** — a client's first flight carries a destination ID the client
//!   chose at random — go to one of the sockets the core says accept new connections
//!   (workers that serve and are not draining), picked by four bytes of that ID, which
//!   the client keeps until the server answers. The handshake's later packets carry the
//!   ID the server chose, which names its socket.
//! - **Anything too short to read** goes by the kernel's hash (an index past the group's
//!   end), as does a new connection while no socket accepts.

use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use rand::Rng;
use servery_core::supervisor::QuicSteering;

/// Bytes of every connection ID servery issues: the index byte and eight random bytes
/// (quinn's default IDs are eight random bytes; the index adds to them, not replaces).
pub const CID_LEN: usize = 9;

/// Where in a connection ID the socket index sits.
pub const INDEX_BYTE: usize = 0;

/// The index byte of sockets the program cannot name (index 255 and beyond: `--workers`
/// allows 1024); their connections are steered by the hash, as without a program.
pub const UNSTEERED: u8 = u8::MAX;

/// The index byte for the slot socket at `index` in its reuseport group.
pub fn index_byte(index: u32) -> u8 {
    u8::try_from(index)
        .ok()
        .filter(|&b| b != UNSTEERED)
        .unwrap_or(UNSTEERED)
}

/// Issues connection IDs that name one slot socket: [`INDEX_BYTE`] is its index, the
/// rest is random.
#[derive(Debug, Clone, Copy)]
pub struct SlotCidGenerator {
    byte: u8,
}

impl SlotCidGenerator {
    pub fn new(index: u32) -> Self {
        SlotCidGenerator {
            byte: index_byte(index),
        }
    }
}

impl ConnectionIdGenerator for SlotCidGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut bytes = [0u8; CID_LEN];
        // The thread-local CSPRNG quinn's own generators use.
        rand::rng().fill_bytes(&mut bytes);
        bytes[INDEX_BYTE] = self.byte;
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// One classic-BPF instruction (`struct sock_filter`): opcode, jump offsets if true and
/// if false, constant.
pub type Insn = (u16, u8, u8, u32);

/// The most instructions a classic-BPF program may have (`BPF_MAXINSNS`).
const MAX_INSNS: usize = 4096;

/// The program every slot socket group runs under `steering` (the core's decision,
/// decision 0079). On a UDP reuseport group the kernel starts it with the packet at the
/// UDP payload, so offset 0 is the QUIC first byte; it returns the index of the socket
/// that gets the packet.
///
/// - A packet whose destination connection ID servery issued — a short header, a
///   Handshake packet, or an Initial whose ID has servery's length — goes to the socket
///   its index byte names, if somebody reads that socket: a connection stays with the
///   worker that has it, draining or not.
/// - Anything else is a new connection (or names a socket nobody reads): it goes to one
///   of the sockets that accept new connections, picked by four bytes of its connection
///   ID, which the client chose at random and keeps for its whole first flight. With
///   none accepting, the kernel's hash picks (an index past the group's end).
pub fn program(steering: &QuicSteering) -> Vec<Insn> {
    // Classic-BPF opcodes (linux/filter.h).
    const LD_W_LEN: u16 = 0x80; // BPF_LD | BPF_W | BPF_LEN
    const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
    const MOD_K: u16 = 0x94; // BPF_ALU | BPF_MOD | BPF_K
    const JA: u16 = 0x05; // BPF_JMP | BPF_JA
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const RET_A: u16 = 0x16; // BPF_RET | BPF_A
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    /// The QUIC header-form bit: set on long headers.
    const LONG_HEADER: u32 = 0x80;
    /// A long header's packet-type bits, and the types whose ID may be servery's.
    const TYPE_BITS: u32 = 0x30;
    const INITIAL: u32 = 0x00;
    const HANDSHAKE: u32 = 0x20;
    /// A long header: first byte, version (4), the ID's length, then the ID.
    const LONG_CID_LEN_AT: u32 = 5;
    const LONG_CID_AT: u32 = 6;
    /// Four bytes of the ID to pick by: inside any ID a client may choose (at least
    /// eight bytes in an Initial, RFC 9000 §7.2), and random in servery's short headers.
    const PICK_AT: u32 = LONG_CID_AT;
    const SHORTEST: u32 = PICK_AT + 4;

    let read: Vec<u32> = steering
        .read()
        .filter(|&i| i < u32::from(UNSTEERED))
        .collect();
    // Room for the fixed part and a pair per read socket; what is left is the picks'.
    let room = (MAX_INSNS - 20 - 2 * read.len()) / 2;
    let accepting = &steering.accepting[..steering.accepting.len().min(room)];
    // Jump offsets count from the next instruction; every path ends in a return.
    let mut p: Vec<Insn> = vec![
        // 0: too short to be QUIC we can read → the hash.
        (LD_W_LEN, 0, 0, 0),
        (JGE_K, 1, 0, SHORTEST),
        (RET_K, 0, 0, u32::MAX),
        // 3: long header → 7.
        (LD_B_ABS, 0, 0, 0),
        (JSET_K, 2, 0, LONG_HEADER),
        // 5: short header: A = the index byte, on to the read check (14).
        (LD_B_ABS, 0, 0, 1 + INDEX_BYTE as u32),
        (JA, 0, 0, 7),
        // 7: Handshake → by index (13); Initial with servery's ID length → by index;
        //    anything else → pick (12).
        (AND_K, 0, 0, TYPE_BITS),
        (JEQ_K, 4, 0, HANDSHAKE),
        (JEQ_K, 0, 2, INITIAL),
        (LD_B_ABS, 0, 0, LONG_CID_LEN_AT),
        (JEQ_K, 1, 0, CID_LEN as u32),
        // 12: to pick; its offset is set once the read check's length is known.
        (JA, 0, 0, 0),
        // 13: A = the index byte of a long header's ID.
        (LD_B_ABS, 0, 0, LONG_CID_AT + INDEX_BYTE as u32),
    ];
    const TO_PICK: usize = 12;
    // 14: the read check: the socket the ID names, if somebody reads it.
    for &index in &read {
        p.push((JEQ_K, 0, 1, index));
        p.push((RET_A, 0, 0, 0));
    }
    p[TO_PICK].3 = u32::try_from(p.len() - TO_PICK - 1).unwrap_or(0);
    // Pick: an accepting socket by the ID's bytes, or the hash when none accepts.
    match accepting {
        [] => p.push((RET_K, 0, 0, u32::MAX)),
        [only] => p.push((RET_K, 0, 0, *only)),
        _ => {
            p.push((LD_W_ABS, 0, 0, PICK_AT));
            p.push((MOD_K, 0, 0, accepting.len() as u32));
            for (j, &index) in accepting.iter().enumerate() {
                p.push((JEQ_K, 0, 1, j as u32));
                p.push((RET_K, 0, 0, index));
            }
            p.push((RET_K, 0, 0, accepting[0]));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_issued_id_names_its_socket_and_is_otherwise_random() {
        let mut generator = SlotCidGenerator::new(3);
        let a = generator.generate_cid();
        let b = generator.generate_cid();
        assert_eq!(a.len(), CID_LEN);
        assert_eq!(a[INDEX_BYTE], 3);
        assert_eq!(b[INDEX_BYTE], 3);
        assert_ne!(a[1..], b[1..], "the rest is random");
        assert_eq!(SlotCidGenerator::new(254).generate_cid()[INDEX_BYTE], 254);
        assert_eq!(
            SlotCidGenerator::new(255).generate_cid()[INDEX_BYTE],
            UNSTEERED
        );
        assert_eq!(
            SlotCidGenerator::new(1000).generate_cid()[INDEX_BYTE],
            UNSTEERED
        );
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_a_return() {
        let workers = |n: u64| QuicSteering {
            readers: (1..=n)
                .map(|w| Some(servery_core::ids::WorkerId(w)))
                .collect(),
            accepting: (0..n as u32).collect(),
        };
        for steering in [
            QuicSteering::default(),
            workers(1),
            workers(3),
            workers(1100),
        ] {
            let program = program(&steering);
            assert!(program.len() <= MAX_INSNS);
            for (at, &(code, jt, jf, k)) in program.iter().enumerate() {
                if code == 0x05 {
                    assert!(at + 1 + (k as usize) < program.len(), "{at}");
                } else if code & 0x07 == 0x05 {
                    assert!(at + 1 + usize::from(jt.max(jf)) < program.len(), "{at}");
                }
            }
            assert_eq!(program.last().map(|i| i.0 & 0x07), Some(0x06));
        }
    }
}
