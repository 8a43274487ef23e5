//! The `--acme*` flags and their checks (all before anything is bound).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use servery_core::acme::{ManagerConfig, RetryPolicy};

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// `--acme` and its settings.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "ACME certificates (obtained and renewed by the parent)")]
pub struct AcmeArgs {
    /// Serve HTTPS with a certificate for these DNS names from an ACME CA (RFC 8555,
    /// HTTP-01), renewed at two thirds of its lifetime or in the CA's renewal window.
    /// The CA must reach this machine on --acme-http-port for each name.
    #[arg(long, value_name = "DOMAIN", num_args = 1.., value_delimiter = ',', env = "SERVERY_ACME")]
    pub acme: Vec<String>,
    /// The CA's ACME directory URL.
    #[arg(long, value_name = "URL", env = "SERVERY_ACME_DIRECTORY", default_value = LETS_ENCRYPT)]
    pub acme_directory: String,
    /// A PEM CA certificate to trust for the directory's HTTPS instead of the system's
    /// roots (a private CA, or a test CA).
    #[arg(long, value_name = "PEM", env = "SERVERY_ACME_DIRECTORY_CA")]
    pub acme_directory_ca: Option<PathBuf>,
    /// Contact address registered with the account (expiry notices).
    #[arg(long, value_name = "EMAIL", env = "SERVERY_ACME_EMAIL")]
    pub acme_email: Option<String>,
    /// Where the account key, the certificate and its key are kept (created 0700; files
    /// 0600, each replaced atomically). Required with --acme.
    #[arg(long, value_name = "DIR", env = "SERVERY_ACME_DIR")]
    pub acme_dir: Option<PathBuf>,
    /// External account binding key id, for CAs that require one; needs --acme-eab-hmac.
    #[arg(
        long,
        value_name = "KID",
        env = "SERVERY_ACME_EAB_KID",
        requires = "acme_eab_hmac"
    )]
    pub acme_eab_kid: Option<String>,
    /// External account binding HMAC key (base64url), with --acme-eab-kid.
    #[arg(
        long,
        value_name = "KEY",
        env = "SERVERY_ACME_EAB_HMAC",
        requires = "acme_eab_kid"
    )]
    pub acme_eab_hmac: Option<String>,
    /// The cleartext HTTP port the CA validates on (HTTP-01). Every bind address listens
    /// on it too; it answers challenges and redirects everything else to HTTPS.
    #[arg(
        long,
        value_name = "PORT",
        env = "SERVERY_ACME_HTTP_PORT",
        default_value_t = 80
    )]
    pub acme_http_port: u16,
    /// Renew when this little of the certificate's lifetime is left at the latest, even
    /// before the usual time (seconds; 0: two thirds of the lifetime or the CA's window).
    #[arg(
        long,
        value_name = "SECS",
        env = "SERVERY_ACME_RENEW_BEFORE",
        default_value_t = 0
    )]
    pub acme_renew_before: u64,
    /// The first retry after a failure waits about this long, doubling up to 6 hours
    /// (seconds).
    #[arg(
        long,
        value_name = "SECS",
        env = "SERVERY_ACME_RETRY",
        default_value_t = 60,
        hide = true
    )]
    pub acme_retry: u64,
}

/// One broken `--acme*` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeIssue {
    pub flag: &'static str,
    pub message: String,
}

/// The checked settings.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    pub domains: Vec<String>,
    pub directory: String,
    pub directory_ca: Option<PathBuf>,
    pub email: Option<String>,
    pub dir: PathBuf,
    pub eab: Option<(String, Vec<u8>)>,
    pub http_port: u16,
    pub manager: ManagerConfig,
}

crate::knobs::core_fields! {
    impl AcmeArgs {
        acme => features.acme = |a| a.enabled();
    }
}

impl AcmeArgs {
    pub fn enabled(&self) -> bool {
        !self.acme.is_empty()
    }

    /// Every rule at once; `other_tls` is whether --tls-cert or --tls-self-signed is on,
    /// `port` the HTTPS port asked for.
    pub fn check(
        &self,
        other_tls: bool,
        port: Option<u16>,
    ) -> Result<Option<AcmeSettings>, Vec<AcmeIssue>> {
        if !self.enabled() {
            return Ok(None);
        }
        let mut issues = Vec::new();
        let mut issue = |flag, message: String| issues.push(AcmeIssue { flag, message });
        for d in &self.acme {
            let ok = d.contains('.')
                && !d.starts_with('*')
                && d.parse::<std::net::IpAddr>().is_err()
                && rustls::pki_types::DnsName::try_from(d.as_str()).is_ok();
            if !ok {
                issue(
                    "--acme",
                    format!(
                        "{d:?} is not a DNS name (HTTP-01 cannot validate IP addresses or wildcards)"
                    ),
                );
            }
        }
        if other_tls {
            issue("--acme", "cannot be combined with --tls-cert or --tls-self-signed (it supplies the certificate)".into());
        }
        if self.acme_http_port == 0 {
            issue(
                "--acme-http-port",
                "must be a fixed port the CA can reach (HTTP-01 dials it), not 0".into(),
            );
        }
        if port == Some(self.acme_http_port) {
            issue(
                "--acme-http-port",
                format!(
                    "must differ from --port ({}), which serves HTTPS",
                    self.acme_http_port
                ),
            );
        }
        if port.is_none() {
            issue(
                "--port",
                "is required with --acme (the HTTPS port, usually 443)".into(),
            );
        }
        let dir = match &self.acme_dir {
            Some(d) => d.clone(),
            None => {
                issue(
                    "--acme-dir",
                    "is required with --acme (the account and certificates live there)".into(),
                );
                PathBuf::new()
            }
        };
        if !(self.acme_directory.starts_with("https://")) {
            issue("--acme-directory", "must be an https:// URL".into());
        }
        if let Some(ca) = &self.acme_directory_ca
            && !ca.is_file()
        {
            issue(
                "--acme-directory-ca",
                format!("{} is not a readable file", ca.display()),
            );
        }
        let eab = match (&self.acme_eab_kid, &self.acme_eab_hmac) {
            (Some(kid), Some(hmac)) => {
                use base64::Engine;
                match base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(hmac.trim_end_matches('='))
                {
                    Ok(key) if !key.is_empty() => Some((kid.clone(), key)),
                    _ => {
                        issue(
                            "--acme-eab-hmac",
                            "must be a non-empty base64url key".into(),
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        if self.acme_retry == 0 {
            issue("--acme-retry", "must be at least 1 second".into());
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        let mut domains = self.acme.clone();
        domains.iter_mut().for_each(|d| d.make_ascii_lowercase());
        domains.dedup();
        let manager = ManagerConfig {
            retry: RetryPolicy {
                first: Duration::from_secs(self.acme_retry),
                ..RetryPolicy::default()
            },
            renew_before: Duration::from_secs(self.acme_renew_before),
            ..ManagerConfig::new(domains.clone())
        };
        Ok(Some(AcmeSettings {
            domains,
            directory: self.acme_directory.clone(),
            directory_ca: self.acme_directory_ca.clone(),
            email: self.acme_email.clone(),
            dir,
            eab,
            http_port: self.acme_http_port,
            manager,
        }))
    }
}
