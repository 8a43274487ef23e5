//! Access control and the headers that site configuration adds: Basic authentication, CORS,
//! the single-page-app fallback test, `Cache-Control`, security headers and HSTS.
//!
//! Everything here is a pure function of configuration and request headers.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderValue, Method, header};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

/// The `WWW-Authenticate` challenge sent with 401.
pub const CHALLENGE: &str = "Basic realm=\"servery\", charset=\"UTF-8\"";

/// `Strict-Transport-Security` over TLS: one year, this host only. `includeSubDomains`
/// and `preload` commit other hosts and are not ours to decide.
pub const HSTS: &str = "max-age=31536000";

/// One accepted user and password, from `--auth`.
///
/// Accepted forms:
/// - `user:password`: the password in clear in the configuration;
/// - `user:sha256:<64 hex digits>`: the SHA-256 of the password, so the configuration (and
///   the process list, if it is passed as an argument) does not reveal it.
///
/// Why SHA-256 and not a slow password hash (argon2, bcrypt): Basic authentication sends the
/// password with *every* request, so the check runs per request; a deliberately slow hash
/// would turn each request into tens of milliseconds of CPU, an easy denial of service.
/// An unsalted fast hash does not protect a weak password against offline guessing if the
/// configuration leaks, so use a long random password; it does keep a strong one from being
/// read over a shoulder or out of a process listing. A clear password that itself looks like
/// `sha256:<64 hex>` is read as the hashed form: choose another.
///
/// Both forms are stored as SHA-256 digests, and the user name too, so every comparison is
/// between 32-byte values and takes the same time whatever the input's length or content.
#[derive(Clone)]
pub struct Credential {
    user: [u8; 32],
    password: [u8; 32],
}

/// Why an `--auth` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// No `:` between user and password.
    #[error("expected user:password or user:sha256:<hex>, found no ':'")]
    MissingColon,
    /// The user name is empty.
    #[error("the user name is empty")]
    EmptyUser,
    /// The password is empty.
    #[error("the password is empty")]
    EmptyPassword,
    /// `sha256:` followed by something other than 64 hex digits.
    #[error("sha256: must be followed by exactly 64 hex digits")]
    BadHash,
}

