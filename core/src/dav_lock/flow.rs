//! The two steps of a WebDAV write that need answers from outside: the `If` header's
//! evaluation ([`IfCheck`]) and the lock check ([`LockViews::require`]). Each hands the
//! driver what it needs next — an inspection of a resource, a broker query — and takes the
//! answer back; the driver performs, the machine decides.

use std::collections::VecDeque;

use super::if_header::{IfHeader, ResourceState, parse};
use super::{DavRefusal, applies, covers, parent_of, parse_token, token_uri};
use crate::ids::LeaseId;
use crate::proto::{DavLockInfo, DavReach};

/// The lock table as one request sees it: every broker answer (`DavQuery`) the request
/// got, by resource key. Asked once per resource and request.
#[derive(Debug, Clone, Default)]
pub struct LockViews {
    answers: Vec<(String, Vec<DavLockInfo>)>,
}

/// What [`LockViews::require`] needs before it can decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needs {
    /// Ask the broker which locks are around this key (`DavQuery`) and give the answer to
    /// [`LockViews::answer`].
    Query(String),
    /// Decided: the write may go on, or the 423 naming the lock roots not satisfied.
    Decided(Result<(), DavRefusal>),
}

impl LockViews {
    /// The broker's answer about `key`.
    pub fn answer(&mut self, key: String, locks: Vec<DavLockInfo>) {
        if !self.answers.iter().any(|(k, _)| *k == key) {
            self.answers.push((key, locks));
        }
    }

    /// Every live lock around `key`, if the broker was asked.
    pub fn around(&self, key: &str) -> Option<&[DavLockInfo]> {
        let found = self.answers.iter().find(|(k, _)| k == key);
        found.map(|(_, locks)| locks.as_slice())
    }

    /// The lock check of a write to `resource` that reaches so far (RFC 4918 §7.4): every
    /// lock that protects what it changes must have a token submitted, one per lock root
    /// (so one holder of a shared lock may write). What protects it: a lock that applies
    /// to the resource; with `tree`, every lock rooted below it; with `membership`, a lock
    /// rooted at its parent collection (of any depth: the collection's membership
    /// changes).
    pub fn require(&self, resource: &str, reach: DavReach, submitted: &[LeaseId]) -> Needs {
        let Some(around) = self.around(resource) else {
            return Needs::Query(resource.to_owned());
        };
        let mut protecting: Vec<&DavLockInfo> = around
            .iter()
            .filter(|l| applies(l, resource) || (reach.tree && covers(resource, &l.resource)))
            .collect();
        if reach.membership
            && let Some(parent) = parent_of(resource)
        {
            let Some(around_parent) = self.around(parent) else {
                return Needs::Query(parent.to_owned());
            };
            protecting.extend(around_parent.iter().filter(|l| l.resource == parent));
        }
        let mut unsatisfied: Vec<String> = Vec::new();
        for lock in &protecting {
            let satisfied = protecting
                .iter()
                .any(|l| l.resource == lock.resource && submitted.contains(&l.token));
            if !satisfied && !unsatisfied.contains(&lock.resource) {
                unsatisfied.push(lock.resource.clone());
            }
        }
        if unsatisfied.is_empty() {
            Needs::Decided(Ok(()))
        } else {
            Needs::Decided(Err(DavRefusal::Locked(unsatisfied)))
        }
    }
}

/// A resource the `If` header's evaluation needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The request's own resource.
    Request,
    /// A tagged list's resource, the tag as written (an absolute URI or path): the driver
    /// maps it to one of its resources, or to none.
    Tag(String),
}

/// What [`IfCheck`] needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfStep {
    /// Look at a resource: [`IfCheck::inspected`] with its lock-table key (`None` when the
    /// tag names nothing served) and current ETag (`None` when nothing is there).
    Inspect(Subject),
    /// Ask the broker which locks are around this key: [`IfCheck::answered`].
    Query(String),
    /// Decided: the lock tokens the client submitted (those servery issued), or the
    /// refusal (400 for a malformed header, 412 when it evaluates false).
    Done(Result<Vec<LeaseId>, DavRefusal>),
}

/// One resource the header names, as it is now.
#[derive(Debug, Default)]
struct Seen {
    etag: Option<String>,
    tokens: Vec<String>,
}

