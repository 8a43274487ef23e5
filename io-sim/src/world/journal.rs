//! The lock journal's rules, judged after every step against the simulated disk
//! (decisions 0084 and 0091): the table never holds a lock, or a lock's time, that the
//! journal on disk does not; and once the disk has room again, the journal on disk holds
//! exactly the table within [`JOURNAL_RETRY`] (a removal the disk missed reaches it).

use core::time::Duration;

use servery_core::Instant;
use servery_core::parent::{JOURNAL_RETRY, Parent};

use super::SimWorld;

/// The journal's expiries are whole milliseconds of the table's.
const MILLISECOND: Duration = Duration::from_millis(1);

/// The retry's wakeup comes on the timer step right after an event step at the same
/// instant, never later (decision 0017's deadlines after a timer wakeup).
const RETRY_SLACK: Duration = Duration::from_millis(10);

impl SimWorld {
    pub(super) fn judge_journal(&mut self, now: Instant, parent: &Parent) {
        let Some(journal) = &self.journal else {
            return;
        };
        let dav = parent.broker().dav();
        let mut breaches = Vec::new();
        let mut ahead = Vec::new();
        let mut longer = Vec::new();
        for lock in dav.snapshot(now) {
            let table = dav.expiry(lock.token).unwrap_or(now);
            match journal.get(&lock.token) {
                None => ahead.push(lock.resource),
                Some(&on_disk) if on_disk + MILLISECOND < table => {
                    longer.push((lock.resource, table.saturating_since(on_disk)));
                }
                Some(_) => {}
            }
        }
        if !ahead.is_empty() {
            breaches.push(format!(
                "journal rule: the lock table holds locks on {ahead:?} that the journal on disk does not (the table ran ahead of the journal)"
            ));
        }
        if !longer.is_empty() {
            breaches.push(format!(
                "journal rule: the lock table promises locks longer than the journal on disk holds them (resource, time beyond the disk's): {longer:?}"
            ));
        }
        // Once the disk has room again, a retry brings it to the table.
        let had_room = self.disk_full_until > Instant::ZERO
            && now >= self.disk_full_until + JOURNAL_RETRY + RETRY_SLACK;
        if had_room {
            let live: Vec<_> = dav.snapshot(now).into_iter().map(|l| l.token).collect();
            let stale: Vec<_> = journal
                .iter()
                .filter(|(t, at)| **at > now && !live.contains(t))
                .map(|(t, _)| *t)
                .collect();
            if !stale.is_empty() {
                breaches.push(format!(
                    "journal retry rule: {} ms after the disk had room again, the journal on disk still holds {} lock(s) the table released",
                    now.saturating_since(self.disk_full_until).as_millis(),
                    stale.len()
                ));
            }
        }
        for breach in breaches {
            self.violation(breach);
        }
    }
}
