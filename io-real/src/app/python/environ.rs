//! A request as a WSGI environ (PEP 3333). The head is read into [`RequestHead`] on the
//! async thread, without the interpreter's lock; only the dictionary is built under it.
//!
//! Strings are PEP 3333's "native strings": the request's bytes decoded as ISO-8859-1,
//! so every byte reaches the application unchanged (`PATH_INFO` is percent-decoded first,
//! as every WSGI server does).

use http::request::Parts;
use http::{HeaderMap, Version, header};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};

use crate::app::Caller;

/// What the environ is made of, taken from the request without the interpreter.
#[derive(Debug)]
pub(super) struct RequestHead {
    method: String,
    path: Vec<u8>,
    query: String,
    protocol: &'static str,
    /// `HTTP_*` variables, combined as RFC 9110 §5.3 allows (cookies with `; `).
    headers: Vec<(Key, Vec<u8>)>,
    content_type: Option<Vec<u8>>,
    content_length: Option<Vec<u8>>,
    server_name: String,
    server_port: String,
    caller: Caller,
}

impl RequestHead {
    pub(super) fn of(parts: &Parts, caller: Caller) -> RequestHead {
        let path = percent_encoding::percent_decode_str(parts.uri.path()).collect();
        let (server_name, server_port) = server(parts, caller.tls);
        RequestHead {
            method: parts.method.as_str().to_owned(),
            path,
            query: parts.uri.query().unwrap_or("").to_owned(),
            protocol: match parts.version {
                Version::HTTP_10 => "HTTP/1.0",
                Version::HTTP_2 => "HTTP/2",
                Version::HTTP_3 => "HTTP/3",
                _ => "HTTP/1.1",
            },
            headers: http_variables(&parts.headers),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes().to_vec()),
            content_length: parts
                .headers
                .get(header::CONTENT_LENGTH)
                .map(|v| v.as_bytes().to_vec()),
            server_name,
            server_port,
            caller,
        }
    }

    /// `METHOD /path`, for the log.
    pub(super) fn line(&self) -> String {
        format!("{} {}", self.method, String::from_utf8_lossy(&self.path))
    }

    /// The environ: the worker's constant keys, then this request's. The keys, and the
    /// values that repeat from request to request, are strings made once per worker
    /// (interned, their hashes kept), not once per request.
    pub(super) fn environ<'py>(
        &self,
        py: Python<'py>,
        base: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let environ = base.copy()?;
        let text = |bytes: &[u8]| latin1(py, bytes);
        let method = match self.method.as_str() {
            "GET" => intern!(py, "GET").clone(),
            "POST" => intern!(py, "POST").clone(),
            "HEAD" => intern!(py, "HEAD").clone(),
            other => PyString::new(py, other),
        };
        environ.set_item(intern!(py, "REQUEST_METHOD"), method)?;
        environ.set_item(intern!(py, "PATH_INFO"), text(&self.path))?;
        let query = match self.query.as_str() {
            "" => intern!(py, "").clone(),
            query => PyString::new(py, query),
        };
        environ.set_item(intern!(py, "QUERY_STRING"), query)?;
        let protocol = match self.protocol {
            "HTTP/1.0" => intern!(py, "HTTP/1.0"),
            "HTTP/2" => intern!(py, "HTTP/2"),
            "HTTP/3" => intern!(py, "HTTP/3"),
            _ => intern!(py, "HTTP/1.1"),
        };
        environ.set_item(intern!(py, "SERVER_PROTOCOL"), protocol)?;
        environ.set_item(intern!(py, "SERVER_NAME"), self.server_name.as_str())?;
        environ.set_item(intern!(py, "SERVER_PORT"), self.server_port.as_str())?;
        let scheme = if self.caller.tls {
            intern!(py, "https")
        } else {
            intern!(py, "http")
        };
        environ.set_item(intern!(py, "wsgi.url_scheme"), scheme)?;
        if let Some(peer) = self.caller.peer {
            environ.set_item(intern!(py, "REMOTE_ADDR"), peer.ip().to_string())?;
            environ.set_item(intern!(py, "REMOTE_PORT"), peer.port().to_string())?;
        }
        if let Some(v) = &self.content_type {
            environ.set_item(intern!(py, "CONTENT_TYPE"), text(v))?;
        }
        if let Some(v) = &self.content_length {
            environ.set_item(intern!(py, "CONTENT_LENGTH"), text(v))?;
        }
        for (name, value) in &self.headers {
            match name {
                Key::Common(i) => environ.set_item(common_key(py, *i), text(value))?,
                Key::Other(name) => environ.set_item(name.as_str(), text(value))?,
            }
        }
        Ok(environ)
    }
}

/// An `HTTP_*` variable's name: one of the headers most requests carry (an index into
/// [`COMMON`], its Python string made once), or any other.
#[derive(Debug, PartialEq)]
enum Key {
    Common(usize),
    Other(String),
}

/// The headers browsers, clients and proxies send on most requests, with their variables.
const COMMON: [(&str, &str); 16] = [
    ("host", "HTTP_HOST"),
    ("user-agent", "HTTP_USER_AGENT"),
    ("accept", "HTTP_ACCEPT"),
    ("accept-encoding", "HTTP_ACCEPT_ENCODING"),
    ("accept-language", "HTTP_ACCEPT_LANGUAGE"),
    ("connection", "HTTP_CONNECTION"),
    ("cookie", "HTTP_COOKIE"),
    ("referer", "HTTP_REFERER"),
    ("origin", "HTTP_ORIGIN"),
    ("cache-control", "HTTP_CACHE_CONTROL"),
    ("authorization", "HTTP_AUTHORIZATION"),
    ("if-none-match", "HTTP_IF_NONE_MATCH"),
    ("if-modified-since", "HTTP_IF_MODIFIED_SINCE"),
    ("x-forwarded-for", "HTTP_X_FORWARDED_FOR"),
    ("x-forwarded-proto", "HTTP_X_FORWARDED_PROTO"),
    ("x-requested-with", "HTTP_X_REQUESTED_WITH"),
];

