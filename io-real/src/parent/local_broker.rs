//! The parent's own broker client (for its TFTP service's writes): a worker's client
//! whose frames, instead of crossing a control channel, are decoded here and handed to
//! the driver as messages from [`PARENT_CLIENT`]; the driver hands the broker's answers
//! back (see `RealIo::perform`). Requests and answers go through the same broker
//! tables as every worker's, on the driver thread.

use servery_core::ValidConfig;
use servery_core::parent::PARENT_CLIENT;
use servery_core::proto::{FrameDecoder, MAX_FRAME_DEFAULT};
use servery_core::supervisor::Event;

use super::io::{Inbound, InboundTx};
use crate::worker::broker::BrokerHandle;

pub(super) fn client(config: &ValidConfig, events: InboundTx) -> BrokerHandle {
    let b = config.broker();
    BrokerHandle::new(b.queue_capacity().max(1), b.reply_timeout(), move |frame| {
        let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
        decoder.push(&frame);
        while let Ok(Some(message)) = decoder.next_worker_message() {
            // A closed channel means the driver is gone; so is every grant.
            let _ = events.send(Inbound::Event(Event::Message {
                worker: PARENT_CLIENT,
                message,
            }));
        }
    })
}
