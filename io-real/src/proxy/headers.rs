//! The header rewriting of a forwarded request and of the upstream's response: hop-by-hop
//! fields removed (RFC 9110 §7.6.1, with those the `Connection` field names), and the
//! client's address, scheme and host passed on in `X-Forwarded-For/-Proto/-Host` and
//! `Forwarded` (RFC 7239) — extended when the peer is a trusted proxy, replaced otherwise.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The fields that describe one hop, not the message (RFC 9110 §7.6.1), plus the
/// non-standard `Proxy-Connection` clients still send. As names, not text: removing by
/// text would read each name again on every request.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TRAILER,
    header::PROXY_AUTHORIZATION,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Which of `names` (at most 32) `headers` holds, a bit for each by its index: one pass
/// over the few fields a message has, where removing every name would look each up.
fn held(headers: &HeaderMap, names: &[HeaderName]) -> u32 {
    headers
        .keys()
        .filter_map(|k| names.iter().position(|n| n == k))
        .fold(0, |bits, i| bits | (1 << i))
}

/// Removes the hop-by-hop fields, and every field the `Connection` fields name.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let present = held(headers, &HOP_BY_HOP);
    if present == 0 {
        return;
    }
    // `Connection` is the first of them. Nearly every message's says only `keep-alive`,
    // which names no field: seen whole, without splitting it into names.
    if present & 1 != 0
        && !headers
            .get_all(header::CONNECTION)
            .iter()
            .all(|v| v.as_bytes().eq_ignore_ascii_case(b"keep-alive"))
    {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            // Hop-by-hop fields themselves go below; `keep-alive` is the option
            // nearly every HTTP/1.1 message names.
            .filter(|t| !t.eq_ignore_ascii_case("keep-alive") && !t.eq_ignore_ascii_case("upgrade"))
            .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.into_iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

/// What the forwarding headers say about the client.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    pub peer: Option<SocketAddr>,
    /// The peer is a trusted proxy: its forwarding headers are kept and extended.
    pub trusted: bool,
    pub tls: bool,
    /// The host the client asked for (its `Host` or `:authority`).
    pub host: Option<&'a str>,
}

/// `ip` as text: an IPv4 address by its four numbers (the formatter's general machinery
/// costs more than the rest of the header), an IPv6 one by the formatter.
fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                if octet >= 100 {
                    out.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    out.push(char::from(b'0' + octet / 10 % 10));
                }
                out.push(char::from(b'0' + octet % 10));
            }
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write as _;
            // Writing to a String cannot fail.
            let _ = write!(out, "{v6}");
        }
    }
}

/// An RFC 7239 node for the address written `text`: an IPv6 address is bracketed, and
/// so must be quoted (§6).
fn push_forwarded_node(out: &mut String, ip: IpAddr, text: &str) {
    match ip {
        IpAddr::V4(_) => out.push_str(text),
        IpAddr::V6(_) => {
            out.push_str("\"[");
            out.push_str(text);
            out.push_str("]\"");
        }
    }
}

/// `value` as an RFC 7239 quoted-string.
fn push_quoted(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// A field value made from text built for it (checked, not copied again).
fn value_of(text: String) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text)).ok()
}

