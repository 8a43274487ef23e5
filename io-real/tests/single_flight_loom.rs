//! Model checks of the single-flight table (`src/http/single_flight.rs`): every
//! interleaving of concurrent callers, as loom explores them.
//!
//! The table's source file is compiled here a second time, beside a `sync` module that
//! names loom's locks where the crate's names std's, so only this small executable is
//! built for the check. It runs without the test harness (`harness = false` in
//! Cargo.toml): without `cfg(test)` the file's own unit tests, written for std's locks,
//! are left out, and `main` runs each model in turn.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::{future::block_on, thread};

/// The locks the table's source file takes from its parent module: loom's.
mod sync {
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
}

// Part of the table's API is used by the server only (`run`'s siblings).
#[allow(dead_code, unreachable_pub)]
#[path = "../src/http/single_flight.rs"]
mod single_flight;

use single_flight::{Join, SingleFlight};
use sync::Arc;

fn concurrent_callers_agree_and_leave_nothing() {
    loom::model(|| {
        let sf = Arc::new(SingleFlight::<u8, usize>::new());
        let work = Arc::new(AtomicUsize::new(0));
        let spawn = |sf: Arc<SingleFlight<u8, usize>>, work: Arc<AtomicUsize>| {
            thread::spawn(move || {
                block_on(sf.run(
                    1,
                    || async move { work.fetch_add(1, Ordering::SeqCst) + 100 },
                ))
            })
        };
        let other = spawn(Arc::clone(&sf), Arc::clone(&work));
        let mine = block_on(sf.run(1, || {
            let work = Arc::clone(&work);
            async move { work.fetch_add(1, Ordering::SeqCst) + 100 }
        }));
        let theirs = other.join().expect("thread");
        let runs = work.load(Ordering::SeqCst);
        // Either they overlapped (one run, shared result) or not (two runs).
        assert!(runs == 1 || runs == 2, "{runs} runs of one key's work");
        if runs == 1 {
            assert_eq!(mine, theirs, "callers of one run share its result");
        }
        assert_eq!(
            sf.in_flight(),
            0,
            "an entry retained after every caller ended"
        );
    });
}

fn abandoned_leader_hands_over() {
    loom::model(|| {
        let sf = Arc::new(SingleFlight::<u8, usize>::new());
        let Join::Leader(leader) = sf.join(1) else {
            panic!("first caller leads");
        };
        let follower = {
            let sf = Arc::clone(&sf);
            thread::spawn(move || block_on(sf.run(1, || async { 5 })))
        };
        // The leader gives up (its request was cancelled) at some point in the
        // follower's life; the follower must still finish with a value.
        drop(leader);
        assert_eq!(follower.join().expect("thread"), 5);
        assert_eq!(
            sf.in_flight(),
            0,
            "an entry retained after every caller ended"
        );
    });
}

fn completion_wakes_a_waiting_follower() {
    loom::model(|| {
        let sf = Arc::new(SingleFlight::<u8, usize>::new());
        let Join::Leader(leader) = sf.join(1) else {
            panic!("first caller leads");
        };
        let follower = {
            let sf = Arc::clone(&sf);
            thread::spawn(move || match sf.join(1) {
                Join::Follower(f) => block_on(f),
                // The leader already finished: a fresh flight, nothing to wait for.
                Join::Leader(l) => Some(l.complete(3)),
            })
        };
        leader.complete(3);
        assert_eq!(follower.join().expect("thread"), Some(3));
        assert_eq!(
            sf.in_flight(),
            0,
            "an entry retained after every caller ended"
        );
    });
}

fn main() {
    let models: [(&str, fn()); 3] = [
        (
            "concurrent callers agree and leave nothing",
            concurrent_callers_agree_and_leave_nothing,
        ),
        (
            "an abandoned leader hands over",
            abandoned_leader_hands_over,
        ),
        (
            "completion wakes a waiting follower",
            completion_wakes_a_waiting_follower,
        ),
    ];
    for (name, model) in models {
        model();
        println!("single flight, every interleaving: {name}: ok");
    }
}
