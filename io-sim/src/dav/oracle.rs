//! The oracle of the simulation's WebDAV: what the parent decided about each lock request
//! it read (the answers on the control channels), and which granted locks the broker's
//! table still holds after every step; and, at the end of the run, every request's lock
//! decision judged against that record of the table by RFC 4918's rules, written here
//! apart from the core's (`guards`, `lock_applies`): a write let through while a live
//! lock protected what it changes without its token, one refused though every lock had
//! its token or had ended, an `If` header held or failed against the lock it names, the
//! lock a refresh extended or an UNLOCK removed, the locks PROPFIND shows, what a LOCK
//! conflict and a read-only share answer. Each breach is a violation naming its rule.

use servery_core::parent::Parent;
use servery_core::proto::{BrokerReply, Rejection};
use servery_core::{Instant, WorkerId};

use super::{Wire, ns};
use crate::labels;
use crate::outcome::{
    DavAnswer, DavEnd, DavIf, DavLockDecision, DavLockRecord, DavOp, DavOutcome, DavRecord,
};
use crate::world::SimWorld;

/// What a write changes, in the oracle's own terms (RFC 4918 §7.4, §9.7, §9.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reach {
    /// It may add or remove the resource as a member of its collection.
    member: bool,
    /// It changes the resource's whole tree.
    tree: bool,
}

/// Only the resource's content or properties (PROPPATCH).
pub(super) const CONTENT: Reach = Reach {
    member: false,
    tree: false,
};
/// Its collection's membership too (PUT, MKCOL, a LOCK that creates the resource).
pub(super) const MEMBER: Reach = Reach {
    member: true,
    tree: false,
};
/// Membership and everything below (DELETE, MOVE's source, COPY's and MOVE's destination).
pub(super) const TREE: Reach = Reach {
    member: true,
    tree: true,
};

/// Whether `path` is `ancestor` or below it.
pub(super) fn under(ancestor: &str, path: &str) -> bool {
    ancestor == path
        || ancestor == "/"
        || path
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The collection `path` is a member of; none for the root.
pub(super) fn collection_of(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/')? {
        0 => Some("/"),
        i => Some(&path[..i]),
    }
}

/// Whether a lock rooted at `root` applies to `resource`: rooted there, or above it with
/// depth infinity (RFC 4918 §6.1, §7.5).
pub(super) fn lock_applies(root: &str, infinity: bool, resource: &str) -> bool {
    root == resource || (infinity && under(root, resource))
}

/// Whether a lock rooted at `root` protects what a write of `resource` with this reach
/// changes: it applies to the resource; with the tree, it is rooted below it; with the
/// membership, it is rooted at the resource's collection (of any depth).
pub(super) fn guards(root: &str, infinity: bool, resource: &str, reach: Reach) -> bool {
    lock_applies(root, infinity, resource)
        || (reach.tree && under(resource, root))
        || (reach.member && collection_of(resource) == Some(root))
}

/// Whether a lock was in force for the broker all through a request's questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    Yes,
    No,
    /// It began or ended while the request was asking: the broker may have seen either.
    Unsure,
}

/// The broker's clock and the oracle's may read a lock's end a little apart.
const MARGIN_NS: u64 = 2_000_000;

