//! A request as a WSGI environ (PEP 3333). The head is read into [`RequestHead`] on the
//! async thread, without the interpreter's lock; only the dictionary is built under it.
//!
//! Strings are PEP 3333's "native strings": the request's bytes decoded as ISO-8859-1,
//! so every byte reaches the application unchanged (`PATH_INFO` is percent-decoded first,
//! as every WSGI server does).

use std::borrow::Cow;
use std::net::IpAddr;

use http::request::Parts;
use http::{HeaderMap, Version, header};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString};

use crate::app::Caller;

/// The keys every request's environ has, in the order the template holds them (the
/// worker's template has them without a value; [`RequestHead::environ`] sets each, except
/// `wsgi.input`, which the call sets, and the remote address's two, which it removes when
/// the request has no peer address).
pub(super) const PER_REQUEST: [&str; 10] = [
    "REQUEST_METHOD",
    "PATH_INFO",
    "QUERY_STRING",
    "SERVER_PROTOCOL",
    "SERVER_NAME",
    "SERVER_PORT",
    "wsgi.url_scheme",
    "wsgi.input",
    "REMOTE_ADDR",
    "REMOTE_PORT",
];

/// What the environ is made of: the request's head as hyper parsed it, moved here rather
/// than copied (no allocation per field on the async thread to be freed on the pool's).
#[derive(Debug)]
pub(super) struct RequestHead {
    parts: Parts,
    caller: Caller,
}

impl RequestHead {
    pub(super) fn of(parts: Parts, caller: Caller) -> RequestHead {
        RequestHead { parts, caller }
    }

    /// `METHOD /path`, for the log.
    pub(super) fn line(&self) -> String {
        format!(
            "{} {}",
            self.parts.method,
            String::from_utf8_lossy(&self.path_info())
        )
    }

    /// `PATH_INFO`'s bytes: the path percent-decoded.
    fn path_info(&self) -> std::borrow::Cow<'_, [u8]> {
        percent_encoding::percent_decode_str(self.parts.uri.path()).into()
    }

    /// The environ: a copy of the worker's template (its constant keys, then this
    /// request's without values), every per-request key then set. The keys, and the
    /// values that repeat from request to request, are strings made once per worker
    /// (interned, or kept from the last request), not once per request.
    pub(super) fn environ<'py>(
        &self,
        py: Python<'py>,
        base: &Bound<'py, PyDict>,
        repeated: &Repeated,
    ) -> PyResult<Bound<'py, PyDict>> {
        let parts = &self.parts;
        let environ = base.copy()?;
        let text = |bytes: &[u8]| latin1(py, bytes);
        let method = match parts.method.as_str() {
            "GET" => intern!(py, "GET").clone(),
            "POST" => intern!(py, "POST").clone(),
            "HEAD" => intern!(py, "HEAD").clone(),
            other => PyString::new(py, other),
        };
        environ.set_item(intern!(py, "REQUEST_METHOD"), method)?;
        environ.set_item(intern!(py, "PATH_INFO"), text(&self.path_info()))?;
        let query = match parts.uri.query().unwrap_or("") {
            "" => intern!(py, "").clone(),
            query => PyString::new(py, query),
        };
        environ.set_item(intern!(py, "QUERY_STRING"), query)?;
        let protocol = match parts.version {
            Version::HTTP_10 => intern!(py, "HTTP/1.0"),
            Version::HTTP_2 => intern!(py, "HTTP/2"),
            Version::HTTP_3 => intern!(py, "HTTP/3"),
            _ => intern!(py, "HTTP/1.1"),
        };
        environ.set_item(intern!(py, "SERVER_PROTOCOL"), protocol)?;
        let (server_name, server_port) = server(parts, self.caller.tls);
        environ.set_item(
            intern!(py, "SERVER_NAME"),
            repeated.server_name.get(py, server_name),
        )?;
        environ.set_item(
            intern!(py, "SERVER_PORT"),
            repeated.server_port.get(py, server_port),
        )?;
        let scheme = if self.caller.tls {
            intern!(py, "https")
        } else {
            intern!(py, "http")
        };
        environ.set_item(intern!(py, "wsgi.url_scheme"), scheme)?;
        if let Some(peer) = self.caller.peer {
            environ.set_item(
                intern!(py, "REMOTE_ADDR"),
                repeated.remote_addr.get(py, peer.ip()),
            )?;
            environ.set_item(intern!(py, "REMOTE_PORT"), peer.port().to_string())?;
        } else {
            // The template's keys without a value: no address to give.
            environ.del_item(intern!(py, "REMOTE_ADDR"))?;
            environ.del_item(intern!(py, "REMOTE_PORT"))?;
        }
        if let Some(v) = parts.headers.get(header::CONTENT_TYPE) {
            environ.set_item(intern!(py, "CONTENT_TYPE"), text(v.as_bytes()))?;
        }
        if let Some(v) = parts.headers.get(header::CONTENT_LENGTH) {
            environ.set_item(intern!(py, "CONTENT_LENGTH"), text(v.as_bytes()))?;
        }
        for (name, value) in http_variables(&parts.headers) {
            let value = text(&value);
            match name {
                Key::Common(i) => environ.set_item(common_key(py, i), value)?,
                Key::Other(name) => environ.set_item(name.as_str(), value)?,
            }
        }
        Ok(environ)
    }
}

/// Per worker: the last value of each environ string that is usually the same from one
/// request to the next (the Host's name and port, the client's address behind a proxy or
/// on loopback), so a repeat costs a comparison instead of a new Python string.
#[derive(Debug, Default)]
pub(super) struct Repeated {
    server_name: LastString,
    server_port: LastString,
    remote_addr: LastAddr,
}

