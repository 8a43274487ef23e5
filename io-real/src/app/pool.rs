//! The threads a worker runs application calls on: at most `max` (the seed's
//! `max_workers`, `--max-blocking-threads`), started as calls need them and kept.
//!
//! Not tokio's blocking pool: an application call can take as long as the application
//! likes (a slow query, a long download it streams), and the files the worker serves must
//! keep their own threads whatever the application does. Calls beyond `max` wait in a
//! queue in arrival order; the connections that made them stay counted by the worker, so
//! the queue is bounded by `--max-connections`.
//!
//! Few threads are kept hot (decision 0049). Python runs one thread at a time, so for
//! calls that hold the interpreter every extra thread woken only queues for its lock. A
//! thread that finishes a call takes the next queued one itself, and while it is the only
//! one running calls it does so inside the same batch scope (one acquisition of the lock
//! for the run). A call that arrives while calls run is left to them; a free thread takes
//! it only when no call has been taken for [`TAKE_OVER`], which is when the running calls
//! are blocked (on a slow client, a query, a sleep). The thread woken for an idle pool is
//! the one that went idle last.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long the running calls may take no queued call before a free thread takes one:
/// short against a request's time, long against a call that holds the interpreter (tens
/// of microseconds). A call waits at most about twice this when every running call is
/// blocked and a thread is free.
const TAKE_OVER: Duration = Duration::from_micros(500);

/// What a pool thread runs its loop inside (`thread`: the embedded interpreter keeps one
/// thread state per thread for the thread's life this way) and each run of back-to-back
/// calls inside (`batch`: the interpreter's lock taken once for all of them).
#[derive(Clone, Copy)]
pub(super) struct Scopes {
    pub thread: fn(&mut (dyn FnMut() + Send)),
    pub batch: fn(&mut dyn FnMut()),
}

#[derive(Debug, Clone)]
pub(super) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// One per thread: a thread is woken on its own, so the pool picks which.
    wake: Vec<Condvar>,
    scopes: Option<Scopes>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("max", &self.wake.len())
            .finish()
    }
}

struct State {
    /// Calls not yet taken.
    queue: VecDeque<Job>,
    /// When a call was last taken from the queue.
    progress: Instant,
    /// Threads waiting for work, the one that went idle last on top.
    idle: Vec<usize>,
    /// Per thread: handed the queue by `run` (it takes calls without waiting).
    handed: Vec<bool>,
    /// How many of `handed` are set: a call handed to a thread on its way is not taken by
    /// another that merely finds nothing running.
    handing: usize,
    /// Threads running calls (in a batch).
    busy: usize,
    started: usize,
    /// The idle thread that watches the queue while calls run, if any.
    standby: Option<usize>,
    /// A batch started since the standby last looked: it keeps watching through the short
    /// gaps of a loaded pool instead of being appointed (woken) again after each.
    active: bool,
}

/// What to do once the lock is let go.
enum After {
    Nothing,
    Wake(usize),
    Spawn(usize),
}

impl Pool {
    /// A pool of at most `max` threads (at least one), none started yet.
    #[cfg(test)]
    fn new(max: usize) -> Pool {
        Pool::with_scopes(max, None)
    }

