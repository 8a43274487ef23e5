//! TFTP datagrams (RFC 1350) and their options (RFC 2347 option extension, RFC 2348
//! blksize, RFC 2349 timeout and tsize, RFC 7440 windowsize): decoding what a peer sent
//! and encoding what we send. Pure: bytes in, values out.
//!
//! Decoding never panics and refuses rather than guesses: a request whose name or mode is
//! not NUL-terminated, an odd option list, or a packet of unknown opcode is an error the
//! service answers with an ERROR packet (or ignores, for a stray packet on a transfer).

/// The largest datagram a peer may send us: a DATA packet at the largest `blksize`.
pub const MAX_DATAGRAM: usize = 4 + MAX_BLKSIZE as usize;
/// RFC 1350's block size, used when the client asks for none.
pub const DEFAULT_BLKSIZE: u16 = 512;
/// RFC 2348's bounds for `blksize`.
pub const MIN_BLKSIZE: u16 = 8;
pub const MAX_BLKSIZE: u16 = 65464;

/// The opcode of each packet type.
mod op {
    pub(super) const RRQ: u16 = 1;
    pub(super) const WRQ: u16 = 2;
    pub(super) const DATA: u16 = 3;
    pub(super) const ACK: u16 = 4;
    pub(super) const ERROR: u16 = 5;
    pub(super) const OACK: u16 = 6;
}

/// RFC 1350 / RFC 2347 error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 0: see the message.
    NotDefined,
    FileNotFound,
    AccessViolation,
    /// 3: disk full or allocation exceeded (our per-transfer size limit).
    DiskFull,
    IllegalOperation,
    UnknownTransferId,
    FileExists,
    NoSuchUser,
    /// 8: option negotiation refused.
    BadOption,
    /// A code outside the RFCs, kept so a peer's ERROR round-trips.
    Other(u16),
}

impl ErrorCode {
    pub fn code(self) -> u16 {
        match self {
            ErrorCode::NotDefined => 0,
            ErrorCode::FileNotFound => 1,
            ErrorCode::AccessViolation => 2,
            ErrorCode::DiskFull => 3,
            ErrorCode::IllegalOperation => 4,
            ErrorCode::UnknownTransferId => 5,
            ErrorCode::FileExists => 6,
            ErrorCode::NoSuchUser => 7,
            ErrorCode::BadOption => 8,
            ErrorCode::Other(c) => c,
        }
    }

    pub fn from_code(code: u16) -> Self {
        match code {
            0 => ErrorCode::NotDefined,
            1 => ErrorCode::FileNotFound,
            2 => ErrorCode::AccessViolation,
            3 => ErrorCode::DiskFull,
            4 => ErrorCode::IllegalOperation,
            5 => ErrorCode::UnknownTransferId,
            6 => ErrorCode::FileExists,
            7 => ErrorCode::NoSuchUser,
            8 => ErrorCode::BadOption,
            c => ErrorCode::Other(c),
        }
    }
}

/// The transfer mode a request names. `mail` is obsolete and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Octet,
    Netascii,
}

/// One `name value` option pair as sent (names compare case-insensitively).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOption {
    pub name: String,
    pub value: String,
}

/// A read or write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The file name as sent: bytes, since nothing requires them to be UTF-8.
    pub filename: Vec<u8>,
    pub mode: Mode,
    pub options: Vec<RawOption>,
}

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    Rrq(Request),
    Wrq(Request),
    Data { block: u16, data: &'a [u8] },
    Ack { block: u16 },
    Error { code: ErrorCode, message: String },
    Oack(Vec<RawOption>),
}

/// Why a datagram could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    #[error("datagram shorter than its header")]
    Short,
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    #[error("a string field is not NUL-terminated")]
    Unterminated,
    #[error("a text field is not UTF-8")]
    NotUtf8,
    #[error("the file name is empty")]
    EmptyName,
    #[error("unsupported transfer mode")]
    BadMode,
    #[error("an option has no value")]
    OddOptions,
    #[error("DATA larger than the largest block size")]
    DataTooLong,
}