/// One value and its Python string.
#[derive(Debug, Default)]
pub(super) struct LastString(std::sync::Mutex<Option<(String, Py<PyString>)>>);

impl LastString {
    /// `value` as a Python string: the kept one when `value` is the same as last time.
    pub(super) fn get<'py>(&self, py: Python<'py>, value: &str) -> Bound<'py, PyString> {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((kept, string)) = last.as_ref()
            && kept == value
        {
            return string.bind(py).clone();
        }
        let string = PyString::new(py, value);
        *last = Some((value.to_owned(), string.clone().unbind()));
        string
    }
}

/// One address and its Python string: a repeat costs a comparison of addresses, without
/// formatting the address again.
#[derive(Debug, Default)]
pub(super) struct LastAddr(std::sync::Mutex<Option<(IpAddr, Py<PyString>)>>);

impl LastAddr {
    pub(super) fn get<'py>(&self, py: Python<'py>, ip: IpAddr) -> Bound<'py, PyString> {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((kept, string)) = last.as_ref()
            && *kept == ip
        {
            return string.bind(py).clone();
        }
        let string = PyString::new(py, &ip.to_string());
        *last = Some((ip, string.clone().unbind()));
        string
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
/// A header that appears once is borrowed; only a repeated one is combined into new bytes.
fn http_variables(headers: &HeaderMap) -> impl Iterator<Item = (Key, Cow<'_, [u8]>)> {
    headers.keys().filter_map(|name| {
        if name == header::CONTENT_TYPE
            || name == header::CONTENT_LENGTH
            || name.as_str().contains('_')
        {
            return None;
        }
        let mut values = headers.get_all(name).iter();
        let first = values.next()?.as_bytes();
        let mut value = Cow::Borrowed(first);
        let separator: &[u8] = if name == header::COOKIE { b"; " } else { b"," };
        for v in values {
            let combined = value.to_mut();
            combined.extend_from_slice(separator);
            combined.extend_from_slice(v.as_bytes());
        }
        Some((variable(name.as_str()), value))
    })
}

/// `SERVER_NAME` and `SERVER_PORT` from the Host header (or HTTP/2's `:authority`), with
/// the scheme's port when the request names none.
fn server(parts: &Parts, tls: bool) -> (&str, &str) {
    let default_port = if tls { "443" } else { "80" };
    let authority = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()));
    let Some(authority) = authority else {
        return ("localhost", default_port);
    };
    let (host, port) = match authority.rsplit_once(':') {
        // `[::1]:8000` has its port after the bracket; `[::1]` has none.
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.starts_with('[') || host.ends_with(']')) =>
        {
            (host, port)
        }
        _ => (authority, default_port),
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
            ("example.org", "8080")
        );
        assert_eq!(server(&parts(Some("[::1]:9"), &[]), true), ("[::1]", "9"));
        assert_eq!(server(&parts(Some("[::1]"), &[]), true), ("[::1]", "443"));
        assert_eq!(server(&parts(None, &[]), false), ("localhost", "80"));
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
        let vars: Vec<_> = http_variables(&p.headers).collect();
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
    fn a_repeated_value_is_the_kept_string_and_a_new_one_replaces_it() {
        Python::initialize();
        Python::attach(|py| {
            let last = LastString::default();
            let a = last.get(py, "example.org");
            assert!(
                a.is(last.get(py, "example.org")),
                "a repeat made a new string"
            );
            let b = last.get(py, "example.net");
            assert_eq!(b.to_cow().expect("text"), "example.net");
            assert!(!a.is(&b));
            let addrs = LastAddr::default();
            let one: IpAddr = "10.0.0.1".parse().expect("address");
            let two: IpAddr = "::1".parse().expect("address");
            let first = addrs.get(py, one);
            assert!(first.is(addrs.get(py, one)), "a repeat made a new string");
            assert_eq!(addrs.get(py, two).to_cow().expect("text"), "::1");
            assert_eq!(addrs.get(py, one).to_cow().expect("text"), "10.0.0.1");
        });
    }

    #[test]
    fn the_path_is_percent_decoded_and_the_query_kept_raw() {
        let head = RequestHead::of(
            parts(Some("h"), &[]),
            Caller {
                peer: None,
                tls: false,
            },
        );
        assert_eq!(&*head.path_info(), b"/a b/c");
        assert_eq!(head.parts.uri.query(), Some("x=1&y=%2F"));
    }

    #[test]
    fn every_key_of_the_template_gets_the_requests_value() {
        Python::initialize();
        Python::attach(|py| {
            let template = PyDict::new(py);
            for key in PER_REQUEST {
                template
                    .set_item(PyString::intern(py, key), py.None())
                    .expect("key");
            }
            for peer in [Some("127.0.0.1:4000".parse().expect("address")), None] {
                let head = RequestHead::of(parts(Some("h:8"), &[]), Caller { peer, tls: false });
                let environ = head
                    .environ(py, &template, &Repeated::default())
                    .expect("environ");
                for (key, value) in environ.iter() {
                    let key: String = key.extract().expect("str key");
                    if key != "wsgi.input" {
                        assert!(
                            value.is_instance_of::<PyString>(),
                            "{key} kept the template's None: a per-request key not set"
                        );
                    }
                }
                assert_eq!(
                    environ.contains("REMOTE_PORT").expect("lookup"),
                    peer.is_some(),
                    "REMOTE_PORT without a peer address (or missing with one)"
                );
                assert!(
                    !environ.contains("REMOTE_ADDR").expect("lookup") || peer.is_some(),
                    "REMOTE_ADDR without a peer address"
                );
            }
        });
    }
}
