//! A WSGI call's response events between its pool thread and the connection's task: at
//! most [`RESPONSE_QUEUE`] ahead of the client, so a slow reader makes the application's
//! next `yield` or `write()` wait (its pool thread sleeps, without the interpreter's lock,
//! until the task reads one).
//!
//! One allocation shared by the two ends rather than a tokio channel per request (its
//! shared state and its first block of 32 slots, made and freed per request; decision
//! 0115's addendum): one writer, one reader, so a lock, a ring of slots, the reader's
//! waker and a condition variable for the writer do the same.

use std::future::poll_fn;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::{Out, RESPONSE_QUEUE};

#[derive(Default)]
pub(super) struct Outbox {
    state: Mutex<State>,
    /// The writer waits here for room (or for the reader to go).
    room: Condvar,
}

#[derive(Default)]
struct State {
    events: Ring,
    /// The connection's task reads no more (the response ended, or its client went).
    closed: bool,
    /// The call is over: no event follows those queued.
    ended: bool,
    /// The task waiting for the next event.
    reader: Option<Waker>,
    /// The writer sleeps on `room`.
    writer_waits: bool,
}

/// The queued events, in order, in slots of their own (no allocation per event).
#[derive(Default)]
struct Ring {
    slots: [Option<Out>; RESPONSE_QUEUE],
    first: usize,
    len: usize,
}

impl Ring {
    fn is_full(&self) -> bool {
        self.len == RESPONSE_QUEUE
    }

    fn push(&mut self, event: Out) {
        debug_assert!(!self.is_full());
        self.slots[(self.first + self.len) % RESPONSE_QUEUE] = Some(event);
        self.len += 1;
    }

    fn pop(&mut self) -> Option<Out> {
        if self.len == 0 {
            return None;
        }
        let event = self.slots[self.first].take();
        self.first = (self.first + 1) % RESPONSE_QUEUE;
        self.len -= 1;
        event
    }
}

/// What became of an event offered to the queue.
pub(super) enum Sent {
    /// Queued: the reader to wake, if it waits.
    Queued(Option<Waker>),
    /// [`RESPONSE_QUEUE`] events wait already: the event, to offer again.
    Full(Out),
    /// Nobody reads (or the call already ended): the event is dropped.
    Closed,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `event` while fewer than [`RESPONSE_QUEUE`] wait: the reader to wake, if it
    /// waits.
    pub(super) fn try_send(&self, event: Out) -> Sent {
        let mut state = self.lock();
        if state.closed || state.ended {
            return Sent::Closed;
        }
        if state.events.is_full() {
            return Sent::Full(event);
        }
        state.events.push(event);
        Sent::Queued(state.reader.take())
    }

