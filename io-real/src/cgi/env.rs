//! The environment a script runs with (RFC 3875 §4.1): the meta-variables of its request,
//! `PATH`, and the operator's `--cgi-env` allow-list; nothing else of servery's own.

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use http::header::{self, HeaderMap};
use http::request::Parts;

use super::script::Script;

/// `PATH` when the allow-list does not pass servery's own (Apache's and fcgiwrap's
/// default for scripts).
pub(super) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Request fields never given to a script: credentials servery checked itself
/// (`Authorization`, `Proxy-Authorization`), `Proxy` (which would become `HTTP_PROXY`,
/// read by many HTTP libraries as their proxy: "httpoxy"), and the two that have their
/// own variables.
fn withheld(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "authorization" | "proxy-authorization" | "proxy" | "content-length" | "content-type"
    )
}

/// `HTTP_*` for every field a script may see (RFC 3875 §4.1.18): repeated fields joined
/// with `, ` (a `Cookie` with `; `). A name with `_` is left out, as Apache and nginx do,
/// since `X_Forwarded_For` would otherwise pass for `X-Forwarded-For`.
fn protocol_variables(headers: &HeaderMap, vars: &mut Vec<(OsString, OsString)>) {
    for name in headers.keys() {
        if withheld(name) || name.as_str().contains('_') {
            continue;
        }
        let joiner: &[u8] = if name == header::COOKIE { b"; " } else { b", " };
        let mut value = Vec::new();
        for (i, v) in headers.get_all(name).iter().enumerate() {
            if i > 0 {
                value.extend_from_slice(joiner);
            }
            value.extend_from_slice(v.as_bytes());
        }
        let var = format!(
            "HTTP_{}",
            name.as_str().to_ascii_uppercase().replace('-', "_")
        );
        vars.push((var.into(), OsStr::from_bytes(&value).to_owned()));
    }
}

/// The host and port the client addressed (`Host`, or an HTTP/2 `:authority`).
fn server_name_and_port(parts: &Parts, tls: bool) -> (String, String) {
    let authority = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let default_port = if tls { "443" } else { "80" };
    // `[::1]:8080`, `example.org:8080`, `example.org`.
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host.to_owned(), port.to_owned())
        }
        _ => (authority.clone(), default_port.to_owned()),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let host = if host.is_empty() {
        "localhost".to_owned()
    } else {
        host
    };
    (host, port)
}

/// What a request's variables are built from besides the request and the script.
#[derive(Debug, Clone, Copy)]
pub(super) struct Context<'a> {
    pub(super) peer: Option<SocketAddr>,
    pub(super) tls: bool,
    /// The served directory (`PATH_TRANSLATED` maps `PATH_INFO` into it).
    pub(super) document_root: Option<&'a Path>,
}

/// `PATH_INFO` mapped as a request for it would be (RFC 3875 §4.1.6): the served
/// directory and the path, as Apache maps it under its `DocumentRoot`.
fn path_translated(root: &Path, path_info: &str) -> PathBuf {
    let mut translated = root.as_os_str().to_owned();
    translated.push(path_info);
    PathBuf::from(translated)
}

