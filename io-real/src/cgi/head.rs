//! The header block a CGI script writes before its body (RFC 3875 §6): read from peer
//! output, so every malformed block is a clear refusal (the client gets 502 with the
//! reason), never a panic, and a block is never taken larger than [`MAX_HEAD`].

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};

/// The largest header block a script may write (nginx's and Apache's 8 KiB lines, with
/// room for many of them).
pub const MAX_HEAD: usize = 64 * 1024;

/// What a script's header block asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A document: this status (200 unless `Status` said otherwise) and these headers,
    /// the body following.
    Document {
        status: StatusCode,
        headers: HeaderMap,
    },
    /// `Location: /local/path`: the server answers as if this had been asked for, with
    /// `GET` (RFC 3875 §6.2.2).
    LocalRedirect { path_and_query: String },
    /// `Location: scheme://…`: a redirect the client follows (302 unless `Status` says).
    ClientRedirect {
        status: StatusCode,
        headers: HeaderMap,
    },
}

/// Why a header block cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    #[error("the script's header block is larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("the script's output ended before its header block did (no blank line)")]
    Unfinished,
    #[error("the script's header line {0} has no `:`")]
    NoColon(usize),
    #[error("the script's header line {0} has an invalid field name")]
    BadName(usize),
    #[error("the script's header line {0} has an invalid field value")]
    BadValue(usize),
    #[error("the script's `Status` is not a three-digit code from 100 to 999: {0:?}")]
    BadStatus(String),
    #[error("the script sent none of `Content-Type`, `Location` or `Status`")]
    Empty,
    #[error("the script's local redirect {0:?} is not an absolute path")]
    BadLocation(String),
}

/// Where the header block ends in `buf`: the length of the block with its blank line,
/// if it is all there. Lines end in LF or CRLF (RFC 3875 §6.3: scripts may use either).
pub fn end_of_head(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    while let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') {
        let line = &buf[start..start + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        start += nl + 1;
        if line.is_empty() {
            return Some(start);
        }
    }
    None
}

/// The header lines of a complete block (what [`end_of_head`] measured, blank line
/// included).
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

/// Fields a script may not set: the connection's framing is the server's.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// The script's header block (RFC 3875 §6.2), `head` being everything up to and with the
/// blank line.
pub fn parse(head: &[u8]) -> Result<Reply, HeadError> {
    let mut headers = HeaderMap::new();
    let mut status = None;
    let mut location = None;
    for (index, line) in lines(head).enumerate() {
        let number = index + 1;
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::NoColon(number))?;
        let name =
            HeaderName::from_bytes(&line[..colon]).map_err(|_| HeadError::BadName(number))?;
        let value = line[colon + 1..].trim_ascii();
        let value = HeaderValue::from_bytes(value).map_err(|_| HeadError::BadValue(number))?;
        match name.as_str() {
            "status" => status = Some(parse_status(&value)?),
            "location" => location = Some(value),
            _ if hop_by_hop(&name) => {}
            _ => {
                headers.append(name, value);
            }
        }
    }
    match location {
        Some(location) if location.as_bytes().starts_with(b"/") => {
            // A local redirect: the response is the other resource's, so nothing else the
            // script said applies (RFC 3875 §6.2.2 allows no other field).
            let path = location.to_str().map_err(|_| {
                HeadError::BadLocation(String::from_utf8_lossy(location.as_bytes()).into_owned())
            })?;
            if path.starts_with("//") {
                return Err(HeadError::BadLocation(path.to_owned()));
            }
            Ok(Reply::LocalRedirect {
                path_and_query: path.to_owned(),
            })
        }
        Some(location) => {
            headers.insert(http::header::LOCATION, location);
            Ok(Reply::ClientRedirect {
                status: status.unwrap_or(StatusCode::FOUND),
                headers,
            })
        }
        None if status.is_none() && !headers.contains_key(http::header::CONTENT_TYPE) => {
            Err(HeadError::Empty)
        }
        None => Ok(Reply::Document {
            status: status.unwrap_or(StatusCode::OK),
            headers,
        }),
    }
}

fn parse_status(value: &HeaderValue) -> Result<StatusCode, HeadError> {
    let text = String::from_utf8_lossy(value.as_bytes());
    let code = text.split_ascii_whitespace().next().unwrap_or("");
    if code.len() != 3 {
        return Err(HeadError::BadStatus(text.into_owned()));
    }
    StatusCode::from_bytes(code.as_bytes()).map_err(|_| HeadError::BadStatus(text.into_owned()))
}