    /// A pool whose threads run inside `scopes`.
    pub(super) fn with_scopes(max: usize, scopes: Option<Scopes>) -> Pool {
        let max = max.max(1);
        Pool {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    progress: Instant::now(),
                    idle: Vec::with_capacity(max),
                    handed: vec![false; max],
                    handing: 0,
                    busy: 0,
                    started: 0,
                    standby: None,
                    active: false,
                }),
                wake: (0..max).map(|_| Condvar::new()).collect(),
                scopes,
            }),
        }
    }

    /// Runs `job` on a pool thread: the running ones when they reach it, else the
    /// most recently idle one, or a new one while fewer than `max` run.
    pub(super) fn run(&self, job: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.inner);
        state.queue.push_back(Box::new(job));
        let after = if state.busy == 0 {
            match state.idle.pop() {
                Some(t) => {
                    hand(&mut state, t);
                    if state.standby == Some(t) {
                        state.standby = None;
                    }
                    After::Wake(t)
                }
                None => spawn_slot(&mut state, self.inner.wake.len(), true),
            }
        } else {
            watch(&mut state, self.inner.wake.len())
        };
        self.inner.act(state, after);
    }

    /// Threads started so far.
    #[cfg(test)]
    fn started(&self) -> usize {
        lock(&self.inner).started
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    // A job never runs under the lock, so a poisoned lock holds consistent state.
    inner.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Someone to watch the queue while calls run: the top idle thread, or a new one.
fn watch(state: &mut State, max: usize) -> After {
    if state.standby.is_some() {
        return After::Nothing;
    }
    match state.idle.last() {
        Some(&t) => {
            state.standby = Some(t);
            After::Wake(t)
        }
        None => {
            let after = spawn_slot(state, max, false);
            if let After::Spawn(t) = after {
                state.standby = Some(t);
            }
            after
        }
    }
}

/// Marks thread `t` as handed the queue.
fn hand(state: &mut State, t: usize) {
    if !std::mem::replace(&mut state.handed[t], true) {
        state.handing += 1;
    }
}

/// A new thread's slot, `handed` the queue (it takes calls without waiting) or not.
fn spawn_slot(state: &mut State, max: usize, handed: bool) -> After {
    if state.started < max {
        let me = state.started;
        state.started += 1;
        if handed {
            hand(state, me);
        }
        After::Spawn(me)
    } else {
        After::Nothing
    }
}

impl Inner {
    fn act(self: &Arc<Self>, state: MutexGuard<'_, State>, after: After) {
        match after {
            After::Nothing => drop(state),
            After::Wake(t) => {
                drop(state);
                self.wake[t].notify_one();
            }
            After::Spawn(me) => {
                let inner = Arc::clone(self);
                let spawned = std::thread::Builder::new()
                    .name("servery-app".into())
                    .spawn(move || match inner.scopes {
                        Some(scopes) => (scopes.thread)(&mut || work(&inner, me)),
                        None => work(&inner, me),
                    });
                if let Err(e) = spawned {
                    // Out of threads: the queued call waits for one that runs.
                    let mut state = state;
                    state.started -= 1;
                    if std::mem::take(&mut state.handed[me]) {
                        state.handing -= 1;
                    }
                    if state.standby == Some(me) {
                        state.standby = None;
                    }
                    tracing::warn!(error = %e, "cannot start an application thread");
                }
            }
        }
    }
}

fn work(inner: &Arc<Inner>, me: usize) {
    let mut state = lock(inner);
    // Just ended a call: takes the next without waiting.
    let mut warm = false;
    loop {
        if let Some(first) = take(&mut state, me, warm) {
            state.busy += 1;
            state.active = true;
            // Others are queued behind: someone must watch them in case this call blocks.
            let after = if state.queue.is_empty() {
                After::Nothing
            } else {
                watch(&mut state, inner.wake.len())
            };
            inner.act(state, after);
            let mut first = Some(first);
            let mut run = || {
                if let Some(first) = first.take() {
                    batch(inner, first);
                }
            };
            match inner.scopes {
                Some(scopes) => (scopes.batch)(&mut run),
                None => run(),
            }
            state = lock(inner);
            state.busy -= 1;
            warm = true;
            continue;
        }
        warm = false;
        if !state.idle.contains(&me) {
            state.idle.push(me);
        }
        let watching = (state.busy > 0 || state.active) && state.standby.is_none_or(|s| s == me);
        if watching {
            state.standby = Some(me);
            state.active = false;
            state = inner.wake[me]
                .wait_timeout(state, TAKE_OVER)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        } else {
            if state.standby == Some(me) {
                state.standby = None;
            }
            state = inner.wake[me]
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The call this thread takes now, if any: the oldest when this thread just ended one,
/// `run` handed it the queue, or nothing runs nor is on its way to; else only once the
/// running calls have taken none for [`TAKE_OVER`].
fn take(state: &mut State, me: usize, warm: bool) -> Option<Job> {
    let handed = std::mem::take(&mut state.handed[me]);
    if handed {
        state.handing -= 1;
    }
    let nobody = state.busy == 0 && state.handing == 0;
    if state.queue.is_empty()
        || !(warm || handed || nobody || state.progress.elapsed() >= TAKE_OVER)
    {
        return None;
    }
    state.idle.retain(|&t| t != me);
    if state.standby == Some(me) {
        state.standby = None;
    }
    state.progress = Instant::now();
    state.queue.pop_front()
}

/// `first`, then every call queued by the time each one ends while this thread is the
/// only one running calls (another may be waiting for the batch's lock).
fn batch(inner: &Inner, first: Job) {
    let mut next = Some(first);
    while let Some(job) = next {
        // A panic in a job (a bug of ours, never the application's: its exceptions are
        // values) must not take the thread's place in the count with it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let mut state = lock(inner);
        if state.busy > 1 {
            return;
        }
        next = state.queue.pop_front();
        if next.is_some() {
            state.progress = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_every_job_on_at_most_max_threads() {
        let pool = Pool::new(3);
        let (done_tx, done_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        for i in 0..10 {
            let (done_tx, release_rx) = (done_tx.clone(), Arc::clone(&release_rx));
            pool.run(move || {
                // The first three hold their threads until released.
                if i < 3 {
                    let _ = release_rx.lock().map(|r| r.recv());
                }
                let _ = done_tx.send(i);
            });
        }
        // The three held calls each end up on a thread of their own (taken over after
        // waiting), and no more threads than that start.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&pool.inner).busy < 3 {
            assert!(Instant::now() < deadline, "the held calls never all ran");
            std::thread::yield_now();
        }
        assert_eq!(pool.started(), 3, "never more threads than max");
        assert!(
            done_rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "every thread is held: the rest wait"
        );
        for _ in 0..3 {
            release_tx.send(()).expect("release");
        }
        let mut done: Vec<i32> = (0..10)
            .map(|_| {
                done_rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("job ran")
            })
            .collect();
        done.sort_unstable();
        assert_eq!(done, (0..10).collect::<Vec<_>>());
        assert_eq!(pool.started(), 3);
    }

    /// Waits, bounded, until no call runs and the queue is empty.
    fn settle(pool: &Pool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let state = lock(&pool.inner);
                if state.busy == 0 && state.queue.is_empty() && state.idle.len() == state.started {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the pool never settled");
            std::thread::yield_now();
        }
    }

    fn run_and_wait(pool: &Pool) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        pool.run(move || {
            let _ = tx.send(std::thread::current().id());
        });
        let id = rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        settle(pool);
        id
    }

    #[test]
    fn an_idle_thread_is_reused_rather_than_a_new_one_started() {
        let pool = Pool::new(8);
        for _ in 0..5 {
            run_and_wait(&pool);
        }
        assert_eq!(pool.started(), 1);
    }

    /// Runs a call that reports its thread and holds it until released.
    fn held(pool: &Pool) -> (std::thread::ThreadId, mpsc::Sender<()>) {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (id_tx, id_rx) = mpsc::channel();
        pool.run(move || {
            let _ = id_tx.send(std::thread::current().id());
            let _ = release_rx.recv();
        });
        let id = id_rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        (id, release_tx)
    }

    fn wait_idle(pool: &Pool, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&pool.inner).idle.len() < n {
            assert!(Instant::now() < deadline, "the threads never went idle");
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_thread_that_went_idle_last_takes_the_next_call() {
        // Two threads at most, both held (the second call is taken over), then let go
        // in turn: the one let go last must take the next call.
        let pool = Pool::new(2);
        let (a, release_a) = held(&pool);
        let (b, release_b) = held(&pool);
        assert_ne!(a, b, "the second call was taken over");
        release_a.send(()).expect("release");
        wait_idle(&pool, 1);
        release_b.send(()).expect("release");
        settle(&pool);
        assert_eq!(
            run_and_wait(&pool),
            b,
            "the most recently idle thread must take the next call (LIFO)"
        );
    }

    #[test]
    fn a_call_queued_behind_a_blocked_one_is_taken_over() {
        let pool = Pool::new(4);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        pool.run(move || {
            let _ = started_tx.send(());
            let _ = release_rx.recv();
        });
        // Queued while the first runs: left to it unless it stalls.
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("first call started");
        let (tx, rx) = mpsc::channel();
        pool.run(move || {
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "a call behind a blocked one must be taken by a free thread after TAKE_OVER"
        );
        release_tx.send(()).expect("release");
    }

    /// Batches entered by the pool of the next test (its own counter: tests run in parallel).
    static BATCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    #[test]
    fn calls_queued_while_one_runs_run_after_it_in_the_same_batch() {
        fn counted(run: &mut dyn FnMut()) {
            BATCHES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            run();
        }
        fn plain(run: &mut (dyn FnMut() + Send)) {
            run();
        }
        // One thread: no other can take a call over, so the run is the first thread's.
        let pool = Pool::with_scopes(
            1,
            Some(Scopes {
                thread: plain,
                batch: counted,
            }),
        );
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (ids_tx, ids_rx) = mpsc::channel();
        let first = ids_tx.clone();
        pool.run(move || {
            let _ = started_tx.send(());
            let _ = release_rx.recv();
            let _ = first.send(std::thread::current().id());
        });
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("first call started");
        // Queued behind the running call.
        for _ in 0..3 {
            let ids_tx = ids_tx.clone();
            pool.run(move || {
                let _ = ids_tx.send(std::thread::current().id());
            });
        }
        release_tx.send(()).expect("release");
        let ids: Vec<_> = (0..4)
            .map(|_| ids_rx.recv_timeout(Duration::from_secs(10)).expect("ran"))
            .collect();
        settle(&pool);
        assert!(
            ids.iter().all(|&id| id == ids[0]),
            "one thread ran every call"
        );
        assert_eq!(
            BATCHES.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "calls queued behind a running one must run in its batch"
        );
    }
}
