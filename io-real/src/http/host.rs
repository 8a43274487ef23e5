//! Which names a request may address this server by: the defence against DNS rebinding
//! (decision 0046).
//!
//! A web page on `http://evil.example:8000/` can have its name re-resolved to 127.0.0.1
//! and then read (and, with writes on, change) a server on the loopback as its own
//! origin. The browser still says which name it dialed, in `Host` (HTTP/1) or
//! `:authority` (HTTP/2 and HTTP/3), so a server that answers only the names it knows
//! for itself is out of reach of such a page. What passes:
//!
//! - an IP literal (`127.0.0.1:8000`, `[::1]`): a page can rebind a *name* only, and an
//!   address-named page was loaded from that address, so it is this server's own (or
//!   reaches it through a port forward the operator set up);
//! - `localhost` and its subdomains (RFC 6761 §6.3: browsers resolve them to the
//!   loopback themselves, and no one can register one);
//! - the names the worker was given ([`AllowedHosts::new`]) and, over TLS, the names in
//!   the certificate being served;
//! - no name at all (HTTP/1.0 without `Host`): a browser always sends one.
//!
//! The port is not compared: a page's port says nothing about who owns its name, and a
//! forwarded or proxied port would otherwise lock its users out. A name matches
//! case-insensitively, with or without one trailing dot.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, RwLock};

use http::Request;

/// What a `Host` value names, with its port and trailing dot dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// The value is empty (HTTP/1.1 allows that for a target without an authority).
    Nothing,
    Ip(IpAddr),
    /// A registered name, lower-cased, without a trailing dot.
    Name(String),
}

/// The name a `Host` or `:authority` value (`uri-host [ ":" port ]`) gives, or `None`
/// when the value is not one (an unbracketed IPv6 address, a bad port, a bracketed
/// literal that is not an IPv6 address).
pub fn parse(value: &str) -> Option<Named> {
    if let Some(rest) = value.strip_prefix('[') {
        let (literal, after) = rest.split_once(']')?;
        if !is_port_suffix(after) {
            return None;
        }
        // A zone (`fe80::1%25eth0`) names an interface, not a different address.
        let address = literal.split_once('%').map_or(literal, |(a, _)| a);
        return address
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| Named::Ip(ip.into()));
    }
    let host = match value.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        Some(_) => return None,
        None => value,
    };
    if host.contains(':') {
        return None;
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        // `Host: ` and `Host: :80` name nothing; `Host: .` is no name either.
        return (value.is_empty()).then_some(Named::Nothing);
    }
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return Some(Named::Ip(v4.into()));
    }
    Some(Named::Name(host.to_ascii_lowercase()))
}

/// `""` or `":" *DIGIT`.
fn is_port_suffix(s: &str) -> bool {
    s.is_empty()
        || s.strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// One allowed name: `*` (every name), `*.example.com` (every name under it, not the
/// name itself) or an exact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Any,
    Under(String),
    Exact(String),
}

impl Pattern {
    /// A pattern as an operator writes it (`--allowed-host`), or why it is not one.
    pub fn parse(written: &str) -> Result<Pattern, String> {
        let s = written.trim();
        if s == "*" {
            return Ok(Pattern::Any);
        }
        let (under, name) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        let valid_char = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
        if name.is_empty() || name.starts_with('.') || name.contains("..") {
            return Err(format!("`{written}` is not a host name"));
        }
        if name.contains(':') {
            return Err(format!(
                "`{written}`: give the name without a port (every port of it is allowed)"
            ));
        }
        if !name.bytes().all(valid_char) {
            return Err(format!(
                "`{written}`: a host name holds letters, digits, `-`, `_` and `.` \
                 (`*` alone allows every name, `*.NAME` every name under NAME)"
            ));
        }
        Ok(if under {
            Pattern::Under(name)
        } else {
            Pattern::Exact(name)
        })
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(exact) => name == exact,
            Pattern::Under(parent) => name
                .strip_suffix(parent.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        }
    }
}

/// The names one worker answers to; see the module documentation.
#[derive(Debug, Default)]
pub struct AllowedHosts {
    given: Vec<Pattern>,
    /// The served certificate's DNS names, replaced when the parent sends a new one.
    certificate: RwLock<Arc<[Pattern]>>,
}

impl AllowedHosts {
    /// The check with these names allowed besides the ones every check allows.
    pub fn new(given: Vec<Pattern>) -> Self {
        Self {
            given,
            certificate: RwLock::default(),
        }
    }

    /// The names of the certificate now served (its DNS subject alternative names; a
    /// wildcard name allows the names under it).
    pub fn set_certificate_names(&self, names: &[String]) {
        let patterns: Arc<[Pattern]> = names
            .iter()
            .filter_map(|n| Pattern::parse(n).ok())
            .filter(|p| *p != Pattern::Any)
            .collect();
        if let Ok(mut held) = self.certificate.write() {
            *held = patterns;
        }
    }

    /// Whether a `Host` value names this server.
    pub fn allows(&self, value: &str) -> bool {
        match parse(value) {
            None => false,
            Some(Named::Nothing | Named::Ip(_)) => true,
            Some(Named::Name(name)) => {
                name == "localhost"
                    || name.ends_with(".localhost")
                    || self.given.iter().any(|p| p.matches(&name))
                    || self
                        .certificate
                        .read()
                        .is_ok_and(|held| held.iter().any(|p| p.matches(&name)))
            }
        }
    }

    /// Whether every name `req` gives for its target (the `Host` field and the target's
    /// authority: an absolute-form HTTP/1 target, HTTP/2's and HTTP/3's `:authority`)
    /// names this server. A value that is not text names nothing this server knows.
    pub fn allow_request<B>(&self, req: &Request<B>) -> bool {
        let host_fields_pass = req
            .headers()
            .get_all(http::header::HOST)
            .iter()
            .all(|v| v.to_str().is_ok_and(|v| self.allows(v)));
        host_fields_pass && req.uri().host().is_none_or(|h| self.allows(h))
    }
}

#[cfg(test)]
mod tests;
