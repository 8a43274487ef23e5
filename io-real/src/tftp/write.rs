//! Write transfers (`--tftp-write`).

use servery_core::tftp::packet::{ErrorCode, Request};
use tokio::net::UdpSocket;

use super::root::Refusal;
use super::transfer::{Context, Ending, send_error};

pub async fn run(_ctx: &Context, socket: &UdpSocket, _req: Request) -> Ending {
    let refusal = Refusal::new(ErrorCode::AccessViolation, "writes are disabled");
    send_error(socket, refusal.code, &refusal.message).await;
    Ending::Refused(refusal)
}
