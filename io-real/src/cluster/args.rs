//! `--cluster` and its settings (decisions 0096, 0130), checked before anything is bound.
//! The names follow etcdctl's (`--endpoints`, `--cacert`, `--cert`, `--key`, `--user`),
//! prefixed, so an operator who runs etcd recognises them.

use std::path::PathBuf;

use clap::Args;
use servery_core::cluster::ClusterName;

use crate::parent::site::SiteIssue;

/// The cluster's store and this host's place in it.
#[derive(Debug, Clone, Args, serde::Serialize, serde::Deserialize)]
#[command(next_help_heading = "Cluster (several hosts share locks and budgets through etcd)")]
pub struct ClusterArgs {
    /// Share the DAV locks and the upload budget with the other hosts serving this tree,
    /// through etcd (v3 API, 3.4 or later) at these endpoints:
    /// `etcd://host:2379[,host:2379…]`, or `etcds://…` for TLS with the system's roots
    /// (TLS is also on with --cluster-cacert or --cluster-cert). Without it, this host
    /// decides alone.
    #[arg(
        long,
        value_name = "etcd://HOST:PORT[,HOST:PORT…]",
        env = "SERVERY_CLUSTER"
    )]
    pub cluster: Option<String>,
    /// The service's name: every key it writes is under `/servery/<NAME>/` (1 to 64 of
    /// A-Z a-z 0-9 _ . -). Every host of one service gives the same name. Required with
    /// --cluster.
    #[arg(long, value_name = "NAME", env = "SERVERY_CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// This host's id in the cluster, unique among its hosts (1 to 64 of A-Z a-z 0-9
    /// _ . -) [default: the host name].
    #[arg(long, value_name = "ID", env = "SERVERY_CLUSTER_HOST_ID")]
    pub cluster_host_id: Option<String>,
    /// PEM CA certificate(s) etcd's server certificate is verified against (etcdctl's
    /// --cacert); turns TLS on.
    #[arg(long, value_name = "PEM", env = "SERVERY_CLUSTER_CACERT")]
    pub cluster_cacert: Option<PathBuf>,
    /// PEM client certificate for etcd's client-certificate authentication (etcdctl's
    /// --cert), with --cluster-key; turns TLS on.
    #[arg(long, value_name = "PEM", env = "SERVERY_CLUSTER_CERT")]
    pub cluster_cert: Option<PathBuf>,
    /// PEM private key of --cluster-cert (etcdctl's --key).
    #[arg(long, value_name = "PEM", env = "SERVERY_CLUSTER_KEY")]
    pub cluster_key: Option<PathBuf>,
    /// etcd user name for etcd's password authentication (etcdctl's --user), with
    /// --cluster-password-file.
    #[arg(long, value_name = "NAME", env = "SERVERY_CLUSTER_USER")]
    pub cluster_user: Option<String>,
    /// A file holding the etcd user's password (one line; a trailing newline is not part
    /// of it). Read from a file only, so it shows neither in `ps` nor in the environment
    /// of the workers and scripts servery starts; systemd's LoadCredential= fits.
    #[arg(long, value_name = "FILE", env = "SERVERY_CLUSTER_PASSWORD_FILE")]
    pub cluster_password_file: Option<PathBuf>,
}

crate::knobs::core_fields! {
    impl ClusterArgs {}
}

/// An etcd endpoint: where the JSON gateway is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// The checked settings.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub endpoints: Vec<Endpoint>,
    pub tls: bool,
    pub cluster: ClusterName,
    pub host_id: ClusterName,
    pub cacert: Option<PathBuf>,
    /// Client certificate and key.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// User name and password.
    pub auth: Option<(String, String)>,
}

