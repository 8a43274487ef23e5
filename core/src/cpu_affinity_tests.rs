use super::*;
use crate::config::RawConfig;
use proptest::prelude::*;

fn set(cpus: &[u32]) -> CpuSet {
    CpuSet::new(cpus.iter().copied())
}

fn shares(workers: u32, allowed: &CpuSet) -> Vec<CpuSet> {
    (0..workers)
        .map(|i| slot_share(Slot(i), workers, allowed))
        .collect()
}

#[test]
fn slots_get_contiguous_shares_the_first_ones_the_remainder() {
    assert_eq!(shares(2, &set(&[0, 1])), [set(&[0]), set(&[1])]);
    assert_eq!(shares(2, &set(&[0, 1, 2, 3])), [set(&[0, 1]), set(&[2, 3])]);
    assert_eq!(
        shares(2, &set(&[0, 1, 2, 3, 4])),
        [set(&[0, 1, 2]), set(&[3, 4])],
        "the remainder goes to the first slots, one each"
    );
    // A cpuset with holes (taskset -c 2,5,7,9): shares of the CPUs allowed, not of 0..C.
    assert_eq!(
        shares(3, &set(&[2, 5, 7, 9])),
        [set(&[2, 5]), set(&[7]), set(&[9])]
    );
}

#[test]
fn more_slots_than_cpus_go_round_the_cpus() {
    assert_eq!(
        shares(5, &set(&[0, 1, 2])),
        [set(&[0]), set(&[1]), set(&[2]), set(&[0]), set(&[1])]
    );
}

#[test]
fn one_slot_gets_every_cpu_and_no_cpus_give_nothing() {
    assert_eq!(shares(1, &set(&[0, 1, 2])), [set(&[0, 1, 2])]);
    assert_eq!(shares(3, &CpuSet::default()), vec![CpuSet::default(); 3]);
}

fn config(workers: i64, affinity: CpuAffinity, application: bool) -> ValidConfig {
    let mut raw = RawConfig {
        workers,
        worker_cpu_affinity: affinity,
        ..RawConfig::default()
    };
    raw.features.application = application;
    raw.validate().expect("valid")
}

#[test]
fn only_application_workers_under_auto_are_pinned() {
    let host = set(&[0, 1]);
    let app = config(2, CpuAffinity::Auto, true);
    assert_eq!(
        plan(&app, &host),
        [Some(set(&[0])), Some(set(&[1]))],
        "auto: each application worker on its own CPU"
    );
    assert_eq!(
        plan(&config(2, CpuAffinity::Off, true), &host),
        [None, None],
        "off: nobody pinned"
    );
    assert_eq!(
        plan(&config(2, CpuAffinity::Auto, false), &host),
        [None, None],
        "file-serving workers are not pinned under auto"
    );
    assert_eq!(
        plan(&app, &CpuSet::default()),
        [None, None],
        "no CPUs known: nobody pinned"
    );
}

#[test]
fn lists_read_as_the_kernel_writes_them() {
    assert_eq!(CpuSet::parse_list("0-3,8\n"), Ok(set(&[0, 1, 2, 3, 8])));
    assert_eq!(CpuSet::parse_list(""), Ok(CpuSet::default()));
    assert_eq!(CpuSet::parse_list("5"), Ok(set(&[5])));
    assert_eq!(set(&[0, 1, 2, 3, 8, 10, 11]).to_string(), "0-3,8,10-11");
    assert_eq!(set(&[4]).to_string(), "4");
    assert!(matches!(
        CpuSet::parse_list("3-1"),
        Err(CpuListError::Backwards(_))
    ));
    assert!(matches!(
        CpuSet::parse_list("0,,1"),
        Err(CpuListError::NotANumber(_))
    ));
    assert!(matches!(
        CpuSet::parse_list("-1"),
        Err(CpuListError::NotANumber(_))
    ));
    assert!(matches!(
        CpuSet::parse_list("99999999999"),
        Err(CpuListError::TooLarge(_))
    ));
    assert!(matches!(
        CpuSet::parse_list("0-4096"),
        Err(CpuListError::TooLarge(_))
    ));
}

proptest! {
    #[test]
    fn shares_partition_or_go_round(
        cpus in proptest::collection::btree_set(0u32..MAX_CPUS, 1..48),
        workers in 1u32..80,
    ) {
        let allowed = CpuSet::new(cpus);
        let c = allowed.len();
        let all = shares(workers, &allowed);
        for share in &all {
            prop_assert!(!share.is_empty(), "partition rule: a slot got no CPU");
            prop_assert!(share.is_subset(&allowed), "partition rule: {share} is not in {allowed}");
        }
        if workers as usize <= c {
            let mut union = Vec::new();
            for (i, a) in all.iter().enumerate() {
                for b in &all[i + 1..] {
                    prop_assert!(a.is_disjoint(b), "partition rule: {a} and {b} overlap");
                }
                union.extend_from_slice(a.as_slice());
            }
            prop_assert_eq!(CpuSet::new(union), allowed.clone(), "partition rule: the shares do not cover the CPUs");
            let sizes: Vec<usize> = all.iter().map(CpuSet::len).collect();
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "partition rule: uneven shares {sizes:?}");
        } else {
            let mut load = vec![0u32; c];
            for share in &all {
                prop_assert_eq!(share.len(), 1);
                let at = allowed.as_slice().iter().position(|x| *x == share.as_slice()[0]);
                load[at.unwrap_or(0)] += 1;
            }
            let (lo, hi) = (load.iter().min(), load.iter().max());
            prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "round rule: uneven load {load:?}");
        }
    }

    #[test]
    fn a_list_reads_back_as_written(cpus in proptest::collection::btree_set(0u32..MAX_CPUS, 0..64)) {
        let set = CpuSet::new(cpus);
        prop_assert_eq!(CpuSet::parse_list(&set.to_string()), Ok(set));
    }

    #[test]
    fn any_text_is_read_or_refused_without_a_panic(text in "[0-9,\\- a-z]{0,40}") {
        if let Ok(set) = CpuSet::parse_list(&text) {
            prop_assert!(set.as_slice().iter().all(|c| *c < MAX_CPUS));
        }
    }
}
