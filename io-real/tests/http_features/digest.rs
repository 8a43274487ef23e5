//! `Repr-Digest` of identity and coded representations, coalesced.

use super::*;

fn sha256_field(data: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data))
    )
}

fn sha512_field(data: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "sha-512=:{}:",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(data))
    )
}

#[tokio::test]
async fn repr_digest_covers_the_whole_identity_representation() {
    let root = Root::new("digest-identity");
    let small = text(1_000);
    let large = text(700_000);
    root.write("small.txt", &small);
    root.write("large.bin", &large);
    let server = Server::serve(&root).await;

    let r = server.get("/small.txt", &[]).await;
    assert!(!r.has("repr-digest"), "only when asked");

    let want = [("Want-Repr-Digest", "sha-256=1")];
    let r = server.get("/small.txt", &want).await;
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&small).as_str()));

    let r = server.get("/large.bin", &want).await;
    assert_eq!(r.body, large);
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    // A range still reports the digest of the whole representation.
    let r = server
        .get(
            "/large.bin",
            &[
                ("Want-Repr-Digest", "sha-256=1"),
                ("Range", "bytes=100-199"),
            ],
        )
        .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &large[100..200]);
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    // HEAD carries it too.
    let r = server.request("HEAD", "/large.bin", &want).await;
    assert_eq!(r.header("repr-digest"), Some(sha256_field(&large).as_str()));

    let r = server
        .get(
            "/large.bin",
            &[("Want-Repr-Digest", "sha-256=2, sha-512=7")],
        )
        .await;
    assert_eq!(r.header("repr-digest"), Some(sha512_field(&large).as_str()));

    let r = server
        .get("/large.bin", &[("Want-Repr-Digest", "sha-256=0, md5=9")])
        .await;
    assert!(!r.has("repr-digest"), "nothing acceptable");
    assert_eq!(server.site.flights_in_flight(), 0, "nothing retained");
}

#[tokio::test]
async fn repr_digest_of_a_coded_representation_covers_the_encoded_bytes() {
    let root = Root::new("digest-coded");
    let data = text(200_000);
    root.write("page.html", &data);
    let server = Server::serve(&root).await;
    for _ in 0..2 {
        // Once encoding, once from the cache.
        let r = server
            .get(
                "/page.html",
                &[
                    ("Accept-Encoding", "zstd"),
                    ("Want-Repr-Digest", "sha-256=3"),
                ],
            )
            .await;
        assert_eq!(r.header("content-encoding"), Some("zstd"));
        assert_eq!(
            r.header("repr-digest"),
            Some(sha256_field(&r.body).as_str())
        );
        assert_ne!(r.body, data);
    }
}

#[tokio::test]
async fn concurrent_digests_agree_and_leave_no_flights() {
    let root = Root::new("digest-concurrent");
    let data = text(2 * 1024 * 1024);
    root.write("big.dat", &data);
    let server = Arc::new(Server::serve(&root).await);
    let expected = sha256_field(&data);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let server = Arc::clone(&server);
        tasks.push(tokio::spawn(async move {
            server
                .request("HEAD", "/big.dat", &[("Want-Repr-Digest", "sha-256=1")])
                .await
        }));
    }
    for task in tasks {
        let r = timeout(BOUND, task).await.expect("in time").expect("task");
        assert_eq!(r.header("repr-digest"), Some(expected.as_str()));
    }
    assert_eq!(server.site.flights_in_flight(), 0);
}

// =======================================================================================
// Access control and headers