/// Whether the lock was in the broker's table and unexpired from `from` (the request's
/// first question) to `to` (its last answer). A lock is there from its grant until it
/// leaves the table, without a gap; a refresh moves only its end.
fn live(l: &DavLockRecord, from: u64, to: u64) -> Live {
    let gone_before = l.gone_ns.is_some_and(|g| g < from);
    if l.granted_ns > to || gone_before || l.promised_end_ns + MARGIN_NS <= from {
        Live::No
    } else if l.granted_ns <= from && l.last_seen_ns >= to && l.promised_end_ns > to + MARGIN_NS {
        Live::Yes
    } else {
        Live::Unsure
    }
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn lock_name(l: &DavLockRecord) -> String {
    format!(
        "the lock on {} (depth {}, {}), granted at {} ms until {} ms",
        l.resource,
        if l.depth_infinity { "infinity" } else { "0" },
        if l.exclusive { "exclusive" } else { "shared" },
        ms(l.granted_ns),
        ms(l.promised_end_ns)
    )
}

fn method(op: DavOp) -> &'static str {
    match op {
        DavOp::Lock { .. } => "LOCK",
        DavOp::Refresh { .. } => "refresh",
        DavOp::Unlock => "UNLOCK",
        DavOp::Put => "PUT",
        DavOp::Delete => "DELETE",
        DavOp::Copy { .. } => "COPY",
        DavOp::Move { .. } => "MOVE",
        DavOp::Mkcol => "MKCOL",
        DavOp::Proppatch => "PROPPATCH",
        DavOp::Propfind => "PROPFIND",
    }
}

/// "a MOVE of /d to /g with the token of the lock on /d/a (tagged If) through w3 …".
fn describe(r: &DavRecord, locks: &[DavLockRecord]) -> String {
    let target = match r.op {
        DavOp::Copy { to } | DavOp::Move { to } => format!(" to {to}"),
        _ => String::new(),
    };
    let root = |t: u128| {
        let found = locks.iter().find(|l| l.token == t);
        found.map_or("an unknown lock".to_owned(), |l| {
            format!("the lock on {}", l.resource)
        })
    };
    let token = match (r.token, r.if_header) {
        (_, DavIf::Malformed) => "with an If header that does not parse".to_owned(),
        (Some(t), DavIf::Untagged) => format!("with the token of {} in an untagged If", root(t)),
        (Some(t), _) => format!("with the token of {}", root(t)),
        (None, _) => "without a token".to_owned(),
    };
    format!(
        "{} {} of {}{target} {token} through w{} (generation {}), asked at {} ms",
        if r.op == DavOp::Unlock { "an" } else { "a" },
        method(r.op),
        r.resource,
        r.worker.unwrap_or_default(),
        r.generation,
        ms(r.asked_ns)
    )
}

/// What a write reaches, the oracle's reading of each method (RFC 4918 §9.2, §9.3, §9.6–
/// §9.10): `None` for requests that write nothing.
fn reaches(r: &DavRecord) -> Option<Vec<(&str, Reach)>> {
    let own = r.resource.as_str();
    Some(match r.op {
        DavOp::Put | DavOp::Mkcol => vec![(own, MEMBER)],
        DavOp::Lock { .. } if !super::checked::mapped(own) => vec![(own, MEMBER)],
        DavOp::Delete => vec![(own, TREE)],
        DavOp::Copy { to } => vec![(to, TREE)],
        DavOp::Move { to } => vec![(own, TREE), (to, TREE)],
        DavOp::Proppatch => vec![(own, CONTENT)],
        DavOp::Lock { .. } | DavOp::Refresh { .. } | DavOp::Unlock | DavOp::Propfind => {
            return None;
        }
    })
}

/// Every breach of a lock rule in the run's WebDAV requests.
pub(super) fn lock_rule_breaches(dav: &DavOutcome) -> Vec<String> {
    dav.log.iter().filter_map(|r| judge(dav, r).err()).collect()
}

