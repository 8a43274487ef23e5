//! The parent's hold on the TFTP service across its life: bound before serving, started
//! when the singleton machine says so, stopped once — one of the parent's singleton
//! services (`crate::parent::services`) — and the parent's own broker client its writes
//! use, whose answers the driver hands over through [`TftpReplies`].

use servery_core::Generation;
use servery_core::proto::ParentMessage;
use tokio::runtime::Handle;

use super::{RunningTftp, ServedRoot, TftpService, TftpSettings};
use crate::parent::services::{Pending, Service, ServiceContext, ServiceError};
use crate::worker::broker::BrokerHandle;
#[derive(Debug, Default)]
enum State {
    /// `--tftp` is off.
    #[default]
    Off,
    /// Bound, waiting for the first commit.
    Ready {
        socket: std::net::UdpSocket,
        settings: TftpSettings,
        root: ServedRoot,
    },
    Running(RunningTftp),
    Stopped,
}

#[derive(Debug, Default)]
pub struct TftpSlot {
    state: State,
    broker: Option<BrokerHandle>,
}

impl TftpSlot {
    /// `--tftp` is off.
    pub fn off() -> Self {
        TftpSlot::default()
    }

    /// A bound service waiting for its start; `broker` is the parent's own client, for
    /// writes.
    pub fn ready(
        socket: std::net::UdpSocket,
        settings: TftpSettings,
        root: ServedRoot,
        broker: Option<BrokerHandle>,
    ) -> Self {
        TftpSlot {
            state: State::Ready {
                socket,
                settings,
                root,
            },
            broker,
        }
    }

    /// Where the driver hands the broker's answers to the parent's own client.
    pub fn replies(&self) -> TftpReplies {
        TftpReplies(self.broker.clone())
    }
}

impl Service for TftpSlot {
    fn start<'a>(&'a mut self, ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(async move {
            let State::Ready {
                socket,
                settings,
                root,
            } = std::mem::replace(&mut self.state, State::Stopped)
            else {
                return Ok(());
            };
            let warnings = super::no_auth_warnings(
                Some(&socket),
                settings.http_auth,
                settings.writes.is_some(),
            );
            let running = TftpService::start(
                socket,
                settings,
                root,
                self.broker.clone(),
                &Handle::current(),
            )?;
            let address = running.local_addr();
            crate::banner::say(
                "tftp_listening",
                &format!("servery: TFTP on udp {address}"),
                &[("address", address.to_string().into())],
            );
            for warning in warnings {
                tracing::warn!("{warning}");
            }
            tracing::info!(generation = %ctx.generation, "TFTP started");
            self.state = State::Running(running);
            Ok(())
        })
    }

    /// The service describes no generation: a switch changes nothing it serves.
    fn switch<'a>(&'a mut self, _from: Generation, _ctx: &'a ServiceContext) -> Pending<'a> {
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> Pending<'_> {
        Box::pin(async move {
            if let State::Running(running) = std::mem::replace(&mut self.state, State::Stopped) {
                running.stop();
            }
            Ok(())
        })
    }
}

/// The driver's end of the parent's own broker client: answers addressed to
/// `PARENT_CLIENT` go here.
#[derive(Debug, Default)]
pub struct TftpReplies(Option<BrokerHandle>);

impl TftpReplies {
    pub fn deliver(&self, message: ParentMessage) {
        if let (Some(broker), ParentMessage::Broker { id, reply }) = (&self.0, message) {
            broker.on_reply(id, reply);
        }
    }
}

impl From<super::TftpError> for ServiceError {
    fn from(e: super::TftpError) -> Self {
        ServiceError::Tftp(Box::new(e))
    }
}
