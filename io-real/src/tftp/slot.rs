//! The parent's hold on the TFTP service across its life: bound before serving, started
//! when the singleton machine says so, stopped once; and the parent's own broker client
//! its writes use, whose answers the driver hands over here.

use servery_core::proto::ParentMessage;
use servery_core::singletons::{SingletonAction, SingletonKind};
use tokio::runtime::Handle;

use super::{RunningTftp, ServedRoot, TftpService, TftpSettings};
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

    /// A broker answer addressed to the parent's own client.
    pub fn deliver(&self, message: ParentMessage) {
        if let (Some(broker), ParentMessage::Broker { id, reply }) = (&self.broker, message) {
            broker.on_reply(id, reply);
        }
    }

    /// Carries out a singleton action if it is TFTP's; others are not ours.
    pub fn perform(&mut self, action: &SingletonAction, rt: &Handle) {
        match *action {
            SingletonAction::Start {
                kind: SingletonKind::Tftp,
                generation,
            } => match std::mem::take(&mut self.state) {
                State::Ready {
                    socket,
                    settings,
                    root,
                } => match TftpService::start(socket, settings, root, self.broker.clone(), rt) {
                    Ok(running) => {
                        say!("servery: TFTP on udp {}", running.local_addr());
                        tracing::info!(%generation, "TFTP started");
                        self.state = State::Running(running);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start TFTP");
                        self.state = State::Stopped;
                    }
                },
                other => self.state = other,
            },
            SingletonAction::Stop {
                kind: SingletonKind::Tftp,
            } => {
                if let State::Running(running) = std::mem::replace(&mut self.state, State::Stopped)
                {
                    running.stop();
                }
            }
            // The service describes no generation: the switch changes nothing it serves.
            _ => {}
        }
    }
}
