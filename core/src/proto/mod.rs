//! The parent↔worker protocol: messages and a length-prefixed, size-bounded codec.
//!
//! A frame is a 4-byte big-endian payload length followed by the payload; the payload is
//! a one-byte tag and the message's fields. Anything a peer sends is decoded without
//! panicking: a malformed frame is a [`ProtoError`], and the parent treats the worker
//! that sent it as faulty.

mod codec;
mod messages;
mod wire;

pub use codec::{FrameDecoder, MAX_FRAME_DEFAULT, encode_parent, encode_worker};
pub use messages::{
    BrokerReply, BrokerRequest, DavDepth, DavLockInfo, ParentMessage, Rejection, TargetKey,
    WorkerMessage,
};

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
}