/// The endpoints of `--cluster`, and whether its scheme asks for TLS.
fn parse_endpoints(value: &str) -> Result<(Vec<Endpoint>, bool), String> {
    let (rest, tls) = if let Some(rest) = value.strip_prefix("etcd://") {
        (rest, false)
    } else if let Some(rest) = value.strip_prefix("etcds://") {
        (rest, true)
    } else {
        return Err(format!(
            "{value:?} must start with etcd:// (or etcds:// for TLS)"
        ));
    };
    let mut endpoints = Vec::new();
    for part in rest.split(',') {
        // Each may repeat the scheme: etcd://a:2379,etcd://b:2379.
        let part = part
            .strip_prefix("etcd://")
            .or_else(|| part.strip_prefix("etcds://"))
            .unwrap_or(part)
            .trim_end_matches('/');
        let (host, port) = part
            .rsplit_once(':')
            .ok_or_else(|| format!("{part:?} must be HOST:PORT (etcd's client port, 2379)"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{part:?}: the port must be 1 to 65535"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{part:?} names no host"));
        }
        endpoints.push(Endpoint {
            host: host.to_owned(),
            port,
        });
    }
    Ok((endpoints, tls))
}

impl ClusterArgs {
    pub fn enabled(&self) -> bool {
        self.cluster.is_some()
    }

