//! The serving options, checked and prepared once by the parent before anything is bound:
//! `--auth` values are parsed, the TLS identity is loaded from `--tls-cert/--tls-key` or
//! generated for `--tls-self-signed`, and everything is turned into what each worker is
//! started with ([`WorkerSite`]). Doing it here, once, is what makes every worker present
//! the same certificate, and makes a bad certificate a configuration error (exit 2) that
//! names its flag instead of a startup failure of every worker.

use std::net::IpAddr;

use sha2::{Digest, Sha256};

use crate::cli::SiteArgs;
use crate::http::policy::Credential;
use crate::tls::{Identity, TlsError};
use crate::worker::setup::{MAX_SETUP, SETTINGS_ROOM, SiteFacts};

/// One problem with the serving options, reported like a core validation issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteIssue {
    /// The flag at fault.
    pub flag: &'static str,
    pub message: String,
}

/// The serving options, ready to hand to workers.
#[derive(Debug)]
pub(crate) struct PreparedSite {
    /// What every worker is told besides its settings.
    pub worker: SiteFacts,
    /// `sha256` fingerprint of the leaf certificate, `AB:CD:…`, when serving TLS.
    pub fingerprint: Option<String>,
    /// The identity the parent's TLS material starts with (it reaches the workers as
    /// their first control message, not in the setup preamble).
    pub identity: Option<Identity>,
    /// Subject alternative names of a generated certificate.
    pub self_signed_names: Vec<String>,
    pub auth_users: usize,
}

impl PreparedSite {
    pub(crate) fn scheme(&self) -> &'static str {
        if self.worker.tls { "https" } else { "http" }
    }
}

/// Check and prepare the serving options; every issue at once.
pub(crate) fn prepare(args: &SiteArgs, bind: &[IpAddr]) -> Result<PreparedSite, Vec<SiteIssue>> {
    let mut issues = Vec::new();
    for (i, value) in args.auth.iter().enumerate() {
        if let Err(e) = value.parse::<Credential>() {
            // The value itself is never echoed: it may be a password.
            issues.push(SiteIssue {
                flag: "--auth",
                message: format!("entry {} of {}: {e}", i + 1, args.auth.len()),
            });
        }
    }
    if args.http3 && !args.tls() {
        issues.push(SiteIssue {
            flag: "--http3",
            message: "HTTP/3 needs TLS (QUIC is always encrypted): add --tls-cert and --tls-key, or --tls-self-signed".into(),
        });
    }
    let mut self_signed_names = Vec::new();
    let identity = if args.tls_self_signed {
        self_signed_names = self_signed_names_for(bind);
        match Identity::self_signed(&self_signed_names) {
            Ok(id) => Some(id),
            Err(e) => {
                issues.push(SiteIssue {
                    flag: "--tls-self-signed",
                    message: e.to_string(),
                });
                None
            }
        }
    } else if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let loaded = Identity::from_files(cert, key).and_then(|id| {
            // Validated here so that a bad pair stops us before binding.
            id.certified().map(|_| id)
        });
        match loaded {
            Ok(id) => Some(id),
            Err(e) => {
                issues.push(SiteIssue {
                    flag: flag_of(&e, &cert.display().to_string()),
                    message: e.to_string(),
                });
                None
            }
        }
    } else {
        None
    };
    if let Some(id) = &identity
        && let Err(e) = servery_core::tls_material::check_identity_fits(&id.cert_pem, &id.key_pem)
    {
        issues.push(SiteIssue {
            flag: "--tls-cert",
            message: e.to_string(),
        });
    }
    if !issues.is_empty() {
        return Err(issues);
    }
    let fingerprint = identity.as_ref().and_then(|id| {
        let leaf = id.certificates().ok()?.into_iter().next()?;
        Some(fingerprint(&leaf))
    });
    // The credentials travel in every worker's setup preamble with the settings.
    let credentials = serde_json::to_vec(&args.auth).map_or(0, |v| v.len());
    if credentials > MAX_SETUP - SETTINGS_ROOM {
        // Every worker would refuse it and fail to start: say so now, as configuration.
        return Err(vec![SiteIssue {
            flag: "--auth",
            message: format!(
                "the credentials take {credentials} bytes; workers accept at most {} (fewer or shorter --auth entries)",
                MAX_SETUP - SETTINGS_ROOM
            ),
        }]);
    }
    Ok(PreparedSite {
        worker: SiteFacts {
            tls: identity.is_some(),
            ..SiteFacts::default()
        },
        fingerprint,
        identity,
        self_signed_names,
        auth_users: args.auth.len(),
    })
}

/// Which flag a TLS loading error is about.
fn flag_of(e: &TlsError, cert_source: &str) -> &'static str {
    match e {
        TlsError::Read { what, .. } if *what == "certificate" => "--tls-cert",
        TlsError::Read { .. } => "--tls-key",
        TlsError::NoCertificate { .. } | TlsError::BadCertificate { .. } => "--tls-cert",
        TlsError::Pem { source_name, .. } if source_name == cert_source => "--tls-cert",
        TlsError::NoPrivateKey { .. }
        | TlsError::EncryptedKey { .. }
        | TlsError::UnsupportedKey { .. }
        | TlsError::Pem { .. } => "--tls-key",
        TlsError::KeyMismatch { .. } => "--tls-key",
        _ => "--tls-cert",
    }
}

