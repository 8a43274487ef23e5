//! The WebDAV lock journal's rule (issue 34; decisions 0040 and 0084): **the lock table
//! never runs ahead of the journal.** A lock is answered only once the journal that holds
//! it is on disk; when the driver cannot write it (a full disk, an I/O error), the locks
//! the journal on disk does not hold yet were promised nothing: their grants become
//! refusals (`Saturated`, which a worker answers 503) and they leave the table, so a
//! restart loses no lock a client was given.
//!
//! The driver only writes and reports how the write went ([`JournalWrite`], through
//! [`crate::driver::ParentIo::persist_dav_locks`]); which locks that refuses, and what
//! becomes of their answers, is decided here, before any of those answers leaves the
//! parent's queue.

use std::collections::{BTreeSet, VecDeque};

use super::{Action, Parent, ParentAction, ParentMessage};
use crate::LeaseId;
use crate::proto::{BrokerReply, DavLockInfo, Rejection};

/// How the driver's write of a journal ([`ParentAction::PersistDavLocks`]) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalWrite {
    /// The journal is on disk (written, synced and renamed into place).
    Written,
    /// It is not: the last journal written is what the disk holds.
    Failed,
}

/// What the parent knows of the journal on disk.
#[derive(Debug, Clone, Default)]
pub(super) struct JournalState {
    /// The locks the journal on disk holds: as last written, or as restored from it.
    on_disk: BTreeSet<LeaseId>,
    /// The locks of each journal handed to the driver whose outcome has not come back,
    /// oldest first (a step may queue one, and several steps may run before the driver
    /// carries their actions out).
    writing: VecDeque<BTreeSet<LeaseId>>,
}

impl JournalState {
    /// A journal `locks` goes to the driver.
    pub(super) fn handed_out(&mut self, locks: &[DavLockInfo]) {
        self.writing
            .push_back(locks.iter().map(|l| l.token).collect());
    }

    /// The journal the parent started from holds `tokens`.
    pub(super) fn restored(&mut self, tokens: impl IntoIterator<Item = LeaseId>) {
        self.on_disk = tokens.into_iter().collect();
    }
}

