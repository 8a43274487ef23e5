//! Wakes of the connections' tasks from the interpreter's threads (the ASGI loop's, the
//! WSGI pool's), delivered in batches: such a thread queues a task's waker here, and only
//! the first of a batch wakes the one dispatcher task on the worker's runtime, which then
//! wakes the rest from there.
//!
//! A task woken from a thread outside the runtime costs a write to the runtime's event
//! descriptor each time (the current-thread runtime does not ask whether its thread is
//! parked); woken from the dispatcher, it is a push on the runtime's own queue. The ASGI
//! loop's other direction already works so (`asgi::Bridge::notify`: one byte per batch).

use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(super) struct Deliveries(Mutex<State>);

#[derive(Default)]
struct State {
    /// Tasks to wake, in the order the loop woke them.
    wakers: Vec<Waker>,
    /// The dispatcher was woken (or is running) and has not found the queue empty since.
    scheduled: bool,
    /// The dispatcher, waiting for the next batch.
    dispatcher: Option<Waker>,
}

impl Deliveries {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes `waker`'s task from the runtime, soon: at once when a batch is being
    /// delivered, else by waking the dispatcher.
    pub(super) fn wake(&self, waker: Waker) {
        let mut state = self.lock();
        state.wakers.push(waker);
        if std::mem::replace(&mut state.scheduled, true) {
            return;
        }
        let dispatcher = state.dispatcher.take();
        drop(state);
        if let Some(dispatcher) = dispatcher {
            dispatcher.wake();
        }
    }

    /// Wakes every queued task, until the queue is found empty; never ready.
    fn poll_dispatch(&self, cx: &mut Context<'_>, batch: &mut Vec<Waker>) -> Poll<()> {
        loop {
            let mut state = self.lock();
            if state.wakers.is_empty() {
                state.scheduled = false;
                match &mut state.dispatcher {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => state.dispatcher = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            std::mem::swap(&mut state.wakers, batch);
            drop(state);
            for waker in batch.drain(..) {
                waker.wake();
            }
        }
    }
}

/// The dispatcher: a task of the worker's runtime for as long as the worker lives.
pub(super) async fn dispatch(deliveries: Arc<Deliveries>) {
    let mut batch = Vec::new();
    poll_fn(|cx| deliveries.poll_dispatch(cx, &mut batch)).await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counted() -> (Arc<Counted>, Waker) {
        let count = Arc::new(Counted::default());
        let waker = Waker::from(Arc::clone(&count));
        (count, waker)
    }

    #[test]
    fn a_batch_wakes_the_dispatcher_once_and_it_wakes_every_task() {
        let deliveries = Deliveries::default();
        let (dispatcher, dispatcher_waker) = counted();
        let mut cx = Context::from_waker(&dispatcher_waker);
        let mut batch = Vec::new();
        assert!(deliveries.poll_dispatch(&mut cx, &mut batch).is_pending());
        let tasks: Vec<_> = (0..3).map(|_| counted()).collect();
        for (_, waker) in &tasks {
            deliveries.wake(waker.clone());
        }
        assert_eq!(
            dispatcher.0.load(Ordering::SeqCst),
            1,
            "each task's wake woke the dispatcher: no batching of the loop's wakes"
        );
        assert!(tasks.iter().all(|(n, _)| n.0.load(Ordering::SeqCst) == 0));
        assert!(deliveries.poll_dispatch(&mut cx, &mut batch).is_pending());
        for (n, _) in &tasks {
            assert_eq!(
                n.0.load(Ordering::SeqCst),
                1,
                "a task the loop woke was never woken"
            );
        }
        // The queue found empty: the next wake wakes the dispatcher again.
        deliveries.wake(tasks[0].1.clone());
        assert_eq!(
            dispatcher.0.load(Ordering::SeqCst),
            2,
            "a wake after the batch was delivered is lost"
        );
    }
}
