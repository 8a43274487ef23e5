//! The file cache and the encoded cache: freshness, containment, budgets, streaming.

use super::*;

/// Waits (bounded) until every file in `paths` changed at least [`FILE_CACHE_SETTLE`] ago,
/// so the file cache may keep them.
async fn until_settled(paths: &[&Path]) {
    use std::os::unix::fs::MetadataExt;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let newest = paths
            .iter()
            .map(|p| {
                let m = std::fs::symlink_metadata(p).expect("stat");
                std::time::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
            })
            .max()
            .expect("paths");
        let age = SystemTime::now().duration_since(newest).unwrap_or_default();
        let wanted = FILE_CACHE_SETTLE + Duration::from_millis(50);
        if age >= wanted {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "files never settled"
        );
        tokio::time::sleep(wanted - age).await;
    }
}

/// Writes `files` under `root` and waits until the file cache may keep them.
async fn settled_files(root: &Root, files: &[(&str, &[u8])]) {
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|(rel, data)| root.write(rel, data))
        .collect();
    let paths: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    until_settled(&paths).await;
}

#[cfg(unix)]
#[tokio::test]
async fn the_file_cache_serves_only_the_file_as_it_is_now() {
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new("file-cache");
    settled_files(
        &root,
        &[
            ("rewritten.txt", b"version-1"),
            ("removed.txt", b"soon gone"),
            ("locked.txt", b"private now"),
        ],
    )
    .await;
    let server = Server::serve(&root).await;
    let first = server.get("/rewritten.txt", &[]).await;
    assert_eq!(
        (first.status, first.body.as_slice()),
        (200, &b"version-1"[..])
    );
    assert_eq!(
        server.site.file_cache_usage().0,
        1,
        "a settled file is cached"
    );
    let again = server.get("/rewritten.txt", &[]).await;
    assert_eq!(again.body, b"version-1");
    assert_eq!(again.header("etag"), first.header("etag"));
    let ranged = server
        .get("/rewritten.txt", &[("Range", "bytes=2-4")])
        .await;
    assert_eq!((ranged.status, ranged.body.as_slice()), (206, &b"rsi"[..]));
    let head = server.request("HEAD", "/rewritten.txt", &[]).await;
    assert_eq!(head.header("content-length"), Some("9"));

    // Rewritten in place with as many bytes: the new content, never the cached one.
    root.write("rewritten.txt", b"version-2");
    let r = server.get("/rewritten.txt", &[]).await;
    assert_eq!(r.body, b"version-2");
    assert_ne!(r.header("etag"), first.header("etag"));
    assert_eq!(server.get("/rewritten.txt", &[]).await.body, b"version-2");

    assert_eq!(server.get("/removed.txt", &[]).await.status, 200);
    std::fs::remove_file(root.path().join("removed.txt")).expect("rm");
    assert_eq!(server.get("/removed.txt", &[]).await.status, 404);

    // Permission bits do not bind root; the identity check is unit-tested either way.
    if !rustix::process::geteuid().is_root() {
        assert_eq!(server.get("/locked.txt", &[]).await.status, 200);
        let mode = std::fs::Permissions::from_mode(0o000);
        std::fs::set_permissions(root.path().join("locked.txt"), mode).expect("chmod");
        assert_eq!(server.get("/locked.txt", &[]).await.status, 403);
    }
}