fn judge(dav: &DavOutcome, r: &DavRecord) -> Result<(), String> {
    let Some(end) = r.end else { return Ok(()) };
    // Ends that say nothing about a lock decision: the request was lost with its worker,
    // refused at the door, or the broker could not be asked.
    if matches!(
        end,
        DavEnd::Lost
            | DavEnd::Refused
            | DavEnd::FailedClosed
            | DavEnd::ClientBusy
            | DavEnd::Saturated
    ) {
        return Ok(());
    }
    let what = || describe(r, &dav.locks);
    let writes = reaches(r);
    if dav.read_only && writes.is_some() {
        if end != DavEnd::ReadOnly {
            return Err(format!(
                "read-only rule: {} on a read-only share ended {end:?}; a read-only share \
                 takes no writes, a LOCK of an unmapped URL included, since it creates the \
                 resource (403)",
                what()
            ));
        }
        return Ok(());
    }
    if r.if_header == DavIf::Malformed {
        if end != DavEnd::BadIf {
            return Err(format!(
                "If syntax rule (RFC 4918 §10.4): {} ended {end:?}; a malformed If header \
                 is refused with 400",
                what()
            ));
        }
        return Ok(());
    }
    match r.op {
        DavOp::Lock { .. } if r.lock_answer == Some(DavAnswer::Busy) && end != DavEnd::Conflict => {
            Err(format!(
                "LOCK conflict rule (RFC 4918 §9.10.6): {}, which the broker refused for a \
                 conflicting lock, ended {end:?}; a conflict is 423 no-conflicting-lock",
                what()
            ))
        }
        DavOp::Refresh { .. } => judge_refresh(dav, r, end),
        DavOp::Unlock => judge_unlock(dav, r, end),
        DavOp::Propfind => judge_discovery(dav, r),
        _ => match writes {
            Some(parts) => judge_write(dav, r, end, &parts),
            None => Ok(()),
        },
    }
}

/// Whether the request's `If` header held for the broker: the lock whose token it names
/// applies to the resource it is about (its tag, or the request's own) and was live.
fn if_holds(dav: &DavOutcome, r: &DavRecord) -> (Live, String) {
    let about = match r.if_header {
        DavIf::None => return (Live::Yes, String::new()),
        DavIf::Malformed => return (Live::No, "it does not parse".to_owned()),
        DavIf::Tagged => r.lock_root.unwrap_or(r.resource.as_str()),
        DavIf::Untagged => r.resource.as_str(),
    };
    let Some(l) = r
        .token
        .and_then(|t| dav.locks.iter().find(|l| l.token == t))
    else {
        return (Live::No, "its token is no lock's".to_owned());
    };
    if !lock_applies(&l.resource, l.depth_infinity, about) {
        let why = format!("{} does not apply to {about}", lock_name(l));
        return (Live::No, why);
    }
    let state = live(l, r.asked_ns, r.answered_ns);
    (
        state,
        format!(
            "{} was {}live",
            lock_name(l),
            if state == Live::No { "not " } else { "" }
        ),
    )
}