/// Splits off one NUL-terminated field.
fn field(bytes: &[u8]) -> Result<(&[u8], &[u8]), PacketError> {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or(PacketError::Unterminated)?;
    Ok((&bytes[..end], &bytes[end + 1..]))
}

fn text(bytes: &[u8]) -> Result<String, PacketError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| PacketError::NotUtf8)
}

fn options(mut rest: &[u8]) -> Result<Vec<RawOption>, PacketError> {
    let mut options = Vec::new();
    while !rest.is_empty() {
        let (name, after) = field(rest)?;
        if after.is_empty() {
            return Err(PacketError::OddOptions);
        }
        let (value, after) = field(after)?;
        options.push(RawOption {
            name: text(name)?,
            value: text(value)?,
        });
        rest = after;
    }
    Ok(options)
}

fn request(rest: &[u8]) -> Result<Request, PacketError> {
    let (filename, rest) = field(rest)?;
    if filename.is_empty() {
        return Err(PacketError::EmptyName);
    }
    let (mode, rest) = field(rest)?;
    let mode = if mode.eq_ignore_ascii_case(b"octet") {
        Mode::Octet
    } else if mode.eq_ignore_ascii_case(b"netascii") {
        Mode::Netascii
    } else {
        return Err(PacketError::BadMode);
    };
    Ok(Request {
        filename: filename.to_vec(),
        mode,
        options: options(rest)?,
    })
}

impl<'a> Packet<'a> {
    pub fn decode(bytes: &'a [u8]) -> Result<Self, PacketError> {
        if bytes.len() < 2 {
            return Err(PacketError::Short);
        }
        let opcode = u16::from_be_bytes([bytes[0], bytes[1]]);
        let rest = &bytes[2..];
        let number = || {
            (rest.len() >= 2)
                .then(|| u16::from_be_bytes([rest[0], rest[1]]))
                .ok_or(PacketError::Short)
        };
        match opcode {
            op::RRQ => Ok(Packet::Rrq(request(rest)?)),
            op::WRQ => Ok(Packet::Wrq(request(rest)?)),
            op::DATA => {
                let block = number()?;
                let data = &rest[2..];
                if data.len() > usize::from(MAX_BLKSIZE) {
                    return Err(PacketError::DataTooLong);
                }
                Ok(Packet::Data { block, data })
            }
            op::ACK => Ok(Packet::Ack { block: number()? }),
            op::ERROR => {
                let code = ErrorCode::from_code(number()?);
                // Peers often omit the terminator or send Latin-1: the message is only
                // logged, so it is read leniently.
                let raw = &rest[2..];
                let raw = raw.split(|&b| b == 0).next().unwrap_or(raw);
                let message = String::from_utf8_lossy(raw).into_owned();
                Ok(Packet::Error { code, message })
            }
            op::OACK => Ok(Packet::Oack(options(rest)?)),
            other => Err(PacketError::UnknownOpcode(other)),
        }
    }

