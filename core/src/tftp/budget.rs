//! How many bytes a TFTP write may reserve against the upload budget and then receive.
//!
//! The budget is kept on bytes received, not on what the client announces: a write that
//! announces `tsize` reserves that much and may send exactly that much (RFC 2349: the
//! size of the file it is about to send); the block that would take it past is refused
//! as too large, as is the one past the limit for a write that announces nothing (it
//! reserves the whole limit, as an HTTP upload without a Content-Length does). So what
//! all writes in progress can put on disk is never more than what the broker reserved
//! for them.

/// What one write may reserve and receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteAllowance {
    /// Bytes to reserve, and the most the write may receive.
    pub bytes: u64,
    /// The bound is the client's own `tsize` (the refusal says so), not the limit.
    pub announced: bool,
}

/// The write announced more than the limit allows: refused before anything is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the announced size {announced} is larger than the transfer limit ({limit} bytes)")]
#[non_exhaustive]
pub struct OverLimit {
    pub announced: u64,
    pub limit: u64,
}

/// The allowance of a write that announced `announced` (its `tsize`, if any) under
/// `limit` (the smaller of the transfer and upload size limits).
pub fn write_allowance(announced: Option<u64>, limit: u64) -> Result<WriteAllowance, OverLimit> {
    match announced {
        Some(size) if size > limit => Err(OverLimit {
            announced: size,
            limit,
        }),
        Some(size) => Ok(WriteAllowance {
            bytes: size,
            announced: true,
        }),
        None => Ok(WriteAllowance {
            bytes: limit,
            announced: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_size_is_what_the_write_reserves_and_may_receive() {
        assert_eq!(
            write_allowance(Some(10), 50_000),
            Ok(WriteAllowance {
                bytes: 10,
                announced: true
            }),
            "rule: a write announcing tsize may receive only what it announced"
        );
    }

    #[test]
    fn without_a_size_the_write_reserves_the_limit() {
        assert_eq!(
            write_allowance(None, 50_000),
            Ok(WriteAllowance {
                bytes: 50_000,
                announced: false
            }),
            "rule: a write announcing nothing reserves the whole limit"
        );
    }

    #[test]
    fn an_announced_size_over_the_limit_is_refused() {
        assert_eq!(
            write_allowance(Some(50_001), 50_000),
            Err(OverLimit {
                announced: 50_001,
                limit: 50_000
            }),
            "rule: an announced size over the limit is refused before reserving"
        );
        assert!(write_allowance(Some(50_000), 50_000).is_ok());
    }
}
