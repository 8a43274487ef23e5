//! One access-log line per request, in the format the operator chose: Common Log Format,
//! the Combined format (CLF with referer and user agent, what most log tools read), or
//! one JSON object per line. Every line ends in `\n` and holds no other newline: values a
//! client sent are escaped, so a client cannot forge a line.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The line formats of `--access-log-format`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Format {
    /// `host - user [time] "request" status bytes`.
    Clf,
    /// CLF plus `"referer" "user-agent"`.
    Combined,
    /// One JSON object per line: time, remote, method, target, protocol, status, bytes,
    /// duration_ms, user_agent, referer, worker, generation.
    Json,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Clf => "clf",
            Format::Combined => "combined",
            Format::Json => "json",
        }
    }

    pub fn parse(name: &str) -> Option<Format> {
        [Format::Clf, Format::Combined, Format::Json]
            .into_iter()
            .find(|f| f.name() == name)
    }
}

/// What one line says about one request.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub time: SystemTime,
    pub remote: Option<SocketAddr>,
    pub user: Option<&'a str>,
    /// Empty for a request refused before its head was parsed (a malformed head, one too
    /// large, one that never finished): the request is then written as
    /// [`Record::request_line`] (`null`s in JSON, and the line as `request_line`).
    pub method: &'a str,
    pub target: &'a str,
    pub protocol: &'a str,
    /// For a request refused before its head was parsed: its raw request line as far as
    /// it arrived (at most 1 KiB), written escaped as nginx writes `$request`; `"-"` when
    /// none of it arrived (decision 0080). Ignored when `method` is set.
    pub request_line: &'a [u8],
    pub status: u16,
    /// Body bytes the response declared (`None`: not known when it was sent).
    pub bytes: Option<u64>,
    pub duration: Duration,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub worker: u64,
    pub generation: u64,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month 1–12, day, hour, minute, second) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u64, u64, u64) {
    let c = crate::civil_time::utc(t);
    (c.year, c.month, c.day, c.hour, c.minute, c.second)
}

/// Bytes a client sent, as printable ASCII: `"` and `\` escaped, everything else outside
/// 0x20–0x7e as `\xHH` (what nginx does), so a value can never end the field or the line.
fn push_escaped(out: &mut String, value: &[u8]) {
    for &b in value {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02X}");
            }
        }
    }
}

