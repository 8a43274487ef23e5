//! The server under test: started on an ephemeral port, asked through its control
//! socket, and killed with whatever is left when dropped.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::{Value, json};

use crate::*;

/// Servers in one test process run one at a time: lifecycle timings are tight, and a
/// 2-core machine running several supervisors at once would test the scheduler instead.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How [`Server::launch`] departs from [`Server::start`].
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Pass no `--control-socket`: the socket goes where servery puts it by default, and
    /// [`Server::socket`] is read from the banner.
    pub default_socket: bool,
    /// Start servery under this umask (through `sh -c 'umask …; exec …'`).
    pub umask: Option<u32>,
    /// Run servery as this (uid, gid), with no supplementary groups, through `setpriv`
    /// (which execs it: the pid is servery's). The tree's directory must be writable by
    /// it, for the control socket.
    pub user: Option<(u32, u32)>,
    /// Start servery with `WATCHDOG_PID` set to its own pid (through `sh -c`, which
    /// execs it), as a service manager does.
    pub watchdog_pid: bool,
    /// Run servery inside this network namespace (through `nsenter`, which execs it).
    pub netns: Option<std::sync::Arc<netns::Netns>>,
    /// Start servery with this open-file limit, (soft, hard), through `prlimit`, which
    /// execs it.
    pub open_files: Option<(u64, u64)>,
    /// A second server of the same test, started while the first runs (the cluster's
    /// hosts): it does not wait for the one-server-at-a-time turn the first holds.
    pub alongside: bool,
}

/// A running `servery` parent. Dropping it kills its process group and every worker it
/// was seen to have.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub socket: PathBuf,
    pub pid: u32,
    /// When the process was spawned.
    pub spawned: Instant,
    stdout: Arc<Mutex<Vec<(Instant, String)>>>,
    stderr: Arc<Mutex<String>>,
    /// The threads reading stdout and stderr: done at end of file.
    readers: Vec<std::thread::JoinHandle<()>>,
    pids: Mutex<BTreeSet<u32>>,
    exit: Option<ExitStatus>,
    _serial: Option<MutexGuard<'static, ()>>,
}

impl Server {
    /// Start `servery ROOT --port 0 --workers N --control-socket … ARGS` with `env`, and
    /// wait for its listening line.
    pub fn start(tree: &Tree, workers: u32, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch(tree, workers, args, env, &Launch::default())
    }

