//! A streaming `multipart/form-data` parser (RFC 7578 over RFC 2046 framing), sans I/O:
//! bytes in with [`Parser::push`], events out with [`Parser::poll`].
//!
//! Why not `multer`: an upload must take its target lease after reading a part's headers
//! (they carry the file name) and before reading a byte of its content, must stream the
//! content into a file without buffering it, and must count every body byte against the
//! reserved bound. That is exactly the shape of a push parser; `multer` is a pull stream
//! over a body it owns and would bring `futures-util`, `encoding_rs`, `mime` and `spin`
//! for the one thing we need, finding a delimiter across chunk boundaries, which `memchr`
//! (already in the tree) does.
//!
//! What it holds is bounded: part headers by [`MAX_PART_HEADERS`], and otherwise only a
//! delimiter's length of lookahead while streaming content.

use bytes::{Buf, Bytes, BytesMut};
use memchr::memmem::Finder;
use percent_encoding::percent_decode_str;

use crate::write::WriteError;

/// Largest header block of one part. Browsers send two or three short fields.
pub const MAX_PART_HEADERS: usize = 16 * 1024;

/// RFC 2046 §5.1.1: a boundary is 1 to 70 characters.
const MAX_BOUNDARY: usize = 70;

/// Transport padding allowed after a delimiter before its CRLF.
const MAX_PADDING: usize = 256;

/// What one part says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartHeaders {
    /// The form field's name.
    pub name: Option<String>,
    /// The file name as sent (may hold a client-side path), when the part is a file.
    pub filename: Option<String>,
}

/// What the parser found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A part begins; its content follows as [`Event::Data`].
    Part(PartHeaders),
    /// Some of the current part's content.
    Data(Bytes),
    /// The current part's content is complete.
    PartEnd,
    /// The closing delimiter: the form is complete.
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Preamble,
    AfterDelimiter,
    Headers,
    Body,
    Done,
}

/// The parser for one form.
pub struct Parser {
    /// `CRLF--boundary`.
    delimiter: Vec<u8>,
    finder: Finder<'static>,
    buf: BytesMut,
    state: State,
}

impl std::fmt::Debug for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parser")
            .field("state", &self.state)
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

const BAD: WriteError = WriteError::BadRequest("malformed multipart body");

/// The boundary of a `multipart/form-data` content type, or why not.
pub fn boundary(content_type: &str) -> Result<String, WriteError> {
    let mut params = content_type.split(';');
    let media = params.next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return Err(WriteError::UnsupportedMediaType);
    }
    for (key, value) in
        parse_params(&content_type[content_type.find(';').unwrap_or(content_type.len())..])
    {
        if key.eq_ignore_ascii_case("boundary") {
            return Ok(value);
        }
    }
    Err(WriteError::BadRequest(
        "multipart/form-data without a boundary",
    ))
}

impl Parser {
    pub fn new(boundary: &str) -> Result<Parser, WriteError> {
        if boundary.is_empty()
            || boundary.len() > MAX_BOUNDARY
            || !boundary.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(WriteError::BadRequest("invalid multipart boundary"));
        }
        let mut delimiter = b"\r\n--".to_vec();
        delimiter.extend_from_slice(boundary.as_bytes());
        let finder = Finder::new(&delimiter).into_owned();
        // The first delimiter may open the body without a CRLF before it; a CRLF in
        // front lets one search find both.
        let mut buf = BytesMut::with_capacity(8 * 1024);
        buf.extend_from_slice(b"\r\n");
        Ok(Parser {
            delimiter,
            finder,
            buf,
            state: State::Preamble,
        })
    }

    /// More body bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.state != State::Done {
            self.buf.extend_from_slice(data);
        }
    }

    /// Whether the closing delimiter was seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The next event, `Ok(None)` when more input is needed.
    pub fn poll(&mut self) -> Result<Option<Event>, WriteError> {
        loop {
            match self.state {
                State::Done => return Ok(Some(Event::End)),
                State::Preamble => match self.finder.find(&self.buf) {
                    Some(at) => {
                        self.buf.advance(at + self.delimiter.len());
                        self.state = State::AfterDelimiter;
                    }
                    None => {
                        let keep = self.delimiter.len() - 1;
                        if self.buf.len() > keep {
                            self.buf.advance(self.buf.len() - keep);
                        }
                        return Ok(None);
                    }
                },
                State::AfterDelimiter => {
                    if self.buf.len() < 2 {
                        return Ok(None);
                    }
                    if self.buf.starts_with(b"--") {
                        self.state = State::Done;
                        self.buf.clear();
                        return Ok(Some(Event::End));
                    }
                    let padding = self
                        .buf
                        .iter()
                        .take_while(|b| **b == b' ' || **b == b'\t')
                        .count();
                    if padding > MAX_PADDING {
                        return Err(BAD);
                    }
                    if self.buf.len() < padding + 2 {
                        return Ok(None);
                    }
                    if &self.buf[padding..padding + 2] != b"\r\n" {
                        return Err(BAD);
                    }
                    self.buf.advance(padding + 2);
                    self.state = State::Headers;
                }
                State::Headers => {
                    let (block, consumed) = if self.buf.starts_with(b"\r\n") {
                        (&self.buf[..0], 2)
                    } else {
                        match Finder::new(b"\r\n\r\n").find(&self.buf) {
                            Some(at) => (&self.buf[..at], at + 4),
                            None if self.buf.len() > MAX_PART_HEADERS => {
                                return Err(WriteError::BadRequest(
                                    "multipart part headers too large",
                                ));
                            }
                            None => return Ok(None),
                        }
                    };
                    if consumed > MAX_PART_HEADERS {
                        return Err(WriteError::BadRequest("multipart part headers too large"));
                    }
                    let headers = parse_headers(block)?;
                    self.buf.advance(consumed);
                    self.state = State::Body;
                    return Ok(Some(Event::Part(headers)));
                }
                State::Body => match self.finder.find(&self.buf) {
                    Some(0) => {
                        self.buf.advance(self.delimiter.len());
                        self.state = State::AfterDelimiter;
                        return Ok(Some(Event::PartEnd));
                    }
                    Some(at) => return Ok(Some(Event::Data(self.buf.split_to(at).freeze()))),
                    None => {
                        // Everything but what could be the start of a delimiter.
                        let keep = self.delimiter.len() - 1;
                        if self.buf.len() <= keep {
                            return Ok(None);
                        }
                        let n = self.buf.len() - keep;
                        return Ok(Some(Event::Data(self.buf.split_to(n).freeze())));
                    }
                },
            }
        }
    }
}

