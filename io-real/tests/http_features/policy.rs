//! Access policy and response headers: Basic auth, CORS, SPA fallback, caching.

use super::*;

fn basic(user_pass: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

#[tokio::test]
async fn basic_auth_guards_everything_but_preflights() {
    let root = Root::new("auth");
    root.write("a.txt", b"protected");
    // sha256("hunter2")
    let hashed = "bob:sha256:f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7";
    let server = Server::start(SiteConfig {
        auth: vec![
            "alice:s3cret".parse().expect("credential"),
            hashed.parse().expect("credential"),
        ],
        cors: true,
        cache_max_age: Some(60),
        ..config(&root)
    })
    .await;

    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"servery\", charset=\"UTF-8\"")
    );
    assert!(!String::from_utf8_lossy(&r.body).contains("protected"));
    let r = server.get("/missing", &[]).await;
    assert_eq!(
        r.status, 401,
        "no probing for existence without credentials"
    );

    for wrong in ["alice:s3cre", "alice:s3cret!", "bob:s3cret", "alice", ""] {
        let r = server
            .get("/a.txt", &[("Authorization", &basic(wrong))])
            .await;
        assert_eq!(r.status, 401, "{wrong:?}");
    }
    let r = server
        .get("/a.txt", &[("Authorization", &basic("alice:s3cret"))])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"protected");
    assert_eq!(
        r.header("cache-control"),
        Some("private, max-age=60"),
        "never public behind auth"
    );
    let r = server
        .get("/a.txt", &[("Authorization", &basic("bob:hunter2"))])
        .await;
    assert_eq!(r.status, 200, "hashed form");

    // A preflight carries no credentials and must not be refused.
    let r = server
        .request(
            "OPTIONS",
            "/a.txt",
            &[
                ("Origin", "https://app.example"),
                ("Access-Control-Request-Method", "GET"),
                ("Access-Control-Request-Headers", "authorization, range"),
            ],
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("authorization, range")
    );
}

#[tokio::test]
async fn cors_headers_and_preflight() {
    let root = Root::new("cors");
    root.write("data.json", b"{}");
    let plain = Server::serve(&root).await;
    let r = plain
        .get("/data.json", &[("Origin", "https://app.example")])
        .await;
    assert!(!r.has("access-control-allow-origin"), "off by default");

    let server = Server::start(SiteConfig {
        cors: true,
        ..config(&root)
    })
    .await;
    let r = server
        .get("/data.json", &[("Origin", "https://app.example")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(
        r.header("access-control-expose-headers")
            .is_some_and(|v| v.contains("ETag"))
    );
    let r = server.get("/nope.json", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("*"),
        "errors are readable cross-origin too"
    );
    let r = server
        .request(
            "OPTIONS",
            "/data.json",
            &[
                ("Origin", "https://app.example"),
                ("Access-Control-Request-Method", "GET"),
            ],
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, HEAD, OPTIONS")
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r.has("access-control-max-age"));
    // A plain OPTIONS is still answered with Allow.
    let r = server.request("OPTIONS", "/data.json", &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
}

#[tokio::test]
async fn spa_falls_back_to_the_index_for_html_navigations() {
    let root = Root::new("spa");
    root.write("index.html", b"<div id=app></div>");
    root.write("assets/app.js", b"console.log(1)");
    let server = Server::start(SiteConfig {
        spa: true,
        cache_max_age: Some(3600),
        ..config(&root)
    })
    .await;
    let html = ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8");
    let r = server.get("/settings/profile", &[html]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<div id=app></div>");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.header("vary").is_some_and(|v| v.contains("Accept")));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let r = server.request("HEAD", "/deep/link", &[html]).await;
    assert_eq!(r.status, 200);

    // Real files are served as such; missing assets fetched by scripts stay 404.
    let r = server.get("/assets/app.js", &[html]).await;
    assert_eq!(r.body, b"console.log(1)");
    assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
    let r = server.get("/assets/missing.js", &[("Accept", "*/*")]).await;
    assert_eq!(r.status, 404);
    // Hidden paths are never served, fallback or not.
    let r = server.get("/.env", &[html]).await;
    assert_eq!(r.status, 404);

    let off = Server::serve(&root).await;
    assert_eq!(off.get("/settings/profile", &[html]).await.status, 404);
}

#[tokio::test]
async fn cache_and_security_headers() {
    let root = Root::new("headers");
    root.write("a.txt", b"a");
    let server = Server::serve(&root).await;
    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert!(r.has("x-frame-options"));
    assert!(r.has("referrer-policy"));
    assert!(!r.has("strict-transport-security"), "never over cleartext");
    let etag = r.header("etag").expect("etag").to_owned();
    let r = server.get("/a.txt", &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status, 304);
    assert_eq!(
        r.header("cache-control"),
        Some("no-cache"),
        "304 repeats it"
    );

    let server = Server::start(SiteConfig {
        security_headers: false,
        cache_max_age: Some(120),
        hsts: true,
        ..config(&root)
    })
    .await;
    let r = server.get("/a.txt", &[]).await;
    assert_eq!(r.header("cache-control"), Some("public, max-age=120"));
    assert!(!r.has("x-content-type-options"));
    assert!(!r.has("x-frame-options"));
    assert!(!r.has("referrer-policy"));
    assert!(!r.has("strict-transport-security"), "hsts needs TLS");
}

// =======================================================================================
// TLS
