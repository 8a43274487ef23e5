//! The parent↔worker protocol: messages and a length-prefixed, size-bounded codec.
//!
//! A frame is a 4-byte big-endian payload length followed by the payload; the payload is
//! a one-byte tag and the message's fields. Anything a peer sends is decoded without
//! panicking: a malformed frame is a [`ProtoError`], and the parent treats the worker
//! that sent it as faulty. The encoders are bound by the same frame limit: they cut free
//! texts, split lock lists, or refuse with an [`EncodeError`], and never write a frame
//! the decoder would refuse.

mod codec;
mod messages;
mod stats_wire;
#[cfg(test)]
mod stats_wire_tests;
mod tls_wire;
mod wire;

pub use codec::{
    FrameDecoder, MAX_FRAME_DEFAULT, MAX_FRAMES_PER_MESSAGE, TRUNCATION_MARKER,
    check_lock_reportable, check_reply, check_request, check_worker, encode_parent,
    encode_parent_within, encode_worker, encode_worker_within, tls_material_len,
};
pub use messages::{
    BrokerReply, BrokerRequest, DavDepth, DavLockInfo, DavReach, DavWriteCheck,
    MAX_SUBMITTED_TOKENS, ParentMessage, Rejection, RequestStats, TargetKey, WorkerMessage,
};
pub use stats_wire::MAX_STATS_LEN;

/// Errors of the protocol layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge { len: usize, max: usize },
    #[error("empty frame")]
    EmptyFrame,
    #[error("unknown message tag {0:#04x}")]
    UnknownTag(u8),
    #[error("frame ends inside a field")]
    Truncated,
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    #[error("a text field is not UTF-8")]
    InvalidUtf8,
    #[error("invalid value {value} for {field}")]
    InvalidValue { field: &'static str, value: u64 },
    #[error("a message split over frames was interrupted by another")]
    UnfinishedMessage,
    #[error("a message continues over more than {0} frames")]
    TooManyFrames(usize),
}

/// A message no frames within the limit can carry: its oversized field may be neither
/// cut (a name, a path, a lock) nor split. Nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("{what} needs {len} bytes, over the {max}-byte frame limit")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
}
