//! The directory page in a real browser: headless Chromium driven by Selenium
//! (`tests/browser/page.py`) against servery with four workers, so pages, upload chunks
//! and archives are served by different processes. See the script for the steps: browse
//! and sort, filter and search, a search result renamed within its own folder, code
//! previewed with line numbers and opened as text, delete, a 10,000-entry folder sent
//! compressed (under 200 KB) in natural order, relative dates, a styled 404, uploads with
//! progress, a refused upload explained in words with a retry, an interrupted upload
//! resumed byte-exact after a reload and after a failure (counted once), a folder as zip
//! and tar.gz, a cross-origin upload refused, hostile names shown as text, and an uploaded
//! HTML page and SVG whose scripts never run (decision 0047's sandbox).
//!
//! Needs Debian's `chromium` and `chromium-driver` and PyPI's `selenium`
//! (`scripts/debian-packages.txt`, `scripts/python-packages.txt`). With
//! `SERVERY_SCREENSHOTS=DIR` the script saves its screenshots there (the README's come from
//! `SERVERY_SCREENSHOTS=docs/screenshots`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, run_command};

#[test]
fn the_page_works_in_a_browser() {
    for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(program).exists(),
            "{program} is missing: install Debian's chromium and chromium-driver"
        );
    }
    let selenium = Command::new("python3")
        .args(["-c", "import selenium"])
        .status();
    assert!(
        selenium.is_ok_and(|s| s.success()),
        "python3 cannot import selenium: pip install selenium (scripts/python-packages.txt)"
    );
    let tree = Tree::new("browser");
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend(["--upload", "--dav", "--allow-overwrite", "--qr"]);
    let server = Server::start(&tree, 4, &args, &[]);
    server.wait_ready(4, Duration::from_secs(30));
    let work = tree.dir.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/page.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(format!("http://{}", server.addr))
        .arg(tree.root())
        .arg(&work);
    if let Some(dir) = std::env::var_os("SERVERY_SCREENSHOTS") {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
        cmd.arg(dir);
    }
    let run = run_command(cmd, Duration::from_secs(170));
    assert!(
        run.status.success(),
        "browser test failed\n--- stdout\n{}\n--- stderr\n{}\n--- servery\n{}",
        run.stdout,
        run.stderr,
        server.stderr()
    );
}
