//! A real worker killed between two steps of a WebDAV tree request
//! (`SERVERY_TEST_FAULT=kill-before-tree-step=…`): afterwards clients see one of the
//! states the WebDAV guide's crash table allows, the parent's cleanup removes the staging
//! and trash names, the broker holds no lease, and the request sent again completes. The
//! real-process counterpart of the simulator's `dav-move-crash-between-steps`, for a few
//! steps on the real file system.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use servery_tests::serde_json::json;
use servery_tests::{FAST, Server, Tree, wait_until, worker_ids};

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Conn, head, request};

/// What a top-level name holds: relative path → file content (`None`: a collection).
type Content = BTreeMap<String, Option<String>>;

/// What a client must find after the kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// The tree before the request.
    Before,
    /// The request's whole result.
    Done,
    /// The source untouched, the destination it was to replace gone (moved aside).
    DestinationGivenUp,
}

struct Case {
    method: &'static str,
    from: &'static str,
    to: Option<&'static str>,
    step: &'static str,
    after: After,
}

const CASES: &[Case] = &[
    Case {
        method: "MOVE",
        from: "/a",
        to: Some("/b"),
        step: "trash-destination",
        after: After::Before,
    },
    Case {
        method: "MOVE",
        from: "/a",
        to: Some("/b"),
        step: "place",
        after: After::DestinationGivenUp,
    },
    Case {
        method: "MOVE",
        from: "/a",
        to: Some("/b"),
        step: "properties",
        after: After::Done,
    },
    Case {
        method: "COPY",
        from: "/a",
        to: Some("/c"),
        step: "fill-staging",
        after: After::Before,
    },
    Case {
        method: "COPY",
        from: "/a",
        to: Some("/b"),
        step: "remove-trash",
        after: After::Done,
    },
    Case {
        method: "DELETE",
        from: "/a",
        to: None,
        step: "finish",
        after: After::Done,
    },
];

fn a() -> Content {
    [
        ("", None),
        ("/1", Some("one")),
        ("/sub", None),
        ("/sub/2", Some("two")),
    ]
    .into_iter()
    .map(|(p, c)| (p.to_owned(), c.map(str::to_owned)))
    .collect()
}

fn b() -> Content {
    [("", None), ("/x", Some("ex"))]
        .into_iter()
        .map(|(p, c)| (p.to_owned(), c.map(str::to_owned)))
        .collect()
}

fn write(root: &Path, name: &str, content: &Content) {
    for (rel, c) in content {
        let path = root.join(format!("{}{rel}", &name[1..]));
        match c {
            None => std::fs::create_dir_all(&path).expect("mkdir"),
            Some(text) => std::fs::write(&path, text).expect("write"),
        }
    }
}

/// What clients see at `name`: everything but servery's private names.
fn read(root: &Path, name: &str) -> Option<Content> {
    fn walk(dir: &Path, rel: String, out: &mut Content) {
        let meta = std::fs::symlink_metadata(dir).expect("stat");
        if meta.is_file() {
            out.insert(rel, Some(std::fs::read_to_string(dir).expect("read")));
            return;
        }
        out.insert(rel.clone(), None);
        for entry in std::fs::read_dir(dir).expect("ls") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with(".servery-") {
                walk(&entry.path(), format!("{rel}/{name}"), out);
            }
        }
    }
    let path = root.join(&name[1..]);
    path.exists().then(|| {
        let mut out = Content::new();
        walk(&path, String::new(), &mut out);
        out
    })
}

/// Private names (staging copies, trash) anywhere in the share.
fn private_names(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("ls").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".servery-tmp-") {
            found.push(name);
        } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(private_names(&entry.path()));
        }
    }
    found
}

fn state(root: &Path) -> [Option<Content>; 3] {
    ["/a", "/b", "/c"].map(|n| read(root, n))
}

/// The three names before the request and after it completed.
fn expected(case: &Case) -> ([Option<Content>; 3], [Option<Content>; 3]) {
    let before = [Some(a()), Some(b()), None];
    let done = match (case.method, case.to) {
        ("MOVE", Some("/b")) => [None, Some(a()), None],
        ("COPY", Some("/b")) => [Some(a()), Some(a()), None],
        ("COPY", Some("/c")) => [Some(a()), Some(b()), Some(a())],
        _ => [None, Some(b()), None],
    };
    (before, done)
}

