//! A network namespace of the test's own: loopback up with multicast and a route for
//! 224.0.0.0/4 through it, so multicast (mDNS) stays inside; held open by a sleeping
//! process and removed with it. Programs join it through `nsenter`, which execs them (the
//! pid is the program's). Unix sockets are files, so `servery ctl` reaches a servery in it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a namespace's holder lives at most, should a test forget it.
const HOLD: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Netns {
    holder: Child,
}

impl Netns {
    /// A new namespace, or why none can be made here (the caller skips, saying so).
    /// The tools it needs (`ip`, `nsenter`) must be installed: their absence fails the
    /// test, it is not a reason to skip.
    pub fn create() -> Result<Netns, String> {
        for (tool, package) in [("ip", "iproute2"), ("nsenter", "util-linux")] {
            assert!(
                Command::new(tool).arg("-V").output().is_ok(),
                "`{tool}` is missing: install {package} (scripts/debian-packages.txt)"
            );
        }
        let script = format!(
            "ip link set lo up multicast on && ip route add 224.0.0.0/4 dev lo && echo up && exec sleep {}",
            HOLD.as_secs()
        );
        let mut holder = Command::new("unshare")
            .args(["-n", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run `unshare`: {e}"))?;
        let mut line = String::new();
        if let Some(out) = holder.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() == "up" {
            return Ok(Netns { holder });
        }
        let _ = holder.kill();
        let out = holder.wait_with_output().map_err(|e| e.to_string())?;
        Err(format!(
            "`unshare -n` cannot make a network namespace with multicast on loopback here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.path().display()))
            .arg("--")
            .arg(program);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
