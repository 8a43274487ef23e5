//! The parent's bounded access-log queue: one writer, many producers, an explicit policy
//! for when producers outrun the writer.

use std::collections::{BTreeMap, VecDeque};

use crate::config::LogPolicy;
use crate::ids::WorkerId;
use crate::proto::BrokerReply;

/// The log lines a record holds: a worker sends whole lines in one record (a batch); a
/// record without a newline is one line. Counts are kept in lines, what an operator
/// compares with requests served.
fn lines(record: &str) -> u64 {
    (record.bytes().filter(|b| *b == b'\n').count() as u64).max(1)
}

#[derive(Debug, Clone)]
pub struct LogQueue {
    records: VecDeque<String>,
    capacity: usize,
    policy: LogPolicy,
    blocked: VecDeque<(WorkerId, u64, String)>,
    accepted: u64,
    dropped: u64,
    discarded: u64,
    /// What each worker's records and reports brought, until its final counts are
    /// compared with them ([`LogQueue::worker_ended`]).
    received: BTreeMap<WorkerId, Received>,
}

/// Lines one worker's records held (whatever became of them here) and lines it said it
/// dropped itself.
#[derive(Debug, Clone, Copy, Default)]
struct Received {
    lines: u64,
    dropped: u64,
}

impl LogQueue {
    pub fn new(capacity: u32, policy: LogPolicy) -> Self {
        LogQueue {
            records: VecDeque::new(),
            capacity: capacity as usize,
            policy,
            blocked: VecDeque::new(),
            accepted: 0,
            dropped: 0,
            discarded: 0,
            received: BTreeMap::new(),
        }
    }

