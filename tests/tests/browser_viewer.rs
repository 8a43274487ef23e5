//! The directory page's viewer and editor in a real browser: headless Chromium driven by
//! Selenium (`tests/browser/viewer.py`) against servery with two workers and writes on.
//! See the script for the steps: images with previous and next, audio and a video it
//! cannot play, a framed PDF, and the text editor's saves, conflicts and line endings.
//!
//! Needs what the main browser test needs (`tests/tests/browser.rs`). With
//! `SERVERY_SCREENSHOTS=DIR` the script saves its screenshots there.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use servery_tests::{FAST, Server, Tree, run_command};

#[test]
fn the_viewer_and_editor_work_in_a_browser() {
    for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(program).exists(),
            "{program} is missing: install Debian's chromium and chromium-driver"
        );
    }
    let tree = Tree::new("browser-viewer");
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend(["--upload", "--dav", "--allow-overwrite"]);
    let server = Server::start(&tree, 2, &args, &[]);
    server.wait_ready(2, Duration::from_secs(30));
    let work = tree.dir.join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/viewer.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(format!("http://{}", server.addr))
        .arg(tree.root())
        .arg(&work);
    if let Some(dir) = std::env::var_os("SERVERY_SCREENSHOTS") {
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir));
    }
    let run = run_command(cmd, Duration::from_secs(150));
    assert!(
        run.status.success(),
        "viewer test failed\n--- stdout\n{}\n--- stderr\n{}\n--- servery\n{}",
        run.stdout,
        run.stderr,
        server.stderr()
    );
}
