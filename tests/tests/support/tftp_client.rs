//! A scripted TFTP peer for the tests that need to misbehave on purpose (stall, send
//! junk, race for the last slot): it sends exactly what it is told and reports what comes
//! back, with a bound on every wait.

#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, run_command};

/// Deterministic bytes that differ block to block, so a block sent twice or out of place
/// changes the file.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// servery with the fast test timings, `flags` and TFTP on an ephemeral port; the address
/// it says it serves TFTP on.
pub(crate) fn start_servery(tree: &Tree, workers: u32, flags: &[&str]) -> (Server, SocketAddr) {
    let mut args = FAST.to_vec();
    args.extend(["--tftp", "--tftp-port", "0"]);
    args.extend(flags);
    let mut server = Server::start(tree, workers, &args, &[]);
    let (line, _) = server.wait_stdout("servery: TFTP on udp ", Duration::from_secs(20));
    let addr = line
        .trim_start_matches("servery: TFTP on udp ")
        .parse()
        .expect("the TFTP address");
    (server, addr)
}

/// Runs a client to its end (bounded) and fails, naming `what`, unless it succeeded.
pub(crate) fn run(cmd: Command, what: &str) {
    let done = run_command(cmd, Duration::from_secs(60));
    assert!(
        done.status.success(),
        "{what} failed: {}\n{}",
        done.stdout,
        done.stderr
    );
}

pub(crate) struct Peer {
    pub socket: UdpSocket,
    last_from: std::cell::Cell<Option<SocketAddr>>,
}

/// What arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Data {
        block: u16,
        len: usize,
        from: SocketAddr,
    },
    Oack(String),
    Error {
        code: u16,
        message: String,
    },
    Other(Vec<u8>),
}

impl Peer {
    pub(crate) fn new() -> Peer {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind a client socket");
        Peer {
            socket,
            last_from: std::cell::Cell::new(None),
        }
    }

    /// Where the last datagram came from (a transfer's TID).
    pub(crate) fn last_from(&self) -> Option<SocketAddr> {
        self.last_from.get()
    }

    pub(crate) fn send(&self, to: SocketAddr, datagram: &[u8]) {
        self.socket.send_to(datagram, to).expect("send");
    }

    pub(crate) fn rrq(&self, to: SocketAddr, name: &str, options: &[(&str, &str)]) {
        self.send(to, &request(1, name, options));
    }

    pub(crate) fn wrq(&self, to: SocketAddr, name: &str, options: &[(&str, &str)]) {
        self.send(to, &request(2, name, options));
    }

    /// The next datagram, or `None` after `bound`.
    pub(crate) fn recv(&self, bound: Duration) -> Option<Reply> {
        self.socket.set_read_timeout(Some(bound)).expect("timeout");
        let mut buf = vec![0u8; 70_000];
        let (n, from) = self.socket.recv_from(&mut buf).ok()?;
        self.last_from.set(Some(from));
        let b = &buf[..n];
        let op = u16::from_be_bytes([b[0], b[1]]);
        let num = u16::from_be_bytes([b[2], b[3]]);
        Some(match op {
            3 => Reply::Data {
                block: num,
                len: n - 4,
                from,
            },
            5 => Reply::Error {
                code: num,
                message: String::from_utf8_lossy(&b[4..])
                    .trim_end_matches('\0')
                    .into(),
            },
            6 => Reply::Oack(String::from_utf8_lossy(&b[2..]).replace('\0', " ")),
            _ => Reply::Other(b.to_vec()),
        })
    }

    pub(crate) fn ack(&self, to: SocketAddr, block: u16) {
        let mut p = vec![0, 4];
        p.extend_from_slice(&block.to_be_bytes());
        self.send(to, &p);
    }
}

pub(crate) fn request(op: u16, name: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut p = op.to_be_bytes().to_vec();
    for field in [name, "octet"] {
        p.extend_from_slice(field.as_bytes());
        p.push(0);
    }
    for (k, v) in options {
        p.extend_from_slice(k.as_bytes());
        p.push(0);
        p.extend_from_slice(v.as_bytes());
        p.push(0);
    }
    p
}