#[cfg(unix)]
#[tokio::test]
async fn the_file_cache_never_widens_what_links_reach() {
    use std::os::unix::fs::symlink;
    let root = Root::new("file-cache-links");
    let outside = Root::new("file-cache-outside");
    settled_files(
        &root,
        &[
            ("target.txt", b"inside"),
            ("dir/nested.txt", b"nested bytes"),
        ],
    )
    .await;
    settled_files(&outside, &[("secret.txt", b"SECRET")]).await;
    symlink("target.txt", root.path().join("link.txt")).expect("symlink");
    let server = Server::serve(&root).await;

    // A link retargeted out of the root is refused at once: the target is another file.
    assert_eq!(server.get("/link.txt", &[]).await.body, b"inside");
    let swap = root.path().join("link.tmp");
    symlink(outside.path().join("secret.txt"), &swap).expect("symlink");
    std::fs::rename(&swap, root.path().join("link.txt")).expect("retarget");
    let r = server.get("/link.txt", &[]).await;
    assert_eq!(r.status, 403);
    assert!(!r.body.windows(6).any(|w| w == b"SECRET"));

    // A directory moved out and linked back holds the very file that was proven beneath
    // the root; it is refused once the proof is due again (bounded, see the module).
    assert_eq!(
        server.get("/dir/nested.txt", &[]).await.body,
        b"nested bytes"
    );
    let moved = outside.path().join("dir");
    std::fs::rename(root.path().join("dir"), &moved).expect("move out");
    symlink(&moved, root.path().join("dir")).expect("link back");
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let r = server.get("/dir/nested.txt", &[]).await;
        if r.status == 403 {
            break;
        }
        assert_eq!(
            r.body, b"nested bytes",
            "only the proven bytes, until refused"
        );
        assert!(tokio::time::Instant::now() < deadline, "never re-proven");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_file_cache_keeps_settled_files_within_its_budget() {
    let root = Root::new("file-cache-budget");
    let many: Vec<(String, Vec<u8>)> = (0..8u8)
        .map(|i| (format!("many/{i}.txt"), vec![b'0' + i; 600]))
        .collect();
    let files: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(name, data)| (name.as_str(), data.as_slice()))
        .collect();
    settled_files(&root, &files).await;

    // Room for four entries of 600 bytes and their bookkeeping (about 1 KB each), so an
    // entry is within the quarter of the budget one entry may take, and eight do not fit.
    let budget = 4_400;
    let small = Server::start(SiteConfig {
        file_cache_size: budget,
        ..config(&root)
    })
    .await;
    for (name, data) in &many {
        assert_eq!(&small.get(&format!("/{name}"), &[]).await.body, data);
    }
    let (kept, used) = small.site.file_cache_usage();
    assert!((1..8).contains(&kept), "{kept} files kept");
    assert!(used as u64 <= budget, "{used} bytes kept");

    let before = small.site.file_cache_usage();
    root.write("fresh.txt", b"just written");
    assert_eq!(small.get("/fresh.txt", &[]).await.body, b"just written");
    assert_eq!(
        small.site.file_cache_usage(),
        before,
        "a fresh file is not kept"
    );

    let off = Server::start(SiteConfig {
        file_cache_size: 0,
        ..config(&root)
    })
    .await;
    assert_eq!(off.get("/many/0.txt", &[]).await.body, many[0].1);
    assert_eq!(off.site.file_cache_usage(), (0, 0), "0 disables the cache");
}

#[tokio::test]
async fn the_encoded_cache_is_used_and_bounded() {
    let root = Root::new("cache");
    let data = text(30_000);
    root.write("a.html", &data);
    root.write("b.html", &text(31_000));
    let server = Server::serve(&root).await;
    let first = server.get("/a.html", &[("Accept-Encoding", "br")]).await;
    let cache = server.site.encoded_cache();
    assert_eq!(cache.len(), 1);
    let used = cache.used();
    let second = server.get("/a.html", &[("Accept-Encoding", "br")]).await;
    assert_eq!(first.body, second.body);
    assert_eq!(cache.len(), 1, "served from the cache");
    assert_eq!(cache.used(), used);
    server.get("/a.html", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(cache.len(), 2, "one entry per coding");

    let off = Server::start(SiteConfig {
        compression_cache_size: 0,
        ..config(&root)
    })
    .await;
    let r = off.get("/a.html", &[("Accept-Encoding", "br")]).await;
    assert_eq!(decode("br", &r.body), data);
    assert!(off.site.encoded_cache().is_empty(), "0 disables the cache");

    // A budget that fits one entry keeps the most recent.
    let small = Server::start(SiteConfig {
        compression_cache_size: (used * 4 + used / 2) as u64,
        ..config(&root)
    })
    .await;
    small.get("/a.html", &[("Accept-Encoding", "br")]).await;
    small.get("/b.html", &[("Accept-Encoding", "br")]).await;
    let cache = small.site.encoded_cache();
    assert!(cache.used() <= used * 4 + used / 2);
}

#[tokio::test]
async fn large_files_are_encoded_while_streaming() {
    let root = Root::new("stream");
    let data = text(3 * 1024 * 1024 + 17);
    root.write("big.json", &data);
    let server = Server::serve(&root).await;
    let r = server
        .get("/big.json", &[("Accept-Encoding", "zstd")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("zstd"));
    assert!(!r.has("content-length"), "length unknown up front");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(decode("zstd", &r.body), data);
    assert!(
        server.site.encoded_cache().is_empty(),
        "streamed output is not cached"
    );
}

// =======================================================================================
// Repr-Digest
