//! Steering by connection ID (decision 0027): every connection ID a worker's endpoint
//! issues carries, in a fixed byte, the index of the slot socket it reads, and a
//! classic-BPF program on each reuseport group sends a short-header packet to the socket
//! that byte names. A client whose address changes (NAT rebinding, migration) then still
//! reaches the worker that knows its connection; the kernel's 4-tuple hash would pick a
//! socket at random.
//!
//! - **Which socket a number names.** A reuseport program returns an index into the
//!   group's sockets in the order they joined it. The parent binds slot `i`'s socket as
//!   the `i`-th of its address's group and never closes one while it runs (closing
//!   would move the group's last socket into the gap), so index `i` is slot `i` for the
//!   parent's life, across recycles, crashes and reloads; sockets added by a reload that
//!   raises `--workers` join at the end, as the next indices.
//! - **Long-header packets** (Initial, 0-RTT, Handshake) go by the kernel's hash, as
//!   nginx's `quic_bpf` does when the destination connection ID is not one it issued:
//!   a client's first Initial carries an ID the client chose at random, and the
//!   handshake's later packets come from the same address, so the hash keeps them with
//!   the first. Only an established connection can migrate (RFC 9000 §9), and it speaks
//!   in short headers.
//! - **Anything else** — a datagram too short to hold the byte, or the byte
//!   [`UNSTEERED`] — the program answers with an index past the group's end, which the
//!   kernel takes as "use the hash".

use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use rand::Rng;

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

/// The program every slot socket group runs. On a UDP reuseport group the kernel starts
/// it with the packet at the UDP payload, so offset 0 is the QUIC first byte.
pub fn program() -> Vec<Insn> {
    // Classic-BPF opcodes (linux/filter.h): loads, a bit test and returns.
    const LD_W_LEN: u16 = 0x80; // BPF_LD (0) | BPF_W (0) | BPF_LEN (0x80)
    const LD_B_ABS: u16 = 0x30; // BPF_LD (0) | BPF_B (0x10) | BPF_ABS (0x20)
    const JGE_K: u16 = 0x35; // BPF_JMP (5) | BPF_JGE (0x30) | BPF_K (0)
    const JEQ_K: u16 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
    const JSET_K: u16 = 0x45; // BPF_JMP (5) | BPF_JSET (0x40) | BPF_K (0)
    const RET_A: u16 = 0x16; // BPF_RET (6) | BPF_A (0x10)
    const RET_K: u16 = 0x06; // BPF_RET (6) | BPF_K (0)
    /// The QUIC header-form bit: set on long headers.
    const LONG_HEADER: u32 = 0x80;
    // Short header: the first byte, then the destination connection ID.
    let index_at = 1 + INDEX_BYTE as u32;
    // Jump offsets count from the next instruction; every path ends in a return.
    vec![
        // 0: too short to hold the index byte → hash (a load past the end would abort
        //    the program with 0, which names socket 0).
        (LD_W_LEN, 0, 0, 0),
        (JGE_K, 0, 5, index_at + 1),
        // 2: long header → hash.
        (LD_B_ABS, 0, 0, 0),
        (JSET_K, 3, 0, LONG_HEADER),
        // 4: short header → the socket the index byte names, unless it names none.
        (LD_B_ABS, 0, 0, index_at),
        (JEQ_K, 1, 0, u32::from(UNSTEERED)),
        (RET_A, 0, 0, 0),
        // 7: past any group's end: the kernel falls back to its hash.
        (RET_K, 0, 0, u32::MAX),
    ]
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
        let program = program();
        for (at, &(code, jt, jf, _)) in program.iter().enumerate() {
            if code & 0x07 == 0x05 {
                assert!(at + 1 + usize::from(jt.max(jf)) < program.len(), "{at}");
            }
        }
        assert_eq!(program.last().map(|i| i.0 & 0x07), Some(0x06));
    }
}
