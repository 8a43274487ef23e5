//! `--http3` under socket activation (systemd `LISTEN_FDS`). The service manager passes
//! the TCP listeners; servery binds its UDP sockets itself, one per worker on the
//! listeners' ports (a manager passes one socket per address, and the per-slot layout
//! needs a reuseport group of its own; decision 0027). On a port this process may not
//! bind (below `net.ipv4.ip_unprivileged_port_start`, without root or
//! `CAP_NET_BIND_SERVICE`) that bind would fail after startup had begun, so it is a
//! configuration error found before anything is bound.

use std::net::SocketAddr;

/// `CAP_NET_BIND_SERVICE` (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// The first inherited address whose port this process could not bind for UDP.
pub fn unbindable(addrs: &[SocketAddr]) -> Option<SocketAddr> {
    let start = unprivileged_port_start();
    let allowed = rustix::process::geteuid().is_root() || can_bind_privileged();
    addrs
        .iter()
        .copied()
        .find(|a| !allowed && u32::from(a.port()) < start)
}

/// The configuration error's words.
pub fn refusal(addr: SocketAddr) -> String {
    format!(
        "--http3: servery binds its own UDP sockets on the listeners' ports, and may not bind port {} \
         (below net.ipv4.ip_unprivileged_port_start, without root or CAP_NET_BIND_SERVICE); \
         grant CAP_NET_BIND_SERVICE (systemd: AmbientCapabilities=CAP_NET_BIND_SERVICE), \
         use a port of 1024 or more, or leave out --http3",
        addr.port()
    )
}

fn unprivileged_port_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

/// Whether the effective capability set holds `CAP_NET_BIND_SERVICE`.
fn can_bind_privileged() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_high_port_is_always_bindable_and_the_refusal_names_the_flag_and_the_port() {
        let high: SocketAddr = "127.0.0.1:8443".parse().expect("addr");
        assert_eq!(unbindable(&[high]), None);
        let low: SocketAddr = "127.0.0.1:443".parse().expect("addr");
        let privileged = rustix::process::geteuid().is_root() || can_bind_privileged();
        assert_eq!(
            unbindable(&[high, low]).is_some(),
            !privileged && unprivileged_port_start() > 443
        );
        let words = refusal(low);
        assert!(
            words.starts_with("--http3") && words.contains("443"),
            "{words}"
        );
    }
}