fn parse_headers(block: &[u8]) -> Result<PartHeaders, WriteError> {
    let text = std::str::from_utf8(block)
        .map_err(|_| WriteError::BadRequest("multipart part headers are not UTF-8"))?;
    let mut headers = PartHeaders::default();
    for line in text.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            return Err(BAD);
        };
        if !name.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        let value = value.trim();
        let kind = value.split(';').next().unwrap_or_default().trim();
        if !kind.eq_ignore_ascii_case("form-data") {
            return Err(WriteError::BadRequest("multipart part is not form-data"));
        }
        let mut extended = None;
        for (key, v) in parse_params(&value[kind.len()..]) {
            match key.to_ascii_lowercase().as_str() {
                "name" => headers.name = Some(v),
                "filename" => headers.filename = Some(v),
                "filename*" => extended = ext_value(&v),
                _ => {}
            }
        }
        // RFC 6266 §4.3: the extended form wins when a client sends both.
        if extended.is_some() {
            headers.filename = extended;
        }
    }
    Ok(headers)
}

/// `; key=value; key="quoted \" value"` pairs. Lenient about what browsers send (they do
/// not escape backslashes in file names, so a backslash only escapes a quote).
fn parse_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ';' || c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && *c != ';') {
            key.push(c);
        }
        if key.is_empty() && chars.peek().is_none() {
            return out;
        }
        let mut value = String::new();
        if chars.next_if_eq(&'=').is_some() {
            while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
            if chars.next_if_eq(&'"').is_some() {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if chars.peek() == Some(&'"') => {
                            value.push('"');
                            chars.next();
                        }
                        c => value.push(c),
                    }
                }
                while chars.next_if(|c| *c != ';').is_some() {}
            } else {
                while let Some(c) = chars.next_if(|c| *c != ';') {
                    value.push(c);
                }
                value = value.trim_end().to_owned();
            }
        }
        let key = key.trim().to_owned();
        if !key.is_empty() {
            out.push((key, value));
        }
    }
}

