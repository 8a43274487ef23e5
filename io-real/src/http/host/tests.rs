use super::*;
use proptest::prelude::*;

fn allowed(given: &[&str]) -> AllowedHosts {
    AllowedHosts::new(
        given
            .iter()
            .map(|g| Pattern::parse(g).expect("pattern"))
            .collect(),
    )
}

#[test]
fn the_names_every_check_allows_and_the_ones_it_refuses() {
    let hosts = allowed(&["files.example", "*.lan.example"]);
    for pass in [
        "localhost",
        "LOCALHOST:8000",
        "localhost.",
        "app.localhost:1",
        "127.0.0.1",
        "127.0.0.1:8000",
        "[::1]",
        "[::1]:8000",
        "[fe80::1%25eth0]:80",
        "192.0.2.7:80",
        "files.example",
        "Files.Example.:443",
        "a.lan.example",
        "a.b.LAN.example.",
        "",
    ] {
        assert!(hosts.allows(pass), "{pass:?} should pass");
    }
    for refuse in [
        "evil.example",
        "evil.example:8000",
        "localhost.evil.example",
        "lan.example",
        "files.example.evil",
        "xfiles.example",
        "::1",
        "[::1",
        "[evil.example]",
        "[::1]x",
        "localhost:80x",
        ":80",
        ".",
        "127.0.0.1.evil.example",
    ] {
        assert!(!hosts.allows(refuse), "{refuse:?} should be refused");
    }
}

#[test]
fn certificate_names_pass_once_served_and_stop_when_replaced() {
    let hosts = allowed(&[]);
    assert!(!hosts.allows("cert.example"));
    hosts.set_certificate_names(&["cert.example".into(), "*.wild.example".into(), "*".into()]);
    assert!(hosts.allows("cert.example:8443"));
    assert!(hosts.allows("a.wild.example"));
    assert!(
        !hosts.allows("other.example"),
        "`*` in a certificate allows nothing more"
    );
    hosts.set_certificate_names(&["next.example".into()]);
    assert!(!hosts.allows("cert.example"));
    assert!(hosts.allows("next.example"));
}

#[test]
fn a_request_passes_only_when_every_name_it_gives_passes() {
    let hosts = allowed(&[]);
    let req = |uri: &str, host: &[&str]| {
        let mut b = Request::builder().uri(uri);
        for h in host {
            b = b.header(http::header::HOST, *h);
        }
        b.body(()).expect("request")
    };
    assert!(hosts.allow_request(&req("/", &["localhost:8000"])));
    assert!(hosts.allow_request(&req("/", &[])));
    assert!(!hosts.allow_request(&req("/", &["evil.example"])));
    // HTTP/2's :authority arrives as the URI's.
    assert!(hosts.allow_request(&req("http://127.0.0.1:8000/", &[])));
    assert!(!hosts.allow_request(&req("http://evil.example:8000/", &[])));
    // An absolute-form target names the resource, whatever Host says (RFC 9112 §3.2.2).
    assert!(!hosts.allow_request(&req("http://evil.example/", &["localhost"])));
    assert!(!hosts.allow_request(&req("/", &["localhost", "evil.example"])));
}

#[test]
fn written_patterns_are_checked() {
    assert_eq!(Pattern::parse("*"), Ok(Pattern::Any));
    assert_eq!(
        Pattern::parse("Files.Example."),
        Ok(Pattern::Exact("files.example".into()))
    );
    assert_eq!(
        Pattern::parse("*.Example"),
        Ok(Pattern::Under("example".into()))
    );
    for bad in [
        "",
        ".",
        "a..b",
        "example.com:8080",
        "a b",
        "*.",
        "a/b",
        "*x.example",
        "**",
    ] {
        assert!(Pattern::parse(bad).is_err(), "{bad:?} accepted");
    }
    let port = Pattern::parse("example.com:8080").expect_err("port");
    assert!(port.contains("without a port"), "{port}");
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn name() -> impl Strategy<Value = String> {
    proptest::collection::vec(label(), 1..4).prop_map(|labels| labels.join("."))
}

/// `name` as a browser or a proxy may spell it: any case, a trailing dot or not, a
/// port or not.
fn spelled(name: &str, upper: &[bool], dot: bool, port: Option<u16>) -> String {
    let mut s: String = name
        .chars()
        .zip(upper.iter().cycle())
        .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
        .collect();
    if dot {
        s.push('.');
    }
    if let Some(port) = port {
        s.push_str(&format!(":{port}"));
    }
    s
}

proptest! {
    #[test]
    fn a_name_passes_however_spelled_exactly_when_it_is_allowed(
        allowed_name in name(),
        asked in name(),
        upper in proptest::collection::vec(any::<bool>(), 1..8),
        dot in any::<bool>(),
        port in proptest::option::of(any::<u16>()),
    ) {
        let hosts = allowed(&[&allowed_name]);
        let value = spelled(&asked, &upper, dot, port);
        let is_ip = asked.parse::<Ipv4Addr>().is_ok();
        prop_assert_eq!(
            parse(&value),
            Some(if is_ip {
                Named::Ip(asked.parse::<Ipv4Addr>().expect("v4").into())
            } else {
                Named::Name(asked.clone())
            })
        );
        let expected = is_ip
            || asked == allowed_name
            || asked == "localhost"
            || asked.ends_with(".localhost");
        prop_assert_eq!(hosts.allows(&value), expected, "{}", value);
        // Under `*.allowed`, the names below it pass and the name itself does not.
        let under = self::allowed(&[&format!("*.{allowed_name}")]);
        let below = spelled(&format!("{asked}.{allowed_name}"), &upper, dot, port);
        prop_assert!(under.allows(&below), "{}", below);
        prop_assert_eq!(under.allows(&spelled(&allowed_name, &upper, dot, port)),
            allowed_name.parse::<Ipv4Addr>().is_ok() || allowed_name == "localhost"
                || allowed_name.ends_with(".localhost"));
    }

    #[test]
    fn every_ip_literal_passes_with_or_without_a_port(
        v4 in any::<Ipv4Addr>(),
        v6 in any::<Ipv6Addr>(),
        port in proptest::option::of(any::<u16>()),
    ) {
        let hosts = allowed(&[]);
        let port = port.map_or(String::new(), |p| format!(":{p}"));
        let v4_value = format!("{v4}{port}");
        let v6_value = format!("[{v6}]{port}");
        prop_assert_eq!(parse(&v4_value), Some(Named::Ip(v4.into())));
        prop_assert_eq!(parse(&v6_value), Some(Named::Ip(v6.into())));
        prop_assert!(hosts.allows(&v4_value) && hosts.allows(&v6_value));
        // Unbracketed, an IPv6 address is no `Host` value.
        let bare_v6 = format!("{v6}{port}");
        prop_assert!(!hosts.allows(&bare_v6), "{}", bare_v6);
    }

    #[test]
    fn any_value_gets_an_answer_and_a_refused_one_is_no_allowed_name(
        value in "\\PC{0,40}",
        written in "\\PC{0,20}",
    ) {
        let hosts = allowed(&["files.example"]);
        let pattern = Pattern::parse(&written);
        if hosts.allows(&value) {
            prop_assert!(
                matches!(parse(&value), Some(Named::Nothing | Named::Ip(_)))
                    || matches!(parse(&value), Some(Named::Name(n))
                        if n == "files.example" || n == "localhost" || n.ends_with(".localhost"))
            );
        }
        if let Ok(Pattern::Exact(name)) = pattern {
            prop_assert!(self::allowed(&[&written]).allows(&name.to_ascii_uppercase()));
        }
    }
}
