//! The directory page against the real binary, without a browser: its assets and headers,
//! the cross-site refusal of every mutation from a foreign page (decision 0022), and
//! `MKCOL` under `--upload` alone. The browser itself is driven in `browser.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, wait_until};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Reply, request};

fn start(tree: &Tree, extra: &[&str]) -> Server {
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend_from_slice(extra);
    let server = Server::start(tree, 2, &args, &[]);
    server.wait_ready(2, Duration::from_secs(30));
    server
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, b"", &[])
}

/// The whole raw response (head and chunked body) to a GET on a connection that closes.
fn raw_get(addr: SocketAddr, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    out
}

/// The `href`/`src` of the page's stylesheet and script.
fn asset_paths(page: &str) -> Vec<String> {
    page.split("\"/.servery/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|name| format!("/.servery/{name}"))
        .collect()
}

#[test]
fn page_assets_are_immutable_and_the_page_has_a_strict_policy() {
    let tree = Tree::new("page-assets");
    let server = start(&tree, &[]);
    let page = get(server.addr, "/");
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("style-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let text = String::from_utf8_lossy(&page.body).into_owned();
    let assets = asset_paths(&text);
    assert_eq!(assets.len(), 2, "{assets:?}");
    for asset in &assets {
        let r = request(server.addr, "GET", asset, b"", &[("Accept-Encoding", "br")]);
        assert_eq!(r.status, 200, "{asset}");
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=31536000, immutable")
        );
        assert_eq!(r.header("content-encoding"), Some("br"));
    }
    // An unknown hash is an ordinary (hidden, so absent) path.
    assert_eq!(get(server.addr, "/.servery/app-0.js").status, 404);
    // The JSON listing for scripts is unchanged.
    let json = get(server.addr, "/?format=json");
    assert!(String::from_utf8_lossy(&json.body).contains("\"name\":\"hello.txt\""));
}

/// The page's assets are encoded in a worker only when a request first accepts a coding,
/// once per coding (decision 0124): nothing at start-up, nothing for a file fetched by
/// name or for a page that only links to them. Read from the worker's debug line for each
/// encoding; the last one asked for is awaited, so every earlier line is in by then (one
/// worker writes them in order).
#[test]
fn page_assets_are_encoded_only_when_a_request_first_accepts_a_coding() {
    let tree = Tree::new("asset-encoding");
    let server = Server::start(
        &tree,
        1,
        FAST,
        &[("SERVERY_LOG", "info,servery::http::page::assets=debug")],
    );
    server.wait_ready(1, Duration::from_secs(30));
    let encodings = |server: &Server| -> Vec<String> {
        server
            .stderr()
            .lines()
            .filter(|l| l.contains("encoded a page asset"))
            .map(|l| {
                let field = |name: &str| {
                    l.split(&format!("{name}=\""))
                        .nth(1)
                        .and_then(|rest| rest.split('"').next())
                        .unwrap_or("?")
                        .to_owned()
                };
                format!("{}.{} {}", field("asset"), field("ext"), field("coding"))
            })
            .collect()
    };
    assert_eq!(get(server.addr, "/hello.txt").status, 200);
    let page = get(server.addr, "/");
    assert_eq!(page.status, 200);
    let assets = asset_paths(&String::from_utf8_lossy(&page.body));
    let asset = |ext: &str| {
        assets
            .iter()
            .find(|a| a.ends_with(ext))
            .unwrap_or_else(|| panic!("no {ext} asset in {assets:?}"))
    };
    for (path, coding) in [
        (asset(".css"), "br"),
        (asset(".css"), "br"),
        (asset(".js"), "gzip"),
    ] {
        let r = request(
            server.addr,
            "GET",
            path,
            b"",
            &[("Accept-Encoding", coding)],
        );
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-encoding"), Some(coding), "{path}");
    }
    wait_until(
        Duration::from_secs(10),
        "the script's gzip encoding logged",
        || {
            encodings(&server)
                .iter()
                .any(|e| e == "app.js gz")
                .then_some(())
        },
    );
    assert_eq!(
        encodings(&server),
        ["app.css br", "app.js gz"],
        "asset rule (decision 0124): a worker encodes an asset's coding when a request \
         first accepts it, once, and nothing before"
    );
}

#[test]
fn foreign_pages_cannot_upload_or_delete_but_clients_without_browsers_can() {
    let tree = Tree::new("page-csrf");
    let server = start(&tree, &["--upload", "--dav", "--allow-overwrite"]);
    let addr = server.addr;
    let root = tree.root();
    let foreign: [&[(&str, &str)]; 3] = [
        &[("Origin", "http://127.0.0.1:1")],
        &[
            ("Origin", "http://localhost"),
            ("Sec-Fetch-Site", "same-site"),
        ],
        &[("Sec-Fetch-Site", "cross-site")],
    ];
    for headers in foreign {
        let r = request(addr, "PUT", "/evil.txt", b"x", headers);
        assert_eq!(r.status, 403, "{headers:?}");
        assert!(String::from_utf8_lossy(&r.body).contains("cross-site"));
        assert!(!root.join("evil.txt").exists());
        assert_eq!(
            request(addr, "DELETE", "/hello.txt", b"", headers).status,
            403
        );
        assert_eq!(request(addr, "MKCOL", "/d/", b"", headers).status, 403);
        assert!(root.join("hello.txt").exists());
        // Reads stay open to links from anywhere.
        assert_eq!(request(addr, "GET", "/hello.txt", b"", headers).status, 200);
    }
    // The page itself (same origin), and curl (no browser headers).
    let own = [
        ("Origin", "http://localhost"),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    assert_eq!(request(addr, "PUT", "/own.txt", b"own", &own).status, 201);
    assert_eq!(request(addr, "PUT", "/curl.txt", b"curl", &[]).status, 201);
    assert_eq!(request(addr, "DELETE", "/curl.txt", b"", &own).status, 204);
    assert_eq!(
        std::fs::read(root.join("own.txt")).ok().as_deref(),
        Some(&b"own"[..])
    );
}

#[test]
fn folders_can_be_made_with_upload_alone() {
    let tree = Tree::new("page-mkcol");
    let server = start(&tree, &["--upload"]);
    let addr = server.addr;
    assert_eq!(request(addr, "MKCOL", "/new%20dir/", b"", &[]).status, 201);
    assert!(tree.root().join("new dir").is_dir());
    assert_eq!(request(addr, "MKCOL", "/new%20dir", b"", &[]).status, 405);
    assert_eq!(request(addr, "MKCOL", "/hello.txt/", b"", &[]).status, 405);
    assert_eq!(request(addr, "MKCOL", "/no/such/", b"", &[]).status, 409);
    assert_eq!(request(addr, "MKCOL", "/.git/", b"", &[]).status, 403);
    assert_eq!(request(addr, "MKCOL", "/b/", b"body", &[]).status, 415);
    assert_eq!(
        request(addr, "PUT", "/new%20dir/f.txt", b"f", &[]).status,
        201
    );
    // The page offers uploading (and with it, a new folder) only under --upload.
    let page = String::from_utf8_lossy(&get(addr, "/").body).into_owned();
    assert!(page.contains("data-upload") && page.contains("id=\"mkdir\""));
    assert!(!page.contains("data-dav"));
}

#[test]
fn archives_are_bounded_and_can_be_turned_off() {
    let tree = Tree::new("page-archive");
    let server = start(&tree, &["--archive-max-entries", "2"]);
    // The root holds hello.txt, sub/ and sub/big.bin: over two entries, refused before
    // anything is sent.
    let r = get(server.addr, "/?archive=zip");
    assert_eq!(r.status, 403);
    assert!(String::from_utf8_lossy(&r.body).contains("--archive-max-entries"));
    let r = get(server.addr, "/sub/?archive=tar.gz");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/gzip"));
    assert!(
        r.header("content-disposition")
            .is_some_and(|d| d.contains("sub.tar.gz"))
    );
    let raw = raw_get(server.addr, "/sub/?archive=tar.gz");
    let body_at = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let chunk_at = body_at
        + raw[body_at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("size")
        + 2;
    assert_eq!(&raw[chunk_at..chunk_at + 2], &[0x1f, 0x8b], "a gzip stream");
    drop(server);
    let server = start(&tree, &["--no-archive"]);
    let r = get(server.addr, "/sub/?archive=zip");
    assert_eq!(r.status, 403);
    assert!(String::from_utf8_lossy(&r.body).contains("--no-archive"));
    assert!(!String::from_utf8_lossy(&get(server.addr, "/").body).contains("archive="));
}

#[test]
fn readme_and_search() {
    let tree = Tree::new("page-readme");
    let root = tree.root();
    std::fs::write(
        root.join("sub/README.md"),
        "# Sub\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1))",
    )
    .expect("write");
    std::fs::create_dir_all(root.join("sub/deeper")).expect("mkdir");
    std::fs::write(root.join("sub/deeper/needle-one.txt"), b"1").expect("write");
    std::fs::write(root.join(".needle-hidden"), b"h").expect("write");
    let server = start(&tree, &[]);
    let page = String::from_utf8_lossy(&get(server.addr, "/sub/").body).into_owned();
    assert!(page.contains("<h1>Sub</h1>"), "{page}");
    assert!(!page.contains("<script>alert") && !page.contains("javascript:"));
    let found = String::from_utf8_lossy(&get(server.addr, "/?q=NEEDLE").body).into_owned();
    assert!(
        found.contains("href=\"./sub/deeper/needle-one.txt\""),
        "{found}"
    );
    assert!(!found.contains("needle-hidden"));
    assert!(found.contains("1 found"));
}

#[test]
fn with_qr_the_page_shows_the_code_of_the_folders_lan_address() {
    let tree = Tree::new("page-qr");
    let mut server = start(&tree, &["--qr"]);
    let (line, _) = server.wait_stdout("servery: scan to open ", Duration::from_secs(20));
    let base = line
        .trim_start_matches("servery: scan to open ")
        .split(' ')
        .next()
        .expect("a URL")
        .to_owned();
    assert!(base.starts_with("http://") && base.ends_with('/'), "{line}");
    let page = String::from_utf8_lossy(&get(server.addr, "/sub/").body).into_owned();
    let url = format!("{base}sub/");
    assert!(
        page.contains(&format!("<a href=\"{url}\">{url}</a>")),
        "{page}"
    );
    assert!(
        page.contains(&format!("alt=\"QR code of {url}\"")),
        "{page}"
    );
    assert!(page.contains("src=\"data:image/svg+xml;base64,"), "{page}");
    drop(server);

    let plain = Tree::new("page-no-qr");
    let server = start(&plain, &[]);
    let page = String::from_utf8_lossy(&get(server.addr, "/sub/").body).into_owned();
    assert!(!page.contains("class=\"qr"), "no code without --qr: {page}");
}

/// A file name that is not UTF-8 (a Latin-1 `é`, byte 0xE9) is listed as text, with U+FFFD
/// for that byte, and its link names the exact bytes; two names that differ only in such
/// bytes are two files, compressed answers included.
#[cfg(unix)]
#[test]
fn names_that_are_not_utf8_are_listed_and_served_by_their_bytes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tree = Tree::new("page-bytes");
    let text = |tag: &str| format!("{tag} ").repeat(400);
    let named = |bytes: &[u8]| tree.root().join(OsStr::from_bytes(bytes));
    std::fs::write(named(b"caf\xe9.txt"), text("latin1-e-acute")).expect("write");
    std::fs::write(named(b"caf\xe8.txt"), text("latin1-e-grave")).expect("write");
    std::fs::create_dir(named(b"d\xfcr")).expect("mkdir");
    std::fs::write(named(b"d\xfcr/inner.txt"), "inner").expect("write");
    let server = start(&tree, &[]);

    let page = get(server.addr, "/");
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.body).expect("the page is UTF-8");
    for (href, shown) in [
        ("./caf%E9.txt", "caf\u{FFFD}.txt"),
        ("./caf%E8.txt", "caf\u{FFFD}.txt"),
        ("./d%FCr/", "d\u{FFFD}r/"),
    ] {
        assert!(
            html.contains(&format!("href=\"{href}\">{shown}</a>")),
            "{href}: {html}"
        );
    }
    let json = request(server.addr, "GET", "/?format=json", b"", &[]);
    let json = String::from_utf8(json.body).expect("UTF-8 JSON");
    assert!(json.contains("\"href\":\"caf%E9.txt\""), "{json}");

    for (path, tag) in [
        ("/caf%E9.txt", "latin1-e-acute"),
        ("/caf%E8.txt", "latin1-e-grave"),
    ] {
        let reply = get(server.addr, path);
        assert_eq!(
            (reply.status, reply.body),
            (200, text(tag).into_bytes()),
            "{path}"
        );
    }
    // Compressed twice each: the second answer of each comes from the encoded cache.
    let gzip = |path: &str| {
        request(
            server.addr,
            "GET",
            path,
            b"",
            &[("Accept-Encoding", "gzip")],
        )
    };
    let first = [gzip("/caf%E9.txt"), gzip("/caf%E8.txt")];
    let again = [gzip("/caf%E9.txt"), gzip("/caf%E8.txt")];
    assert_eq!(first[0].header("content-encoding"), Some("gzip"));
    assert_ne!(first[0].body, first[1].body, "two files, two encodings");
    assert_eq!(
        (&first[0].body, &first[1].body),
        (&again[0].body, &again[1].body)
    );

    let inner = get(server.addr, "/d%FCr/");
    let inner_html = String::from_utf8(inner.body).expect("UTF-8");
    assert!(
        inner_html.contains("<li aria-current=\"page\">d\u{FFFD}r</li>"),
        "{inner_html}"
    );
    assert_eq!(get(server.addr, "/d%FCr/inner.txt").body, b"inner");

    // The search finds them by their text and links them by their bytes.
    let found = get(server.addr, "/?q=inner");
    let found = String::from_utf8(found.body).expect("UTF-8");
    assert!(
        found.contains("href=\"./d%FCr/inner.txt\">d\u{FFFD}r/inner.txt</a>"),
        "{found}"
    );
    // The tar.gz holds every name by its exact bytes: curl fetches it (the body is
    // chunked), GNU tar lists its names as they are.
    let tgz = std::process::Command::new("curl")
        .args(["-sf", "--max-time", "20"])
        .arg(format!("http://{}/?archive=tar.gz", server.addr))
        .output()
        .expect("curl (Debian package curl)");
    assert!(tgz.status.success(), "{tgz:?}");
    let mut tar = std::process::Command::new("tar")
        .args(["-tzf", "-", "--quoting-style=literal"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("GNU tar (Debian package tar)");
    std::io::Write::write_all(&mut tar.stdin.take().expect("stdin"), &tgz.stdout).expect("pipe");
    let listed = tar.wait_with_output().expect("tar ran");
    assert!(listed.status.success(), "{listed:?}");
    let names: Vec<&[u8]> = listed.stdout.split(|b| *b == b'\n').collect();
    for name in [&b"caf\xe9.txt"[..], b"caf\xe8.txt", b"d\xfcr/inner.txt"] {
        assert!(
            names.iter().any(|n| n.ends_with(name)),
            "{:?} not in {:?}",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(&listed.stdout)
        );
    }
    // Writers keep to UTF-8 names: an upload to such a path is refused, not written.
    let put = request(server.addr, "PUT", "/new%FF.txt", b"x", &[]);
    assert!(matches!(put.status, 400 | 403 | 405), "{}", put.status);
}

#[test]
fn delete_is_offered_only_where_the_server_allows_it() {
    let tree = Tree::new("page-delete");
    let browser = [("Accept", "text/html")];
    let server = start(&tree, &["--upload", "--dav"]);
    let page = request(server.addr, "GET", "/", b"", &browser);
    let text = String::from_utf8_lossy(&page.body).into_owned();
    assert!(
        text.contains(" data-dav") && !text.contains("data-delete"),
        "{text}"
    );
    assert!(
        text.contains("Deleting and replacing files is turned off"),
        "the page says why before anyone clicks"
    );
    // What the page would have offered is indeed refused.
    assert_eq!(
        request(server.addr, "DELETE", "/hello.txt", b"", &[]).status,
        403
    );
    drop(server);
    let server = start(&tree, &["--upload", "--dav", "--allow-overwrite"]);
    let page = request(server.addr, "GET", "/", b"", &browser);
    let text = String::from_utf8_lossy(&page.body).into_owned();
    assert!(text.contains(" data-dav data-delete"), "{text}");
    assert!(!text.contains("turned off"));
}

#[test]
fn code_and_text_files_are_served_as_text() {
    let tree = Tree::new("page-text");
    let root = tree.root();
    for name in [
        "a.py",
        "b.rs",
        "Cargo.toml",
        "run.sh",
        "main.go",
        "x.c",
        "c.yaml",
    ] {
        std::fs::write(root.join(name), b"print('hi')\n").expect("write");
    }
    std::fs::write(root.join("Makefile"), b"all:\n\tcc x.c\n").expect("write");
    std::fs::write(root.join("blob"), b"\x7fELF\x02\x01\x01\0\0\0").expect("write");
    std::fs::write(root.join("big-notes"), "ünïcode text\n".repeat(200_000)).expect("write");
    let server = start(&tree, &[]);
    for (name, want) in [
        ("a.py", "text/plain; charset=utf-8"),
        ("b.rs", "text/plain; charset=utf-8"),
        ("Cargo.toml", "text/plain; charset=utf-8"),
        ("run.sh", "text/plain; charset=utf-8"),
        ("main.go", "text/plain; charset=utf-8"),
        ("x.c", "text/plain; charset=utf-8"),
        ("c.yaml", "text/plain; charset=utf-8"),
        ("Makefile", "text/plain; charset=utf-8"),
        // Large enough to be streamed from its handle: sniffed all the same.
        ("big-notes", "text/plain; charset=utf-8"),
        ("blob", "application/octet-stream"),
    ] {
        let r = get(server.addr, &format!("/{name}"));
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.header("content-type"), Some(want), "{name}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
}

#[test]
fn listings_are_compressed_and_sorted_naturally() {
    let tree = Tree::new("page-big");
    let big = tree.root().join("big");
    std::fs::create_dir_all(&big).expect("mkdir");
    for i in 0..10_000 {
        std::fs::write(big.join(format!("icon-{i}.png")), i.to_string()).expect("write");
    }
    let server = start(&tree, &[]);
    let plain = request(server.addr, "GET", "/big/", b"", &[]);
    let gz = request(
        server.addr,
        "GET",
        "/big/",
        b"",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(gz.status, 200);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept, Accept-Encoding"));
    eprintln!(
        "10,000 entries: {} bytes as HTML, {} gzipped",
        plain.body.len(),
        gz.body.len()
    );
    assert!(gz.body.len() < 200 * 1024, "{} bytes", gz.body.len());
    let mut html = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz.body[..]), &mut html)
        .expect("gzip");
    assert_eq!(html.as_bytes(), &plain.body[..]);
    let at = |name: &str| html.find(&format!("data-name=\"{name}\"")).expect(name);
    assert!(at("icon-2.png") < at("icon-10.png"));
    assert!(at("icon-99.png") < at("icon-100.png"));
    let json = request(
        server.addr,
        "GET",
        "/big/?format=json",
        b"",
        &[("Accept-Encoding", "zstd")],
    );
    assert_eq!(json.header("content-encoding"), Some("zstd"));
}

#[test]
fn a_browser_is_shown_a_styled_page_where_nothing_is() {
    let tree = Tree::new("page-404");
    let server = start(&tree, &[]);
    let r = request(
        server.addr,
        "GET",
        "/no/such/file.txt",
        b"",
        &[("Accept", "text/html,*/*;q=0.8")],
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("<h1>Not found</h1>") && text.contains("href=\"/no/such/\""));
    assert!(text.contains("/.servery/app-"), "styled like the page");
    let tool = get(server.addr, "/no/such/file.txt");
    assert_eq!(tool.status, 404);
    assert_eq!(
        tool.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
}
