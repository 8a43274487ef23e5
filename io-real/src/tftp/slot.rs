//! The parent's hold on the TFTP service across its life: bound before serving, started
//! when the singleton machine says so, stopped once.

use servery_core::singletons::{SingletonAction, SingletonKind};
use tokio::runtime::Handle;

use super::{RunningTftp, ServedRoot, TftpService, TftpSettings};

#[derive(Debug, Default)]
pub enum TftpSlot {
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

impl TftpSlot {
    /// Carries out a singleton action if it is TFTP's; others are not ours.
    pub fn perform(&mut self, action: &SingletonAction, rt: &Handle) {
        match *action {
            SingletonAction::Start {
                kind: SingletonKind::Tftp,
                generation,
            } => match std::mem::take(self) {
                TftpSlot::Ready {
                    socket,
                    settings,
                    root,
                } => match TftpService::start(socket, settings, root, rt) {
                    Ok(running) => {
                        say!("servery: TFTP on udp {}", running.local_addr());
                        tracing::info!(%generation, "TFTP started");
                        *self = TftpSlot::Running(running);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start TFTP");
                        *self = TftpSlot::Stopped;
                    }
                },
                other => *self = other,
            },
            SingletonAction::Stop {
                kind: SingletonKind::Tftp,
            } => {
                if let TftpSlot::Running(running) = std::mem::replace(self, TftpSlot::Stopped) {
                    running.stop();
                }
            }
            // The service describes no generation: the switch changes nothing it serves.
            _ => {}
        }
    }
}
