//! A request's response events between the loop and the connection's task: at most
//! [`RESPONSE_QUEUE`] ahead of the client, so a slow reader makes the application's
//! `send` wait (it is told the queue is full and woken when there is room).
//!
//! Part of the request's exchange rather than a channel of its own: one request, one
//! reader, one writer, so a lock and a waker do what a channel's shared allocation and its
//! blocks of slots did (made and freed per request; decision 0115).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::{Out, RESPONSE_QUEUE};

#[derive(Default)]
pub(super) struct Outbox(Mutex<State>);

#[derive(Default)]
struct State {
    events: VecDeque<Out>,
    /// The connection's task reads no more (the response ended, or its client went).
    closed: bool,
    /// The task waiting for the next event.
    reader: Option<Waker>,
}

/// Why an event was not queued.
pub(super) enum Refused {
    /// [`RESPONSE_QUEUE`] events wait already: the event, to offer again.
    Full(Out),
    /// Nobody reads: the event is dropped.
    Closed,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `event` while fewer than [`RESPONSE_QUEUE`] wait: the reader to wake, if it
    /// waits.
    pub(super) fn try_send(&self, event: Out) -> Result<Option<Waker>, Refused> {
        let mut state = self.lock();
        if state.closed {
            return Err(Refused::Closed);
        }
        if state.events.len() >= RESPONSE_QUEUE {
            return Err(Refused::Full(event));
        }
        state.events.push_back(event);
        Ok(state.reader.take())
    }

    /// Queues the last events of a call whatever the bound (at most a held head and the
    /// failure that cuts the response: nothing can follow them): the reader to wake, if
    /// it waits.
    pub(super) fn send_last(&self, events: impl IntoIterator<Item = Out>) -> Option<Waker> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        state.events.extend(events);
        state.reader.take()
    }

    /// The next event, or the reader's waker kept until one comes.
    pub(super) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Out> {
        let mut state = self.lock();
        match state.events.pop_front() {
            Some(event) => Poll::Ready(event),
            None => {
                match &mut state.reader {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => state.reader = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }

    pub(super) async fn recv(&self) -> Out {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The reader is gone: what waits is dropped (files closed), and sends are refused.
    pub(super) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.reader = None;
        let dropped = std::mem::take(&mut state.events);
        drop(state);
        drop(dropped);
    }

    /// The next event without waiting.
    #[cfg(test)]
    pub(super) fn try_recv(&self) -> Option<Out> {
        self.lock().events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use bytes::Bytes;

    use super::*;

    fn chunk(n: u8) -> Out {
        Out::Chunk(Bytes::from(vec![n]), false)
    }

    fn number(event: Out) -> u8 {
        match event {
            Out::Chunk(data, _) => data[0],
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
        for n in 0..RESPONSE_QUEUE as u8 {
            match outbox.try_send(chunk(n)) {
                Ok(Some(reader)) => reader.wake(),
                Ok(None) => {}
                Err(_) => panic!("no room for event {n}"),
            }
        }
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            1,
            "the waiting reader is woken once"
        );
        match outbox.try_send(chunk(99)) {
            Err(Refused::Full(event)) => assert_eq!(number(event), 99, "the event comes back"),
            _ => panic!(
                "a response queue past {RESPONSE_QUEUE} events takes more: no back-pressure on the application's send"
            ),
        }
        for n in 0..RESPONSE_QUEUE as u8 {
            match outbox.poll_recv(&mut cx) {
                Poll::Ready(event) => assert_eq!(number(event), n, "events out of order"),
                Poll::Pending => panic!("event {n} was queued"),
            }
        }
        assert!(outbox.try_send(chunk(7)).is_ok(), "room again once read");
        // The last events go whatever the bound.
        outbox.send_last([chunk(8), chunk(9), chunk(10), chunk(11), Out::Fail]);
        assert_eq!(outbox.try_recv().map(number), Some(7));
    }

    #[test]
    fn a_closed_outbox_drops_what_waits_and_refuses_more() {
        let outbox = Outbox::default();
        assert!(outbox.try_send(chunk(1)).is_ok());
        outbox.close();
        assert!(
            outbox.try_recv().is_none(),
            "events queued for a reader that has gone are kept (a file held open)"
        );
        assert!(
            matches!(outbox.try_send(chunk(2)), Err(Refused::Closed)),
            "a send after the client went is taken: the application is never told"
        );
        outbox.send_last([Out::Fail]);
        assert!(
            outbox.try_recv().is_none(),
            "the last events after close are kept"
        );
    }
}
