//! How much of the service's byte budget (`--max-upload-bytes`) one upload reserves, and
//! how a reservation grows (decision 0064).
//!
//! An upload that says its length (`Content-Length`) reserves exactly that, once. One that
//! does not (a chunked `PUT`, as Finder, davfs2 and rclone send) used to reserve the whole
//! `--max-upload-size` (1 GiB by default), so eight of them filled the default 8 GiB and the
//! ninth was refused. Now it reserves what its client announced in a length hint
//! (`X-Expected-Entity-Length`, `OC-Total-Length`) or, without one, a first step, and grows
//! the reservation before it writes past it: to twice what it holds or to what it needs,
//! whichever is more, never past the upload's limit. Growth asks the broker, which grants
//! it only within the budget, so the reserved total never exceeds the budget and an upload
//! that cannot grow ends (its temporary file removed, nothing published).

/// What an upload of unknown length reserves before its first byte.
pub const FIRST_STEP: u64 = 8 * 1024 * 1024;

/// An upload's reservation before its body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadBudget {
    /// Bytes to reserve now.
    pub bytes: u64,
    /// Whether the reservation grows as bytes arrive (the length was not given).
    pub grows: bool,
}

/// The upload is larger than its limit, by what it said of its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the upload announces {announced} bytes, more than its limit of {limit}")]
#[non_exhaustive]
pub struct TooLarge {
    pub announced: u64,
    pub limit: u64,
}

/// The first reservation of an upload with `length` (its `Content-Length`, exact) or only
/// `hint` (a length its client announced for a body of unknown length), whose content may
/// take at most `limit` bytes.
pub fn first_reservation(
    length: Option<u64>,
    hint: Option<u64>,
    limit: u64,
) -> Result<UploadBudget, TooLarge> {
    if let Some(announced) = length.or(hint).filter(|&n| n > limit) {
        return Err(TooLarge { announced, limit });
    }
    Ok(match (length, hint) {
        (Some(bytes), _) => UploadBudget {
            bytes,
            grows: false,
        },
        (None, Some(bytes)) => UploadBudget { bytes, grows: true },
        (None, None) => UploadBudget {
            bytes: FIRST_STEP.min(limit),
            grows: true,
        },
    })
}

/// The total a growing reservation holding `held` bytes asks for before the upload's
/// content reaches `needed` bytes: at least `needed`, and at least twice `held` (so an
/// upload of n bytes asks the broker O(log n) times), never over `limit`. `None` when
/// `needed` is over the limit (the upload is too large) and `Some(held)` when `held`
/// already covers it.
pub fn next_reservation(held: u64, needed: u64, limit: u64) -> Option<u64> {
    if needed > limit {
        return None;
    }
    if needed <= held {
        return Some(held);
    }
    Some(
        held.saturating_mul(2)
            .max(FIRST_STEP)
            .max(needed)
            .min(limit),
    )
}

/// The totals a growing reservation asks for, in order, until one is granted: the
/// [`next_reservation`], then, should the budget not hold that much, only what is
/// `needed` (so an upload near a full budget still takes what is left, a batch at a time,
/// rather than failing while room remains). Empty when `needed` is over the limit; only
/// `held` when nothing needs to grow.
pub fn growth_ladder(held: u64, needed: u64, limit: u64) -> Vec<u64> {
    match next_reservation(held, needed, limit) {
        None => Vec::new(),
        Some(next) if next > needed.max(held) => vec![next, needed],
        Some(next) => vec![next],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    #[test]
    fn a_known_length_reserves_exactly_it_and_never_grows() {
        let b = first_reservation(Some(10 * MIB), Some(GIB), GIB);
        assert_eq!(
            b,
            Ok(UploadBudget {
                bytes: 10 * MIB,
                grows: false
            })
        );
        assert_eq!(
            first_reservation(Some(GIB + 1), None, GIB),
            Err(TooLarge {
                announced: GIB + 1,
                limit: GIB
            })
        );
    }

    #[test]
    fn a_hint_is_reserved_and_a_body_without_either_starts_at_the_first_step() {
        assert_eq!(
            first_reservation(None, Some(3 * MIB), GIB),
            Ok(UploadBudget {
                bytes: 3 * MIB,
                grows: true
            })
        );
        assert!(first_reservation(None, Some(2 * GIB), GIB).is_err());
        assert_eq!(
            first_reservation(None, None, GIB),
            Ok(UploadBudget {
                bytes: FIRST_STEP,
                grows: true
            })
        );
        assert_eq!(first_reservation(None, None, MIB).map(|b| b.bytes), Ok(MIB));
    }

    #[test]
    fn thirty_two_chunked_uploads_of_ten_mib_fit_the_default_budget() {
        // What each holds once written: the first step, then one doubling.
        let mut held = first_reservation(None, None, GIB).expect("fits").bytes;
        held = next_reservation(held, 10 * MIB, GIB).expect("fits");
        assert_eq!(held, 16 * MIB);
        assert!(32 * held <= 8 * GIB);
    }

    #[test]
    fn growth_doubles_then_stops_at_the_limit() {
        assert_eq!(next_reservation(8 * MIB, 8 * MIB, GIB), Some(8 * MIB));
        assert_eq!(next_reservation(8 * MIB, 8 * MIB + 1, GIB), Some(16 * MIB));
        assert_eq!(next_reservation(8 * MIB, 100 * MIB, GIB), Some(100 * MIB));
        assert_eq!(next_reservation(600 * MIB, 601 * MIB, GIB), Some(GIB));
        assert_eq!(next_reservation(GIB, GIB + 1, GIB), None);
        assert_eq!(next_reservation(0, 1, GIB), Some(FIRST_STEP));
    }

    #[test]
    fn near_a_full_budget_growth_falls_back_to_what_is_needed() {
        assert_eq!(growth_ladder(32 * MIB, 33 * MIB, GIB), [64 * MIB, 33 * MIB]);
        assert_eq!(growth_ladder(32 * MIB, 64 * MIB, 64 * MIB), [64 * MIB]);
        assert_eq!(growth_ladder(32 * MIB, 30 * MIB, GIB), [32 * MIB]);
        assert!(growth_ladder(32 * MIB, GIB + 1, GIB).is_empty());
    }

    proptest! {
        /// A grown reservation covers what is needed, never shrinks, never passes the
        /// limit, and at least doubles (or reaches the limit) when it grows.
        #[test]
        fn growth_covers_and_is_bounded(
            held in 0u64..4 * GIB,
            needed in 0u64..8 * GIB,
            limit in 1u64..8 * GIB,
        ) {
            let held = held.min(limit);
            match next_reservation(held, needed, limit) {
                None => prop_assert!(needed > limit),
                Some(next) => {
                    prop_assert!(next >= needed && next >= held && next <= limit);
                    if next > held {
                        prop_assert!(next >= held.saturating_mul(2).min(limit) || next >= needed);
                        prop_assert!(next == limit || next >= held.saturating_mul(2));
                    }
                }
            }
        }
    }
}
