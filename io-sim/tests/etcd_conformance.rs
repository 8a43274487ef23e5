//! The simulator's etcd model against a real etcd (Debian `etcd-server`): core's
//! `ClusterHost` runs the same script against both and must get the same answers, fences
//! included; then, against the real store alone, a host that stops its keep-alives loses
//! its grants to another host when its lease expires, and a host whose clock says it
//! still holds a moved name is fenced. Skipped, saying so, when `etcd` is not installed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as WallInstant};

use serde_json::{Value, json};
use servery_core::Instant;
use servery_core::cluster::{
    Budget, BudgetLimits, ClusterAction, ClusterAnswer, ClusterHost, ClusterName, ClusterRequest,
    ClusterTiming, CompareTarget, KeyLayout, KeyValue, NameKind, SharedName, StoreCall, StoreReply,
    TxnOp,
};
use servery_sim::cluster::EtcdModel;

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
        let v = B64.iter().position(|x| *x == c).expect("base64") as u32;
        bits = bits << 6 | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n & 0xff) as u8);
        }
    }
    String::from_utf8(out).expect("utf-8")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A real etcd on loopback ports, killed when dropped.
struct Etcd {
    child: Child,
    client: SocketAddr,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    fn start() -> Option<Etcd> {
        let installed = Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            eprintln!(
                "SKIPPED: etcd is not installed (Debian: apt-get install etcd-server etcd-client)"
            );
            return None;
        }
        // One directory per store: the tests of this file run side by side.
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("servery-etcd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a data directory");
        let (client, peer) = (free_port(), free_port());
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "conformance"])
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!(
                "--initial-cluster=conformance=http://127.0.0.1:{peer}"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        let etcd = Etcd {
            child,
            client: SocketAddr::from(([127, 0, 0, 1], client)),
            _dir: TempDir(dir),
        };
        let started = WallInstant::now();
        while etcd
            .post("/v3/kv/range", &json!({"key": b64("x")}))
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "etcd did not answer on {} within 20 s",
                etcd.client
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(etcd)
    }

    /// One JSON call to etcd's gateway.
    fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
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
        // The gateway may answer chunked: the JSON object is between the outer braces.
        let start = body.find('{').ok_or("no JSON")?;
        let end = body.rfind('}').ok_or("no JSON")?;
        serde_json::from_str(&body[start..=end]).map_err(|e| e.to_string())
    }

    fn num(v: &Value) -> i64 {
        match v {
            Value::String(s) => s.parse().unwrap_or(0),
            Value::Number(n) => n.as_i64().unwrap_or(0),
            _ => 0,
        }
    }

    fn kvs(v: &Value) -> Vec<KeyValue> {
        v["kvs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|kv| KeyValue {
                        key: unb64(kv["key"].as_str().unwrap_or("")),
                        value: unb64(kv["value"].as_str().unwrap_or("")),
                        create_revision: Etcd::num(&kv["create_revision"]),
                        mod_revision: Etcd::num(&kv["mod_revision"]),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn op(op: &TxnOp) -> Value {
        match op {
            TxnOp::Put { key, value, lease } => {
                json!({"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string()}})
            }
            TxnOp::Delete { key } => json!({"request_delete_range": {"key": b64(key)}}),
            TxnOp::Get { key, range_end } => {
                let mut r = json!({"key": b64(key)});
                if let Some(end) = range_end {
                    r["range_end"] = json!(b64(end));
                }
                json!({ "request_range": r })
            }
        }
    }

    /// Carries out one store call as the production driver will: one etcd request.
    fn call(&self, call: &StoreCall) -> StoreReply {
        match call {
            StoreCall::LeaseGrant { ttl_secs } => {
                let v = self
                    .post("/v3/lease/grant", &json!({"TTL": ttl_secs.to_string()}))
                    .expect("lease grant");
                StoreReply::LeaseGranted {
                    lease: Etcd::num(&v["ID"]),
                }
            }
            StoreCall::KeepAlive { lease } => {
                let v = self
                    .post("/v3/lease/keepalive", &json!({"ID": lease.to_string()}))
                    .expect("keep-alive");
                if Etcd::num(&v["result"]["TTL"]) > 0 {
                    StoreReply::KeptAlive
                } else {
                    StoreReply::LeaseNotFound
                }
            }
            StoreCall::Txn(t) => {
                let compare: Vec<Value> = t
                    .compare
                    .iter()
                    .map(|c| {
                        let mut v = match &c.target {
                            CompareTarget::CreateRevisionIs(r) => json!({
                                "target": "CREATE", "result": "EQUAL", "create_revision": r.to_string()
                            }),
                            CompareTarget::ModRevisionAtMost(r) => json!({
                                "target": "MOD", "result": "LESS", "mod_revision": (r + 1).to_string()
                            }),
                            CompareTarget::ValueIs(s) => json!({
                                "target": "VALUE", "result": "EQUAL", "value": b64(s)
                            }),
                        };
                        v["key"] = json!(b64(&c.key));
                        if let Some(end) = &c.range_end {
                            v["range_end"] = json!(b64(end));
                        }
                        v
                    })
                    .collect();
                let body = json!({
                    "compare": compare,
                    "success": t.success.iter().map(Etcd::op).collect::<Vec<_>>(),
                    "failure": t.failure.iter().map(Etcd::op).collect::<Vec<_>>(),
                });
                let v = self.post("/v3/kv/txn", &body).expect("txn");
                if v.get("error").is_some() {
                    return StoreReply::Failed;
                }
                let read = v["responses"]
                    .as_array()
                    .map(|rs| {
                        rs.iter()
                            .flat_map(|r| Etcd::kvs(&r["response_range"]))
                            .collect()
                    })
                    .unwrap_or_default();
                StoreReply::Txn {
                    succeeded: v["succeeded"].as_bool().unwrap_or(false),
                    revision: Etcd::num(&v["header"]["revision"]),
                    read,
                }
            }
            other => panic!("no etcd request for {other:?}"),
        }
    }
}

/// Where a host's calls go.
enum Store<'a> {
    Real(&'a Etcd),
    Model(EtcdModel),
}

impl Store<'_> {
    fn call(&mut self, now: Instant, call: &StoreCall) -> StoreReply {
        match self {
            Store::Real(e) => e.call(call),
            Store::Model(m) => m.apply(now, call),
        }
    }
}

/// Runs everything `host` asked at `now` to its answers, every store call answered at
/// once.
fn settle(host: &mut ClusterHost, store: &mut Store<'_>, now: Instant) -> Vec<ClusterAnswer> {
    let mut answers = Vec::new();
    while let Some(a) = host.poll_action() {
        match a {
            ClusterAction::Store { op, call } => {
                let reply = store.call(now, &call);
                host.handle_reply(now, op, reply);
            }
            ClusterAction::Answer { answer, .. } => answers.push(answer),
            _ => {}
        }
    }
    answers
}

fn timing() -> ClusterTiming {
    // Short enough for a test; the rule still holds (1 + 1 < 3).
    let t = ClusterTiming {
        lease_ttl: Duration::from_secs(3),
        keepalive_every: Duration::from_millis(500),
        grant_deadline: Duration::from_secs(1),
        skew_bound: Duration::from_secs(1),
        op_timeout: Duration::from_secs(2),
        retry_after: Duration::from_secs(1),
    };
    t.check().expect("the rule holds");
    t
}

fn host(name: &str) -> ClusterHost {
    let cluster = ClusterName::new("conformance").expect("a name");
    let limits = BudgetLimits {
        max_count: 1,
        max_bytes: 1_000,
    };
    ClusterHost::new(
        KeyLayout::new(&cluster, &ClusterName::new(name).expect("a name")),
        timing(),
        [limits; 2],
    )
}

/// The script both stores run: two hosts, one name, one budget slot.
fn script(mut store: Store<'_>) -> Vec<ClusterAnswer> {
    let t0 = Instant::ZERO;
    let (mut a, mut b) = (host("a"), host("b"));
    let name = SharedName::new(NameKind::Lock, "docs/report.odt").expect("a path");
    let mut out = Vec::new();
    a.start(t0);
    out.extend(settle(&mut a, &mut store, t0));
    b.start(t0);
    out.extend(settle(&mut b, &mut store, t0));
    a.acquire(t0, ClusterRequest(1), &name);
    out.extend(settle(&mut a, &mut store, t0));
    b.acquire(t0, ClusterRequest(2), &name);
    out.extend(settle(&mut b, &mut store, t0));
    let Some(ClusterAnswer::Granted { fence }) = out.first().cloned() else {
        panic!("host a was not granted: {out:?}")
    };
    a.check_fence(t0, ClusterRequest(3), &name, fence);
    out.extend(settle(&mut a, &mut store, t0));
    a.release(t0, &name, fence);
    out.extend(settle(&mut a, &mut store, t0));
    b.acquire(t0, ClusterRequest(4), &name);
    out.extend(settle(&mut b, &mut store, t0));
    a.reserve(t0, ClusterRequest(5), Budget::Uploads, 10);
    out.extend(settle(&mut a, &mut store, t0));
    b.reserve(t0, ClusterRequest(6), Budget::Uploads, 10);
    out.extend(settle(&mut b, &mut store, t0));
    a.give_back(t0, Budget::Uploads, 10);
    out.extend(settle(&mut a, &mut store, t0));
    b.reserve(t0, ClusterRequest(7), Budget::Uploads, 10);
    out.extend(settle(&mut b, &mut store, t0));
    out
}

#[test]
fn the_model_answers_the_cluster_machine_as_etcd_does() {
    let Some(etcd) = Etcd::start() else { return };
    let real = script(Store::Real(&etcd));
    let model = script(Store::Model(EtcdModel::new(1.0)));
    assert_eq!(real, model, "etcd and the model answered differently");
    // What the script is there to show, on the real store.
    assert!(matches!(real[0], ClusterAnswer::Granted { .. }), "{real:?}");
    assert_eq!(
        real[1],
        ClusterAnswer::Busy,
        "a lock held through one host is refused through another"
    );
    assert_eq!(real[2], ClusterAnswer::MayPublish);
    assert!(
        matches!(real[3], ClusterAnswer::Granted { fence } if Some(fence) > match real[0] { ClusterAnswer::Granted { fence } => Some(fence), _ => None }),
        "the fence rises: {real:?}"
    );
    assert_eq!(
        real[4..],
        [
            ClusterAnswer::Reserved,
            ClusterAnswer::Saturated,
            ClusterAnswer::Reserved
        ],
        "the budget is the service's"
    );
}

#[test]
fn a_silent_hosts_grants_pass_to_another_after_its_ttl_and_a_slow_clock_is_fenced() {
    let Some(etcd) = Etcd::start() else { return };
    let mut store = Store::Real(&etcd);
    let start = WallInstant::now();
    let clock = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let (mut a, mut b) = (host("a"), host("b"));
    let name = SharedName::new(NameKind::Lease, "upload/big.iso").expect("a path");
    let t = clock();
    a.start(t);
    settle(&mut a, &mut store, t);
    b.start(t);
    settle(&mut b, &mut store, t);
    a.acquire(t, ClusterRequest(1), &name);
    let Some(ClusterAnswer::Granted { fence: first }) = settle(&mut a, &mut store, t).pop() else {
        panic!("host a was not granted")
    };
    // Host a goes silent (no keep-alive); host b keeps its lease alive and asks until the
    // name is its own, within the TTL and a bound.
    let mut second = None;
    let mut tries = 0;
    while second.is_none() {
        let now = clock();
        assert!(
            now.saturating_since(t) < Duration::from_secs(10),
            "host b was not granted the silent host's name within 10 s (TTL 3 s)"
        );
        if b.poll_timeout().is_some_and(|d| d <= now) {
            b.handle_timeout(now);
            settle(&mut b, &mut store, now);
        }
        tries += 1;
        b.acquire(now, ClusterRequest(100 + tries), &name);
        match settle(&mut b, &mut store, now).pop() {
            Some(ClusterAnswer::Granted { fence }) => second = Some((now, fence)),
            Some(ClusterAnswer::Busy) => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("host b was answered {other:?}"),
        }
    }
    let (granted_at, second) = second.expect("granted");
    assert!(second > first, "the fence moved: {first} → {second}");
    assert!(
        granted_at.saturating_since(t) >= Duration::from_secs(2),
        "granted elsewhere {:?} after the silent host's grant: before its TTL could end",
        granted_at.saturating_since(t)
    );
    // Host a's clock runs slow: it believes its grant deadline has not passed. The
    // fence is what refuses its publish.
    a.check_fence(t, ClusterRequest(2), &name, first);
    assert_eq!(settle(&mut a, &mut store, t), vec![ClusterAnswer::Fenced]);
}