/// `AB:CD:…` of the SHA-256 of a certificate's DER, as browsers show it.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The names a generated certificate covers: `localhost`, the loopback addresses, every
/// specific bind address, and — when binding a wildcard address, the only case in which
/// other machines can reach us — this machine's non-loopback addresses and host name.
pub(crate) fn self_signed_names_for(bind: &[IpAddr]) -> Vec<String> {
    let mut ips: Vec<IpAddr> = vec![
        IpAddr::from([127, 0, 0, 1]),
        IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    ];
    let mut names = vec!["localhost".to_owned()];
    for ip in bind {
        if ip.is_unspecified() {
            ips.extend(local_addresses());
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            if !host.is_empty()
                && host != "localhost"
                && rustls::pki_types::DnsName::try_from(host.as_str()).is_ok()
            {
                names.push(host);
            }
        } else {
            ips.push(*ip);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    ips.retain(|ip| seen.insert(*ip));
    names.extend(ips.iter().map(IpAddr::to_string));
    names.dedup();
    names
}

/// This machine's non-loopback, non-link-local addresses, read from `/proc` (no
/// `getifaddrs` without `unsafe`); none where `/proc` does not have them.
fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    // IPv4: in fib_trie each local address is a `|-- A.B.C.D` line followed by a
    // `/32 host LOCAL` line.
    if let Ok(trie) = std::fs::read_to_string("/proc/net/fib_trie") {
        let mut last: Option<IpAddr> = None;
        for line in trie.lines() {
            let line = line.trim();
            if let Some(addr) = line.strip_prefix("|-- ") {
                last = addr.parse().ok();
            } else if line.contains("/32 host LOCAL")
                && let Some(ip) = last
                && !ip.is_loopback()
            {
                out.push(ip);
            }
        }
    }
    // IPv6: 32 hex digits, interface index, prefix length, scope (0 = global), flags, name.
    if let Ok(table) = std::fs::read_to_string("/proc/net/if_inet6") {
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 4 || fields[3] != "00" || fields[0].len() != 32 {
                continue;
            }
            let Ok(bits) = u128::from_str_radix(fields[0], 16) else {
                continue;
            };
            let ip = IpAddr::from(std::net::Ipv6Addr::from(bits));
            if !ip.is_loopback() {
                out.push(ip);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn site_args() -> SiteArgs {
        SiteArgs {
            tls_cert: None,
            tls_key: None,
            tls_self_signed: false,
            auth: Vec::new(),
            cors: false,
            spa: false,
            cache: None,
            no_security_headers: false,
            hsts: false,
            max_compress_size: crate::http::SiteConfig::default().max_compress_size,
            http3: false,
            allowed_host: Vec::new(),
            deny: Vec::new(),
        }
    }

    #[test]
    fn http3_without_tls_names_its_flag_and_the_rule() {
        let mut args = site_args();
        args.http3 = true;
        let issues = prepare(&args, &[]).expect_err("no TLS");
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].flag, "--http3");
        assert!(issues[0].message.contains("needs TLS"), "{issues:?}");
        args.tls_self_signed = true;
        prepare(&args, &["127.0.0.1".parse().expect("ip")]).expect("with TLS it is fine");
    }

    #[test]
    fn names_cover_loopback_and_specific_binds() {
        let names = self_signed_names_for(&["10.1.2.3".parse().expect("ip")]);
        for n in ["localhost", "127.0.0.1", "::1", "10.1.2.3"] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
        let wild = self_signed_names_for(&["0.0.0.0".parse().expect("ip")]);
        assert!(!wild.iter().any(|x| x == "0.0.0.0"), "{wild:?}");
        Identity::self_signed(&wild).expect("every name is usable");
    }

    #[test]
    fn bad_auth_and_tls_files_name_their_flag_without_echoing_secrets() {
        let mut args = site_args();
        args.auth = vec![
            "alice:secret".into(),
            "bob".into(),
            "carol:sha256:xyz".into(),
        ];
        args.tls_cert = Some(PathBuf::from("/nonexistent/c.pem"));
        args.tls_key = Some(PathBuf::from("/nonexistent/k.pem"));
        let issues = prepare(&args, &[]).expect_err("invalid");
        let flags: Vec<_> = issues.iter().map(|i| i.flag).collect();
        assert_eq!(flags, ["--auth", "--auth", "--tls-cert"], "{issues:?}");
        assert!(!format!("{issues:?}").contains("secret"));
    }

    #[test]
    fn a_setup_workers_would_refuse_is_a_configuration_error() {
        let mut args = site_args();
        // Valid entries, but together more than a worker accepts in its preamble.
        let hash = "0".repeat(64);
        args.auth = (0..20_000)
            .map(|i| format!("user{i}:sha256:{hash}"))
            .collect();
        let issues = prepare(&args, &[]).expect_err("too large");
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].flag, "--auth");
        assert!(
            issues[0].message.contains("workers accept at most"),
            "{issues:?}"
        );
        args.auth.truncate(100);
        assert!(prepare(&args, &[]).is_ok());
    }

    #[test]
    fn self_signed_prepares_a_setup_with_the_identity() {
        let mut args = site_args();
        args.tls_self_signed = true;
        args.auth = vec!["a:b".into()];
        let site = prepare(&args, &["127.0.0.1".parse().expect("ip")]).expect("valid");
        assert_eq!(site.scheme(), "https");
        assert!(site.fingerprint.as_ref().is_some_and(|f| f.len() == 95));
        assert!(site.identity.is_some());
        assert!(site.worker.tls, "workers are told to serve TLS");
    }
}
