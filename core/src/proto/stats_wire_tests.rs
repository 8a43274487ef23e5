//! A heartbeat's counters round-trip exactly, stay within their bound, and any bytes in
//! their place decode without panicking to an error or to counters that encode back to
//! the same bytes.

use proptest::prelude::*;

use super::wire::{Reader, Writer};
use super::{MAX_STATS_LEN, stats_wire};
use crate::request_stats::{
    DURATION_BUCKETS, METHODS, ROUTE_CLASSES, RequestStats, STATUS_CLASSES, STORAGE_FAULTS, UNHEARD,
};

/// Counters with some cells set (most are zero, as in a real worker's).
pub(crate) fn stats() -> impl Strategy<Value = RequestStats> {
    let cell = prop_oneof![3 => Just(0u64), 1 => any::<u64>()];
    (
        proptest::collection::vec(cell.clone(), METHODS.len() * STATUS_CLASSES.len()),
        any::<u64>(),
        proptest::collection::vec(cell.clone(), ROUTE_CLASSES * DURATION_BUCKETS),
        proptest::collection::vec(cell.clone(), ROUTE_CLASSES),
        proptest::collection::vec(cell.clone(), UNHEARD.len()),
        proptest::collection::vec(cell, STORAGE_FAULTS.len()),
    )
        .prop_map(|(cells, bytes_sent, buckets, sums, unheard, faults)| {
            let mut s = RequestStats {
                bytes_sent,
                ..RequestStats::default()
            };
            for (i, n) in cells.into_iter().enumerate() {
                s.requests[i / STATUS_CLASSES.len()][i % STATUS_CLASSES.len()] = n;
            }
            s.duration_buckets
                .as_flattened_mut()
                .copy_from_slice(&buckets);
            s.duration_sum_us.copy_from_slice(&sums);
            s.closed_unheard.copy_from_slice(&unheard);
            s.storage_faults.copy_from_slice(&faults);
            s
        })
}

/// Every counter set, every class's histogram full: the largest heartbeat a worker can
/// send is exactly the bound.
#[test]
fn the_fullest_counters_fit_their_bound() {
    let full = RequestStats {
        requests: [[u64::MAX; STATUS_CLASSES.len()]; METHODS.len()],
        bytes_sent: u64::MAX,
        duration_buckets: [[u64::MAX; DURATION_BUCKETS]; ROUTE_CLASSES],
        duration_sum_us: [u64::MAX; ROUTE_CLASSES],
        closed_unheard: [u64::MAX; UNHEARD.len()],
        storage_faults: [u64::MAX; STORAGE_FAULTS.len()],
    };
    let bytes = encode(&full);
    assert_eq!(bytes.len(), MAX_STATS_LEN);
    let mut r = Reader { buf: &bytes };
    assert_eq!(stats_wire::get_stats(&mut r), Ok(full));
}

fn encode(s: &RequestStats) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, usize::MAX);
    stats_wire::put_stats(&mut w, s);
    buf
}

proptest! {
    #[test]
    fn counters_round_trip_within_their_bound(s in stats()) {
        let bytes = encode(&s);
        prop_assert!(bytes.len() <= MAX_STATS_LEN);
        let mut r = Reader { buf: &bytes };
        prop_assert_eq!(stats_wire::get_stats(&mut r), Ok(s));
        prop_assert!(r.finish().is_ok());
    }

    #[test]
    fn any_bytes_decode_to_an_error_or_to_their_own_encoding(
        bytes in proptest::collection::vec(any::<u8>(), 0..400)
    ) {
        let mut r = Reader { buf: &bytes };
        if let Ok(s) = stats_wire::get_stats(&mut r) {
            let used = bytes.len() - r.buf.len();
            prop_assert_eq!(encode(&s), bytes[..used].to_vec());
        }
    }

    #[test]
    fn small_indices_and_counts_decode_like_the_encoder_wrote_them(
        raw in proptest::collection::vec((0u8..20, 0u8..8, 0u64..3), 0..12)
    ) {
        // Bytes shaped like an encoding (so not all rejected early): a cell list of
        // small indices, some out of range, out of order, repeated or zero.
        let mut bytes = vec![raw.len() as u8];
        for (m, c, n) in &raw {
            bytes.extend([*m, *c]);
            bytes.extend(n.to_be_bytes());
        }
        bytes.extend([0u8; 8]);
        // No duration bucket, no duration sum, no connection closed unheard, no storage
        // fault.
        bytes.extend([0u8; 4]);
        let mut r = Reader { buf: &bytes };
        let decoded = stats_wire::get_stats(&mut r);
        let canonical = raw.windows(2).all(|w| {
            (usize::from(w[0].0) * STATUS_CLASSES.len() + usize::from(w[0].1))
                < (usize::from(w[1].0) * STATUS_CLASSES.len() + usize::from(w[1].1))
        }) && raw.iter().all(|(m, c, n)| {
            usize::from(*m) < METHODS.len() && usize::from(*c) < STATUS_CLASSES.len() && *n > 0
        });
        prop_assert_eq!(decoded.is_ok(), canonical, "{:?}", raw);
        if let Ok(s) = decoded {
            prop_assert_eq!(encode(&s), bytes);
        }
    }
}