    /// Every rule at once: the settings, or each broken rule named by its flag.
    /// Without --cluster, none of the other options may be given (they would do nothing).
    pub fn check(&self) -> Result<Option<ClusterSettings>, Vec<SiteIssue>> {
        let mut issues = Vec::new();
        let mut issue = |flag, message: String| issues.push(SiteIssue { flag, message });
        let Some(value) = &self.cluster else {
            let given = [
                ("--cluster-name", self.cluster_name.is_some()),
                ("--cluster-host-id", self.cluster_host_id.is_some()),
                ("--cluster-cacert", self.cluster_cacert.is_some()),
                ("--cluster-cert", self.cluster_cert.is_some()),
                ("--cluster-key", self.cluster_key.is_some()),
                ("--cluster-user", self.cluster_user.is_some()),
                (
                    "--cluster-password-file",
                    self.cluster_password_file.is_some(),
                ),
            ];
            for (flag, _) in given.iter().filter(|(_, on)| *on) {
                issue(flag, "needs --cluster".into());
            }
            return if issues.is_empty() {
                Ok(None)
            } else {
                Err(issues)
            };
        };
        let (endpoints, scheme_tls) = parse_endpoints(value).unwrap_or_else(|e| {
            issue("--cluster", e);
            (Vec::new(), false)
        });
        let cluster = match &self.cluster_name {
            None => {
                issue(
                    "--cluster-name",
                    "is required with --cluster (every host of the service gives the same)".into(),
                );
                None
            }
            Some(n) => ClusterName::new(n)
                .map_err(|e| issue("--cluster-name", e.to_string()))
                .ok(),
        };
        let id = self
            .cluster_host_id
            .clone()
            .unwrap_or_else(crate::parent::services::context::host_name);
        let host_id = ClusterName::new(&id)
            .map_err(|e| {
                let why = if self.cluster_host_id.is_none() {
                    format!("the host name {e}; give --cluster-host-id")
                } else {
                    e.to_string()
                };
                issue("--cluster-host-id", why)
            })
            .ok();
        for (flag, path) in [
            ("--cluster-cacert", &self.cluster_cacert),
            ("--cluster-cert", &self.cluster_cert),
            ("--cluster-key", &self.cluster_key),
        ] {
            if let Some(p) = path
                && let Err(e) =
                    crate::operator_file::read_text(p, crate::operator_file::PEM_CAP, "a PEM file")
            {
                issue(flag, e.to_string());
            }
        }
        let identity = match (&self.cluster_cert, &self.cluster_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => {
                issue("--cluster-key", "is required with --cluster-cert".into());
                None
            }
            (None, Some(_)) => {
                issue("--cluster-cert", "is required with --cluster-key".into());
                None
            }
        };
        let auth = match (&self.cluster_user, &self.cluster_password_file) {
            (Some(user), Some(file)) => {
                match crate::operator_file::read_text(file, 4096, "a password file") {
                    Ok(text) => {
                        let password = text.strip_suffix('\n').unwrap_or(&text);
                        let password = password.strip_suffix('\r').unwrap_or(password);
                        Some((user.clone(), password.to_owned()))
                    }
                    Err(e) => {
                        issue("--cluster-password-file", e.to_string());
                        None
                    }
                }
            }
            (None, None) => None,
            (Some(_), None) => {
                issue(
                    "--cluster-password-file",
                    "is required with --cluster-user (the password is read from a file only)"
                        .into(),
                );
                None
            }
            (None, Some(_)) => {
                issue(
                    "--cluster-user",
                    "is required with --cluster-password-file".into(),
                );
                None
            }
        };
        let tls = scheme_tls || self.cluster_cacert.is_some() || identity.is_some();
        if tls
            && let Err((flag, e)) =
                super::gateway::tls_config(self.cluster_cacert.as_deref(), identity.as_ref())
        {
            issue(flag, e);
        }
        match (cluster, host_id) {
            (Some(cluster), Some(host_id)) if issues.is_empty() => Ok(Some(ClusterSettings {
                endpoints,
                tls,
                cluster,
                host_id,
                cacert: self.cluster_cacert.clone(),
                identity,
                auth,
            })),
            _ => Err(issues),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cluster: Option<&str>) -> ClusterArgs {
        ClusterArgs {
            cluster: cluster.map(str::to_owned),
            cluster_name: Some("office".into()),
            cluster_host_id: Some("web-1".into()),
            cluster_cacert: None,
            cluster_cert: None,
            cluster_key: None,
            cluster_user: None,
            cluster_password_file: None,
        }
    }

    #[test]
    fn endpoints_are_host_and_port_after_the_scheme() {
        let (e, tls) = parse_endpoints("etcd://10.0.0.1:2379,etcd://[::1]:2380").expect("valid");
        assert!(!tls);
        assert_eq!(
            e,
            vec![
                Endpoint {
                    host: "10.0.0.1".into(),
                    port: 2379
                },
                Endpoint {
                    host: "::1".into(),
                    port: 2380
                }
            ]
        );
        assert!(parse_endpoints("etcds://a:2379").expect("valid").1);
        assert!(parse_endpoints("http://a:2379").is_err());
        assert!(parse_endpoints("etcd://a").is_err());
        assert!(parse_endpoints("etcd://a:0").is_err());
    }

    #[test]
    fn each_broken_rule_is_named_by_its_flag() {
        let mut a = args(Some("etcd://a:2379"));
        a.cluster_name = Some("no spaces".into());
        a.cluster_cert = Some("/nonexistent.pem".into());
        a.cluster_user = Some("servery".into());
        let flags: Vec<&str> = a
            .check()
            .expect_err("refused")
            .iter()
            .map(|i| i.flag)
            .collect();
        assert!(flags.contains(&"--cluster-name"), "{flags:?}");
        assert!(flags.contains(&"--cluster-cert"), "{flags:?}");
        assert!(flags.contains(&"--cluster-key"), "{flags:?}");
        assert!(flags.contains(&"--cluster-password-file"), "{flags:?}");
    }

    #[test]
    fn without_cluster_nothing_is_on_and_its_options_are_refused() {
        let mut a = args(None);
        a.cluster_name = None;
        a.cluster_host_id = None;
        assert!(a.check().expect("valid").is_none());
        a.cluster_name = Some("office".into());
        let issues = a.check().expect_err("refused");
        assert_eq!(issues[0].flag, "--cluster-name");
        assert!(issues[0].message.contains("needs --cluster"));
    }

    #[test]
    fn a_plain_cluster_is_checked() {
        let s = args(Some("etcd://127.0.0.1:2379"))
            .check()
            .expect("valid")
            .expect("on");
        assert_eq!(s.cluster.as_str(), "office");
        assert_eq!(s.host_id.as_str(), "web-1");
        assert!(!s.tls && s.auth.is_none() && s.identity.is_none());
    }
}