    /// Queues `event`, waiting (blocking the thread) for room: never [`Sent::Full`].
    pub(super) fn send_waiting(&self, event: Out) -> Sent {
        let mut state = self.lock();
        loop {
            if state.closed || state.ended {
                return Sent::Closed;
            }
            if !state.events.is_full() {
                state.events.push(event);
                state.writer_waits = false;
                return Sent::Queued(state.reader.take());
            }
            state.writer_waits = true;
            state = self
                .room
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The call is over: the reader gets what is queued and then the end. The reader to
    /// wake, if it waits.
    pub(super) fn end(&self) -> Option<Waker> {
        let mut state = self.lock();
        state.ended = true;
        state.reader.take()
    }

    /// The next event; `None` once the call ended with nothing more queued. Otherwise the
    /// reader's waker is kept until one comes.
    pub(super) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        let mut state = self.lock();
        match state.events.pop() {
            Some(event) => {
                if std::mem::take(&mut state.writer_waits) {
                    drop(state);
                    self.room.notify_one();
                }
                Poll::Ready(Some(event))
            }
            None if state.ended => Poll::Ready(None),
            None => {
                match &mut state.reader {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => state.reader = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    pub(super) async fn recv(&self) -> Option<Out> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The reader is gone: what waits is dropped (files closed), sends are refused and a
    /// writer waiting for room is let go.
    pub(super) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.reader = None;
        let dropped = std::mem::take(&mut state.events);
        let waits = std::mem::take(&mut state.writer_waits);
        drop(state);
        drop(dropped);
        if waits {
            self.room.notify_one();
        }
    }

    /// The next event without waiting.
    #[cfg(test)]
    fn try_recv(&self) -> Option<Out> {
        self.lock().events.pop()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::*;

    fn chunk(n: u8) -> Out {
        Out::Chunk(Bytes::from(vec![n]))
    }

    fn number(event: Out) -> u8 {
        match event {
            Out::Chunk(data) => data[0],
            _ => panic!("not a chunk"),
        }
    }

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn at_most_the_queue_waits_in_order_and_the_reader_is_woken() {
        let outbox = Outbox::default();
        let woken = Arc::new(Counted::default());
        let waker = Waker::from(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        assert!(outbox.poll_recv(&mut cx).is_pending());
        for round in 0..3u8 {
            for n in 0..RESPONSE_QUEUE as u8 {
                match outbox.try_send(chunk(round * 10 + n)) {
                    Sent::Queued(Some(reader)) => reader.wake(),
                    Sent::Queued(None) => {}
                    _ => panic!("no room for event {n}"),
                }
            }
            match outbox.try_send(chunk(99)) {
                Sent::Full(event) => assert_eq!(number(event), 99, "the event comes back"),
                _ => panic!(
                    "a response queue past {RESPONSE_QUEUE} events takes more: no back-pressure on the application's yield"
                ),
            }
            for n in 0..RESPONSE_QUEUE as u8 {
                match outbox.poll_recv(&mut cx) {
                    Poll::Ready(Some(event)) => {
                        assert_eq!(number(event), round * 10 + n, "events out of order")
                    }
                    _ => panic!("event {n} was queued"),
                }
            }
            assert!(outbox.poll_recv(&mut cx).is_pending());
        }
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            3,
            "the waiting reader is woken once per batch"
        );
        assert!(
            matches!(outbox.try_send(chunk(7)), Sent::Queued(_)),
            "room again once read"
        );
        let _ = outbox.end();
        assert!(
            matches!(outbox.try_send(chunk(8)), Sent::Closed),
            "an event after the call ended is taken"
        );
        assert!(matches!(outbox.poll_recv(&mut cx), Poll::Ready(Some(_))));
        assert!(
            matches!(outbox.poll_recv(&mut cx), Poll::Ready(None)),
            "the reader is not told the call ended: a response that never finishes"
        );
    }

    #[test]
    fn a_writer_waits_for_room_and_is_let_go_by_a_read_or_the_reader_going() {
        for reader_goes in [false, true] {
            let outbox = Arc::new(Outbox::default());
            for n in 0..RESPONSE_QUEUE as u8 {
                assert!(matches!(outbox.try_send(chunk(n)), Sent::Queued(_)));
            }
            let writer = {
                let outbox = Arc::clone(&outbox);
                std::thread::spawn(move || {
                    matches!(outbox.send_waiting(chunk(42)), Sent::Queued(_))
                })
            };
            // The writer must be asleep on the full queue before the reader acts.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !outbox.lock().writer_waits {
                assert!(
                    Instant::now() < deadline,
                    "a writer on a full queue did not wait for room"
                );
                std::thread::yield_now();
            }
            assert!(!writer.is_finished(), "the writer did not wait for room");
            if reader_goes {
                outbox.close();
            } else {
                let waker = Waker::noop();
                let mut cx = Context::from_waker(waker);
                assert!(matches!(outbox.poll_recv(&mut cx), Poll::Ready(Some(_))));
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while !writer.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "a writer waiting for room was never let go (reader went: {reader_goes})"
                );
                std::thread::yield_now();
            }
            assert_eq!(
                writer.join().expect("writer"),
                !reader_goes,
                "the event is taken when a slot frees, refused when the reader went"
            );
        }
    }

    #[test]
    fn a_closed_outbox_drops_what_waits_and_refuses_more() {
        let outbox = Outbox::default();
        assert!(matches!(outbox.try_send(chunk(1)), Sent::Queued(_)));
        outbox.close();
        assert!(
            outbox.try_recv().is_none(),
            "events queued for a reader that has gone are kept (a file held open)"
        );
        assert!(
            matches!(outbox.try_send(chunk(2)), Sent::Closed),
            "a send after the client went is taken: the application is never told"
        );
        assert!(
            matches!(outbox.send_waiting(chunk(3)), Sent::Closed),
            "a waiting send after the client went is taken"
        );
    }
}
