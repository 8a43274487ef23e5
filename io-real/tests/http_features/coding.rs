//! Content codings: negotiation, conditionals per representation, ranges, sidecars.

use super::*;

#[tokio::test]
async fn negotiates_each_coding_and_round_trips() {
    let root = Root::new("codings");
    let js = text(20_000);
    root.write("app.js", &js);
    let server = Server::serve(&root).await;
    let identity = server.get("/app.js", &[]).await;
    assert_eq!(identity.status, 200);
    assert!(
        !identity.has("content-encoding"),
        "no Accept-Encoding: identity"
    );
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));
    assert_eq!(identity.body, js);
    let identity_etag = identity.header("etag").expect("etag").to_owned();

    for (accept, coding, suffix) in [
        ("gzip, deflate, br, zstd", "zstd", "-zst\""),
        ("gzip, br", "br", "-br\""),
        ("gzip", "gzip", "-gz\""),
        ("zstd;q=0.1, gzip;q=0.9", "gzip", "-gz\""),
    ] {
        let r = server.get("/app.js", &[("Accept-Encoding", accept)]).await;
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-encoding"), Some(coding), "{accept}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(
            r.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
        let etag = r.header("etag").expect("etag");
        assert!(etag.ends_with(suffix), "{etag} is coding-specific");
        assert_eq!(
            etag.trim_end_matches(suffix),
            identity_etag.trim_end_matches('"')
        );
        assert!(r.body.len() < js.len() / 2, "{coding} actually compresses");
        assert_eq!(decode(coding, &r.body), js, "{coding} round trip");
    }

    let r = server
        .get("/app.js", &[("Accept-Encoding", "gzip;q=0, identity")])
        .await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.body, js);
}

#[tokio::test]
async fn conditionals_match_per_representation() {
    let root = Root::new("conditional-codings");
    root.write("style.css", &text(5_000));
    let server = Server::serve(&root).await;
    let zst = server
        .get("/style.css", &[("Accept-Encoding", "zstd")])
        .await;
    let zst_etag = zst.header("etag").expect("etag").to_owned();
    let plain = server.get("/style.css", &[]).await;
    let plain_etag = plain.header("etag").expect("etag").to_owned();
    assert_ne!(zst_etag, plain_etag);

    let r = server
        .get(
            "/style.css",
            &[("Accept-Encoding", "zstd"), ("If-None-Match", &zst_etag)],
        )
        .await;
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(zst_etag.as_str()));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"), "304 keeps Vary");

    // The client holds identity but now asks for zstd: it needs the zstd bytes.
    let r = server
        .get(
            "/style.css",
            &[("Accept-Encoding", "zstd"), ("If-None-Match", &plain_etag)],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("zstd"));

    // And the reverse.
    let r = server
        .get("/style.css", &[("If-None-Match", &zst_etag)])
        .await;
    assert_eq!(r.status, 200);
    assert!(!r.has("content-encoding"));

    // HEAD reports the coded length a GET would send.
    let head = server
        .request("HEAD", "/style.css", &[("Accept-Encoding", "zstd")])
        .await;
    assert_eq!(head.header("content-encoding"), Some("zstd"));
    assert_eq!(
        head.header("content-length"),
        Some(zst.body.len().to_string().as_str())
    );
}

#[tokio::test]
async fn ranges_are_served_identity() {
    let root = Root::new("range-identity");
    let data = text(10_000);
    root.write("doc.txt", &data);
    let server = Server::serve(&root).await;
    let r = server
        .get(
            "/doc.txt",
            &[
                ("Accept-Encoding", "gzip, br, zstd"),
                ("Range", "bytes=10-19"),
            ],
        )
        .await;
    assert_eq!(r.status, 206);
    assert!(!r.has("content-encoding"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.body, &data[10..20]);
    assert!(!r.header("etag").expect("etag").ends_with("-zst\""));
}

#[tokio::test]
async fn compressed_media_and_tiny_files_are_left_alone() {
    let root = Root::new("media");
    root.write("photo.png", &text(5_000));
    root.write("font.woff2", &text(5_000));
    root.write("tiny.txt", b"hi");
    let server = Server::serve(&root).await;
    for path in ["/photo.png", "/font.woff2"] {
        let r = server
            .get(path, &[("Accept-Encoding", "gzip, br, zstd")])
            .await;
        assert_eq!(r.status, 200);
        assert!(!r.has("content-encoding"), "{path}");
        assert!(!r.has("vary"), "{path} never varies");
    }
    let r = server
        .get("/tiny.txt", &[("Accept-Encoding", "gzip")])
        .await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
}

#[tokio::test]
async fn files_over_max_compress_size_are_identity() {
    let root = Root::new("max-size");
    root.write("big.txt", &text(4_000));
    root.write("ok.txt", &text(1_000));
    let server = Server::start(SiteConfig {
        max_compress_size: 2_000,
        ..config(&root)
    })
    .await;
    let r = server.get("/big.txt", &[("Accept-Encoding", "gzip")]).await;
    assert!(!r.has("content-encoding"));
    assert_eq!(r.body.len(), 4_000);
    let r = server.get("/ok.txt", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[tokio::test]
async fn compression_can_be_switched_off() {
    let root = Root::new("off");
    root.write("a.txt", &text(4_000));
    let server = Server::start(SiteConfig {
        compress: false,
        ..config(&root)
    })
    .await;
    let r = server.get("/a.txt", &[("Accept-Encoding", "gzip")]).await;
    assert!(!r.has("content-encoding"));
    assert!(!r.has("vary"));
}

#[tokio::test]
async fn precompressed_sidecars_are_used_when_fresh() {
    let root = Root::new("sidecar");
    let css = text(3_000);
    let original = root.write("app.css", &css);
    // A sidecar whose bytes differ from what we would produce, so we can tell it was used.
    let br = {
        let mut out = Vec::new();
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 1, 20);
        std::io::Write::write_all(&mut w, &css).expect("br");
        drop(w);
        out
    };
    let sidecar = root.write("app.css.br", &br);
    let now = SystemTime::now();
    set_mtime(&original, now - Duration::from_secs(100));
    set_mtime(&sidecar, now - Duration::from_secs(50));
    let server = Server::serve(&root).await;

    // A sidecar for an acceptable coding wins over encoding a preferred one ourselves.
    let r = server
        .get("/app.css", &[("Accept-Encoding", "zstd, br")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(r.body, br, "the sidecar's bytes");
    assert!(r.header("etag").expect("etag").ends_with("-br\""));
    assert!(
        server.site.encoded_cache().is_empty(),
        "nothing was encoded"
    );

    // Stale: the original was edited after the sidecar was made.
    set_mtime(&original, now);
    let r = server.get("/app.css", &[("Accept-Encoding", "br")]).await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_ne!(r.body, br, "a stale sidecar is ignored");
    assert_eq!(decode("br", &r.body), css);

    // The sidecar itself is still an ordinary file.
    let r = server.get("/app.css.br", &[]).await;
    assert_eq!(r.body, br);
}
