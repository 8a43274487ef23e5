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

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{Action, Parent, ParentAction, ParentMessage};
use crate::Instant;
use crate::LeaseId;
use crate::proto::{BrokerReply, Rejection};

/// How long after a failed write the journal is written again when nothing else changes
/// the table meanwhile: an UNLOCK or an expiry the disk does not hold yet is brought to
/// it within this of the disk having room again.
pub const JOURNAL_RETRY: Duration = Duration::from_secs(1);

/// How the driver's write of a journal ([`ParentAction::PersistDavLocks`]) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalWrite {
    /// The journal is on disk (written, synced and renamed into place).
    Written,
    /// It is not: the last journal written is what the disk holds.
    Failed,
}

/// The locks of one journal: each token with the expiry the journal gives it.
type Journal = BTreeMap<LeaseId, Instant>;

/// What the parent knows of the journal on disk.
#[derive(Debug, Clone, Default)]
pub(super) struct JournalState {
    /// The locks the journal on disk holds, with their expiries: as last written, or as
    /// restored from it.
    on_disk: Journal,
    /// The locks of each journal handed to the driver whose outcome has not come back,
    /// oldest first (a step may queue one, and several steps may run before the driver
    /// carries their actions out).
    writing: VecDeque<Journal>,
    /// When to write the journal again after a failure, if no change writes it first.
    retry_at: Option<Instant>,
    /// The retry is due: the next pass writes the journal whatever changed.
    retry_due: bool,
}

impl JournalState {
    /// A journal holding `locks` (token and exact expiry) goes to the driver.
    pub(super) fn handed_out(&mut self, locks: impl IntoIterator<Item = (LeaseId, Instant)>) {
        self.writing.push_back(locks.into_iter().collect());
    }

    /// The journal the parent started from holds `locks`.
    pub(super) fn restored(&mut self, locks: impl IntoIterator<Item = (LeaseId, Instant)>) {
        self.on_disk = locks.into_iter().collect();
    }

    /// The retry's deadline, for the parent's next wakeup.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.retry_at
    }

    /// A wakeup at `now`: the retry is due if its time has come.
    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
            self.retry_due = true;
        }
    }

    /// Whether a retry is due (and clears it: the caller writes the journal now).
    pub(super) fn take_retry_due(&mut self) -> bool {
        std::mem::take(&mut self.retry_due)
    }
}