    /// Appends the encoded packet to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let put_str = |out: &mut Vec<u8>, s: &[u8]| {
            out.extend_from_slice(s);
            out.push(0);
        };
        let put_options = |out: &mut Vec<u8>, options: &[RawOption]| {
            for o in options {
                put_str(out, o.name.as_bytes());
                put_str(out, o.value.as_bytes());
            }
        };
        let put_request = |out: &mut Vec<u8>, opcode: u16, r: &Request| {
            out.extend_from_slice(&opcode.to_be_bytes());
            put_str(out, &r.filename);
            put_str(
                out,
                match r.mode {
                    Mode::Octet => b"octet",
                    Mode::Netascii => b"netascii",
                },
            );
            put_options(out, &r.options);
        };
        match self {
            Packet::Rrq(r) => put_request(out, op::RRQ, r),
            Packet::Wrq(r) => put_request(out, op::WRQ, r),
            Packet::Data { block, data } => {
                encode_data_header(*block, out);
                out.extend_from_slice(data);
            }
            Packet::Ack { block } => {
                out.extend_from_slice(&op::ACK.to_be_bytes());
                out.extend_from_slice(&block.to_be_bytes());
            }
            Packet::Error { code, message } => {
                out.extend_from_slice(&op::ERROR.to_be_bytes());
                out.extend_from_slice(&code.code().to_be_bytes());
                // A NUL inside the message would end it early on the wire.
                let message: Vec<u8> = message.bytes().filter(|&b| b != 0).collect();
                put_str(out, &message);
            }
            Packet::Oack(options) => {
                out.extend_from_slice(&op::OACK.to_be_bytes());
                put_options(out, options);
            }
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// The four bytes before a DATA packet's payload, so a sender can read the file straight
/// into the rest of its buffer.
pub fn encode_data_header(block: u16, out: &mut Vec<u8>) {
    out.extend_from_slice(&op::DATA.to_be_bytes());
    out.extend_from_slice(&block.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_a_read_request_with_options() {
        let bytes = b"\x00\x01dir/a.bin\x00octet\x00blksize\x001468\x00tsize\x000\x00";
        let Ok(Packet::Rrq(r)) = Packet::decode(bytes) else {
            panic!("not an RRQ");
        };
        assert_eq!(r.filename, b"dir/a.bin");
        assert_eq!(r.mode, Mode::Octet);
        assert_eq!(r.options.len(), 2);
        assert_eq!(r.options[0].name, "blksize");
        assert_eq!(r.options[1].value, "0");
    }

    #[test]
    fn refuses_malformed_requests() {
        assert_eq!(Packet::decode(b"\x00"), Err(PacketError::Short));
        assert_eq!(
            Packet::decode(b"\x00\x01a\x00octet"),
            Err(PacketError::Unterminated)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01\x00octet\x00"),
            Err(PacketError::EmptyName)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01a\x00mail\x00"),
            Err(PacketError::BadMode)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01a\x00octet\x00blksize\x00"),
            Err(PacketError::OddOptions)
        );
        assert_eq!(
            Packet::decode(b"\x00\x09"),
            Err(PacketError::UnknownOpcode(9))
        );
    }

    fn arb_text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._/-]{1,12}"
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        (
            arb_text(),
            prop_oneof![Just(Mode::Octet), Just(Mode::Netascii)],
            prop::collection::vec((arb_text(), arb_text()), 0..4),
        )
            .prop_map(|(name, mode, opts)| Request {
                filename: name.into_bytes(),
                mode,
                options: opts
                    .into_iter()
                    .map(|(name, value)| RawOption { name, value })
                    .collect(),
            })
    }

    fn arb_packet() -> impl Strategy<Value = Packet<'static>> {
        prop_oneof![
            arb_request().prop_map(Packet::Rrq),
            arb_request().prop_map(Packet::Wrq),
            (any::<u16>(), prop::collection::vec(any::<u8>(), 0..600)).prop_map(|(block, d)| {
                Packet::Data {
                    block,
                    data: Vec::leak(d),
                }
            }),
            any::<u16>().prop_map(|block| Packet::Ack { block }),
            (0u16..20, "[ -~]{0,40}").prop_map(|(c, message)| Packet::Error {
                code: ErrorCode::from_code(c),
                message
            }),
            prop::collection::vec((arb_text(), arb_text()), 0..4).prop_map(|o| Packet::Oack(
                o.into_iter()
                    .map(|(name, value)| RawOption { name, value })
                    .collect()
            )),
        ]
    }

    proptest! {
        /// Whatever arrives, decoding returns; what decodes re-encodes to a datagram that
        /// decodes to the same packet.
        #[test]
        fn arbitrary_datagrams_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
            if let Ok(packet) = Packet::decode(&bytes) {
                let again = packet.to_vec();
                prop_assert_eq!(Packet::decode(&again), Ok(packet));
            }
        }

        /// Datagrams that start like a request (the opcode a peer's first packet carries).
        #[test]
        fn request_shaped_datagrams_never_panic(
            op in 1u16..=2,
            body in prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..80),
        ) {
            let mut bytes = op.to_be_bytes().to_vec();
            bytes.extend(body);
            let _ = Packet::decode(&bytes);
        }

        #[test]
        fn packets_round_trip(packet in arb_packet()) {
            let bytes = packet.to_vec();
            prop_assert_eq!(Packet::decode(&bytes), Ok(packet));
        }
    }
}
