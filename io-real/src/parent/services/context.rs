//! What a service describes: the listeners as they were bound (fixed for the parent's
//! life), the modes the core's configuration turned on (features cannot change on reload),
//! and the generation the core's action names. Nothing here is remembered between actions.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use servery_core::Generation;

/// The served site as the parent bound it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// Every listener's address (one port for all).
    pub addrs: Vec<SocketAddr>,
    /// The listeners speak TLS.
    pub tls: bool,
    /// WebDAV is on (`features.webdav`).
    pub dav: bool,
    /// The served directory's name, for the advertised instance name.
    pub root_name: String,
    /// This machine's host name (`uname -n`).
    pub host_name: String,
}

/// One action's context: the site and the generation to describe.
#[derive(Debug, Clone)]
pub struct ServiceContext {
    pub generation: Generation,
    pub site: Arc<Site>,
}

impl Site {
    pub fn port(&self) -> u16 {
        self.addrs.first().map_or(0, SocketAddr::port)
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// Whether every listener is on a loopback address: nothing else on the network can
    /// reach it, whatever is advertised.
    pub fn loopback_only(&self) -> bool {
        self.addrs.iter().all(|a| a.ip().is_loopback())
    }

    /// The URL another machine on the LAN opens: a listener's own address when it is
    /// bound to one, or, for a wildcard listener, this machine's first IPv4 address on an
    /// interface that is up and not loopback (then a global IPv6 one). With loopback
    /// listeners only, the loopback URL (the caller warns).
    pub fn lan_url(&self, interfaces: &[(IpAddr, bool)]) -> String {
        let port = self.port();
        let specific = self
            .addrs
            .iter()
            .map(|a| a.ip())
            .find(|ip| !ip.is_loopback() && !ip.is_unspecified());
        let wildcard = self.addrs.iter().any(|a| a.ip().is_unspecified());
        let from_interfaces = || {
            let usable = |(ip, up): &&(IpAddr, bool)| *up && !ip.is_loopback() && !link_local(ip);
            let v4 = interfaces
                .iter()
                .filter(usable)
                .find(|(ip, _)| ip.is_ipv4());
            v4.or_else(|| interfaces.iter().find(usable))
                .map(|(ip, _)| *ip)
        };
        let ip = specific
            .or_else(|| wildcard.then(from_interfaces).flatten())
            .or_else(|| self.addrs.first().map(|a| a.ip()))
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let ip = if ip.is_unspecified() {
            // A wildcard listener on a machine with no other interface: loopback reaches it.
            if ip.is_ipv4() {
                IpAddr::from([127, 0, 0, 1])
            } else {
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
            }
        } else {
            ip
        };
        format!("{}://{}/", self.scheme(), SocketAddr::new(ip, port))
    }

    /// The DNS-SD instance name: `DIR on HOST`, at most 63 bytes (one DNS label).
    pub fn instance_name(&self) -> String {
        let name = format!("{} on {}", self.root_name, self.host_name);
        truncate(&name, 63).to_owned()
    }

    /// `HOST.local.`, with anything a DNS label may not hold replaced by `-`.
    pub fn mdns_host(&self) -> String {
        mdns_host_of(&self.host_name)
    }
}

/// The mDNS host name `--discoverable` advertises for a machine named `host_name`.
pub fn mdns_host_of(host_name: &str) -> String {
    let label: String = host_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let label = truncate(label.trim_matches('-'), 63);
    let label = if label.is_empty() { "servery" } else { label };
    format!("{label}.local.")
}

fn link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// This machine's interface addresses and whether each interface is up; none, with a
/// warning the first time, when the list cannot be read.
pub fn interfaces() -> Vec<(IpAddr, bool)> {
    match if_addrs::get_if_addrs() {
        Ok(list) => list.into_iter().map(|i| (i.ip(), i.is_oper_up())).collect(),
        Err(e) => {
            // The usual cause is a service manager's address-family filter without
            // AF_NETLINK: the QR code and mDNS then fall back to loopback-only addresses,
            // which an operator would otherwise only notice from a phone that cannot open
            // the link.
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    "cannot list the network interfaces ({e}); --qr and --discoverable will name no LAN address (under systemd, RestrictAddressFamilies= must include AF_NETLINK)"
                );
            }
            Vec::new()
        }
    }
}

/// This machine's host name, or `servery` when it has none.
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().into_owned();
    if name.is_empty() {
        "servery".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(addrs: &[&str]) -> Site {
        Site {
            addrs: addrs.iter().map(|a| a.parse().expect("addr")).collect(),
            tls: false,
            dav: false,
            root_name: "photos".into(),
            host_name: "lap top.example".into(),
        }
    }

    const IFACES: &[(IpAddr, bool)] = &[
        (IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), true),
        (IpAddr::V4(std::net::Ipv4Addr::new(169, 254, 1, 1)), true),
        (IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 9)), false),
        (IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 1, 5)), true),
    ];

    #[test]
    fn the_lan_url_is_a_bound_address_or_an_up_interface_for_a_wildcard() {
        assert_eq!(
            site(&["0.0.0.0:8000"]).lan_url(IFACES),
            "http://192.168.1.5:8000/"
        );
        assert_eq!(
            site(&["127.0.0.1:8000", "10.1.2.3:8000"]).lan_url(IFACES),
            "http://10.1.2.3:8000/"
        );
        assert_eq!(
            site(&["127.0.0.1:8000"]).lan_url(IFACES),
            "http://127.0.0.1:8000/"
        );
        assert_eq!(
            site(&["[::]:8000"]).lan_url(&IFACES[..2]),
            "http://[::1]:8000/"
        );
        assert!(site(&["127.0.0.1:1"]).loopback_only());
        assert!(!site(&["0.0.0.0:1"]).loopback_only());
    }

    #[test]
    fn names_fit_dns_labels() {
        let s = site(&["0.0.0.0:1"]);
        assert_eq!(s.instance_name(), "photos on lap top.example");
        assert_eq!(s.mdns_host(), "lap-top-example.local.");
        let long = Site {
            root_name: "é".repeat(40),
            ..s
        };
        assert!(long.instance_name().len() <= 63);
    }
}