/// The `If` header's evaluation for one request (RFC 4918 §10.4): the request's own
/// resource first, then each tagged list's resource once, in the order written; then the
/// header holds or not. Without a header nothing is asked and nothing submitted.
#[derive(Debug)]
pub struct IfCheck {
    header: Result<Option<IfHeader>, DavRefusal>,
    /// Subjects not yet inspected, in order.
    pending: VecDeque<Subject>,
    /// The subject inspected last, its key (None: nothing served) and ETag, until its
    /// locks are known.
    current: Option<(Option<String>, Option<String>, Option<String>)>,
    /// What each subject is (`None` for the request's own resource).
    seen: Vec<(Option<String>, Seen)>,
    views: LockViews,
}

impl IfCheck {
    /// The check of the `If` header `value` (all field lines joined), if the request has
    /// one.
    pub fn new(value: Option<&str>) -> IfCheck {
        let header = match value.map(parse) {
            None => Ok(None),
            Some(Ok(header)) => Ok(Some(header)),
            Some(Err(e)) => Err(DavRefusal::BadIf(e)),
        };
        let mut pending = VecDeque::new();
        if let Ok(Some(header)) = &header {
            pending.push_back(Subject::Request);
            for list in &header.lists {
                let Some(tag) = &list.resource else { continue };
                let subject = Subject::Tag(tag.clone());
                if !pending.contains(&subject) {
                    pending.push_back(subject);
                }
            }
        }
        IfCheck {
            header,
            pending,
            current: None,
            seen: Vec::new(),
            views: LockViews::default(),
        }
    }

    /// The check with the answers of an earlier step of the same request.
    pub fn with_views(mut self, views: LockViews) -> IfCheck {
        self.views = views;
        self
    }

    /// What the driver does next.
    pub fn next_step(&mut self) -> IfStep {
        let header = match &self.header {
            Err(refusal) => return IfStep::Done(Err(refusal.clone())),
            Ok(None) => return IfStep::Done(Ok(Vec::new())),
            Ok(Some(header)) => header,
        };
        if let Some((tag, key, etag)) = self.current.take() {
            // A tag that names nothing served has no ETag and no locks.
            let mut tokens = Vec::new();
            if let Some(k) = &key {
                let Some(around) = self.views.around(k) else {
                    let query = k.clone();
                    self.current = Some((tag, key, etag));
                    return IfStep::Query(query);
                };
                let applying = around.iter().filter(|l| applies(l, k));
                tokens = applying.map(|l| token_uri(l.token)).collect();
            }
            let etag = etag.filter(|_| key.is_some());
            self.seen.push((tag, Seen { etag, tokens }));
        }
        if let Some(subject) = self.pending.front() {
            return IfStep::Inspect(subject.clone());
        }
        if !header.evaluate(&*self) {
            return IfStep::Done(Err(DavRefusal::IfFailed));
        }
        let submitted = header.submitted_tokens().into_iter();
        IfStep::Done(Ok(submitted.filter_map(parse_token).collect()))
    }

    /// The answer to [`IfStep::Inspect`] of the subject asked about.
    pub fn inspected(&mut self, key: Option<String>, etag: Option<String>) {
        let tag = match self.pending.pop_front() {
            Some(Subject::Tag(tag)) => Some(tag),
            Some(Subject::Request) | None => None,
        };
        self.current = Some((tag, key, etag));
    }

    /// The answer to [`IfStep::Query`].
    pub fn answered(&mut self, key: String, locks: Vec<DavLockInfo>) {
        self.views.answer(key, locks);
    }

    /// The broker answers collected, for the lock check that follows.
    pub fn into_views(self) -> LockViews {
        self.views
    }

    fn get(&self, resource: Option<&str>) -> Option<&Seen> {
        let found = self.seen.iter().find(|(t, _)| t.as_deref() == resource);
        found.map(|(_, seen)| seen)
    }
}

impl ResourceState for IfCheck {
    fn etag(&self, resource: Option<&str>) -> Option<String> {
        self.get(resource).and_then(|r| r.etag.clone())
    }

    fn is_locked_with(&self, resource: Option<&str>, token: &str) -> bool {
        self.get(resource)
            .is_some_and(|r| r.tokens.iter().any(|t| t == token))
    }
}
