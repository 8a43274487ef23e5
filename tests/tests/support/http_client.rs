//! A small HTTP/1.1 client for the black-box tests: any method, any header, and a
//! connection that can stop in the middle of a body.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn worker(&self) -> Option<u64> {
        self.header("x-servery-worker")?.parse().ok()
    }
}

pub(crate) struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub(crate) fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// One response; leftover bytes stay for the next.
    pub(crate) fn response(&mut self) -> Result<Reply, String> {
        let end = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line in {head:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        if chunked {
            let body = self.chunked_body()?;
            return Ok(Reply {
                status,
                headers,
                body,
            });
        }
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        while self.buf.len() < length {
            self.fill()?;
        }
        let body = self.buf.drain(..length).collect();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// One line ending in CRLF, without it.
    fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// A chunked body (RFC 9112 §7.1), decoded; trailers are read and dropped.
    fn chunked_body(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let size_line = self.line()?;
            let size = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| format!("bad chunk size {size_line:?}"))?;
            if size == 0 {
                while !self.line()?.is_empty() {}
                return Ok(body);
            }
            while self.buf.len() < size + 2 {
                self.fill()?;
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }

    fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                // A signal to this test process (a child's end, a timer) interrupts the
                // read; nothing was read, so it is read again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

/// A request head with a `Content-Length`.
pub(crate) fn head(method: &str, path: &str, length: usize, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut h =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {length}\r\n");
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> Reply {
    let mut c = Conn::open(addr);
    let mut bytes = head(method, path, body.len(), extra);
    bytes.extend_from_slice(body);
    c.send(&bytes).expect("send");
    c.response()
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}
