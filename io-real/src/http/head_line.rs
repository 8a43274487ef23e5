//! The raw request line of the head being read, kept so that a head refused before it
//! was parsed (`400`, `408`, `413`, `414`, `431`) is logged with what the client sent, as
//! nginx logs `$request` (decision 0080): scanners and broken clients show up by what
//! they asked, not as `"-"`.
//!
//! Fed with the bytes read while no request is in progress; keeps the first line (empty
//! lines before it skipped, RFC 9112 §2.2), up to [`HEAD_LINE_MAX`] bytes, without its
//! line end. A new head (the connection's started-request count changed) starts afresh.
//!
//! A pipelining client sends the next head in the same read as this one: when this head
//! ends in the read that completed its line, has no body (no `Content-Length`, no
//! `Transfer-Encoding`) and more bytes follow, those are the next head's, kept for the
//! request count it will be read under, so a refused pipelined head is logged with its
//! own line too (issue 34).

/// The most of a request line kept: longer ones are logged cut here (nginx's default
/// header buffer is 1 KiB too).
pub(super) const HEAD_LINE_MAX: usize = 1024;

/// One head's request line, as far as it has arrived.
#[derive(Debug, Clone, Default)]
pub(super) struct HeadLine {
    /// The connection's started-request count when this head began.
    head_of: u64,
    line: Vec<u8>,
    /// The line ended (or reached [`HEAD_LINE_MAX`]): later bytes are the rest of the head.
    done: bool,
    /// The next head's line, when it arrived in the read that ended this head.
    next: Option<Box<HeadLine>>,
}

impl HeadLine {
    /// Whether the line of the head `started` began is complete: nothing more to keep.
    pub(super) fn complete_for(&self, started: u64) -> bool {
        self.head_of == started && self.done
    }

    /// Takes the next bytes read while no request is in progress.
    pub(super) fn feed(&mut self, started: u64, mut bytes: &[u8]) {
        if started != self.head_of {
            match self.next.take() {
                // The pipelined head whose line was kept ahead of its turn.
                Some(next) if next.head_of == started => *self = *next,
                _ => {
                    self.head_of = started;
                    self.line.clear();
                    self.done = false;
                }
            }
        }
        if self.done {
            return;
        }
        if self.line.is_empty() {
            // Empty lines before a request line are ignored (RFC 9112 §2.2).
            let start = bytes
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .unwrap_or(bytes.len());
            bytes = &bytes[start..];
        }
        let (part, ended) = match memchr::memchr(b'\n', bytes) {
            Some(end) => (&bytes[..end], true),
            None => (bytes, false),
        };
        let room = HEAD_LINE_MAX - self.line.len();
        if part.len() > room {
            // Cut at the cap: what was cut, a line end included, is not looked at.
            self.line.extend_from_slice(&part[..room]);
            self.done = true;
            return;
        }
        self.line.extend_from_slice(part);
        if ended && self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        self.done = ended || self.line.len() >= HEAD_LINE_MAX;
        if ended {
            self.pipelined(&bytes[part.len() + 1..]);
        }
    }

    /// `rest` follows this head's line in the read that ended it: when it holds the end of
    /// a head without a body and more, the more is the next head's.
    fn pipelined(&mut self, rest: &[u8]) {
        let Some(end) = head_end(rest) else {
            return;
        };
        if end == rest.len() || declares_body(&rest[..end]) {
            return;
        }
        let mut next = HeadLine::default();
        next.feed(self.head_of + 1, &rest[end..]);
        self.next = Some(Box::new(next));
    }

    /// The line of the head `started` began (empty when nothing of it was read).
    pub(super) fn line(&self, started: u64) -> &[u8] {
        if self.head_of == started {
            &self.line
        } else {
            self.next.as_ref().map_or(&[], |next| next.line(started))
        }
    }
}