/// Every variable of a script's environment.
pub(super) fn build(
    parts: &Parts,
    script: &Script,
    context: Context<'_>,
    allowed: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let Context {
        peer,
        tls,
        document_root,
    } = context;
    let mut vars: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |name: &str, value: &str| vars.push((name.into(), value.into()));
    let (server_name, server_port) = server_name_and_port(parts, tls);
    set("GATEWAY_INTERFACE", "CGI/1.1");
    set(
        "SERVER_SOFTWARE",
        concat!("servery/", env!("CARGO_PKG_VERSION")),
    );
    set("SERVER_NAME", &server_name);
    set("SERVER_PORT", &server_port);
    set("SERVER_PROTOCOL", &format!("{:?}", parts.version));
    set("REQUEST_METHOD", parts.method.as_str());
    set("SCRIPT_NAME", &script.script_name);
    set("SCRIPT_FILENAME", &script.file.to_string_lossy());
    set("QUERY_STRING", parts.uri.query().unwrap_or(""));
    set(
        "REQUEST_URI",
        parts.uri.path_and_query().map_or("/", |p| p.as_str()),
    );
    if !script.path_info.is_empty() {
        set("PATH_INFO", &script.path_info);
    }
    if let Some(peer) = peer {
        set("REMOTE_ADDR", &peer.ip().to_canonical().to_string());
        set("REMOTE_PORT", &peer.port().to_string());
    }
    if tls {
        set("HTTPS", "on");
    }
    if let Some(length) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
    {
        set("CONTENT_LENGTH", length);
    }
    if let Some(kind) = parts.headers.get(header::CONTENT_TYPE) {
        vars.push((
            "CONTENT_TYPE".into(),
            OsStr::from_bytes(kind.as_bytes()).to_owned(),
        ));
    }
    if let Some(user) = parts.extensions.get::<super::RemoteUser>() {
        vars.push(("AUTH_TYPE".into(), "Basic".into()));
        vars.push(("REMOTE_USER".into(), OsStr::from_bytes(&user.0).to_owned()));
    }
    if let Some(root) = document_root.filter(|_| !script.path_info.is_empty()) {
        vars.push((
            "PATH_TRANSLATED".into(),
            path_translated(root, &script.path_info).into_os_string(),
        ));
    }
    protocol_variables(&parts.headers, &mut vars);
    if !allowed.iter().any(|(name, _)| name == "PATH") {
        vars.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    vars.extend(allowed.iter().cloned());
    vars
}

/// The `--cgi-env` entries as variables: `NAME=VALUE` as given, `NAME` with servery's own
/// value (left out when servery has none). The entries were checked by the parent.
pub(super) fn allowed(entries: &[String]) -> Vec<(OsString, OsString)> {
    entries
        .iter()
        .filter_map(|entry| match super::args::env_entry(entry) {
            Ok((name, Some(value))) => Some((name.into(), value.into())),
            Ok((name, None)) => std::env::var_os(name).map(|value| (name.into(), value)),
            Err(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars_of(req: http::Request<()>, peer: Option<SocketAddr>) -> Vec<(String, String)> {
        let (parts, ()) = req.into_parts();
        let script = Script {
            file: PathBuf::from("/srv/cgi/app"),
            script_name: "/cgi-bin/app".into(),
            path_info: "/a b".into(),
            nph: false,
        };
        let allowed = vec![("LANG".into(), "C".into())];
        let context = Context {
            peer,
            tls: false,
            document_root: Some(Path::new("/srv/www")),
        };
        build(&parts, &script, context, &allowed)
            .into_iter()
            .map(|(n, v)| {
                (
                    n.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    fn get<'v>(vars: &'v [(String, String)], name: &str) -> Option<&'v str> {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn meta_variables_and_no_secrets() {
        let req = http::Request::post("/cgi-bin/app/a%20b?x=1&y")
            .header("host", "example.org:8080")
            .header("content-type", "text/plain")
            .header("content-length", "5")
            .header("authorization", "Basic c2VjcmV0")
            .header("proxy", "http://evil:1")
            .header("x_forwarded_for", "1.2.3.4")
            .header("accept", "a")
            .header("accept", "b")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .expect("request");
        let vars = vars_of(req, Some("[::ffff:10.0.0.1]:4000".parse().expect("addr")));
        assert_eq!(get(&vars, "QUERY_STRING"), Some("x=1&y"));
        assert_eq!(get(&vars, "PATH_INFO"), Some("/a b"));
        assert_eq!(get(&vars, "SCRIPT_NAME"), Some("/cgi-bin/app"));
        assert_eq!(get(&vars, "SERVER_NAME"), Some("example.org"));
        assert_eq!(get(&vars, "SERVER_PORT"), Some("8080"));
        assert_eq!(get(&vars, "REMOTE_ADDR"), Some("10.0.0.1"));
        assert_eq!(get(&vars, "CONTENT_LENGTH"), Some("5"));
        assert_eq!(get(&vars, "CONTENT_TYPE"), Some("text/plain"));
        assert_eq!(get(&vars, "HTTP_ACCEPT"), Some("a, b"));
        assert_eq!(get(&vars, "HTTP_COOKIE"), Some("a=1; b=2"));
        assert_eq!(get(&vars, "REQUEST_METHOD"), Some("POST"));
        assert_eq!(get(&vars, "LANG"), Some("C"));
        assert_eq!(get(&vars, "PATH"), Some(DEFAULT_PATH));
        for secret in [
            "HTTP_AUTHORIZATION",
            "HTTP_PROXY",
            "HTTP_X_FORWARDED_FOR",
            "HTTP_CONTENT_LENGTH",
        ] {
            assert_eq!(get(&vars, secret), None, "{secret} must not reach a script");
        }
    }

    #[test]
    fn the_authenticated_user_and_the_translated_path() {
        let mut req = http::Request::get("/cgi-bin/app/a%20b")
            .header("authorization", "Basic YWxpY2U6c2VjcmV0")
            .body(())
            .expect("request");
        let vars = vars_of(req, None);
        assert_eq!(get(&vars, "PATH_TRANSLATED"), Some("/srv/www/a b"));
        assert_eq!(
            get(&vars, "REMOTE_USER"),
            None,
            "REMOTE_USER only when servery's --auth authenticated the request"
        );
        assert_eq!(get(&vars, "AUTH_TYPE"), None);
        req = http::Request::get("/cgi-bin/app/a%20b")
            .extension(super::super::RemoteUser(b"alice".to_vec()))
            .body(())
            .expect("request");
        let vars = vars_of(req, None);
        assert_eq!(get(&vars, "REMOTE_USER"), Some("alice"));
        assert_eq!(get(&vars, "AUTH_TYPE"), Some("Basic"));
        assert_eq!(get(&vars, "HTTP_AUTHORIZATION"), None);
    }

    #[test]
    fn an_ipv6_host_and_a_missing_port() {
        let req = http::Request::get("/x")
            .header("host", "[::1]")
            .body(())
            .expect("request");
        let vars = vars_of(req, None);
        assert_eq!(get(&vars, "SERVER_NAME"), Some("::1"));
        assert_eq!(get(&vars, "SERVER_PORT"), Some("80"));
        assert_eq!(get(&vars, "REMOTE_ADDR"), None);
    }
}