/// A write's lock decision: refused (412) when its `If` is false; else refused (423)
/// while a live lock protects what it reaches and no lock of that root had its token
/// submitted; let through when every such lock had its token or had ended.
fn judge_write(
    dav: &DavOutcome,
    r: &DavRecord,
    end: DavEnd,
    parts: &[(&str, Reach)],
) -> Result<(), String> {
    let Some(allowed) = r.allowed else {
        return Ok(());
    };
    let (from, to) = (r.asked_ns, r.answered_ns);
    let (holds, why) = if_holds(dav, r);
    match holds {
        Live::Unsure => return Ok(()),
        Live::No if allowed || end != DavEnd::PreconditionFailed => {
            return Err(format!(
                "If rule (RFC 4918 §10.4): {} ended {end:?} at {} ms ({}), but its If header \
                 is false: {why}; a false If is a 412",
                what_of(dav, r),
                ms(to),
                if allowed { "let through" } else { "refused" }
            ));
        }
        Live::No => return Ok(()),
        Live::Yes if end == DavEnd::PreconditionFailed => {
            return Err(format!(
                "If rule (RFC 4918 §10.4): {} was refused with 412 at {} ms, but its If \
                 header holds: {why}",
                what_of(dav, r),
                ms(to)
            ));
        }
        Live::Yes => {}
    }
    let submitted = match r.if_header {
        DavIf::None | DavIf::Malformed => None,
        DavIf::Tagged | DavIf::Untagged => r
            .token
            .and_then(|t| dav.locks.iter().find(|l| l.token == t)),
    };
    let mut blocking = None;
    let mut unsure = false;
    for &(at, reach) in parts {
        let protecting = dav
            .locks
            .iter()
            .filter(|l| guards(&l.resource, l.depth_infinity, at, reach));
        for l in protecting {
            // One submitted token per lock root, of a lock that protects it too.
            let satisfied = submitted.is_some_and(|t| {
                t.resource == l.resource && guards(&t.resource, t.depth_infinity, at, reach)
            });
            if satisfied {
                continue;
            }
            match live(l, from, to) {
                Live::Yes if blocking.is_none() => blocking = Some((l, at)),
                Live::Yes => {}
                Live::Unsure => unsure = true,
                Live::No => {}
            }
        }
    }
    match blocking {
        Some((l, at)) if allowed => Err(format!(
            "lock rule (RFC 4918 §7.4): {} was let through at {} ms while {} protected {at} \
             and its token was not submitted",
            what_of(dav, r),
            ms(to),
            lock_name(l)
        )),
        Some((l, at)) if end != DavEnd::Locked => Err(format!(
            "lock rule (RFC 4918 §7.4): {} ended {end:?} at {} ms; {} protected {at} without \
             its token, which is 423",
            what_of(dav, r),
            ms(to),
            lock_name(l)
        )),
        Some(_) => Ok(()),
        // Locks the oracle saw no grant of would refuse it rightly.
        None if !allowed && !unsure && dav.untracked.is_empty() => Err(format!(
            "lock rule (RFC 4918 §7.4): {} was refused ({end:?}) at {} ms, though every lock \
             protecting what it changes had its token submitted or had ended",
            what_of(dav, r),
            ms(to)
        )),
        None => Ok(()),
    }
}

fn what_of(dav: &DavOutcome, r: &DavRecord) -> String {
    describe(r, &dav.locks)
}

/// A refresh extends the lock whose token its `If` submits, only that one, and only if
/// that lock applies to the resource (RFC 4918 §9.10.2).
fn judge_refresh(dav: &DavOutcome, r: &DavRecord, end: DavEnd) -> Result<(), String> {
    if end == DavEnd::Refreshed && r.acted_on != r.token {
        let other = r
            .acted_on
            .and_then(|t| dav.locks.iter().find(|l| l.token == t));
        return Err(format!(
            "refresh rule (RFC 4918 §9.10.2): {} extended {}, not the lock whose token it \
             submitted",
            what_of(dav, r),
            other.map_or("no lock anyone was granted".to_owned(), lock_name)
        ));
    }
    let (holds, why) = if_holds(dav, r);
    match (holds, end) {
        (Live::No, DavEnd::Refreshed) => Err(format!(
            "If rule (RFC 4918 §10.4): {} was refreshed, but its If header is false: {why}",
            what_of(dav, r)
        )),
        (Live::Yes, DavEnd::PreconditionFailed | DavEnd::NoSuchLock) => Err(format!(
            "refresh rule (RFC 4918 §9.10.2): {} ended {end:?}, but its If header holds \
             and submits the lock's token: {why}",
            what_of(dav, r)
        )),
        _ => Ok(()),
    }
}

/// An UNLOCK removes the lock its `Lock-Token` names, and only if that lock applies to
/// the request's resource (RFC 4918 §9.11: else 409).
fn judge_unlock(dav: &DavOutcome, r: &DavRecord, end: DavEnd) -> Result<(), String> {
    if end != DavEnd::Unlocked {
        return Ok(());
    }
    let named = r
        .token
        .and_then(|t| dav.locks.iter().find(|l| l.token == t));
    let removed = r
        .acted_on
        .and_then(|t| dav.locks.iter().find(|l| l.token == t));
    match (named, removed) {
        (Some(named), Some(removed)) if named.token != removed.token => Err(format!(
            "UNLOCK rule (RFC 4918 §9.11): {} removed {}, not {}, whose token it names",
            what_of(dav, r),
            lock_name(removed),
            lock_name(named)
        )),
        (Some(named), _) if !lock_applies(&named.resource, named.depth_infinity, &r.resource) => {
            Err(format!(
                "UNLOCK rule (RFC 4918 §9.11): {} removed {}, which does not apply to {}; \
                 that is a 409",
                what_of(dav, r),
                lock_name(named),
                r.resource
            ))
        }
        _ => Ok(()),
    }
}

