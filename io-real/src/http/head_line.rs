//! The raw request line of the head being read, kept so that a head refused before it
//! was parsed (`400`, `408`, `413`, `414`, `431`) is logged with what the client sent, as
//! nginx logs `$request` (decision 0080): scanners and broken clients show up by what
//! they asked, not as `"-"`.
//!
//! Fed with the bytes read while no request is in progress; keeps the first line (empty
//! lines before it skipped, RFC 9112 §2.2), up to [`HEAD_LINE_MAX`] bytes, without its
//! line end. A new head (the connection's started-request count changed) starts afresh.

/// The most of a request line kept: longer ones are logged cut here (nginx's default
/// header buffer is 1 KiB too).
pub const HEAD_LINE_MAX: usize = 1024;

/// One head's request line, as far as it has arrived.
#[derive(Debug, Clone, Default)]
pub struct HeadLine {
    /// The connection's started-request count when this head began.
    head_of: u64,
    line: Vec<u8>,
    /// The line ended (or reached [`HEAD_LINE_MAX`]): later bytes are the rest of the head.
    done: bool,
}

impl HeadLine {
    /// Whether the line of the head `started` began is complete: nothing more to keep.
    pub fn complete_for(&self, started: u64) -> bool {
        self.head_of == started && self.done
    }

    /// Takes the next bytes read while no request is in progress.
    pub fn feed(&mut self, started: u64, mut bytes: &[u8]) {
        if started != self.head_of {
            self.head_of = started;
            self.line.clear();
            self.done = false;
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
    }

    /// The line of the head `started` began (empty when nothing of it was read).
    pub fn line(&self, started: u64) -> &[u8] {
        if self.head_of == started {
            &self.line
        } else {
            &[]
        }
    }
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
