//! CPU affinity (decision 0122): each spawn carries its slot's CPUs, a replacement gets
//! its slot's again, and a reload shares them out for its own worker count.

use super::*;
use crate::cpu_affinity::CpuSet;

fn cpus(list: &str) -> Option<CpuSet> {
    Some(CpuSet::parse_list(list).expect("a list"))
}

/// Each spawn in `acts` as (slot, its CPUs).
fn spawned_cpus(acts: &[Action]) -> Vec<(u32, Option<CpuSet>)> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Spawn { slot, cpus, .. } => Some((slot.0, cpus.clone())),
            _ => None,
        })
        .collect()
}

fn pinned_harness(affinity: crate::config::CpuAffinity) -> Harness {
    let mut h = harness(Platform::Posix, |r| {
        r.features.application = true;
        r.worker_cpu_affinity = affinity;
    });
    h.sup.set_host_cpus(CpuSet::new([0, 1, 2, 3]));
    h
}

#[test]
fn a_replacement_gets_its_slots_cpus_and_a_reload_shares_them_out_again() {
    let mut h = pinned_harness(crate::config::CpuAffinity::Auto);
    let acts = h.on(Event::Start);
    assert_eq!(
        spawned_cpus(&acts),
        [(0, cpus("0-1")), (1, cpus("2-3"))],
        "partition rule: two application workers share out four CPUs"
    );
    h.boot(&acts);
    let ws = h.members();
    let status = h.sup.status(h.now);
    assert_eq!(
        status
            .workers
            .iter()
            .map(|w| w.cpus.clone())
            .collect::<Vec<_>>(),
        [cpus("0-1"), cpus("2-3")],
        "the status shows each worker's CPUs"
    );

    // A crash: the replacement starts on the crashed worker's CPUs.
    h.on(Event::Exited {
        worker: ws[1],
        status: ExitStatus::Signal(9),
    });
    let acts = h.advance(Duration::from_secs(1));
    assert_eq!(
        spawned_cpus(&acts),
        [(1, cpus("2-3"))],
        "replacement rule: a crash replacement gets its slot's CPUs"
    );
    h.boot(&acts);

    // A manual recycle: each replacement on its slot's CPUs.
    let acts = h.on(Event::Command(Command::Recycle));
    assert_eq!(
        spawned_cpus(&acts),
        [(0, cpus("0-1"))],
        "replacement rule: a recycle replacement gets its slot's CPUs"
    );

    // A reload to three workers, once the recycles are through.
    let mut next = RawConfig {
        workers: 3,
        ..h.sup.config().as_written()
    };
    next.recovery.drain_timeout = 3.0;
    let mut acts = h.boot(&acts);
    for _ in 0..8 {
        let old: Vec<WorkerId> = h
            .sup
            .status(h.now)
            .workers
            .iter()
            .filter(|w| w.role == Role::Retired)
            .map(|w| w.id)
            .collect();
        for w in old {
            acts.extend(h.on(Event::Exited {
                worker: w,
                status: ExitStatus::Code(0),
            }));
        }
        acts = h.boot(&acts);
        if !h.sup.recycle_in_flight() {
            break;
        }
    }
    assert!(!h.sup.recycle_in_flight());
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(1),
        config: Box::new(next.clone()),
    }));
    assert_eq!(
        spawned_cpus(&acts),
        [(0, cpus("0-1")), (1, cpus("2")), (2, cpus("3"))],
        "partition rule: a reload to three workers shares the CPUs out for three"
    );
    h.boot(&acts);

    // A reload to `off`: nobody pinned.
    for w in h
        .sup
        .status(h.now)
        .workers
        .iter()
        .filter(|w| w.role == Role::Retired)
    {
        h.on(Event::Exited {
            worker: w.id,
            status: ExitStatus::Code(0),
        });
    }
    next.worker_cpu_affinity = crate::config::CpuAffinity::Off;
    let acts = h.on(Event::Command(Command::Reload {
        id: ReloadId(2),
        config: Box::new(next),
    }));
    assert_eq!(
        spawned_cpus(&acts),
        [(0, None), (1, None), (2, None)],
        "off rule: a reload to off starts its workers unpinned"
    );
}

#[test]
fn without_the_hosts_cpus_or_under_off_nobody_is_pinned() {
    let mut h = pinned_harness(crate::config::CpuAffinity::Off);
    let acts = h.on(Event::Start);
    assert_eq!(spawned_cpus(&acts), [(0, None), (1, None)]);
    let mut h = harness(Platform::Posix, |r| r.features.application = true);
    let acts = h.on(Event::Start);
    assert_eq!(
        spawned_cpus(&acts),
        [(0, None), (1, None)],
        "no CPUs reported: nobody pinned"
    );
}
