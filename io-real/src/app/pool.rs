//! The threads a worker runs application calls on: at most `max` (the seed's
//! `max_workers`, `--max-blocking-threads`), started as calls need them and kept.
//!
//! Not tokio's blocking pool: an application call can take as long as the application
//! likes (a slow query, a long download it streams), and the files the worker serves must
//! keep their own threads whatever the application does. Calls beyond `max` wait in a
//! queue in arrival order; the connections that made them stay counted by the worker, so
//! the queue is bounded by `--max-connections`.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// What a pool thread runs its loop inside: the embedded interpreter keeps one thread
/// state per thread for the thread's life this way, instead of making and dropping one
/// for every call.
pub type ThreadScope = fn(&mut (dyn FnMut() + Send));

#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    max: usize,
    scope: Option<ThreadScope>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("max", &self.max).finish()
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    idle: usize,
    started: usize,
}

impl Pool {
    /// A pool of at most `max` threads (at least one), none started yet.
    #[cfg(test)]
    fn new(max: usize) -> Pool {
        Pool::with_scope(max, None)
    }

    /// A pool whose threads run their loop inside `scope`.
    pub fn with_scope(max: usize, scope: Option<ThreadScope>) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                max: max.max(1),
                scope,
            }),
        }
    }

    /// Runs `job` on a pool thread: an idle one, a new one while fewer than `max` run, or
    /// the first to come free.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let mut state = self.lock();
        state.queue.push_back(Box::new(job));
        if state.idle > state.queue.len().saturating_sub(1) {
            drop(state);
            self.inner.work.notify_one();
            return;
        }
        if state.started < self.inner.max {
            let inner = Arc::clone(&self.inner);
            let spawned = std::thread::Builder::new()
                .name("servery-app".into())
                .spawn(move || match inner.scope {
                    Some(scope) => scope(&mut || work(&inner)),
                    None => work(&inner),
                });
            match spawned {
                Ok(_) => state.started += 1,
                // Out of threads: the queued call waits for one that runs.
                Err(e) => tracing::warn!(error = %e, "cannot start an application thread"),
            }
        }
    }

    /// Threads started so far.
    #[cfg(test)]
    fn started(&self) -> usize {
        self.lock().started
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A job never runs under the lock, so a poisoned lock holds consistent state.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn work(inner: &Inner) {
    let mut state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            // A panic in a job (a bug of ours, never the application's: its exceptions are
            // values) must not take the thread's place in the count with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            state = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        state.idle += 1;
        state = inner
            .work
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
        state.idle -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

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

    #[test]
    fn an_idle_thread_is_reused_rather_than_a_new_one_started() {
        let pool = Pool::new(8);
        for _ in 0..5 {
            let (tx, rx) = mpsc::channel();
            pool.run(move || {
                let _ = tx.send(());
            });
            rx.recv_timeout(Duration::from_secs(10)).expect("ran");
            // Wait until the thread is idle again before the next job.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while pool.lock().idle == 0 {
                assert!(std::time::Instant::now() < deadline, "thread never idle");
                std::thread::yield_now();
            }
        }
        assert_eq!(pool.started(), 1);
    }
}
