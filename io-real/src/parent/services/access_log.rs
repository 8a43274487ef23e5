//! The access log's place among the singletons. Its writer is not started by the singleton
//! machine: it opens with the parent, because a worker that is READY serves (and logs)
//! before its whole generation commits, and it closes only after the exit, once the core
//! has let the queue drain (the core holds `Exit` back until then). So the writer always
//! exists while the singleton runs; its actions here only mark the generation the log is
//! being written for, and each line names its own worker and generation (decision 0020).

use servery_core::Generation;

use super::{Pending, Service, ServiceContext};

#[derive(Debug)]
pub(super) struct AccessLogService;

impl Service for AccessLogService {
    fn start<'a>(&'a mut self, _ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(async { Ok(()) })
    }

    fn switch<'a>(&'a mut self, _from: Generation, _ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> Pending<'_> {
        Box::pin(async { Ok(()) })
    }
}