/// A JSON string of bytes a client sent (invalid UTF-8 replaced).
fn push_json(out: &mut String, value: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(value).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Record<'_> {
    /// Appends this request's line (with its `\n`) to `out`.
    pub fn write(&self, format: Format, out: &mut String) {
        match format {
            Format::Clf | Format::Combined => {
                match self.remote {
                    Some(addr) => {
                        let _ = write!(out, "{}", addr.ip());
                    }
                    None => out.push('-'),
                }
                out.push_str(" - ");
                match self.user {
                    Some(user) if !user.is_empty() => push_escaped(out, user.as_bytes()),
                    _ => out.push('-'),
                }
                let (y, mo, d, h, mi, s) = civil(self.time);
                let _ = write!(
                    out,
                    " [{d:02}/{}/{y:04}:{h:02}:{mi:02}:{s:02} +0000] \"",
                    MONTHS[(mo - 1) as usize]
                );
                if self.method.is_empty() && self.request_line.is_empty() {
                    out.push('-');
                } else if self.method.is_empty() {
                    push_escaped(out, self.request_line);
                } else {
                    push_escaped(out, self.method.as_bytes());
                    out.push(' ');
                    push_escaped(out, self.target.as_bytes());
                    out.push(' ');
                    out.push_str(self.protocol);
                }
                let _ = write!(out, "\" {} ", self.status);
                match self.bytes {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None => out.push('-'),
                }
                if format == Format::Combined {
                    for value in [self.referer, self.user_agent] {
                        out.push_str(" \"");
                        match value {
                            Some(v) => push_escaped(out, v),
                            None => out.push('-'),
                        }
                        out.push('"');
                    }
                }
            }
            Format::Json => {
                let (y, mo, d, h, mi, s) = civil(self.time);
                let millis = self
                    .time
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |t| t.subsec_millis());
                let _ = write!(
                    out,
                    "{{\"time\":\"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{millis:03}Z\",\"remote\":"
                );
                match self.remote {
                    Some(addr) => {
                        let _ = write!(out, "\"{}\"", addr.ip());
                    }
                    None => out.push_str("null"),
                }
                if self.method.is_empty() {
                    out.push_str(",\"method\":null,\"target\":null,\"protocol\":null");
                    if !self.request_line.is_empty() {
                        out.push_str(",\"request_line\":");
                        push_json(out, self.request_line);
                    }
                } else {
                    out.push_str(",\"method\":");
                    push_json(out, self.method.as_bytes());
                    out.push_str(",\"target\":");
                    push_json(out, self.target.as_bytes());
                    let _ = write!(out, ",\"protocol\":\"{}\"", self.protocol);
                }
                let _ = write!(out, ",\"status\":{},\"bytes\":", self.status);
                match self.bytes {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None => out.push_str("null"),
                }
                let _ = write!(
                    out,
                    ",\"duration_ms\":{:.3},\"user_agent\":",
                    self.duration.as_secs_f64() * 1000.0
                );
                match self.user_agent {
                    Some(v) => push_json(out, v),
                    None => out.push_str("null"),
                }
                out.push_str(",\"referer\":");
                match self.referer {
                    Some(v) => push_json(out, v),
                    None => out.push_str("null"),
                }
                let _ = write!(
                    out,
                    ",\"worker\":{},\"generation\":{}}}",
                    self.worker, self.generation
                );
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record<'a>(target: &'a str, ua: Option<&'a [u8]>) -> Record<'a> {
        Record {
            time: UNIX_EPOCH + Duration::from_millis(1_796_136_913_250),
            remote: Some("192.0.2.7:5555".parse().expect("addr")),
            user: None,
            method: "GET",
            target,
            protocol: "HTTP/1.1",
            request_line: b"",
            status: 200,
            bytes: Some(2326),
            duration: Duration::from_micros(1500),
            referer: None,
            user_agent: ua,
            worker: 3,
            generation: 2,
        }
    }

    fn line(r: &Record<'_>, f: Format) -> String {
        let mut s = String::new();
        r.write(f, &mut s);
        s
    }

    #[test]
    fn the_three_formats() {
        let r = record("/a%20b?x=1", Some(b"curl/8.5"));
        assert_eq!(
            line(&r, Format::Clf),
            "192.0.2.7 - - [01/Dec/2026:14:55:13 +0000] \"GET /a%20b?x=1 HTTP/1.1\" 200 2326\n"
        );
        assert_eq!(
            line(&r, Format::Combined),
            "192.0.2.7 - - [01/Dec/2026:14:55:13 +0000] \"GET /a%20b?x=1 HTTP/1.1\" 200 2326 \"-\" \"curl/8.5\"\n"
        );
        let json = line(&r, Format::Json);
        let v: serde_json::Value = serde_json::from_str(json.trim_end()).expect("json");
        assert_eq!(v["time"], "2026-12-01T14:55:13.250Z");
        assert_eq!(v["remote"], "192.0.2.7");
        assert_eq!(v["target"], "/a%20b?x=1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 2326);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["user_agent"], "curl/8.5");
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(
            (v["worker"].as_u64(), v["generation"].as_u64()),
            (Some(3), Some(2))
        );
    }

    #[test]
    fn a_request_refused_before_its_head_was_read_is_a_dash() {
        let r = Record {
            method: "",
            target: "",
            status: 400,
            bytes: Some(0),
            ..record("", None)
        };
        assert_eq!(
            line(&r, Format::Combined),
            "192.0.2.7 - - [01/Dec/2026:14:55:13 +0000] \"-\" 400 0 \"-\" \"-\"\n"
        );
        let v: serde_json::Value =
            serde_json::from_str(line(&r, Format::Json).trim_end()).expect("json");
        assert_eq!(
            (&v["method"], &v["target"], &v["protocol"]),
            (
                &serde_json::Value::Null,
                &serde_json::Value::Null,
                &serde_json::Value::Null
            )
        );
        assert_eq!(v["status"], 400);
        assert_eq!(v.get("request_line"), None);
    }

    #[test]
    fn a_refused_head_is_logged_with_its_raw_request_line_escaped() {
        let r = Record {
            method: "",
            target: "",
            request_line: b"GARBAGE \"x\" \x01\xff",
            status: 400,
            bytes: Some(0),
            ..record("", None)
        };
        assert_eq!(
            line(&r, Format::Combined),
            "192.0.2.7 - - [01/Dec/2026:14:55:13 +0000] \"GARBAGE \\\"x\\\" \\x01\\xFF\" 400 0 \"-\" \"-\"\n"
        );
        let v: serde_json::Value =
            serde_json::from_str(line(&r, Format::Json).trim_end()).expect("json");
        assert_eq!(v["method"], serde_json::Value::Null);
        assert!(
            v["request_line"]
                .as_str()
                .is_some_and(|l| l.starts_with("GARBAGE \"x\" ")),
            "{v}"
        );
    }

    #[test]
    fn a_client_cannot_end_a_field_or_a_line() {
        let r = record("/x", Some(b"evil\"\n1.2.3.4 - - [forged]\\\xff"));
        let l = line(&r, Format::Combined);
        assert_eq!(l.matches('\n').count(), 1);
        assert!(
            l.ends_with("\"evil\\\"\\x0A1.2.3.4 - - [forged]\\\\\\xFF\"\n"),
            "{l}"
        );
    }

    proptest! {
        #[test]
        fn every_line_is_one_line_and_json_parses(
            target in "[ -~]{0,40}",
            ua in proptest::collection::vec(any::<u8>(), 0..60),
            referer in proptest::collection::vec(any::<u8>(), 0..60),
        ) {
            let mut r = record(&target, Some(&ua));
            r.referer = Some(&referer);
            for f in [Format::Clf, Format::Combined, Format::Json] {
                let l = line(&r, f);
                prop_assert_eq!(l.matches('\n').count(), 1);
                prop_assert!(l.ends_with('\n'));
                if f == Format::Json {
                    let v: serde_json::Value = serde_json::from_str(l.trim_end()).expect("json");
                    prop_assert_eq!(v["target"].as_str(), Some(target.as_str()));
                }
            }
        }
    }
}
