//! The directory page of a large folder (issue 37): sent while it is rendered (chunked, no
//! length), every entry on it, encoded as the client accepts, the same page as a small
//! folder's apart from its framing.

use std::fs;

use servery_tests::{FAST, Server, Tree, curl_head_and_body};

/// `curl -s -D - ARGS URL`: the head (lower-case) and the body as curl gives it.
fn fetch(url: &str, args: &[&str]) -> (String, Vec<u8>) {
    curl_head_and_body(url, args)
}

/// The names the page links, in order.
fn names(html: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(html);
    text.split("<td class=\"name\"><a href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_large_folders_page_is_streamed_whole_and_encoded() {
    const FILES: usize = 6_000;
    let tree = Tree::new("big-listing");
    let folder = tree.root().join("big");
    fs::create_dir_all(&folder).expect("mkdir");
    for i in 0..FILES {
        fs::write(folder.join(format!("photo-{i:05}.jpg")), b"x").expect("write");
    }
    let server = Server::start(&tree, 1, FAST, &[]);
    let url = format!("http://{}/big/", server.addr);

    let (head, plain) = fetch(&url, &["-H", "Accept: text/html"]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("transfer-encoding: chunked"),
        "streamed: {head}"
    );
    assert!(!head.contains("content-length"), "{head}");
    assert!(head.contains("content-security-policy"), "{head}");
    let listed = names(&plain);
    assert_eq!(listed.len(), FILES + 1, "the parent folder and every file");
    assert_eq!(listed[1], "./photo-00000.jpg");
    assert_eq!(listed[FILES], "./photo-05999.jpg", "in order, to the last");
    let text = String::from_utf8_lossy(&plain);
    assert!(
        text.contains("0 folders, 6000 files"),
        "the caption counts them"
    );
    assert!(text.trim_end().ends_with("</html>"), "the page is whole");

    for coding in ["gzip", "br", "zstd"] {
        let accept = format!("Accept-Encoding: {coding}");
        let (head, raw) = fetch(&url, &["-H", "Accept: text/html", "-H", &accept]);
        assert!(
            head.contains(&format!("content-encoding: {coding}")),
            "{head}"
        );
        assert!(
            raw.len() * 5 < plain.len(),
            "{coding}: {} bytes for {} plain",
            raw.len(),
            plain.len()
        );
        let (_, decoded) = fetch(
            &url,
            &["-H", "Accept: text/html", "-H", &accept, "--compressed"],
        );
        assert!(
            decoded == plain,
            "{coding}: the decoded page differs from the plain one"
        );
    }

    // The JSON listing likewise: streamed, every entry, the same array encoded.
    let json_url = format!("{url}?format=json");
    let (head, plain) = fetch(&json_url, &[]);
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(
        head.contains("transfer-encoding: chunked"),
        "streamed: {head}"
    );
    let entries: servery_tests::serde_json::Value =
        servery_tests::serde_json::from_slice(&plain).expect("a JSON array");
    let entries = entries.as_array().expect("an array");
    assert_eq!(entries.len(), FILES);
    assert_eq!(entries[0]["name"], "photo-00000.jpg");
    assert_eq!(entries[FILES - 1]["name"], "photo-05999.jpg");
    let (head, decoded) = fetch(&json_url, &["-H", "Accept-Encoding: gzip", "--compressed"]);
    assert!(head.contains("content-encoding: gzip"), "{head}");
    assert!(
        decoded == plain,
        "the decoded JSON differs from the plain one"
    );

    // HEAD: the same head, no page (curl -I prints the head again where a body would be).
    let (head, rest) = fetch(&url, &["-I", "-H", "Accept: text/html"]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        !String::from_utf8_lossy(&rest).contains("<html"),
        "a HEAD answer carries no page"
    );
}

#[test]
fn folders_show_how_many_items_they_hold() {
    let tree = Tree::new("item-counts");
    for (folder, n) in [("albums", 3), ("empty", 0), ("one", 1)] {
        let dir = tree.root().join(folder);
        fs::create_dir_all(&dir).expect("mkdir");
        for i in 0..n {
            fs::write(dir.join(format!("f{i}")), b"x").expect("write");
        }
    }
    fs::write(tree.root().join("albums/.hidden"), b"x").expect("write");
    let server = Server::start(&tree, 1, FAST, &[]);
    let url = format!("http://{}/", server.addr);
    let (_, page) = fetch(&url, &["-H", "Accept: text/html"]);
    let page = String::from_utf8_lossy(&page).into_owned();
    for shown in [">3 items<", ">0 items<", ">1 item<"] {
        assert!(page.contains(shown), "{shown} not on the page: {page}");
    }
    let (_, json) = fetch(&format!("{url}?format=json"), &[]);
    let json: servery_tests::serde_json::Value =
        servery_tests::serde_json::from_slice(&json).expect("JSON");
    let albums = json
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "albums"))
        .expect("albums listed");
    assert_eq!(albums["items"], 3, "{albums}");
    let file = json
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == "hello.txt"))
        .expect("hello.txt listed");
    assert!(file.get("items").is_none(), "a file has no count: {file}");
}
