//! The **HTTP/3 steering rule** (decision 0079), judged from the parent's orders alone:
//!
//! - a worker told to drain (or to end) is never among the sockets that receive new
//!   connections, neither in the steering in force when the DRAIN goes out nor in any
//!   later one;
//! - under `--http3` every worker is spawned with a socket of its own, given to nobody
//!   else whose channel the parent has not yet let go.

use std::collections::{BTreeMap, BTreeSet};

use servery_core::WorkerId;
use servery_core::supervisor::QuicSteering;

#[derive(Debug, Default)]
pub(crate) struct QuicOracle {
    steering: Option<QuicSteering>,
    /// Workers the parent told to drain, or ended.
    ended: BTreeSet<WorkerId>,
    /// Workers the parent let go (`WorkerGone`).
    gone: BTreeSet<WorkerId>,
    violations: Vec<String>,
}

impl QuicOracle {
    pub(crate) fn take_violations(&mut self) -> Vec<String> {
        core::mem::take(&mut self.violations)
    }

    fn accepting_ended(&self) -> Option<(u32, WorkerId)> {
        let s = self.steering.as_ref()?;
        s.accepting.iter().find_map(|&i| {
            let reader = s.readers.get(i as usize).copied().flatten()?;
            self.ended.contains(&reader).then_some((i, reader))
        })
    }

    /// The parent carried out a new steering.
    pub(crate) fn steered(&mut self, next: &QuicSteering) {
        // A socket changes reader only once the parent let the previous one go.
        if let Some(prev) = &self.steering {
            let readers: BTreeMap<u32, WorkerId> = prev
                .readers
                .iter()
                .enumerate()
                .filter_map(|(i, r)| Some((u32::try_from(i).ok()?, (*r)?)))
                .collect();
            for (i, was) in readers {
                let now = next.readers.get(i as usize).copied().flatten();
                if now.is_some_and(|w| w != was) && !self.gone.contains(&was) {
                    self.violations.push(format!(
                        "HTTP/3 steering rule: socket {i} given to {} while {was}, its reader, still holds it",
                        now.map_or(0, |w| w.0)
                    ));
                }
            }
        }
        self.steering = Some(next.clone());
        if let Some((i, w)) = self.accepting_ended() {
            self.violations.push(format!(
                "HTTP/3 steering rule: new connections steered to socket {i} of {w}, which was told to drain or end (a draining worker would refuse their handshakes)"
            ));
        }
    }

    /// The parent sent DRAIN (or TERM, KILL) to `worker`.
    pub(crate) fn ending(&mut self, worker: WorkerId) {
        self.ended.insert(worker);
        if let Some((i, w)) = self.accepting_ended() {
            self.violations.push(format!(
                "HTTP/3 steering rule: {w} told to drain or end while new connections still go to its socket {i} (steer them away first)"
            ));
        }
    }

    pub(crate) fn gone(&mut self, worker: WorkerId) {
        self.gone.insert(worker);
    }

    /// The parent spawned `worker`, under `--http3` when `http3`.
    pub(crate) fn spawned(&mut self, worker: WorkerId, http3: bool) {
        let socket = self.steering.as_ref().and_then(|s| s.socket_of(worker));
        if http3 && socket.is_none() {
            self.violations.push(format!(
                "HTTP/3 steering rule: {worker} spawned under --http3 without a socket of its own"
            ));
        }
    }
}
