//! The **answer rule**: every operator request the parent reads gets exactly one answer
//! (decision 0071), and the answer fits the service as the driver saw it:
//!
//! - a request read after a stop began (a stop read, or the listeners closed) is answered
//!   as the stop requires: a stop is `already stopping`, a recycle or a reload is refused
//!   with the stopping reason; and no answer claims a stop the driver has not seen;
//! - a recycle is accepted only once a generation was committed, and refused as "nothing
//!   serves yet" only before;
//! - a reload answered `committed` names the generation whose commit answered it;
//! - every request but a reload is answered in the step that read it; a reload by the
//!   outcome of its generation, and at the latest before the parent exits.
//!
//! Judged from what the driver hands in and carries out, never from the core's tables.

use std::collections::BTreeMap;

use servery_core::control::{Answer, Refusal, Request};
use servery_core::{Instant, ReloadId, RequestId};

use super::ms;

/// One request as read.
#[derive(Debug, Clone)]
struct Asked {
    name: &'static str,
    reload: Option<ReloadId>,
    read_at: Instant,
    /// A stop had begun, as far as the driver had seen, when this was read.
    after_stop: bool,
    /// A generation had been committed when this was read.
    after_commit: bool,
    answer: Option<Answer>,
    /// Its missing answer was reported already.
    reported: bool,
}

#[derive(Debug, Default)]
pub(crate) struct AnswerBook {
    asked: BTreeMap<u64, Asked>,
    stop_seen: bool,
    committed: bool,
    /// Each reload's generation, from the commit that named it.
    reload_commits: BTreeMap<ReloadId, u64>,
    violations: Vec<String>,
}

impl AnswerBook {
    pub(crate) fn take_violations(&mut self) -> Vec<String> {
        core::mem::take(&mut self.violations)
    }

    /// The driver read `request` at `now`.
    pub(crate) fn read(&mut self, now: Instant, id: RequestId, request: &Request) {
        let reload = match request {
            Request::Reload { reload, .. } => Some(*reload),
            _ => None,
        };
        self.asked.insert(
            id.0,
            Asked {
                name: request.name(),
                reload,
                read_at: now,
                after_stop: self.stop_seen,
                after_commit: self.committed,
                answer: None,
                reported: false,
            },
        );
        if matches!(request, Request::Stop) {
            self.stop_seen = true;
        }
    }

    /// A stop began: a stop signal read, or the listeners closed.
    pub(crate) fn stopping(&mut self) {
        self.stop_seen = true;
    }

    pub(crate) fn committed(&mut self, generation: u64, reload: Option<ReloadId>) {
        self.committed = true;
        if let Some(reload) = reload {
            self.reload_commits.insert(reload, generation);
        }
    }

    /// The driver relayed `answer` to request `id` at `now`.
    pub(crate) fn answered(&mut self, now: Instant, id: RequestId, answer: &Answer) {
        let stop_seen = self.stop_seen;
        let Some(asked) = self.asked.get_mut(&id.0) else {
            return self.violations.push(format!(
                "answer rule: an answer ({answer}) to request #{}, which the parent never read",
                id.0
            ));
        };
        let (name, read) = (asked.name, ms(asked.read_at));
        if let Some(first) = &asked.answer {
            let breach = format!(
                "answer rule: {name} #{} (read at {read} ms) answered twice: {first}, then {answer}",
                id.0
            );
            return self.violations.push(breach);
        }
        asked.answer = Some(answer.clone());
        let stops = matches!(answer, Answer::AlreadyStopping)
            || matches!(answer, Answer::Refused(Refusal::Stopping));
        let fits_a_stop = match name {
            "stop" => matches!(answer, Answer::AlreadyStopping),
            "reopen-logs" => true,
            _ => matches!(answer, Answer::Refused(Refusal::Stopping)),
        };
        let mut breach = None;
        if asked.after_stop && !fits_a_stop {
            breach = Some(format!(
                "{name} read at {read} ms while the service was stopping was answered `{answer}`, not as a stop requires"
            ));
        } else if stops && !stop_seen {
            breach = Some(format!(
                "{name} answered `{answer}` at {} ms, but no stop had begun",
                ms(now)
            ));
        } else if name == "recycle" && !asked.after_stop {
            match answer {
                Answer::Accepted if !self.committed => {
                    breach = Some(format!(
                        "recycle accepted at {} ms before any generation was committed",
                        ms(now)
                    ))
                }
                Answer::Refused(Refusal::NotServing) if asked.after_commit => {
                    breach = Some(format!(
                        "recycle read at {read} ms, after a commit, refused as if nothing served"
                    ))
                }
                _ => {}
            }
        } else if let (Answer::Committed { generation }, Some(reload)) = (answer, asked.reload) {
            let named = self.reload_commits.get(&reload).copied();
            if named != Some(generation.0) {
                breach = Some(format!(
                    "reload #{} answered committed as generation {}, but the commit that named it was {named:?}",
                    id.0, generation.0
                ));
            }
        }
        if let Some(breach) = breach {
            self.violations.push(format!("answer rule: {breach}"));
        }
    }

    /// After a step: a request other than a reload must have had its answer in the step
    /// that read it.
    pub(crate) fn step_done(&mut self) {
        for (id, asked) in &mut self.asked {
            if asked.answer.is_none() && asked.reload.is_none() && !asked.reported {
                asked.reported = true;
                self.violations.push(format!(
                    "answer rule: {} #{id} read at {} ms got no answer in the step that read it",
                    asked.name,
                    ms(asked.read_at)
                ));
            }
        }
    }

    /// The parent exits: nobody who asked may be left waiting.
    pub(crate) fn exiting(&mut self) {
        for (id, asked) in &mut self.asked {
            if asked.answer.is_none() && !asked.reported {
                asked.reported = true;
                self.violations.push(format!(
                    "answer rule: {} #{id} read at {} ms was never answered before the parent exited",
                    asked.name,
                    ms(asked.read_at)
                ));
            }
        }
    }
}
