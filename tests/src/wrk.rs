//! wrk, a load generator nobody here wrote, as the tests run it: keep-alive connections
//! until a stop (or the duration given, a bound), with its report read back.

use std::process::{Command, Stdio};
use std::thread::JoinHandle;

use crate::procs::{Sig, signal_pid};

/// What wrk reported: requests completed, and each line of errors it printed (socket
/// errors, non-2xx/3xx answers).
#[derive(Debug)]
pub struct WrkReport {
    pub requests: u64,
    pub errors: Vec<String>,
    pub text: String,
}

/// A running wrk.
#[derive(Debug)]
pub struct Wrk {
    pid: u32,
    report: JoinHandle<WrkReport>,
}

/// Whether wrk is installed; says SKIPPED when it is not.
pub fn wrk_available() -> bool {
    let found = Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        crate::skipped("wrk is not installed (Debian package `wrk`, scripts/test installs it)");
    }
    found
}

impl Wrk {
    /// `wrk ARGS URL`: ARGS say threads, connections and the duration (`-d`), which bounds
    /// the run if nobody stops it.
    pub fn start(url: &str, args: &[&str]) -> Wrk {
        let child = Command::new("wrk")
            .args(args)
            .arg(url)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run wrk (Debian package `wrk`)");
        let pid = child.id();
        let report = std::thread::spawn(move || {
            let out = child.wait_with_output().expect("wrk's report");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "wrk: {text}");
            let requests = text
                .lines()
                .find_map(|l| l.trim().split_once(" requests in "))
                .and_then(|(n, _)| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no request count in wrk's report: {text}"));
            let errors = text
                .lines()
                .filter(|l| l.contains("Socket errors") || l.contains("Non-2xx"))
                .map(str::to_owned)
                .collect();
            WrkReport {
                requests,
                errors,
                text,
            }
        });
        Wrk { pid, report }
    }

    /// Whether wrk has ended by itself (its duration passed).
    pub fn is_finished(&self) -> bool {
        self.report.is_finished()
    }

    /// Waits for wrk's own end (its duration).
    pub fn finish(self) -> WrkReport {
        self.report.join().expect("wrk")
    }

    /// SIGINT: wrk stops its connections and prints its report (exit status 0).
    pub fn stop(self) -> WrkReport {
        signal_pid(self.pid, Sig::INT);
        self.report.join().expect("wrk")
    }
}
