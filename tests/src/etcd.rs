//! One real etcd (Debian `etcd-server`) on loopback ports for the cluster tests: its own
//! data directory, stopped and started again on the same ports and data, and read through
//! its JSON gateway to wait on the exact keys the hosts write.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{free_port, wait_until};

/// Whether `etcd` can be run here.
pub fn etcd_installed() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A single-member etcd; killed when dropped.
#[derive(Debug)]
pub struct Etcd {
    child: Option<Child>,
    pub client: SocketAddr,
    peer: u16,
    dir: PathBuf,
    tls: Option<EtcdTls>,
}

/// PEM files for an etcd that serves its clients over TLS and asks for their
/// certificates (`--client-cert-auth`); the client's pair is etcdctl's.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64(s: &str) -> String {
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unb64(s: &str) -> String {
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|c| *c != b'=') {
        let Some(v) = B64.iter().position(|x| *x == c) else {
            continue;
        };
        bits = bits << 6 | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n & 0xff) as u8);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Etcd {
    /// Starts etcd with its data under `dir` (created), and waits until it answers.
    pub fn start(dir: PathBuf) -> Etcd {
        Etcd::start_with(dir, None)
    }

    /// [`Etcd::start`], serving clients over TLS with these files when given.
    pub fn start_with(dir: PathBuf, tls: Option<EtcdTls>) -> Etcd {
        std::fs::create_dir_all(&dir).expect("etcd's directory");
        let mut etcd = Etcd {
            child: None,
            client: SocketAddr::from(([127, 0, 0, 1], free_port())),
            peer: free_port(),
            dir,
            tls,
        };
        etcd.resume();
        etcd
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// Starts the same member again (same ports, same data), and waits until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "etcd is running already");
        let (client, peer) = (self.client.port(), self.peer);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("etcd's log");
        let scheme = self.scheme();
        let mut cmd = Command::new("etcd");
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--name", "servery-test"])
            .arg(format!(
                "--listen-client-urls={scheme}://127.0.0.1:{client}"
            ))
            .arg(format!(
                "--advertise-client-urls={scheme}://127.0.0.1:{client}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!(
                "--initial-cluster=servery-test=http://127.0.0.1:{peer}"
            ))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        wait_until(Duration::from_secs(30), "etcd to answer", || {
            if self.tls.is_some() {
                self.try_etcdctl(&["endpoint", "health"]).ok().map(|_| ())
            } else {
                self.post("/v3/kv/range", &json!({ "key": b64("x") }))
                    .ok()
                    .map(|_| ())
            }
        });
    }

    /// Kills etcd (its data stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One JSON call to etcd's gateway.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let mut s = TcpStream::connect_timeout(&self.client, Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let body = body.to_string();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.client,
            body.len()
        )
        .map_err(|e| e.to_string())?;
        let mut raw = String::new();
        s.read_to_string(&mut raw).map_err(|e| e.to_string())?;
        let (_, body) = raw.split_once("\r\n\r\n").ok_or("no response head")?;
        let start = body.find('{').ok_or("no JSON")?;
        let end = body.rfind('}').ok_or("no JSON")?;
        serde_json::from_str(&body[start..=end]).map_err(|e| e.to_string())
    }

    /// Runs `etcdctl ARGS` against this etcd and returns what it printed; panics naming
    /// that when it fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        self.try_etcdctl(args)
            .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"))
    }

    fn try_etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}://{}", self.scheme(), self.client));
        if let Some(tls) = &self.tls {
            cmd.arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        let out = cmd.args(args).output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The value of `key`, if etcd has it.
    pub fn get(&self, key: &str) -> Option<String> {
        let v = self
            .post("/v3/kv/range", &json!({ "key": b64(key) }))
            .ok()?;
        v["kvs"][0]["value"].as_str().map(unb64)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}