/// RFC 8187 `charset'lang'value`, UTF-8 only.
fn ext_value(v: &str) -> Option<String> {
    let mut parts = v.splitn(3, '\'');
    let charset = parts.next()?;
    let _lang = parts.next()?;
    let value = parts.next()?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    percent_decode_str(value)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The last path component of a client-side file name (some clients send a whole path,
/// with either separator).
pub fn basename(filename: &str) -> &str {
    filename.rsplit(['/', '\\']).next().unwrap_or(filename)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(boundary: &str, parts: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
        let mut out = b"preamble to ignore\r\n".to_vec();
        for (name, filename, content) in parts {
            out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            let mut cd = format!("Content-Disposition: form-data; name=\"{name}\"");
            if let Some(f) = filename {
                cd.push_str(&format!("; filename=\"{f}\""));
            }
            out.extend_from_slice(cd.as_bytes());
            out.extend_from_slice(b"\r\nContent-Type: application/octet-stream\r\n\r\n");
            out.extend_from_slice(content);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("--{boundary}--\r\nepilogue").as_bytes());
        out
    }

    /// Feeds `body` in pieces of `step` bytes and collects the parts.
    fn parse(
        boundary: &str,
        body: &[u8],
        step: usize,
    ) -> Result<Vec<(PartHeaders, Vec<u8>)>, WriteError> {
        let mut p = Parser::new(boundary)?;
        let mut parts: Vec<(PartHeaders, Vec<u8>)> = Vec::new();
        let mut open = false;
        let mut chunks = body.chunks(step.max(1));
        loop {
            match p.poll()? {
                Some(Event::Part(h)) => {
                    assert!(!open);
                    open = true;
                    parts.push((h, Vec::new()));
                }
                Some(Event::Data(d)) => {
                    assert!(open);
                    parts.last_mut().expect("part").1.extend_from_slice(&d);
                }
                Some(Event::PartEnd) => {
                    assert!(open);
                    open = false;
                }
                Some(Event::End) => return Ok(parts),
                None => match chunks.next() {
                    Some(c) => p.push(c),
                    None => return Err(WriteError::BadRequest("ends early")),
                },
            }
        }
    }

    #[test]
    fn parts_come_out_whole_however_the_body_is_cut() {
        let content: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
        // Content that contains near-delimiters must survive intact.
        let tricky = b"\r\n--XbounXdar\r\n--Xbound\r--Xboundar".to_vec();
        let body = form(
            "Xboundary",
            &[
                ("title", None, b"hello"),
                ("file", Some("a.bin"), &content),
                ("file", Some("dir\\b.txt"), &tricky),
                ("empty", Some("e"), b""),
            ],
        );
        for step in [1, 2, 3, 7, 11, 64, 1000, body.len()] {
            let parts = parse("Xboundary", &body, step).expect("parses");
            assert_eq!(parts.len(), 4, "step {step}");
            assert_eq!(parts[0].0.name.as_deref(), Some("title"));
            assert_eq!(parts[0].0.filename, None);
            assert_eq!(parts[0].1, b"hello");
            assert_eq!(parts[1].0.filename.as_deref(), Some("a.bin"));
            assert_eq!(parts[1].1, content, "step {step}");
            assert_eq!(parts[2].1, tricky, "step {step}");
            assert_eq!(
                basename(parts[2].0.filename.as_deref().unwrap_or("")),
                "b.txt"
            );
            assert_eq!(parts[3].1, b"");
        }
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        assert!(parse("b", b"--b\r\nno colon here\r\n\r\nx\r\n--b--", 5).is_err());
        assert!(parse("b", b"--bXX\r\n\r\n", 5).is_err());
        assert!(
            parse(
                "b",
                b"--b\r\nContent-Disposition: form-data\r\n\r\nnever ends",
                3
            )
            .is_err()
        );
        let huge = format!(
            "--b\r\nX-Long: {}\r\n\r\n",
            "a".repeat(MAX_PART_HEADERS + 10)
        );
        assert!(parse("b", huge.as_bytes(), 1000).is_err());
        assert!(Parser::new("").is_err());
        assert!(Parser::new(&"x".repeat(71)).is_err());
        // Arbitrary junk never panics.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..500 {
            let len = (seed % 200) as usize;
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    b"-\r\nb:;= \"ax"[(seed % 11) as usize]
                })
                .collect();
            let _ = parse("b", &junk, (seed % 5 + 1) as usize);
        }
    }

    #[test]
    fn content_types_and_dispositions() {
        assert_eq!(
            boundary("multipart/form-data; boundary=----abc")
                .ok()
                .as_deref(),
            Some("----abc")
        );
        assert_eq!(
            boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b\"")
                .ok()
                .as_deref(),
            Some("a b")
        );
        assert!(matches!(
            boundary("application/json"),
            Err(WriteError::UnsupportedMediaType)
        ));
        assert!(matches!(
            boundary("multipart/form-data"),
            Err(WriteError::BadRequest(_))
        ));
        let h = parse_headers(
            b"Content-Disposition: form-data; name=\"f\"; filename=\"x \\\"q\\\".txt\"; filename*=UTF-8''%C3%A9t%C3%A9.txt",
        )
        .expect("parses");
        assert_eq!(h.name.as_deref(), Some("f"));
        assert_eq!(h.filename.as_deref(), Some("été.txt"));
        let h =
            parse_headers(b"content-disposition: form-data; name=f; filename=\"C:\\dir\\x.txt\"")
                .expect("parses");
        assert_eq!(basename(h.filename.as_deref().unwrap_or("")), "x.txt");
    }
}