/// A non-parsed-header script's own response head (`HTTP/1.1 200 OK` and its fields):
/// taken as it is, none of its fields interpreted (decision 0092).
pub fn parse_nph(head: &[u8]) -> Result<(StatusCode, HeaderMap), HeadError> {
    let mut lines = lines(head);
    let first = lines.next().unwrap_or(b"");
    let first = String::from_utf8_lossy(first);
    let mut words = first.split_ascii_whitespace();
    let version = words.next().unwrap_or("");
    if !version.starts_with("HTTP/") {
        return Err(HeadError::BadStatus(first.into_owned()));
    }
    let code = words.next().unwrap_or("");
    let status = if code.len() == 3 {
        StatusCode::from_bytes(code.as_bytes())
            .map_err(|_| HeadError::BadStatus(first.to_string()))?
    } else {
        return Err(HeadError::BadStatus(first.into_owned()));
    };
    let mut headers = HeaderMap::new();
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::NoColon(number))?;
        let name =
            HeaderName::from_bytes(&line[..colon]).map_err(|_| HeadError::BadName(number))?;
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii())
            .map_err(|_| HeadError::BadValue(number))?;
        if !hop_by_hop(&name) {
            headers.append(name, value);
        }
    }
    Ok((status, headers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn whole(text: &str) -> Result<Reply, HeadError> {
        let end = end_of_head(text.as_bytes()).expect("complete");
        parse(&text.as_bytes()[..end])
    }

    #[test]
    fn a_document_with_status_and_fields() {
        let reply =
            whole("Status: 404 Not Here\r\nContent-Type: text/plain\nX-A: 1\nX-A: 2\n\nbody")
                .expect("valid");
        let Reply::Document { status, headers } = reply else {
            panic!("not a document: {reply:?}");
        };
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers["content-type"], "text/plain");
        assert_eq!(headers.get_all("x-a").iter().count(), 2);
        assert!(
            headers.get("status").is_none(),
            "Status is the server's to turn into a code"
        );
    }

    #[test]
    fn redirects_local_and_client() {
        assert_eq!(
            whole("Location: /other?x=1\n\n"),
            Ok(Reply::LocalRedirect {
                path_and_query: "/other?x=1".into()
            })
        );
        let Ok(Reply::ClientRedirect { status, headers }) =
            whole("Location: https://example.org/\n\n")
        else {
            panic!("a client redirect");
        };
        assert_eq!(status, StatusCode::FOUND);
        assert_eq!(headers["location"], "https://example.org/");
        assert!(matches!(
            whole("Location: //evil.example/\n\n"),
            Err(HeadError::BadLocation(_))
        ));
    }

    #[test]
    fn malformed_blocks_are_refused_with_a_reason() {
        assert_eq!(whole("no colon here\n\n"), Err(HeadError::NoColon(1)));
        assert_eq!(
            whole("Content-Type: a\nBad Name: x\n\n"),
            Err(HeadError::BadName(2))
        );
        assert_eq!(whole("X-Only: 1\n\n"), Err(HeadError::Empty));
        assert!(matches!(
            whole("Status: abc\n\n"),
            Err(HeadError::BadStatus(_))
        ));
        assert!(matches!(
            whole("Status: 20\n\n"),
            Err(HeadError::BadStatus(_))
        ));
        assert_eq!(end_of_head(b"Content-Type: a\n"), None);
    }

    #[test]
    fn framing_fields_are_the_servers() {
        let Ok(Reply::Document { headers, .. }) =
            whole("Content-Type: a\nTransfer-Encoding: chunked\nConnection: close\n\n")
        else {
            panic!("a document");
        };
        assert_eq!(headers.len(), 1);
    }

    #[test]
    fn nph_heads_are_taken_as_written() {
        let head = b"HTTP/1.1 418 Teapot\r\nContent-Type: x/y\r\n\r\n";
        let (status, headers) = parse_nph(head).expect("valid");
        assert_eq!(status.as_u16(), 418);
        assert_eq!(headers["content-type"], "x/y");
        assert!(parse_nph(b"Status: 200\n\n").is_err());
    }

    proptest! {
        /// Any bytes a script writes are a reply or a refusal, never a panic; and a
        /// block that parses stays within what the script wrote.
        #[test]
        fn any_output_parses_or_is_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Some(end) = end_of_head(&bytes) {
                prop_assert!(end <= bytes.len());
                let _ = parse(&bytes[..end]);
                let _ = parse_nph(&bytes[..end]);
            }
        }

        /// Well-formed fields come back as written, whatever their order.
        #[test]
        fn written_fields_come_back(
            fields in proptest::collection::vec(("x-[a-z]{1,8}", "[ -~]{0,20}"), 0..8),
            crlf in any::<bool>(),
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut text = format!("Content-Type: text/plain{nl}");
            for (n, v) in &fields {
                text.push_str(&format!("{n}: {v}{nl}"));
            }
            text.push_str(nl);
            text.push_str("body");
            let end = end_of_head(text.as_bytes()).expect("complete");
            prop_assert_eq!(&text[end..], "body");
            let Ok(Reply::Document { headers, .. }) = parse(&text.as_bytes()[..end]) else {
                return Err(TestCaseError::fail("not a document"));
            };
            for (n, v) in &fields {
                let found: Vec<_> = headers.get_all(n.as_str()).iter().map(|h| h.as_bytes().to_vec()).collect();
                prop_assert!(found.contains(&v.trim().as_bytes().to_vec()), "{n} lost");
            }
        }
    }
}