impl Parent {
    /// The driver's outcome for the oldest journal it was handed. `Written`: the disk
    /// holds that journal now. `Failed`: the table is brought back to what the disk holds
    /// and what the journal would have promised is refused: every new lock in it is
    /// dropped from the table, and every refresh in it set back to the expiry on disk,
    /// their answers still in the queue turned into refusals (a worker answers 503), new
    /// locks taken out of any later journal still queued; and the journal is written
    /// again [`JOURNAL_RETRY`] later (or at the next change), so a removal the disk does
    /// not hold yet (an UNLOCK, an expiry) reaches it once the disk has room. Returns the
    /// refused locks, for the driver's log.
    pub fn dav_journal_written(&mut self, outcome: JournalWrite) -> Vec<LeaseId> {
        let Some(writing) = self.journal.writing.pop_front() else {
            return Vec::new();
        };
        if outcome == JournalWrite::Written {
            self.journal.on_disk = writing;
            self.journal.retry_at = None;
            self.settle();
            return Vec::new();
        }
        let now = self.last_step.unwrap_or(Instant::ZERO);
        self.journal.retry_at = Some(now + JOURNAL_RETRY);
        let refused: BTreeSet<LeaseId> = writing
            .keys()
            .filter(|t| !self.journal.on_disk.contains_key(t))
            .copied()
            .collect();
        // Refreshes: on disk, but with another expiry in the journal that failed.
        let refreshed: Vec<(LeaseId, Instant)> = writing
            .iter()
            .filter_map(|(t, at)| {
                let on_disk = *self.journal.on_disk.get(t)?;
                (on_disk != *at).then_some((*t, on_disk))
            })
            .collect();
        for token in &refused {
            self.broker.forget_dav_lock(*token);
        }
        for (token, on_disk) in &refreshed {
            self.broker.revert_dav_expiry(*token, *on_disk);
        }
        let unpromised =
            |id: &LeaseId| refused.contains(id) || refreshed.iter().any(|(t, _)| t == id);
        for action in &mut self.actions {
            match action {
                ParentAction::Supervisor(Action::Send {
                    message: ParentMessage::Broker { reply, .. },
                    ..
                }) => {
                    if let BrokerReply::Granted { id, .. } = reply
                        && unpromised(id)
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
            later.retain(|t, _| !refused.contains(t));
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
    /// The resources the broker's lock table holds at `now`.
    fn locked_resources(p: &Parent, now: Instant) -> Vec<String> {
        p.broker()
            .dav()
            .snapshot(now)
            .into_iter()
            .map(|l| l.resource)
            .collect()
    }

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
        let table = locked_resources(&p, t);
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
        // The disk holds the second journal's `/b` now: the next failed write refuses
        // only what is new since, and `/b` stays granted.
        dav(&mut p, w, t, 3, lock_request("/c", 60_000));
        let done = carry_out(&mut p, JournalWrite::Failed);
        assert_eq!(
            reply_to(&done, 3),
            Some(BrokerReply::Rejected(Rejection::Saturated))
        );
        let table = locked_resources(&p, t);
        assert_eq!(
            table,
            ["/b"],
            "journal rule: a later journal, once written, is what the disk holds (less the locks refused before it)"
        );
    }

    /// A refresh whose journal cannot be written promised a time the disk does not hold:
    /// it is refused and the lock's expiry set back to the disk's, so a restart finds the
    /// lock with exactly the time its holder was last given.
    #[test]
    fn a_refresh_the_journal_cannot_hold_is_refused_and_set_back() {
        let (mut p, w) = persistent();
        let t = Instant::ZERO;
        dav(&mut p, w, t, 1, lock_request("/a", 10_000));
        let done = carry_out(&mut p, JournalWrite::Written);
        let Some(BrokerReply::Granted { id: token, .. }) = reply_to(&done, 1) else {
            panic!("journalled, so granted: {done:?}");
        };
        let promised = p.broker().dav().expiry(token).expect("in the table");
        let later = t + Duration::from_secs(5);
        dav(
            &mut p,
            w,
            later,
            2,
            BrokerRequest::DavRefresh {
                token,
                timeout_ms: 60_000,
            },
        );
        let done = carry_out(&mut p, JournalWrite::Failed);
        assert_eq!(
            reply_to(&done, 2),
            Some(BrokerReply::Rejected(Rejection::Saturated)),
            "journal rule: a refresh the journal could not hold was granted"
        );
        assert_eq!(
            p.broker().dav().expiry(token),
            Some(promised),
            "journal rule: the table keeps a refreshed expiry the journal on disk does not hold"
        );
        // The lock still expires when the disk says, and nothing is left armed twice.
        p.handle_timeout(promised);
        assert!(
            !p.broker().dav().contains(token),
            "expired at the disk's time"
        );
        p.check_invariants().expect("invariants");
    }

    /// An UNLOCK whose journal cannot be written is answered (the lock is gone from the
    /// table), and the journal is written again JOURNAL_RETRY later with nothing else
    /// changing, so the disk stops holding a released lock once it has room.
    #[test]
    fn a_failed_journal_is_written_again_after_the_retry_delay() {
        let (mut p, w) = persistent();
        let t = Instant::ZERO;
        dav(&mut p, w, t, 1, lock_request("/a", 60_000));
        let done = carry_out(&mut p, JournalWrite::Written);
        let Some(BrokerReply::Granted { id: token, .. }) = reply_to(&done, 1) else {
            panic!("journalled, so granted: {done:?}");
        };
        dav(&mut p, w, t, 2, BrokerRequest::DavUnlock { token });
        let done = carry_out(&mut p, JournalWrite::Failed);
        assert_eq!(reply_to(&done, 2), Some(BrokerReply::Released));
        assert_eq!(
            p.poll_timeout(),
            Some(t + JOURNAL_RETRY),
            "journal retry rule: no wakeup armed to write the failed journal again"
        );
        // Still full at the first retry: another one is armed.
        p.handle_timeout(t + JOURNAL_RETRY);
        let mut journals = Vec::new();
        while let Some(action) = p.poll_action() {
            if let ParentAction::PersistDavLocks(locks) = action {
                journals.push(locks.len());
                p.dav_journal_written(JournalWrite::Failed);
            }
        }
        assert_eq!(
            journals,
            [0],
            "journal retry rule: the journal was not written again"
        );
        let second = t + JOURNAL_RETRY * 2;
        assert_eq!(p.poll_timeout(), Some(second));
        p.handle_timeout(second);
        let mut written = Vec::new();
        while let Some(action) = p.poll_action() {
            if let ParentAction::PersistDavLocks(locks) = action {
                written.push(locks.len());
                p.dav_journal_written(JournalWrite::Written);
            }
        }
        assert_eq!(written, [0]);
        // On disk now: nothing more to retry.
        assert_ne!(p.poll_timeout(), Some(second + JOURNAL_RETRY));
        p.handle_timeout(second + JOURNAL_RETRY);
        assert!(
            !actions(&mut p)
                .iter()
                .any(|a| matches!(a, ParentAction::PersistDavLocks(_))),
            "a journal on disk is not written again"
        );
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
