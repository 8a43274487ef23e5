//! TFTP (RFC 1350 with the RFC 2347–2349 options and RFC 7440 windows) as pure parts: the
//! packet codec, option negotiation, the transfer machines (with the read window's
//! back-off) and a write's share of the upload budget. The parent's TFTP service
//! (`io-real/src/tftp`) drives them over a UDP socket.

pub mod budget;
pub mod options;
pub mod packet;
pub mod transfer;
pub mod window;