/// `lockdiscovery` of each member a PROPFIND lists shows exactly the live locks that
/// apply to it (RFC 4918 §15.8): none that does not apply, none that had ended, and every
/// one in force all through.
fn judge_discovery(dav: &DavOutcome, r: &DavRecord) -> Result<(), String> {
    let (from, to) = (r.asked_ns, r.answered_ns);
    for (member, shown) in &r.discovered {
        for token in shown {
            let Some(l) = dav.locks.iter().find(|l| l.token == *token) else {
                return Err(format!(
                    "lockdiscovery rule (RFC 4918 §15.8): {} showed a lock on {member} that \
                     nobody was granted",
                    what_of(dav, r)
                ));
            };
            if !lock_applies(&l.resource, l.depth_infinity, member) {
                return Err(format!(
                    "lockdiscovery rule (RFC 4918 §15.8): {} showed {} on {member}, which it \
                     does not apply to",
                    what_of(dav, r),
                    lock_name(l)
                ));
            }
            if live(l, from, to) == Live::No {
                return Err(format!(
                    "lockdiscovery rule (RFC 4918 §15.8): {} showed {} on {member}, which \
                     was not live",
                    what_of(dav, r),
                    lock_name(l)
                ));
            }
        }
        let missing = dav.locks.iter().find(|l| {
            lock_applies(&l.resource, l.depth_infinity, member)
                && live(l, from, to) == Live::Yes
                && !shown.contains(&l.token)
        });
        if let Some(l) = missing {
            return Err(format!(
                "lockdiscovery rule (RFC 4918 §15.8): {} did not show {} on {member}, which \
                 applies to it",
                what_of(dav, r),
                lock_name(l)
            ));
        }
    }
    Ok(())
}

