//! Option negotiation (RFC 2347): what the client asked for, bounded by what the service
//! allows, and the OACK that tells the client what it got. Options we do not know or whose
//! value is out of range are left out of the OACK, which RFC 2347 reads as "not accepted",
//! so the client falls back to the RFC 1350 default.

use core::time::Duration;

use super::packet::{DEFAULT_BLKSIZE, MAX_BLKSIZE, MIN_BLKSIZE, RawOption};

/// RFC 2349's bounds for `timeout`, in seconds.
const TIMEOUT_RANGE: core::ops::RangeInclusive<u64> = 1..=255;

/// What the service allows a transfer to negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub max_blksize: u16,
    pub max_windowsize: u16,
    /// The retransmission timeout when the client names none.
    pub default_timeout: Duration,
}

/// What a transfer runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub blksize: u16,
    pub windowsize: u16,
    pub timeout: Duration,
    /// The client's `tsize` on a write (the size it announces); `None` when not sent.
    pub client_tsize: Option<u64>,
}

/// The result of negotiation: the parameters and the OACK to send (empty: send none, the
/// transfer starts as RFC 1350 has it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiation {
    pub params: Negotiated,
    pub oack: Vec<RawOption>,
    /// The client asked for `tsize` and the answer must carry the file's size (a read):
    /// the caller adds it once it knows the size.
    pub wants_tsize: bool,
}

pub fn negotiate(requested: &[RawOption], allowed: Allowed) -> Negotiation {
    let mut params = Negotiated {
        blksize: DEFAULT_BLKSIZE,
        windowsize: 1,
        timeout: allowed.default_timeout,
        client_tsize: None,
    };
    let mut oack = Vec::new();
    let mut wants_tsize = false;
    let mut seen: Vec<String> = Vec::new();
    for option in requested {
        let name = option.name.to_ascii_lowercase();
        // A repeated option is answered once, by its first value.
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let value: Option<u64> = option.value.trim().parse().ok();
        let accepted = match (name.as_str(), value) {
            ("blksize", Some(v)) if v >= u64::from(MIN_BLKSIZE) => {
                let cap = allowed.max_blksize.clamp(MIN_BLKSIZE, MAX_BLKSIZE);
                params.blksize = u16::try_from(v).unwrap_or(u16::MAX).min(cap);
                Some(params.blksize.to_string())
            }
            ("windowsize", Some(v)) if v >= 1 => {
                let cap = allowed.max_windowsize.max(1);
                params.windowsize = u16::try_from(v).unwrap_or(u16::MAX).min(cap);
                Some(params.windowsize.to_string())
            }
            // RFC 2349: the server must accept the client's timeout or leave it out.
            ("timeout", Some(v)) if TIMEOUT_RANGE.contains(&v) => {
                params.timeout = Duration::from_secs(v);
                Some(v.to_string())
            }
            ("tsize", Some(v)) => {
                params.client_tsize = Some(v);
                wants_tsize = true;
                // Filled in by the caller: the file's size on a read, the echo on a write.
                None
            }
            _ => None,
        };
        if let Some(value) = accepted {
            oack.push(RawOption { name, value });
        }
    }
    Negotiation {
        params,
        oack,
        wants_tsize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(name: &str, value: &str) -> RawOption {
        RawOption {
            name: name.into(),
            value: value.into(),
        }
    }

    const ALLOWED: Allowed = Allowed {
        max_blksize: 1468,
        max_windowsize: 16,
        default_timeout: Duration::from_secs(3),
    };

    #[test]
    fn bounds_what_the_client_asks_and_drops_what_it_cannot_grant() {
        let n = negotiate(
            &[
                opt("BLKSIZE", "9000"),
                opt("windowsize", "64"),
                opt("timeout", "0"),
                opt("tsize", "0"),
                opt("color", "blue"),
                opt("blksize", "8"),
            ],
            ALLOWED,
        );
        assert_eq!(n.params.blksize, 1468);
        assert_eq!(n.params.windowsize, 16);
        assert_eq!(n.params.timeout, Duration::from_secs(3));
        assert!(n.wants_tsize);
        assert_eq!(
            n.oack,
            vec![opt("blksize", "1468"), opt("windowsize", "16")]
        );
    }

    #[test]
    fn no_options_means_rfc_1350() {
        let n = negotiate(&[], ALLOWED);
        assert!(n.oack.is_empty() && !n.wants_tsize);
        assert_eq!(n.params.blksize, 512);
        assert_eq!(n.params.windowsize, 1);
    }

    #[test]
    fn too_small_a_block_is_refused() {
        let n = negotiate(&[opt("blksize", "7"), opt("timeout", "256")], ALLOWED);
        assert!(n.oack.is_empty());
        assert_eq!(n.params.blksize, 512);
    }

    /// RFC 7440: a window of 0 blocks is no window, left out of the OACK; RFC 2349: a
    /// timeout of 1 to 255 s is accepted as the client asked and echoed.
    #[test]
    fn a_zero_window_is_refused_and_a_timeout_in_range_taken_as_asked() {
        let n = negotiate(&[opt("windowsize", "0"), opt("timeout", "5")], ALLOWED);
        assert_eq!(n.params.windowsize, 1, "windowsize rule: 0 is refused");
        assert_eq!(
            n.params.timeout,
            Duration::from_secs(5),
            "timeout rule: a timeout in 1..=255 s is taken as asked"
        );
        assert_eq!(n.oack, vec![opt("timeout", "5")]);
    }
}
