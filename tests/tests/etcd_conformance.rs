//! The simulator's etcd model against a real etcd (Debian `etcd-server`): core's
//! `ClusterHost` runs the same script against both and must get the same answers, fences
//! included; then, against the real store alone, a host that stops its keep-alives loses
//! its grants to another host when its lease expires, and a host whose clock says it
//! still holds a moved name is fenced. The real store is reached through the binary's own
//! JSON mapping of the store calls. Skipped, saying so, when `etcd` is not installed.

use std::time::{Duration, Instant as WallInstant};

use servery::cluster::json;
use servery_core::Instant;
use servery_core::cluster::{
    Budget, BudgetLimits, ClusterAction, ClusterAnswer, ClusterHost, ClusterName, ClusterRequest,
    ClusterTiming, KeyLayout, NameKind, SharedName, StoreCall, StoreReply,
};
use servery_sim::cluster::EtcdModel;
use servery_tests::{Etcd, Tree, etcd_installed, skipped};

/// Where a host's calls go.
enum Store<'a> {
    Real(&'a Etcd),
    Model(EtcdModel),
}

impl Store<'_> {
    fn call(&mut self, now: Instant, call: &StoreCall) -> StoreReply {
        match self {
            Store::Real(e) => real_call(e, call),
            Store::Model(m) => m.apply(now, call),
        }
    }
}

/// Carries out one store call as the production driver does: its request, spelled by the
/// driver's own mapping (`servery::cluster::json`), sent to etcd's gateway, and the
/// answer read back by that mapping. So the model is checked against etcd through the
/// very bytes the binary sends, not a second spelling of them.
fn real_call(etcd: &Etcd, call: &StoreCall) -> StoreReply {
    let request = json::request(call).unwrap_or_else(|| panic!("no etcd request for {call:?}"));
    let body = etcd
        .post(request.path, &request.body)
        .unwrap_or_else(|e| panic!("etcd did not answer {}: {e}", request.path));
    json::reply(call, &body).unwrap_or_else(|| panic!("no reply read from {body}"))
}

/// A running etcd for one test, or none (the test then says it is skipped).
fn etcd(test: &str) -> Option<(Tree, Etcd)> {
    if !etcd_installed() {
        skipped("etcd is not installed (Debian: apt-get install etcd-server etcd-client)");
        return None;
    }
    let tree = Tree::new(test);
    let etcd = Etcd::start(tree.dir.join("etcd"));
    Some((tree, etcd))
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
    let Some((_tree, etcd)) = etcd("conformance-script") else {
        return;
    };
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
    let Some((_tree, etcd)) = etcd("conformance-ttl") else {
        return;
    };
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
