//! A `Content-Length` hyper cannot represent, answered `413` instead of hyper's `431`.
//!
//! hyper keeps the two largest `u64` values (2^64 − 2 and 2^64 − 1) for its own use and
//! refuses a request that declares either before servery sees it, with
//! `431 Request Header Fields Too Large` — the status of a head that is too large, which
//! this one is not (issue: RFC 9110 §8.6 asks for a clear refusal of a length the server
//! cannot take, and §15.5.14 gives it: `413`). Changing hyper's answer would need a fork
//! of its HTTP/1 parser, so the connection's stream does it instead, in two parts:
//!
//! - [`LengthScan`] watches the bytes read while no request is in progress (request heads;
//!   never a body) for the digits both values begin with, across read boundaries;
//! - when hyper's next write is its `431` and the digits were seen in this head, the
//!   stream writes servery's own answer in its place ([`super::error::message_bytes`]) and
//!   tells hyper its bytes were written.
//!
//! A `431` for any other reason (a head over the size bound, too many fields) stays
//! hyper's. Two cases are left as they are: a head that repeats these digits elsewhere and
//! breaks a size rule is answered `413`, and a pipelined head that arrived in one read with
//! the request before it keeps hyper's `431`; both refuse the request and close.

use memchr::memmem::Finder;
use std::sync::LazyLock;

/// What 2^64 − 2 and 2^64 − 1 have in common (a longer number fails hyper's parse and is
/// answered `400` by hyper; a shorter one reaches servery).
const DIGITS: &[u8] = b"1844674407370955161";

/// The start of hyper's answer to a head it refuses as too large.
const HYPER_431: &[u8] = b"HTTP/1.1 431 ";

static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(DIGITS));

/// Whether the current request head holds [`DIGITS`], fed the head's bytes as they arrive.
#[derive(Debug, Default)]
pub(super) struct LengthScan {
    /// The last bytes of the head so far that could begin the digits.
    carry: [u8; DIGITS.len() - 1],
    carry_len: usize,
    seen: bool,
    /// The connection's started-request count when this head began.
    head_of: u64,
}

impl LengthScan {
    /// Takes the next bytes read while no request is in progress; `started` is how many
    /// requests the connection has started (a new count means a new head).
    pub(super) fn feed(&mut self, started: u64, bytes: &[u8]) {
        if started != self.head_of {
            *self = LengthScan {
                head_of: started,
                ..LengthScan::default()
            };
        }
        if self.seen || bytes.is_empty() {
            return;
        }
        // The digits may straddle the last read and this one.
        if self.carry_len > 0 {
            let mut joint = [0u8; 2 * (DIGITS.len() - 1)];
            let head = bytes.len().min(DIGITS.len() - 1);
            joint[..self.carry_len].copy_from_slice(&self.carry[..self.carry_len]);
            joint[self.carry_len..self.carry_len + head].copy_from_slice(&bytes[..head]);
            if FINDER.find(&joint[..self.carry_len + head]).is_some() {
                self.seen = true;
                return;
            }
        }
        if FINDER.find(bytes).is_some() {
            self.seen = true;
            return;
        }
        // Keep the tail for the next read: the last bytes of carry + bytes.
        let keep = DIGITS.len() - 1;
        if bytes.len() >= keep {
            self.carry.copy_from_slice(&bytes[bytes.len() - keep..]);
            self.carry_len = keep;
        } else {
            let old = (keep - bytes.len()).min(self.carry_len);
            self.carry
                .copy_within(self.carry_len - old..self.carry_len, 0);
            self.carry[old..old + bytes.len()].copy_from_slice(bytes);
            self.carry_len = old + bytes.len();
        }
    }

    /// Whether the digits were seen in the current head.
    pub(super) fn seen(&self) -> bool {
        self.seen
    }

    /// Whether `out`, about to be written when `started` requests have started, is hyper
    /// refusing the head in which the digits were seen. A head that arrived in the same
    /// read as the pipelined request before it counts as that request's (`started` has
    /// moved on since), so hyper's `431` stands for it.
    pub(super) fn is_refusal_of_length(&self, started: u64, out: &[u8]) -> bool {
        self.seen && started == self.head_of && out.starts_with(HYPER_431)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fed(pieces: &[&[u8]]) -> bool {
        let mut scan = LengthScan::default();
        for piece in pieces {
            scan.feed(0, piece);
        }
        scan.seen()
    }

    #[test]
    fn the_reserved_values_are_seen_in_one_read_or_split_anywhere() {
        let head = b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551615\r\n\r\n";
        assert!(fed(&[head]));
        for cut in 0..head.len() {
            assert!(fed(&[&head[..cut], &head[cut..]]), "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = head.chunks(1).collect();
        assert!(fed(&bytes), "a byte at a time");
    }

    #[test]
    fn an_ordinary_length_is_not_seen() {
        assert!(!fed(&[
            b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551\r\n\r\n"
        ]));
    }

    #[test]
    fn a_new_request_starts_a_new_head() {
        let mut scan = LengthScan::default();
        scan.feed(0, b"X-Note: 1844674407370955161");
        assert!(scan.seen());
        scan.feed(1, b"GET / HTTP/1.1\r\n");
        assert!(!scan.seen());
        assert!(!scan.is_refusal_of_length(1, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"));
    }

    #[test]
    fn only_hyper_431_is_replaced() {
        let mut scan = LengthScan::default();
        scan.feed(0, b"Content-Length: 18446744073709551614\r\n");
        assert!(scan.is_refusal_of_length(0, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(!scan.is_refusal_of_length(0, b"HTTP/1.1 200 OK\r\n"));
        assert!(!scan.is_refusal_of_length(0, b"\x00\x00\x04\x08"));
        // Seen in a head read with the request before it, which has started since.
        assert!(!scan.is_refusal_of_length(1, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"));
    }

    proptest! {
        /// Cut anywhere, into any number of reads, the scan sees exactly what a search of
        /// the whole head would.
        #[test]
        fn any_split_agrees_with_the_whole(
            before in proptest::collection::vec(any::<u8>(), 0..40),
            after in proptest::collection::vec(any::<u8>(), 0..40),
            plant in any::<bool>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut whole = before;
            if plant {
                whole.extend_from_slice(DIGITS);
            }
            whole.extend_from_slice(&after);
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(whole.len() + 1)).collect();
            at.push(0);
            at.push(whole.len());
            at.sort_unstable();
            let slices: Vec<&[u8]> = at.windows(2).map(|w| &whole[w[0]..w[1]]).collect();
            prop_assert_eq!(fed(&slices), FINDER.find(&whole).is_some());
            prop_assert!(!plant || fed(&slices));
        }
    }
}
