//! `--proxy-max-inflight` and `--cgi-max-concurrent`: the worker's pool of one of the
//! broker's service-wide budgets (the rule is the core's [`GrantPool`]), and the permit
//! one upstream request or one CGI script holds until its response body ends. A request
//! that gets no grant is answered 503 with `Retry-After` before its body is read.

use std::sync::{Arc, Mutex, PoisonError};

use servery_core::proto::{BrokerReply, BrokerRequest};
use servery_core::proxy_admission::{Admit, GrantPool};

use crate::worker::broker::BrokerHandle;

/// Which service-wide budget a pool draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// `--proxy-max-inflight`: upstream requests in flight.
    Proxy,
    /// `--cgi-max-concurrent`: CGI scripts running.
    Cgi,
}

impl Budget {
    fn acquire(self, want: u32) -> BrokerRequest {
        match self {
            Budget::Proxy => BrokerRequest::AcquireProxyGrants { want },
            Budget::Cgi => BrokerRequest::AcquireCgiGrants { want },
        }
    }

    fn give_back(self, count: u32) -> BrokerRequest {
        match self {
            Budget::Proxy => BrokerRequest::ReturnProxyGrants { count },
            Budget::Cgi => BrokerRequest::ReturnCgiGrants { count },
        }
    }

    fn granted(self, reply: &BrokerReply) -> Option<u32> {
        match (self, reply) {
            (Budget::Proxy, BrokerReply::ProxyGrants { granted })
            | (Budget::Cgi, BrokerReply::CgiGrants { granted }) => Some(*granted),
            _ => None,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Budget::Proxy => "--proxy-max-inflight",
            Budget::Cgi => "--cgi-max-concurrent",
        }
    }
}

/// One worker's share of the service-wide bound.
#[derive(Debug)]
pub struct Admission {
    pool: Mutex<GrantPool>,
    broker: BrokerHandle,
    budget: Budget,
}

/// The right to one upstream request in flight; given back (to the pool, and what the
/// pool may not keep, to the broker) when dropped.
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let back = self.admission.lock().finished();
        self.admission.give_back(back);
    }
}

/// Why no permit was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    #[error("{0} is reached service-wide")]
    Saturated(&'static str),
    #[error("the broker did not answer: {0}")]
    Broker(String),
}

impl Admission {
    pub fn new(broker: BrokerHandle, budget: Budget, keep: u32) -> Arc<Admission> {
        Arc::new(Admission {
            pool: Mutex::new(GrantPool::new(keep)),
            broker,
            budget,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GrantPool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn give_back(&self, count: u32) {
        if count > 0 {
            self.broker.release(self.budget.give_back(count));
        }
    }

    /// A permit from a spare grant, or from the broker.
    pub async fn permit(self: &Arc<Self>) -> Result<Permit, Refused> {
        let want = match self.lock().admit() {
            Admit::Go => {
                return Ok(Permit {
                    admission: Arc::clone(self),
                });
            }
            Admit::Ask(want) => want,
        };
        // Until the answer is taken, this request counts as asking; if this future is
        // dropped meanwhile (its client left), the guard says so to the pool.
        let mut asking = Asking(Some(self));
        let answer = self.broker.call(self.budget.acquire(want)).await;
        asking.0 = None;
        let saturated = Refused::Saturated(self.budget.flag());
        let (granted, failure) = match answer {
            Ok(BrokerReply::Rejected(_)) => (0, saturated),
            Ok(reply) => match self.budget.granted(&reply) {
                Some(granted) => (granted, saturated),
                None => (0, Refused::Broker(format!("unexpected answer {reply:?}"))),
            },
            Err(e) => (0, Refused::Broker(e.to_string())),
        };
        let (go, back) = self.lock().granted(granted);
        self.give_back(back);
        if go {
            Ok(Permit {
                admission: Arc::clone(self),
            })
        } else {
            Err(failure)
        }
    }
}

/// A request waiting for the broker's answer about grants.
struct Asking<'a>(Option<&'a Arc<Admission>>);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.0.take() {
            let back = admission.lock().abandoned();
            admission.give_back(back);
        }
    }
}