/// Where the head whose fields start `rest` ends (past its empty line), if it does there.
fn head_end(rest: &[u8]) -> Option<usize> {
    if rest.starts_with(b"\n") {
        return Some(1);
    }
    if rest.starts_with(b"\r\n") {
        return Some(2);
    }
    memchr::memchr_iter(b'\n', rest).find_map(|i| match &rest[i + 1..] {
        [b'\n', ..] => Some(i + 2),
        [b'\r', b'\n', ..] => Some(i + 3),
        _ => None,
    })
}

/// Whether a head's fields announce a body (whose bytes, not a head, come next).
fn declares_body(fields: &[u8]) -> bool {
    fields.split(|b| *b == b'\n').any(|field| {
        let name = field.split(|b| *b == b':').next().unwrap_or_default();
        name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(bytes: &[u8]) -> Vec<u8> {
        let mut h = HeadLine::default();
        h.feed(0, bytes);
        h.line(0).to_vec()
    }

    #[test]
    fn the_first_line_is_kept_without_its_end_and_leading_empty_lines() {
        assert_eq!(whole(b"GARBAGE\r\n\r\n"), b"GARBAGE");
        assert_eq!(
            whole(b"\r\n\nGET / HTTP/1.1\nHost: x\r\n"),
            b"GET / HTTP/1.1"
        );
        assert_eq!(
            whole(b"GET /hello.txt HTTP/1.1\r\nHost: loc"),
            b"GET /hello.txt HTTP/1.1"
        );
        assert_eq!(whole(b"GET /unfinished"), b"GET /unfinished");
        assert_eq!(whole(&[b'a'; 5000]).len(), HEAD_LINE_MAX);
        let mut h = HeadLine::default();
        h.feed(0, b"GET /a HTTP/1.1\r\n");
        assert!(h.complete_for(0));
        assert_eq!(h.line(1), b"", "another head's line is not this one's");
        h.feed(1, b"PUT /b");
        assert_eq!(h.line(1), b"PUT /b");
        assert!(!h.complete_for(1));
    }

    #[test]
    fn a_pipelined_head_keeps_its_own_line_for_its_turn() {
        let mut h = HeadLine::default();
        h.feed(
            0,
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE /b\r\n\r\nGET /c HTTP/1.1\r\n",
        );
        assert_eq!(h.line(0), b"GET /a HTTP/1.1");
        assert_eq!(
            h.line(1),
            b"GARBAGE /b",
            "the second head's, ahead of its turn"
        );
        assert_eq!(h.line(2), b"GET /c HTTP/1.1", "and a third's");
        // Its turn: what arrives later continues it rather than starting afresh.
        let mut h = HeadLine::default();
        h.feed(0, b"GET /a HTTP/1.1\n\nPUT /lo");
        h.feed(1, b"ng HTTP/1.1\r\n");
        assert_eq!(h.line(1), b"PUT /long HTTP/1.1");
        assert!(h.complete_for(1));
        // A head with a body: what follows is the body, not a head.
        let mut h = HeadLine::default();
        h.feed(
            0,
            b"POST /a HTTP/1.1\r\ncontent-LENGTH: 9\r\n\r\nNOT A /head",
        );
        assert_eq!(h.line(1), b"", "a body is not the next head");
        let mut h = HeadLine::default();
        h.feed(0, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(h.line(1), b"", "nothing follows: no next head");
        h.feed(1, b"GET /b HTTP/1.1\r\n");
        assert_eq!(h.line(1), b"GET /b HTTP/1.1");
    }

    proptest! {
        /// However the head arrives in pieces, the line kept is the same, never longer
        /// than the cap, and never holds a line end.
        #[test]
        fn the_line_does_not_depend_on_how_the_head_was_split(
            head in proptest::collection::vec(any::<u8>(), 0..3000),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let want = whole(&head);
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (head.len() + 1)).collect();
            points.sort_unstable();
            let mut h = HeadLine::default();
            let mut at = 0;
            for p in points.into_iter().chain([head.len()]) {
                h.feed(0, &head[at..p]);
                at = p;
            }
            prop_assert_eq!(h.line(0), &want[..]);
            prop_assert!(want.len() <= HEAD_LINE_MAX);
            prop_assert!(!want.contains(&b'\n'));
        }
    }
}