/// The interned Python string of `COMMON[i]`'s variable.
fn common_key(py: Python<'_>, i: usize) -> &Bound<'_, PyString> {
    static KEYS: [PyOnceLock<Py<PyString>>; COMMON.len()] =
        [const { PyOnceLock::new() }; COMMON.len()];
    KEYS[i]
        .get_or_init(py, || PyString::intern(py, COMMON[i].1).unbind())
        .bind(py)
}

/// A header's variable name.
fn variable(name: &str) -> Key {
    match COMMON.iter().position(|(header, _)| *header == name) {
        Some(i) => Key::Common(i),
        None => Key::Other(format!(
            "HTTP_{}",
            name.to_ascii_uppercase().replace('-', "_")
        )),
    }
}

/// Bytes as the str whose code points are those bytes (ISO-8859-1).
fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    match std::str::from_utf8(bytes) {
        // ASCII is the same in both: no decoding pass for the common case.
        Ok(s) if s.is_ascii() => PyString::new(py, s),
        _ => PyString::new(
            py,
            &bytes.iter().map(|&b| char::from(b)).collect::<String>(),
        ),
    }
}

/// `HTTP_*` variables. A header whose name has an underscore is left out: its variable
/// could not be told from the dashed header's, which a proxy in front may have vetted
/// (`X_Forwarded_For` posing as `X-Forwarded-For`); nginx and gunicorn drop them too.
fn http_variables(headers: &HeaderMap) -> Vec<(Key, Vec<u8>)> {
    let mut out: Vec<(Key, Vec<u8>)> = Vec::with_capacity(headers.keys_len());
    for name in headers.keys() {
        if name == header::CONTENT_TYPE
            || name == header::CONTENT_LENGTH
            || name.as_str().contains('_')
        {
            continue;
        }
        let separator: &[u8] = if name == header::COOKIE { b"; " } else { b"," };
        let mut value = Vec::new();
        for (i, v) in headers.get_all(name).iter().enumerate() {
            if i > 0 {
                value.extend_from_slice(separator);
            }
            value.extend_from_slice(v.as_bytes());
        }
        out.push((variable(name.as_str()), value));
    }
    out
}

/// `SERVER_NAME` and `SERVER_PORT` from the Host header (or HTTP/2's `:authority`), with
/// the scheme's port when the request names none.
fn server(parts: &Parts, tls: bool) -> (String, String) {
    let default_port = if tls { "443" } else { "80" };
    let authority = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()));
    let Some(authority) = authority else {
        return ("localhost".into(), default_port.into());
    };
    let (host, port) = match authority.rsplit_once(':') {
        // `[::1]:8000` has its port after the bracket; `[::1]` has none.
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.starts_with('[') || host.ends_with(']')) =>
        {
            (host.to_owned(), port.to_owned())
        }
        _ => (authority.clone(), default_port.to_owned()),
    };
    (host, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(host: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri("/a%20b/c?x=1&y=%2F");
        if let Some(host) = host {
            b = b.header(header::HOST, host);
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn server_name_and_port_come_from_the_host() {
        assert_eq!(
            server(&parts(Some("example.org:8080"), &[]), false),
            ("example.org".into(), "8080".into())
        );
        assert_eq!(
            server(&parts(Some("[::1]:9"), &[]), true),
            ("[::1]".into(), "9".into())
        );
        assert_eq!(
            server(&parts(Some("[::1]"), &[]), true),
            ("[::1]".into(), "443".into())
        );
        assert_eq!(
            server(&parts(None, &[]), false),
            ("localhost".into(), "80".into())
        );
    }

    #[test]
    fn headers_become_variables_combined_and_underscored_names_are_dropped() {
        let p = parts(
            Some("h"),
            &[
                ("accept", "a"),
                ("accept", "b"),
                ("cookie", "x=1"),
                ("cookie", "y=2"),
                ("x_forwarded_for", "1.2.3.4"),
                ("content-type", "text/plain"),
                ("x-custom-thing", "v"),
            ],
        );
        let vars = http_variables(&p.headers);
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| match n {
                    Key::Common(i) => COMMON[*i].1 == k,
                    Key::Other(n) => n == k,
                })
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(get("HTTP_ACCEPT").as_deref(), Some("a,b"));
        assert_eq!(get("HTTP_COOKIE").as_deref(), Some("x=1; y=2"));
        assert_eq!(get("HTTP_X_CUSTOM_THING").as_deref(), Some("v"));
        assert_eq!(get("HTTP_HOST").as_deref(), Some("h"));
        assert!(
            get("HTTP_X_FORWARDED_FOR").is_none(),
            "underscored name kept"
        );
        assert!(
            get("HTTP_CONTENT_TYPE").is_none(),
            "CONTENT_TYPE has its own key"
        );
    }

    #[test]
    fn the_common_headers_variables_are_the_ones_the_rule_gives() {
        for (header, variable) in COMMON {
            let by_rule = format!("HTTP_{}", header.to_ascii_uppercase().replace('-', "_"));
            assert_eq!(by_rule, variable, "the table's variable for {header}");
        }
    }

    #[test]
    fn the_path_is_percent_decoded_and_the_query_kept_raw() {
        let head = RequestHead::of(
            &parts(Some("h"), &[]),
            Caller {
                peer: None,
                tls: false,
            },
        );
        assert_eq!(head.path, b"/a b/c");
        assert_eq!(head.query, "x=1&y=%2F");
    }
}