impl Parent {
    /// The driver's outcome for the oldest journal it was handed. `Written`: the disk
    /// holds that journal now. `Failed`: every lock in it the disk does not hold is
    /// refused: dropped from the table (which then holds no more than the disk), its
    /// grant still in the queue turned into a refusal, and taken out of any later journal
    /// still queued. Returns the refused locks, for the driver's log.
    pub fn dav_journal_written(&mut self, outcome: JournalWrite) -> Vec<LeaseId> {
        let Some(writing) = self.journal.writing.pop_front() else {
            return Vec::new();
        };
        if outcome == JournalWrite::Written {
            self.journal.on_disk = writing;
            return Vec::new();
        }
        let refused: BTreeSet<LeaseId> =
            writing.difference(&self.journal.on_disk).copied().collect();
        if refused.is_empty() {
            return Vec::new();
        }
        for token in &refused {
            self.broker.forget_dav_lock(*token);
        }
        for action in &mut self.actions {
            match action {
                ParentAction::Supervisor(Action::Send {
                    message: ParentMessage::Broker { reply, .. },
                    ..
                }) => {
                    if let BrokerReply::Granted { id, .. } = reply
                        && refused.contains(id)
                    {
                        *reply = BrokerReply::Rejected(Rejection::Saturated);
                    }
                }
                ParentAction::PersistDavLocks(locks) => {
                    locks.retain(|l| !refused.contains(&l.token));
                }
                _ => {}
            }
        }
        for later in &mut self.journal.writing {
            later.retain(|t| !refused.contains(t));
        }
        self.settle();
        refused.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{actions, dav, lock_request, started};
    use super::*;
    use crate::Instant;
    use crate::proto::BrokerRequest;
    use core::time::Duration;

    fn persistent() -> (Parent, crate::ids::WorkerId) {
        started(|r| {
            r.features.webdav = true;
            r.features.dav_persistent_locks = true;
        })
    }

    /// The answer to request `id` in `acts`.
    fn reply_to(acts: &[ParentAction], id: u64) -> Option<BrokerReply> {
        acts.iter().find_map(|a| match a {
            ParentAction::Supervisor(Action::Send {
                message: ParentMessage::Broker { id: i, reply },
                ..
            }) if *i == id => Some(reply.clone()),
            _ => None,
        })
    }

    /// Carries the queued actions out as the driver loop does, the journal's writes going
    /// as `outcome` says; returns what else was carried out.
    fn carry_out(p: &mut Parent, outcome: JournalWrite) -> Vec<ParentAction> {
        let mut done = Vec::new();
        while let Some(action) = p.poll_action() {
            if let ParentAction::PersistDavLocks(_) = action {
                p.dav_journal_written(outcome);
            } else {
                done.push(action);
            }
        }
        done
    }

    /// The case: a full disk under the journal. The lock that could not be
    /// journalled is refused and gone from the table; the one already on disk stays
    /// granted; once the disk has room again, locks are granted and journalled as before.
    #[test]
    fn a_lock_the_journal_cannot_hold_is_refused_and_the_table_never_runs_ahead_of_it() {
        let (mut p, w) = persistent();
        let t = Instant::ZERO;
        dav(&mut p, w, t, 1, lock_request("/kept", 60_000));
        let done = carry_out(&mut p, JournalWrite::Written);
        let Some(BrokerReply::Granted { id: kept, .. }) = reply_to(&done, 1) else {
            panic!("journalled, so granted: {done:?}");
        };

        dav(&mut p, w, t, 2, lock_request("/refused", 60_000));
        let done = carry_out(&mut p, JournalWrite::Failed);
        assert_eq!(
            reply_to(&done, 2),
            Some(BrokerReply::Rejected(Rejection::Saturated)),
            "journal rule: a lock the journal could not hold was granted: {done:?}"
        );
        let table: Vec<String> = p
            .broker()
            .dav()
            .snapshot(t)
            .into_iter()
            .map(|l| l.resource)
            .collect();
        assert_eq!(
            table,
            ["/kept"],
            "journal rule: the table runs ahead of the journal on disk"
        );
        assert!(p.broker().dav().contains(kept));
        p.check_invariants().expect("invariants");
        // Dropping it is no change to journal: nothing more is written.
        dav(
            &mut p,
            w,
            t,
            3,
            BrokerRequest::DavQuery {
                resource: "/".into(),
            },
        );
        assert!(
            !actions(&mut p)
                .iter()
                .any(|a| matches!(a, ParentAction::PersistDavLocks(_)))
        );

        // Room again: the same resource locks, and the journal holds both.
        dav(&mut p, w, t, 4, lock_request("/refused", 60_000));
        let mut journal = None;
        while let Some(action) = p.poll_action() {
            match action {
                ParentAction::PersistDavLocks(locks) => {
                    journal = Some(locks.len());
                    p.dav_journal_written(JournalWrite::Written);
                }
                other => {
                    let got = reply_to(&[other], 4);
                    assert!(matches!(got, Some(BrokerReply::Granted { .. })), "{got:?}");
                }
            }
        }
        assert_eq!(journal, Some(2));
    }

    /// Two steps queue two journals before the driver carries either out: the first
    /// fails, so its new lock is refused, and the second (which held it too) goes out
    /// without it, so a restart cannot bring back a lock nobody was given.
    #[test]
    fn a_refused_lock_leaves_the_journals_queued_behind_the_failed_one() {
        let (mut p, w) = persistent();
        let t = Instant::ZERO;
        dav(&mut p, w, t, 1, lock_request("/a", 60_000));
        dav(&mut p, w, t, 2, lock_request("/b", 60_000));
        let mut journals = Vec::new();
        let mut outcomes = [JournalWrite::Failed, JournalWrite::Written].into_iter();
        let mut replies = Vec::new();
        while let Some(action) = p.poll_action() {
            match action {
                ParentAction::PersistDavLocks(locks) => {
                    journals.push(locks.iter().map(|l| l.resource.clone()).collect::<Vec<_>>());
                    p.dav_journal_written(outcomes.next().expect("two journals"));
                }
                other => replies.push(other),
            }
        }
        assert_eq!(
            journals,
            [vec!["/a".to_owned()], vec!["/b".to_owned()]],
            "journal rule: a lock refused after a failed write went out in a later journal"
        );
        assert_eq!(
            reply_to(&replies, 1),
            Some(BrokerReply::Rejected(Rejection::Saturated))
        );
        assert!(matches!(
            reply_to(&replies, 2),
            Some(BrokerReply::Granted { .. })
        ));
        assert_eq!(p.broker().dav().len(), 1);
    }

    /// Locks restored from the journal are on disk: a failed write refuses none of them.
    #[test]
    fn restored_locks_are_on_disk_and_survive_a_failed_write() {
        let (mut first, w) = persistent();
        dav(
            &mut first,
            w,
            Instant::ZERO,
            1,
            lock_request("/old", 60_000),
        );
        let journal = actions(&mut first)
            .into_iter()
            .find_map(|a| match a {
                ParentAction::PersistDavLocks(locks) => Some(locks),
                _ => None,
            })
            .expect("a journal");
        let (mut p, w) = persistent();
        assert_eq!(p.restore_dav_locks(Instant::ZERO, journal).restored, 1);
        dav(&mut p, w, Instant::ZERO, 2, lock_request("/new", 60_000));
        let done = carry_out(&mut p, JournalWrite::Failed);
        assert_eq!(
            reply_to(&done, 2),
            Some(BrokerReply::Rejected(Rejection::Saturated)),
            "journal rule: a lock the journal could not hold was granted"
        );
        let left: Vec<String> = p
            .broker()
            .dav()
            .snapshot(Instant::ZERO)
            .into_iter()
            .map(|l| l.resource)
            .collect();
        assert_eq!(
            left,
            ["/old"],
            "journal rule: a restored lock is on disk, and a failed write keeps it"
        );
    }

    #[test]
    fn the_lock_journal_goes_out_before_the_answer_and_a_restart_restores_it() {
        let (mut p, w) = started(|r| {
            r.features.webdav = true;
            r.features.dav_persistent_locks = true;
        });
        dav(&mut p, w, Instant::ZERO, 7, lock_request("/a", 10_000));
        let acts = actions(&mut p);
        let [
            ParentAction::PersistDavLocks(journal),
            ParentAction::Supervisor(Action::Send { .. }),
        ] = &acts[..]
        else {
            panic!("journal, then the answer: {acts:?}");
        };
        assert_eq!(journal.len(), 1);
        assert_eq!(journal[0].expires_in_ms, 10_000);
        // A query changes nothing: no journal.
        dav(
            &mut p,
            w,
            Instant::ZERO,
            8,
            BrokerRequest::DavQuery {
                resource: "/".into(),
            },
        );
        assert!(matches!(
            &actions(&mut p)[..],
            [ParentAction::Supervisor(_)]
        ));
        // Expiry is a change too.
        p.handle_timeout(Instant::ZERO + Duration::from_secs(10));
        assert!(
            actions(&mut p)
                .iter()
                .any(|a| matches!(a, ParentAction::PersistDavLocks(l) if l.is_empty()))
        );

        // A new parent takes the journal back: the lock holds, with its time left.
        let (mut again, w2) = started(|r| {
            r.features.webdav = true;
            r.features.dav_persistent_locks = true;
        });
        let mut left = journal.clone();
        left[0].expires_in_ms = 4_000;
        assert_eq!(again.restore_dav_locks(Instant::ZERO, left).restored, 1);
        dav(&mut again, w2, Instant::ZERO, 1, lock_request("/a", 1_000));
        assert!(actions(&mut again).iter().any(|a| matches!(
            a,
            ParentAction::Supervisor(Action::Send {
                message: ParentMessage::Broker {
                    reply: crate::proto::BrokerReply::Rejected(crate::proto::Rejection::Busy),
                    ..
                },
                ..
            })
        )));
        again.handle_timeout(Instant::ZERO + Duration::from_secs(4));
        assert_eq!(
            again.broker().dav().len(),
            0,
            "it ends when its time left runs out"
        );
    }

    #[test]
    fn without_persistence_no_journal_is_kept() {
        let (mut p, w) = started(|r| r.features.webdav = true);
        dav(&mut p, w, Instant::ZERO, 7, lock_request("/a", 10_000));
        assert!(
            !actions(&mut p)
                .iter()
                .any(|a| matches!(a, ParentAction::PersistDavLocks(_)))
        );
    }
}
