//! etcd's JSON gateway over hyper's pooled HTTP/1.1 client (decision 0130): one POST per
//! store call to the first endpoint that takes the connection, TLS on rustls with an
//! optional client certificate, and etcd's password authentication by token.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use servery_core::cluster::{StoreCall, StoreReply};

use super::args::{ClusterSettings, Endpoint};
use super::json;
use crate::proxy::connect::Connector;
use crate::proxy::pem_certs;

/// How long a connection to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The TLS client configuration for etcd: its server verified against `ca` (or the
/// system's roots), this host's certificate offered when given. An error names the flag.
pub(super) fn tls_config(
    ca: Option<&Path>,
    identity: Option<&(PathBuf, PathBuf)>,
) -> Result<Arc<ClientConfig>, (&'static str, String)> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in pem_certs(path).map_err(|e| ("--cluster-cacert", e))? {
                roots
                    .add(cert)
                    .map_err(|e| ("--cluster-cacert", format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ("--cluster-cacert", e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let certs = pem_certs(cert).map_err(|e| ("--cluster-cert", e))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| ("--cluster-key", format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| ("--cluster-key", e.to_string()))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Why a POST got no answer.
enum Transport {
    /// The connection was not made: nothing was sent, the next endpoint may be tried.
    NotSent(String),
    /// Sent, and no answer: the outcome is unknown.
    Lost(String),
}

/// The error and the errors it wraps, for the log (hyper's own says only "client error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub(super) struct Gateway {
    client: Client<Connector, Full<Bytes>>,
    endpoints: Vec<Endpoint>,
    scheme: &'static str,
    /// The endpoint that answered last: tried first.
    current: AtomicUsize,
    auth: Option<(String, String)>,
    token: Mutex<Option<String>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("endpoints", &self.endpoints)
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    pub(super) fn new(settings: &ClusterSettings) -> Result<Self, String> {
        let tls = if settings.tls {
            tls_config(settings.cacert.as_deref(), settings.identity.as_ref())
                .map_err(|(flag, e)| format!("{flag}: {e}"))?
        } else {
            // Never used: plain endpoints are dialled without TLS.
            Arc::new(
                ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
            )
        };
        let connector = Connector {
            unix: Arc::new(Vec::new()),
            timeout: CONNECT_TIMEOUT,
            tls: tokio_rustls::TlsConnector::from(tls),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Gateway {
            client,
            endpoints: settings.endpoints.clone(),
            scheme: if settings.tls { "https" } else { "http" },
            current: AtomicUsize::new(0),
            auth: settings.auth.clone(),
            token: Mutex::new(None),
        })
    }

    fn uri(&self, endpoint: &Endpoint, path: &str) -> String {
        if endpoint.host.contains(':') {
            format!(
                "{}://[{}]:{}{path}",
                self.scheme, endpoint.host, endpoint.port
            )
        } else {
            format!(
                "{}://{}:{}{path}",
                self.scheme, endpoint.host, endpoint.port
            )
        }
    }

    fn token(&self) -> Option<String> {
        self.token.lock().ok().and_then(|t| t.clone())
    }

    fn set_token(&self, token: Option<String>) {
        if let Ok(mut t) = self.token.lock() {
            *t = token;
        }
    }

    async fn post(
        &self,
        endpoint: &Endpoint,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> Result<Value, Transport> {
        let mut request = http::Request::post(self.uri(endpoint, path))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            request = request.header(http::header::AUTHORIZATION, token);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| Transport::NotSent(e.to_string()))?;
        let response = self.client.request(request).await.map_err(|e| {
            if e.is_connect() {
                Transport::NotSent(chain(&e))
            } else {
                Transport::Lost(chain(&e))
            }
        })?;
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Transport::Lost(chain(&e)))?
            .to_bytes();
        json::first_value(&bytes)
            .ok_or_else(|| Transport::Lost("an answer that is not JSON".into()))
    }

    /// A fresh token from etcd's password authentication.
    async fn authenticate(&self, endpoint: &Endpoint) -> Result<Option<String>, Transport> {
        let Some((name, password)) = &self.auth else {
            return Ok(None);
        };
        let body = json!({ "name": name, "password": password });
        let answer = self
            .post(endpoint, "/v3/auth/authenticate", &body, None)
            .await?;
        let token = answer["token"].as_str().map(str::to_owned);
        if token.is_none() {
            tracing::warn!(
                answer = %answer,
                "etcd refused the cluster's user and password (--cluster-user)"
            );
        }
        self.set_token(token.clone());
        Ok(token)
    }

    /// One call on `endpoint`, authenticating first when a user is set and no token is
    /// held, and once again when etcd says the token expired.
    async fn call_on(&self, endpoint: &Endpoint, call: &StoreCall) -> Result<Value, Transport> {
        let Some(request) = json::request(call) else {
            return Err(Transport::NotSent(format!("no etcd request for {call:?}")));
        };
        let mut token = self.token();
        if self.auth.is_some() && token.is_none() {
            token = self.authenticate(endpoint).await?;
        }
        let answer = self
            .post(endpoint, request.path, &request.body, token.as_deref())
            .await?;
        if self.auth.is_some() && json::token_expired(&answer) {
            let token = self.authenticate(endpoint).await?;
            return self
                .post(endpoint, request.path, &request.body, token.as_deref())
                .await;
        }
        Ok(answer)
    }

    /// Carries out `call`: `None` when no endpoint answered, or the answer leaves the
    /// outcome unknown (the cluster machine's deadline then ends the operation).
    pub(super) async fn call(&self, call: &StoreCall) -> Option<StoreReply> {
        let n = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed);
        for k in 0..n {
            let i = (first + k) % n;
            let endpoint = &self.endpoints[i];
            match self.call_on(endpoint, call).await {
                Ok(answer) => {
                    self.current.store(i, Ordering::Relaxed);
                    let reply = json::reply(call, &answer);
                    if reply.is_none() {
                        tracing::warn!(host = %endpoint.host, port = endpoint.port, %answer, "etcd answered an error");
                    }
                    return reply;
                }
                Err(Transport::NotSent(why)) => {
                    tracing::warn!(host = %endpoint.host, port = endpoint.port, error = %why, "cannot reach etcd");
                }
                Err(Transport::Lost(why)) => {
                    tracing::warn!(host = %endpoint.host, port = endpoint.port, error = %why, "an etcd call got no answer");
                    return None;
                }
            }
        }
        None
    }
}
