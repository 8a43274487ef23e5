//! The parent's side of operator requests: each is decided by [`crate::control::decide`]
//! against the machines' state, carried out by the machine it concerns, and answered once
//! (decision 0071).

use super::*;
use crate::acme::AcmeEvent;
use crate::control::{Carry, Decision, Request, ServiceView, decide};
use crate::supervisor::ServiceState;

impl Parent {
    /// Take one request: what it asks is carried out now, its answer goes out at the end
    /// of the step (a reload's when its generation commits or is rejected).
    pub(super) fn request(&mut self, now: Instant, id: RequestId, request: Request) {
        let view = ServiceView {
            stopping: self.supervisor.stopping(),
            serving: self.supervisor.state() == ServiceState::Ready,
            access_log: self.supervisor.config().features().access_log,
            acme: self.acme.is_some(),
        };
        match decide(request, view) {
            Decision::Answer(answer) => self.answers.push_back((id, answer)),
            Decision::CarryOut(carry, answer) => {
                match carry {
                    Carry::Stop => self.supervisor.handle(now, Event::Command(Command::Stop)),
                    Carry::Recycle => self
                        .supervisor
                        .handle(now, Event::Command(Command::Recycle)),
                    Carry::ReopenLogs => self.actions.push_back(ParentAction::ReopenAccessLog),
                    Carry::AcmeRenew { wall } => {
                        if let Some(acme) = &mut self.acme {
                            acme.handle(now, wall, AcmeEvent::RenewNow);
                        }
                    }
                }
                self.answers.push_back((id, answer));
            }
            Decision::Await { reload, config } => {
                self.awaiting.push((reload, id));
                let command = match config {
                    Ok(config) => Command::Reload { id: reload, config },
                    Err(message) => Command::ReloadUnreadable {
                        id: reload,
                        message,
                    },
                };
                self.route(now, Event::Command(command));
            }
        }
    }

    /// When `action` is the outcome of a reload someone asked for, its answer.
    pub(super) fn answer_reload(&mut self, action: &Action) {
        let (reload, answer) = match action {
            Action::GenerationCommitted {
                generation,
                reload: Some(reload),
                ..
            } => (
                *reload,
                Answer::Committed {
                    generation: *generation,
                },
            ),
            Action::ReloadRejected { reload, message } => (
                *reload,
                Answer::Refused(crate::control::Refusal::Reload(message.clone())),
            ),
            _ => return,
        };
        if let Some(at) = self.awaiting.iter().position(|(r, _)| *r == reload) {
            let (_, request) = self.awaiting.swap_remove(at);
            self.answers.push_back((request, answer));
        }
    }

    /// Reloads asked for over the control socket and not answered yet.
    pub fn awaiting_answers(&self) -> usize {
        self.awaiting.len()
    }
}