fn send(server: &Server, case: &Case) -> Result<u16, String> {
    let destination = case.to.map(|t| format!("http://localhost{t}"));
    let mut extra = vec![("Overwrite", "T"), ("Depth", "infinity")];
    if let Some(d) = &destination {
        extra.push(("Destination", d));
    }
    let mut conn = Conn::open(server.addr);
    conn.send(&head(case.method, case.from, 0, &extra))
        .map_err(|e| e.to_string())?;
    conn.response().map(|r| r.status)
}

#[test]
fn a_worker_killed_between_steps_leaves_a_documented_tree_and_nothing_private() {
    // One worker. Spawn 2k dies before case k's step; its replacement, spawn 2k + 1, takes
    // the request sent again; a recycle then brings spawn 2k + 2 for the next case.
    let rules: Vec<String> = CASES
        .iter()
        .enumerate()
        .map(|(i, c)| format!("index={} kill-before-tree-step={}", 2 * i, c.step))
        .collect();
    let rules = rules.join("\n");
    let tree = Tree::new("dav-tree-crash");
    let root = tree.root();
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend_from_slice(&[
        "--dav",
        "--upload",
        "--allow-overwrite",
        "--restart-backoff-max",
        "0.2",
        "--worker-restart-limit",
        "50",
    ]);
    let server = Server::start(&tree, 1, &args, &[("SERVERY_TEST_FAULT", &rules)]);
    server.wait_ready(1, Duration::from_secs(30));
    for case in CASES {
        let what = format!("{} {} before {}", case.method, case.from, case.step);
        for name in ["a", "b", "c"] {
            let _ = std::fs::remove_dir_all(root.join(name));
        }
        write(&root, "/a", &a());
        write(&root, "/b", &b());
        let (before, done) = expected(case);
        let killed = worker_ids(&server.status());
        assert!(
            send(&server, case).is_err(),
            "{what}: answered, but its worker was to be killed"
        );
        // The parent lets the worker go, its cleanup sweeps the private names, the
        // broker holds no lease, and a replacement serves: ready as the parent sees it,
        // since the recycle below recycles only the workers ready when it arrives (one
        // still starting is new already).
        wait_until(Duration::from_secs(10), &format!("{what}: swept"), || {
            let s = server.status();
            let ids = worker_ids(&s);
            let replaced = ids.len() == 1
                && ids != killed
                && s["state"] == "ready"
                && s["workers"][0]["state"] == "ready";
            let leases = s["broker"]["leases"].as_array().map_or(1, Vec::len);
            (replaced && leases == 0 && private_names(&root).is_empty()).then_some(())
        });
        let want = match case.after {
            After::Before => before.clone(),
            After::Done => done.clone(),
            After::DestinationGivenUp => [Some(a()), None, before[2].clone()],
        };
        assert_eq!(state(&root), want, "{what}: the tree after the kill");
        // Sent again, the request completes (a MOVE or DELETE already done: 404).
        let destination = case.to.map(|t| format!("http://localhost{t}"));
        let mut extra = vec![("Overwrite", "T"), ("Depth", "infinity")];
        if let Some(d) = &destination {
            extra.push(("Destination", d));
        }
        let status = request(server.addr, case.method, case.from, b"", &extra).status;
        let already = case.after == After::Done && case.method != "COPY";
        assert!(
            (200..300).contains(&status) || (already && status == 404),
            "{what}: sent again, answered {status}"
        );
        assert_eq!(state(&root), done, "{what}: the tree after the retry");
        let healthy = worker_ids(&server.status());
        server.ctl(&json!({"cmd": "recycle"})).expect("recycle");
        wait_until(Duration::from_secs(10), "the recycle", || {
            let s = server.status();
            let ids = worker_ids(&s);
            (ids.len() == 1 && ids != healthy && s["state"] == "ready").then_some(())
        });
    }
}