    /// [`Server::start`], with the departures from it that `launch` asks for.
    pub fn launch(
        tree: &Tree,
        workers: u32,
        args: &[&str],
        env: &[(&str, &str)],
        launch: &Launch,
    ) -> Server {
        let serial = (!launch.alongside).then(serial);
        let socket = tree.socket();
        let mut cmd = match (launch.umask, launch.user) {
            (None, None) if launch.netns.is_some() => launch
                .netns
                .as_ref()
                .map(|ns| ns.command(servery_bin()))
                .expect("a namespace"),
            // `exec` keeps the pid, so the guard still signals servery itself.
            (Some(mask), None) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(servery_bin());
                sh
            }
            (None, Some((uid, gid))) => {
                let mut setpriv = Command::new("setpriv");
                setpriv
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .args(["--clear-groups", "--"])
                    .arg(servery_bin());
                setpriv
            }
            (None, None) if launch.watchdog_pid => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg("WATCHDOG_PID=$$ && export WATCHDOG_PID && exec \"$0\" \"$@\"")
                    .arg(servery_bin());
                sh
            }
            (None, None) if launch.open_files.is_some() => {
                let mut prlimit = Command::new("prlimit");
                let (soft, hard) = launch.open_files.unwrap_or_default();
                prlimit
                    .arg(format!("--nofile={soft}:{hard}"))
                    .arg("--")
                    .arg(servery_bin());
                prlimit
            }
            (None, None) => Command::new(servery_bin()),
            (Some(_), Some(_)) => panic!("a umask and another user at once are not supported"),
        };
        cmd.arg(tree.root())
            .args(["--port", "0", "--workers", &workers.to_string()]);
        if !launch.default_socket {
            cmd.arg("--control-socket").arg(&socket);
        }
        cmd.args(args)
            .env("SERVERY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let spawned = Instant::now();
        let mut child = cmd.spawn().expect("spawn servery");
        let pid = child.id();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            let lines = Arc::clone(&stdout);
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Instant::now(), line));
                }
            }));
        }
        let stderr = match child.stderr.take() {
            Some(err) => {
                let (text, reader) = capture_text(err);
                readers.push(reader);
                text
            }
            None => Arc::default(),
        };
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            socket,
            pid,
            spawned,
            stdout,
            stderr,
            readers,
            pids: Mutex::new(BTreeSet::new()),
            exit: None,
            _serial: serial,
        };
        let (line, _) = server.wait_stdout("servery: listening on ", Duration::from_secs(20));
        // `http://ADDR/`, or `https://ADDR/` with TLS.
        let addr = line
            .trim_start_matches("servery: listening on ")
            .split_once("://")
            .map_or("", |(_, rest)| rest)
            .trim_end_matches('/');
        server.addr = addr.parse().expect("listening address");
        if launch.default_socket {
            // `servery: serving ROOT with N workers; control socket PATH`
            let (line, _) = server.wait_stdout("servery: serving ", Duration::from_secs(20));
            server.socket = line
                .split_once("; control socket ")
                .map(|(_, path)| PathBuf::from(path))
                .unwrap_or_else(|| panic!("no control socket in {line:?}"));
        }
        server
    }

    /// The admin listener's address, from the start-up line that names it.
    pub fn admin_addr(&mut self, bound: Duration) -> std::net::SocketAddr {
        let (line, _) = self.wait_stdout("servery: admin ", bound);
        line.rsplit_once("http://")
            .and_then(|(_, a)| a.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("no admin address in {line:?}"))
    }

    /// The first stdout line starting with `prefix` (as text: see [`banner_text`]),
    /// waiting at most `bound`, and how long after the spawn it was printed.
    pub fn wait_stdout(&mut self, prefix: &str, bound: Duration) -> (String, Duration) {
        let stdout = Arc::clone(&self.stdout);
        let what = format!("stdout line `{prefix}…`");
        let mut exited = None;
        let found = wait_until(bound, &what, || {
            let lines = stdout.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, l)) = lines
                .iter()
                .map(|(at, l)| (at, banner_text(l)))
                .find(|(_, l)| l.starts_with(prefix))
            {
                return Some(Some((l, *at)));
            }
            drop(lines);
            if exited.is_some() {
                // Looked once more after the pipes drained: the line never came.
                return Some(None);
            }
            exited = self.child.try_wait().ok().flatten();
            if exited.is_some() {
                // What it printed before exiting may still be in the pipe on its way to
                // the reader: look again once the readers have drained it.
                drain(&self.readers);
            }
            None
        });
        match found {
            (Some((line, at)), _) => (line, at.duration_since(self.spawned)),
            (None, _) => panic!(
                "servery exited ({exited:?}) before printing `{prefix}`; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// The stdout lines as servery wrote them (JSON records under `--log-format json`).
    pub fn stdout(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| l.clone())
            .collect()
    }

    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One control request; the answer, or the refusal's text.
    pub fn ctl(&self, request: &Value) -> Result<Value, String> {
        let answer = ctl_at(&self.socket, request);
        if let Ok(status) = &answer {
            self.note_pids(&status["status"]);
        }
        answer
    }

    /// Remember the worker pids in `status`, so that dropping the guard kills them.
    pub fn note_pids(&self, status: &Value) {
        let mut pids = self.pids.lock().unwrap_or_else(|p| p.into_inner());
        pids.extend(worker_pids(status));
    }

    /// `status` over the control socket; remembers every worker pid it shows.
    pub fn status(&self) -> Value {
        self.ctl(&json!({"cmd": "status"}))
            .unwrap_or_else(|e| panic!("status: {e}; stderr:\n{}", self.stderr()))["status"]
            .take()
    }

    /// Every worker pid ever seen in a status.
    pub fn seen_pids(&self) -> BTreeSet<u32> {
        self.pids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait until the service is ready with exactly `n` ready workers (and no other),
    /// all of the committed generation; returns the status.
    pub fn wait_ready(&self, n: usize, bound: Duration) -> (Value, Duration) {
        wait_until(bound, &format!("{n} ready workers"), || {
            let s = self.status();
            let workers = s["workers"].as_array()?;
            let generation = &s["generation"];
            let all_ready = workers.len() == n
                && workers
                    .iter()
                    .all(|w| w["state"] == "ready" && &w["generation"] == generation);
            (s["state"] == "ready" && all_ready).then_some(s)
        })
    }

    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// The parent's exit status if it has exited (without waiting).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Kill the parent alone (`kill -9`), leaving its workers to notice; reaps it.
    pub fn kill_parent(&mut self) -> ExitStatus {
        signal_pid(self.pid, Signal::KILL);
        let status = self.child.wait().expect("reap the parent");
        self.exit = Some(status);
        status
    }

    /// Wait for the parent to exit, at most `bound`; returns its status and how long
    /// after the spawn it exited.
    pub fn wait_exit(&mut self, bound: Duration) -> (ExitStatus, Duration) {
        let status = wait_child(&mut self.child, bound).unwrap_or_else(|| {
            panic!(
                "servery did not exit within {bound:?}; stderr:\n{}",
                self.stderr()
            )
        });
        self.exit = Some(status);
        let exited = self.spawned.elapsed();
        drain(&self.readers);
        (status, exited)
    }
}

/// Once the parent has exited, let `readers` take what it printed up to its exit: they
/// reach the end of the pipes once no process holds them, which a worker outliving a
/// killed parent may still do for a while (so at most two seconds).
fn drain(readers: &[std::thread::JoinHandle<()>]) {
    let until = Instant::now() + Duration::from_secs(2);
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One control request to the socket at `socket`; the answer, or the refusal's text.
pub fn ctl_at(socket: &Path, request: &Value) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    writeln!(s, "{request}").map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    let answer: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line:?}"))?;
    if answer["ok"] == json!(true) {
        Ok(answer)
    } else {
        Err(answer["error"].as_str().unwrap_or("refused").to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.exit.is_none() {
            if let Some(pid) = Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            }
            let _ = self.child.wait();
        }
        for pid in self.seen_pids() {
            if is_worker(pid)
                && let Some(p) = Pid::from_raw(pid as i32)
            {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
        }
        if std::thread::panicking() {
            eprintln!("--- servery stderr ---\n{}", self.stderr());
        }
    }
}

/// The pids of the workers in a status.
pub fn worker_pids(status: &Value) -> Vec<u32> {
    status["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["pid"].as_u64().map(|p| p as u32))
                .collect()
        })
        .unwrap_or_default()
}

/// The ids of the workers in a status.
pub fn worker_ids(status: &Value) -> Vec<u64> {
    status["workers"]
        .as_array()
        .map(|ws| ws.iter().filter_map(|w| w["id"].as_u64()).collect())
        .unwrap_or_default()
}

/// A banner line's text: the line itself, or under `--log-format json` its record's
/// `message`, which holds the same text (so a test waits for one prefix in both formats).
pub fn banner_text(line: &str) -> String {
    if line.starts_with('{')
        && let Ok(record) = serde_json::from_str::<serde_json::Value>(line)
        && let Some(message) = record["message"].as_str()
    {
        return message.to_owned();
    }
    line.to_owned()
}