    pub fn set_capacity(&mut self, capacity: u32, policy: LogPolicy) {
        self.capacity = capacity as usize;
        self.policy = policy;
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.blocked.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records accepted into the queue.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Records refused under the drop policy.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Lines lost with their worker: blocked records whose worker died before they were
    /// admitted, and lines a worker produced and never sent (its final counts).
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Appends waiting for room under the block policy.
    pub fn blocked(&self) -> usize {
        self.blocked.len()
    }

    /// `None` means the append is parked until the writer makes room.
    pub fn append(&mut self, worker: WorkerId, id: u64, record: String) -> Option<BrokerReply> {
        let got = self.received.entry(worker).or_default();
        got.lines = got.lines.saturating_add(lines(&record));
        if self.records.len() < self.capacity && self.blocked.is_empty() {
            self.accepted += lines(&record);
            self.records.push_back(record);
            return Some(BrokerReply::Logged);
        }
        match self.policy {
            LogPolicy::Drop => {
                self.dropped += lines(&record);
                Some(BrokerReply::LogDropped)
            }
            LogPolicy::Block => {
                self.blocked.push_back((worker, id, record));
                None
            }
        }
    }

    /// Up to `max` records for the writer, and the blocked appends admitted by the room
    /// that made.
    pub fn take(&mut self, max: usize) -> (Vec<String>, Vec<(WorkerId, u64)>) {
        // Nothing queued, as whenever the parent asks between its steps: nothing to
        // drain or admit (and no drain to set up and drop).
        if self.records.is_empty() && self.blocked.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let n = max.min(self.records.len());
        let batch: Vec<String> = self.records.drain(..n).collect();
        let mut admitted = Vec::new();
        while self.records.len() < self.capacity {
            let Some((worker, id, record)) = self.blocked.pop_front() else {
                break;
            };
            self.accepted += lines(&record);
            self.records.push_back(record);
            admitted.push((worker, id));
        }
        (batch, admitted)
    }

    /// Lines a worker dropped before they reached the queue.
    pub fn count_dropped(&mut self, worker: WorkerId, lines: u64) {
        let got = self.received.entry(worker).or_default();
        got.dropped = got.dropped.saturating_add(lines);
        self.dropped = self.dropped.saturating_add(lines);
    }

    /// A worker ended having produced `produced` lines and dropped `dropped` itself, in
    /// all (its final counts): the lines it produced that never reached the parent died
    /// with it and are counted with the discarded ones (`lost_with_workers`), the drops
    /// it had not reported yet with the dropped ones. Returns the lines lost so.
    pub fn worker_ended(&mut self, worker: WorkerId, produced: u64, dropped: u64) -> u64 {
        let got = self.received.remove(&worker).unwrap_or_default();
        let lost = produced.saturating_sub(got.lines);
        self.discarded = self.discarded.saturating_add(lost);
        self.dropped = self
            .dropped
            .saturating_add(dropped.saturating_sub(got.dropped));
        lost
    }

    pub fn forget_worker(&mut self, worker: WorkerId) {
        let mut discarded = 0;
        self.blocked.retain(|(w, _, record)| {
            let keep = *w != worker;
            if !keep {
                discarded += lines(record);
            }
            keep
        });
        self.discarded += discarded;
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if self.records.len() > self.capacity {
            return Err(format!(
                "log queue holds {} > capacity {}",
                self.records.len(),
                self.capacity
            ));
        }
        if self.policy == LogPolicy::Drop && !self.blocked.is_empty() {
            return Err("blocked appends under the drop policy".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_reported_and_overfill_is_an_invariant_breach() {
        let mut q = LogQueue::new(2, LogPolicy::Drop);
        assert_eq!(q.capacity(), 2);
        assert!(q.check_invariants().is_ok());
        q.records.extend(["a".to_string(), "b".into(), "c".into()]);
        assert!(q.check_invariants().is_err());
        let mut q = LogQueue::new(1, LogPolicy::Drop);
        q.blocked.push_back((WorkerId(1), 1, "x".into()));
        assert!(
            q.check_invariants().is_err(),
            "nothing blocks under the drop policy"
        );
    }

    #[test]
    fn counts_are_in_lines_whatever_the_batching() {
        let mut q = LogQueue::new(1, LogPolicy::Drop);
        assert_eq!(
            q.append(WorkerId(1), 1, "a\nb\nc\n".into()),
            Some(BrokerReply::Logged)
        );
        assert_eq!(q.accepted(), 3);
        assert_eq!(
            q.append(WorkerId(1), 2, "d\ne\n".into()),
            Some(BrokerReply::LogDropped)
        );
        assert_eq!(q.dropped(), 2);
        q.count_dropped(WorkerId(1), 5);
        assert_eq!(q.dropped(), 7, "lines a worker dropped itself count too");
        assert_eq!(
            q.append(WorkerId(1), 3, "one record".into()),
            Some(BrokerReply::LogDropped)
        );
        assert_eq!(q.dropped(), 8, "a record without a newline is one line");
        let mut q = LogQueue::new(1, LogPolicy::Block);
        q.append(WorkerId(1), 1, "a\n".into());
        assert_eq!(q.append(WorkerId(2), 2, "b\nc\n".into()), None);
        q.forget_worker(WorkerId(2));
        assert_eq!(q.discarded(), 2);
    }

    #[test]
    fn a_workers_lines_it_never_sent_are_counted_lost_when_it_ends() {
        let mut q = LogQueue::new(4, LogPolicy::Drop);
        q.append(WorkerId(1), 1, "a\nb\n".into());
        q.append(WorkerId(2), 2, "c\n".into());
        q.count_dropped(WorkerId(1), 2);
        // Worker 1 produced 5 lines and dropped 3 itself: 3 never arrived, 1 drop was
        // not reported yet.
        assert_eq!(q.worker_ended(WorkerId(1), 5, 3), 3);
        assert_eq!(q.discarded(), 3, "lines that died with the worker");
        assert_eq!(q.dropped(), 3, "its unreported drop is counted");
        // Everything worker 2 produced arrived: nothing lost, and its own count is kept.
        assert_eq!(q.worker_ended(WorkerId(2), 1, 0), 0);
        assert_eq!(q.discarded(), 3);
        // A worker seen once is forgotten: a second report counts from nothing received.
        assert_eq!(q.worker_ended(WorkerId(1), 0, 0), 0);
        // A blocked record discarded with its worker counts once, not again as unsent.
        let mut q = LogQueue::new(1, LogPolicy::Block);
        q.append(WorkerId(1), 1, "a\n".into());
        assert_eq!(q.append(WorkerId(2), 2, "b\nc\n".into()), None);
        q.forget_worker(WorkerId(2));
        assert_eq!(q.worker_ended(WorkerId(2), 2, 0), 0);
        assert_eq!(q.discarded(), 2);
    }
}