/// Sets `X-Forwarded-For`, `-Proto`, `-Host` and `Forwarded` for `client`.
pub fn set_forwarded(headers: &mut HeaderMap, client: Client<'_>) {
    let forwarding = [
        X_FORWARDED_FOR,
        X_FORWARDED_PROTO,
        X_FORWARDED_HOST,
        X_REAL_IP,
        header::FORWARDED,
    ];
    // Those of an untrusted peer go (and then none is left to keep).
    let untrusted = !client.trusted;
    if untrusted {
        let present = held(headers, &forwarding);
        for (i, name) in forwarding.into_iter().enumerate() {
            if present & (1 << i) != 0 {
                headers.remove(name);
            }
        }
    }
    let proto = if client.tls { "https" } else { "http" };
    let peer_ip = client.peer.map(|p| p.ip().to_canonical());
    // The address written once, for both fields.
    let mut ip_text = String::new();
    if let Some(ip) = peer_ip {
        push_ip(&mut ip_text, ip);
        let mut chain = String::with_capacity(48);
        for earlier in headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
        {
            chain.push_str(earlier);
            chain.push_str(", ");
        }
        chain.push_str(&ip_text);
        if let Some(v) = value_of(chain) {
            headers.insert(X_FORWARDED_FOR, v);
        }
    }
    if untrusted || !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if (untrusted || !headers.contains_key(X_FORWARDED_HOST))
        && let Some(v) = client.host.and_then(|h| HeaderValue::from_str(h).ok())
    {
        headers.insert(X_FORWARDED_HOST, v);
    }
    let mut element = String::with_capacity(64 + client.host.map_or(0, str::len));
    if let Some(ip) = peer_ip {
        element.push_str("for=");
        push_forwarded_node(&mut element, ip, &ip_text);
        element.push(';');
    }
    if let Some(host) = client.host {
        element.push_str("host=");
        push_quoted(&mut element, host);
        element.push(';');
    }
    element.push_str("proto=");
    element.push_str(proto);
    if let Some(v) = value_of(element) {
        headers.append(header::FORWARDED, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("content-type", "text/plain"),
            ("x-kept", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            left,
            ["content-type", "x-kept"],
            "hop-by-hop rule (RFC 9110 §7.6.1): the hop-by-hop fields and those `Connection` names are removed"
        );
    }

    #[test]
    fn a_field_named_beside_a_keep_alive_connection_field_goes() {
        let mut h = map(&[
            ("connection", "keep-alive"),
            ("connection", "X-Secret"),
            ("x-secret", "1"),
            ("x-kept", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            left,
            ["x-kept"],
            "hop-by-hop rule (RFC 9110 §7.6.1): a field a second `Connection` field names is removed"
        );
        let mut h = map(&[("connection", "Keep-Alive"), ("x-kept", "1")]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"], "`Connection: keep-alive` itself goes");
    }

    #[test]
    fn an_untrusted_peers_forwarding_headers_are_replaced() {
        let mut h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-host", "evil"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
        ]);
        let client = Client {
            peer: Some("10.0.0.7:5555".parse().expect("addr")),
            trusted: false,
            tls: false,
            host: Some("example.org:8000"),
        };
        set_forwarded(&mut h, client);
        assert_eq!(
            h["x-forwarded-for"], "10.0.0.7",
            "forwarding rule: an untrusted peer's X-Forwarded-For is replaced by its address"
        );
        assert_eq!(h["x-forwarded-host"], "example.org:8000");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(
            h.get_all("forwarded").iter().collect::<Vec<_>>(),
            ["for=10.0.0.7;host=\"example.org:8000\";proto=http"]
        );
        assert!(!h.contains_key("x-real-ip"));
    }

    #[test]
    fn a_trusted_peers_forwarding_headers_are_extended() {
        let mut h = map(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=1.2.3.4;proto=https"),
        ]);
        let client = Client {
            peer: Some("[::1]:5555".parse().expect("addr")),
            trusted: true,
            tls: false,
            host: None,
        };
        set_forwarded(&mut h, client);
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, ::1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(
            h.get_all("forwarded").iter().collect::<Vec<_>>(),
            ["for=1.2.3.4;proto=https", "for=\"[::1]\";proto=http"]
        );
    }

    proptest! {
        /// An address is written as the standard formatter writes it.
        #[test]
        fn addresses_are_written_as_the_formatter_writes_them(bits in any::<u32>(), v6 in any::<u128>()) {
            for ip in [IpAddr::V4(bits.into()), IpAddr::V6(v6.into())] {
                let mut text = String::new();
                push_ip(&mut text, ip);
                prop_assert_eq!(text, ip.to_string());
            }
        }
    }

    fn header_name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("connection".to_owned()),
            Just("keep-alive".to_owned()),
            Just("upgrade".to_owned()),
            Just("x-forwarded-for".to_owned()),
            Just("forwarded".to_owned()),
            Just("x-forwarded-host".to_owned()),
            "x-[a-z]{1,3}",
        ]
    }

    proptest! {
        /// Whatever fields a client sends: no hop-by-hop field and nothing `Connection`
        /// named is left, and an untrusted client's address is the only one in
        /// `X-Forwarded-For` and the one `Forwarded` element.
        #[test]
        fn any_client_headers_are_rewritten_safely(
            fields in proptest::collection::vec((header_name(), "[ -~]{0,20}"), 0..12),
            trusted in any::<bool>(),
        ) {
            let mut h = HeaderMap::new();
            for (name, value) in &fields {
                if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                    h.append(n, v);
                }
            }
            let named: Vec<String> = h
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(',').map(|t| t.trim().to_ascii_lowercase()).collect::<Vec<_>>())
                .filter(|t| !t.is_empty())
                .collect();
            strip_hop_by_hop(&mut h);
            let client = Client {
                peer: Some("192.0.2.1:1".parse().expect("addr")),
                trusted,
                tls: false,
                host: Some("h"),
            };
            set_forwarded(&mut h, client);
            for name in HOP_BY_HOP.iter().map(|n| n.to_string()).chain(named) {
                if name.starts_with("x-forwarded") || name == "forwarded" {
                    continue;
                }
                prop_assert!(!h.contains_key(name.as_str()), "{name} left");
            }
            if !trusted {
                prop_assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
                prop_assert_eq!(&h["x-forwarded-for"], "192.0.2.1");
                prop_assert_eq!(h.get_all("forwarded").iter().count(), 1);
            }
            let chain = h["x-forwarded-for"].to_str().expect("text");
            prop_assert!(chain.ends_with("192.0.2.1"));
        }
    }
}
