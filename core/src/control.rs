//! Operator requests from the control socket (`ctl stop`, `recycle`, `reload`,
//! `reopen-logs`, `acme-renew`): each is decided here and gets exactly one answer from
//! the core, whatever state the service is in (decision 0071). A driver only reads a
//! request, names it with a [`RequestId`], hands it in as
//! [`crate::supervisor::Event::Control`] and relays the
//! [`crate::parent::ParentAction::Answer`] that comes back; it refuses nothing itself but
//! a request it cannot parse.
//!
//! `status` is not a request here: it reads the machine and changes nothing.

use core::fmt;

use crate::acme::UnixTime;
use crate::config::RawConfig;
use crate::ids::{Generation, ReloadId};

pub use crate::ids::RequestId;

/// What an operator asks over the control socket.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A graceful stop, as on SIGTERM.
    Stop,
    /// Recycle every worker of the committed generation, one at a time.
    Recycle,
    /// Roll a new generation onto this configuration, or reject it for the reason the
    /// driver could not read it. `reload` names it to the supervisor.
    Reload {
        reload: ReloadId,
        config: Result<Box<RawConfig>, String>,
    },
    /// Reopen the access log (after logrotate moved it).
    ReopenLogs,
    /// Order a certificate now, at the driver's wall time.
    AcmeRenew { wall: UnixTime },
}

impl Request {
    /// The request as the control socket names it.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Stop => "stop",
            Request::Recycle => "recycle",
            Request::Reload { .. } => "reload",
            Request::ReopenLogs => "reopen-logs",
            Request::AcmeRenew { .. } => "acme-renew",
        }
    }
}

/// The one answer a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Taken and being carried out: a stop begun, a recycle started or queued, a log
    /// reopened, a renewal ordered.
    Accepted,
    /// A stop while the service already stops (or has failed): nothing more to do.
    AlreadyStopping,
    /// The reload's generation is committed and serving.
    Committed {
        generation: Generation,
    },
    Refused(Refusal),
}

impl Answer {
    /// Whether the request was carried out (or already was).
    pub fn ok(&self) -> bool {
        !matches!(self, Answer::Refused(_))
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The listeners are closed: the service stops (asked to, or failed).
    #[error("the service is stopping")]
    Stopping,
    /// A recycle before the first generation committed: nothing serves to be recycled,
    /// and every worker starting is new already.
    #[error("no generation serves yet (the service is starting): nothing to recycle")]
    NotServing,
    #[error("there is no access log to reopen (start servery with --access-log)")]
    NoAccessLog,
    #[error("ACME is not in use (start servery with --acme)")]
    NoAcme,
    /// The supervisor rejected the reload, or its candidate generation failed.
    #[error("{0}")]
    Reload(String),
}

/// What the service is, as far as deciding a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServiceView {
    /// A stop has begun (asked for or after a failure): the listeners are closed.
    pub stopping: bool,
    /// The first generation is committed and serves.
    pub serving: bool,
    pub access_log: bool,
    pub acme: bool,
}

/// What the parent carries out for an accepted request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Carry {
    Stop,
    Recycle,
    ReopenLogs,
    AcmeRenew { wall: UnixTime },
}

/// What becomes of one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// Answered now; nothing else happens.
    Answer(Answer),
    /// Carried out, and answered now.
    CarryOut(Carry, Answer),
    /// A reload: handed to the supervisor, and answered when its generation commits or
    /// is rejected (a stop rejects every reload still in flight, so one always comes).
    Await {
        reload: ReloadId,
        config: Result<Box<RawConfig>, String>,
    },
}

/// The rule: once the service stops, a stop is already done and nothing else that would
/// start work is taken (a reopened log is not work: the writer runs until the exit); a
/// recycle needs a committed generation; the access log and ACME only when in use.
pub(crate) fn decide(request: Request, view: ServiceView) -> Decision {
    let refuse = |why| Decision::Answer(Answer::Refused(why));
    match request {
        Request::Stop if view.stopping => Decision::Answer(Answer::AlreadyStopping),
        Request::Stop => Decision::CarryOut(Carry::Stop, Answer::Accepted),
        Request::Recycle if view.stopping => refuse(Refusal::Stopping),
        Request::Recycle if !view.serving => refuse(Refusal::NotServing),
        Request::Recycle => Decision::CarryOut(Carry::Recycle, Answer::Accepted),
        Request::Reload { .. } if view.stopping => refuse(Refusal::Stopping),
        Request::Reload { reload, config } => Decision::Await { reload, config },
        Request::ReopenLogs if !view.access_log => refuse(Refusal::NoAccessLog),
        Request::ReopenLogs => Decision::CarryOut(Carry::ReopenLogs, Answer::Accepted),
        Request::AcmeRenew { .. } if !view.acme => refuse(Refusal::NoAcme),
        Request::AcmeRenew { .. } if view.stopping => refuse(Refusal::Stopping),
        Request::AcmeRenew { wall } => {
            Decision::CarryOut(Carry::AcmeRenew { wall }, Answer::Accepted)
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Accepted => f.write_str("accepted"),
            Answer::AlreadyStopping => f.write_str("already stopping"),
            Answer::Committed { generation } => {
                write!(f, "committed as generation {}", generation.0)
            }
            Answer::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

#[cfg(test)]
mod tests;