impl SimWorld {
    /// The parent sends `reply` to `worker`'s request `id`: what it decided about a DAV
    /// request it read.
    pub(crate) fn dav_wiretap_reply(
        &mut self,
        now: Instant,
        worker: WorkerId,
        id: u64,
        reply: &BrokerReply,
    ) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let Some(wire) = dav.wire.remove(&(worker, id)) else {
            return;
        };
        let at = ns(now);
        let out = &mut self.out;
        match wire {
            Wire::Lock {
                resource,
                depth_infinity,
                exclusive,
                rec,
            } => {
                let table_len = usize::try_from(dav.table_len as isize + dav.delta).unwrap_or(0);
                let answer = match reply {
                    BrokerReply::Granted { .. } => DavAnswer::Granted,
                    BrokerReply::Rejected(Rejection::Busy) => DavAnswer::Busy,
                    BrokerReply::Rejected(Rejection::Saturated) => DavAnswer::Saturated,
                    _ => DavAnswer::Other,
                };
                if let Some(r) = rec.and_then(|i| out.dav.log.get_mut(i)) {
                    r.lock_answer = Some(answer);
                }
                out.dav.decisions.push(DavLockDecision {
                    at_ns: at,
                    table_len,
                    limit: dav.limit,
                    answer,
                });
                match reply {
                    &BrokerReply::Granted { id, expires_in_ms } => {
                        dav.delta += 1;
                        out.dav.locks.push(DavLockRecord {
                            token: id.0,
                            resource,
                            depth_infinity,
                            exclusive,
                            granted_to: worker.0,
                            granted_ns: at,
                            promised_end_ns: at + expires_in_ms * 1_000_000,
                            refreshes: 0,
                            unlocked_ns: None,
                            last_seen_ns: at,
                            gone_ns: None,
                        });
                        let i = out.dav.locks.len() - 1;
                        dav.all.insert(id, i);
                        dav.live.insert(id, i);
                    }
                    BrokerReply::Rejected(Rejection::Busy) => {
                        out.coverage.insert(labels::DAV_LOCK_CONFLICT);
                    }
                    BrokerReply::Rejected(Rejection::Saturated) => {
                        out.coverage.insert(labels::DAV_TABLE_SATURATED);
                    }
                    _ => {}
                }
            }
            Wire::Refresh { token, rec } => {
                if let (BrokerReply::Granted { .. }, Some(r)) =
                    (reply, rec.and_then(|i| out.dav.log.get_mut(i)))
                {
                    r.acted_on = Some(token.0);
                }
                if let (&BrokerReply::Granted { expires_in_ms, .. }, Some(&i)) =
                    (reply, dav.all.get(&token))
                {
                    let l = &mut out.dav.locks[i];
                    l.promised_end_ns = at + expires_in_ms * 1_000_000;
                    l.refreshes += 1;
                    out.coverage.insert(labels::DAV_LOCK_REFRESHED);
                }
            }
            Wire::Unlock { token, rec } => {
                if let (BrokerReply::Released, Some(r)) =
                    (reply, rec.and_then(|i| out.dav.log.get_mut(i)))
                {
                    r.acted_on = Some(token.0);
                }
                // An UNLOCK removes a lock the table held, answered `Released` — or
                // `NotFound` when its time was up but its expiry not yet handled.
                if dav.live.contains_key(&token) && !dav.unlocked.contains(&token) {
                    dav.unlocked.push(token);
                    dav.delta -= 1;
                }
                if *reply == BrokerReply::Released
                    && let Some(&i) = dav.all.get(&token)
                {
                    out.dav.locks[i].unlocked_ns.get_or_insert(at);
                }
            }
        }
    }

    /// After every step: which granted locks the broker's table still holds.
    pub(crate) fn dav_observe(&mut self, now: Instant, parent: &Parent) {
        let Some(dav) = self.dav.as_mut() else {
            return;
        };
        let broker = parent.broker();
        let table = broker.dav();
        let at = ns(now);
        dav.limit = broker.limits().max_dav_locks() as usize;
        dav.table_len = table.len();
        dav.delta = 0;
        dav.unlocked.clear();
        let out = &mut self.out;
        out.dav.table_max = out.dav.table_max.max(table.len());
        let mut held = 0;
        dav.live.retain(|token, &mut i| {
            let l = &mut out.dav.locks[i];
            if table.contains(*token) {
                held += 1;
                l.last_seen_ns = at;
                return true;
            }
            l.gone_ns = Some(at);
            if l.unlocked_ns.is_some() {
                out.coverage.insert(labels::DAV_LOCK_UNLOCKED);
            } else if at >= l.promised_end_ns {
                out.coverage.insert(labels::DAV_LOCK_EXPIRED);
            }
            false
        });
        if held != table.len() && out.dav.untracked.len() < 8 {
            out.dav.untracked.push((at, table.len(), held));
        }
        let sup = parent.supervisor();
        dav.killed.retain(|&(worker, token)| {
            if sup.is_connected(worker) {
                return true;
            }
            // Let go (its grants revoked): the lock is the client's, still held.
            if table.contains(token) {
                out.coverage.insert(labels::DAV_LOCK_OUTLIVED_GRANTER);
            }
            false
        });
    }
}

impl SimWorld {
    /// At the end of the run: every request's lock decision judged against the record of
    /// the broker's table; each breach is a violation naming its rule.
    pub(crate) fn dav_judge(&mut self) {
        if self.dav.is_none() {
            return;
        }
        for breach in lock_rule_breaches(&self.out.dav) {
            if self.out.violations.len() < 16 {
                self.out.violations.push(breach);
            }
        }
    }
}