impl FromStr for Credential {
    type Err = CredentialError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (user, secret) = text.split_once(':').ok_or(CredentialError::MissingColon)?;
        if user.is_empty() {
            return Err(CredentialError::EmptyUser);
        }
        let password = match secret.strip_prefix("sha256:") {
            Some(hex) => parse_hex32(hex).ok_or(CredentialError::BadHash)?,
            None if secret.is_empty() => return Err(CredentialError::EmptyPassword),
            None => sha256(secret.as_bytes()),
        };
        Ok(Self {
            user: sha256(user.as_bytes()),
            password,
        })
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Even digests stay out of logs.
        f.write_str("Credential(<redacted>)")
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn parse_hex32(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

/// Whether the request may proceed: always when no credentials are configured, otherwise
/// when its `Authorization: Basic` matches one of them. Every configured credential is
/// compared, in constant time, whatever matched earlier: the time taken reveals neither
/// which part was wrong nor which entry matched.
pub fn authorized(credentials: &[Credential], headers: &HeaderMap) -> bool {
    if credentials.is_empty() {
        return true;
    }
    let Some((user, password)) = basic_credentials(headers) else {
        return false;
    };
    let (user, password) = (sha256(&user), sha256(&password));
    let mut ok = Choice::from(0);
    for c in credentials {
        ok |= c.user.ct_eq(&user) & c.password.ct_eq(&password);
    }
    ok.into()
}

/// The user a request authenticated as under `--auth` (checked by [`authorized`]); `None`
/// without `--auth`, or when the request carries no readable Basic credentials.
pub fn authenticated_user(credentials: &[Credential], headers: &HeaderMap) -> Option<Vec<u8>> {
    if credentials.is_empty() {
        return None;
    }
    basic_credentials(headers).map(|(user, _)| user)
}

/// `Authorization: Basic <base64(user:password)>` (RFC 7617); `None` if absent or malformed.
/// The halves are bytes: nothing requires them to be UTF-8 to be compared.
fn basic_credentials(headers: &HeaderMap) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let text = value.to_str().ok()?.trim();
    let (scheme, token) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = STANDARD.decode(token.trim()).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`. Browsers
/// never attach credentials to one, so it is answered before authentication.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The methods a cross-origin request may use.
pub const CORS_METHODS: &str = "GET, HEAD, OPTIONS";

/// Response headers a cross-origin script may read beyond the CORS-safelisted ones.
pub const CORS_EXPOSE: &str =
    "ETag, Content-Range, Accept-Ranges, Content-Length, Content-Encoding, Repr-Digest";

/// How long a browser may reuse a preflight answer (seconds).
pub const CORS_MAX_AGE: &str = "600";

/// Headers of a preflight answer. Requested headers are echoed back when they form a valid
/// list of field names (the `*` wildcard would not cover `Authorization`); anything else is
/// not allowed.
pub fn add_preflight_headers(request: &HeaderMap, response: &mut HeaderMap) {
    response.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(CORS_METHODS),
    );
    response.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(CORS_MAX_AGE),
    );
    let requested: Vec<&str> = request
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let requested = requested.join(",");
    let names: Vec<&str> = requested
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if !names.is_empty()
        && names.iter().all(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        })
        && let Ok(value) = HeaderValue::from_str(&names.join(", "))
    {
        response.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, value);
    }
}

/// Headers on every response when CORS is on: any origin may read what we serve (it is a
/// public file server; with `--auth`, browsers still refuse credentialed cross-origin
/// reads, since `*` never satisfies them).
pub fn add_cors_headers(response: &mut HeaderMap) {
    response.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(CORS_EXPOSE),
    );
}

/// Whether the request explicitly accepts `text/html` (a browser navigating), which is when
/// a single-page app wants its `index.html` for an unknown path. `*/*` alone does not
/// count: scripts fetching a missing asset send it, and should get a 404, not the app.
pub fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("text/html")
                && !parts.any(|p| {
                    p.split_once('=').is_some_and(|(k, v)| {
                        k.trim().eq_ignore_ascii_case("q")
                            && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                    })
                })
        })
}

/// `Cache-Control` for a served file. With `max_age`, a cacheable response; `private` when
/// authentication is on, because `public` would let a shared cache hand protected files to
/// anyone (RFC 9111 §3.5). Without it, `no-cache`: caches may keep the file but must
/// revalidate, which our validators make cheap (304).
pub fn cache_control(max_age: Option<u32>, authenticated: bool) -> HeaderValue {
    match max_age {
        Some(secs) => {
            let scope = if authenticated { "private" } else { "public" };
            HeaderValue::from_str(&format!("{scope}, max-age={secs}"))
                .unwrap_or_else(|_| HeaderValue::from_static("no-cache"))
        }
        None => HeaderValue::from_static("no-cache"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user_pass: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let value = format!("Basic {}", STANDARD.encode(user_pass));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&value).expect("value"),
        );
        h
    }

    fn creds(list: &[&str]) -> Vec<Credential> {
        list.iter()
            .map(|c| c.parse().expect("credential"))
            .collect()
    }

    #[test]
    fn parses_both_forms() {
        let hashed = format!(
            "bob:sha256:{}",
            "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
        );
        let c = creds(&["alice:secret:with:colons", &hashed]);
        assert!(authorized(&c, &basic("alice:secret:with:colons")));
        assert!(
            authorized(&c, &basic("bob:password")),
            "sha256(\"password\")"
        );
        assert!(!authorized(&c, &basic("bob:sha256:5e88")));
        let upper = hashed
            .to_uppercase()
            .replacen("BOB:SHA256:", "bob:sha256:", 1);
        assert!(
            authorized(&creds(&[&upper]), &basic("bob:password")),
            "hex is case-insensitive"
        );
    }

    #[test]
    fn refuses_bad_credentials() {
        assert_eq!(
            "nopass".parse::<Credential>().err(),
            Some(CredentialError::MissingColon)
        );
        assert_eq!(
            ":x".parse::<Credential>().err(),
            Some(CredentialError::EmptyUser)
        );
        assert_eq!(
            "u:".parse::<Credential>().err(),
            Some(CredentialError::EmptyPassword)
        );
        assert_eq!(
            "u:sha256:abc".parse::<Credential>().err(),
            Some(CredentialError::BadHash)
        );
        let not_hex = format!("u:sha256:{}", "g".repeat(64));
        assert_eq!(
            not_hex.parse::<Credential>().err(),
            Some(CredentialError::BadHash)
        );
        assert_eq!(
            format!("{:?}", creds(&["u:p"])[0]),
            "Credential(<redacted>)"
        );
    }

    #[test]
    fn checks_authorization() {
        let c = creds(&["user:pass"]);
        assert!(
            authorized(&[], &HeaderMap::new()),
            "no credentials configured"
        );
        assert!(!authorized(&c, &HeaderMap::new()));
        assert!(authorized(&c, &basic("user:pass")));
        assert!(!authorized(&c, &basic("user:pas")));
        assert!(!authorized(&c, &basic("user:passs")));
        assert!(!authorized(&c, &basic("usr:pass")));
        assert!(!authorized(&c, &basic("userpass")), "no colon");
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!!"));
        assert!(!authorized(&c, &h), "not base64");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer dXNlcjpwYXNz"),
        );
        assert!(!authorized(&c, &h), "other scheme");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("basic dXNlcjpwYXNz"),
        );
        assert!(authorized(&c, &h), "scheme is case-insensitive");
        h.append(
            header::AUTHORIZATION,
            HeaderValue::from_static("basic dXNlcjpwYXNz"),
        );
        assert!(!authorized(&c, &h), "two Authorization fields are refused");
    }

    #[test]
    fn preflight_detection_and_headers() {
        let mut req = HeaderMap::new();
        assert!(!is_preflight(&Method::OPTIONS, &req));
        req.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://a.example"),
        );
        req.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("GET"),
        );
        assert!(is_preflight(&Method::OPTIONS, &req));
        assert!(!is_preflight(&Method::GET, &req));
        req.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("range, authorization"),
        );
        let mut resp = HeaderMap::new();
        add_preflight_headers(&req, &mut resp);
        assert_eq!(
            resp[header::ACCESS_CONTROL_ALLOW_HEADERS],
            "range, authorization"
        );
        assert_eq!(resp[header::ACCESS_CONTROL_ALLOW_METHODS], CORS_METHODS);
        req.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("bad header(name)"),
        );
        let mut resp = HeaderMap::new();
        add_preflight_headers(&req, &mut resp);
        assert!(!resp.contains_key(header::ACCESS_CONTROL_ALLOW_HEADERS));
    }

    #[test]
    fn html_acceptance() {
        let accept = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(v));
            accepts_html(&h)
        };
        assert!(accept("text/html,application/xhtml+xml,*/*;q=0.8"));
        assert!(accept("TEXT/HTML"));
        assert!(!accept("*/*"));
        assert!(!accept("application/json"));
        assert!(!accept("text/html;q=0, */*"));
        assert!(!accepts_html(&HeaderMap::new()));
    }

    #[test]
    fn cache_control_values() {
        assert_eq!(cache_control(None, false), "no-cache");
        assert_eq!(cache_control(Some(60), false), "public, max-age=60");
        assert_eq!(cache_control(Some(60), true), "private, max-age=60");
    }
}
