//! A heartbeat's request counters on the wire: only the counters that are not zero, each
//! with its index, in ascending order. A worker that served a few kinds of request sends a
//! few dozen bytes, and the largest encoding (every counter set, every route class's
//! histogram full) is about 2 KiB ([`MAX_STATS_LEN`]), so a heartbeat always fits a frame
//! ([`super::MAX_FRAME_DEFAULT`]). The decoder accepts exactly what the encoder writes:
//! an index out of range, out of order or repeated is a malformed frame.

use super::ProtoError;
use super::wire::{Reader, Writer};
use crate::request_stats::{
    DURATION_BUCKETS, METHODS, ROUTE_CLASSES, RequestStats, STATUS_CLASSES, STORAGE_FAULTS, UNHEARD,
};

/// How many request cells there are (method × status class).
const CELLS: usize = METHODS.len() * STATUS_CLASSES.len();

/// How many duration buckets there are (route class × bucket); each is sent with its
/// index in the flattened table, one byte.
const BUCKETS: usize = ROUTE_CLASSES * DURATION_BUCKETS;
const _: () = assert!(BUCKETS <= u8::MAX as usize, "a bucket's index is one byte");

/// The most bytes [`put_stats`] writes: 2,104 with 9 route classes.
pub const MAX_STATS_LEN: usize = 1
    + CELLS * 10
    + 8
    + 1
    + BUCKETS * 9
    + 1
    + ROUTE_CLASSES * 9
    + 1
    + UNHEARD.len() * 9
    + 1
    + STORAGE_FAULTS.len() * 9;

pub(super) fn put_stats(w: &mut Writer<'_>, s: &RequestStats) {
    // Every heartbeat carries these, and most counters are zero: the scans stop at the
    // last counter set, counted first (in a simulated run, where beats are most of the
    // frames, full scans were a tenth of the time).
    let flat = s.requests.as_flattened();
    // Whether any is set, first: an OR over the table is cheaper than counting it.
    let cells = if flat.iter().fold(0, |any, n| any | n) == 0 {
        0
    } else {
        flat.iter().filter(|n| **n > 0).count()
    };
    w.u8(u8::try_from(cells).unwrap_or(u8::MAX));
    let mut left = cells;
    for (m, row) in s.requests.iter().enumerate() {
        if left == 0 {
            break;
        }
        for (c, &n) in row.iter().enumerate() {
            if n > 0 {
                // Both indices are below 16 by the tables' sizes.
                w.u8(m as u8);
                w.u8(c as u8);
                w.u64(n);
                left -= 1;
            }
        }
    }
    w.u64(s.bytes_sent);
    let flat = s.duration_buckets.as_flattened();
    let buckets = if flat.iter().fold(0, |any, n| any | n) == 0 {
        0
    } else {
        flat.iter().filter(|n| **n > 0).count()
    };
    w.u8(u8::try_from(buckets).unwrap_or(u8::MAX));
    let mut left = buckets;
    for (b, &n) in flat.iter().enumerate() {
        if left == 0 {
            break;
        }
        if n > 0 {
            // Below `BUCKETS`, which fits a byte.
            w.u8(b as u8);
            w.u64(n);
            left -= 1;
        }
    }
    let sums = s.duration_sum_us.iter().filter(|n| **n > 0).count();
    w.u8(sums as u8);
    for (i, &n) in s.duration_sum_us.iter().enumerate() {
        if n > 0 {
            w.u8(i as u8);
            w.u64(n);
        }
    }
    put_listed(w, &s.closed_unheard);
    put_listed(w, &s.storage_faults);
}

/// A short table: how many of its counters are set, then each set one with its index.
fn put_listed(w: &mut Writer<'_>, table: &[u64]) {
    let set = table.iter().filter(|n| **n > 0).count();
    w.u8(set as u8);
    for (i, &n) in table.iter().enumerate() {
        if n > 0 {
            w.u8(i as u8);
            w.u64(n);
        }
    }
}

#[cfg(test)]
pub(super) fn get_stats(r: &mut Reader<'_>) -> Result<RequestStats, ProtoError> {
    let mut s = RequestStats::default();
    get_stats_into(r, &mut s)?;
    Ok(s)
}

/// Decodes into `s`, which must be all zero (a fresh table): the decoder fills the table
/// where it will live, behind its pointer, instead of building it and copying it there.
pub(super) fn get_stats_into(r: &mut Reader<'_>, s: &mut RequestStats) -> Result<(), ProtoError> {
    let cells = usize::from(r.u8()?);
    if cells > CELLS {
        return Err(invalid("request cells", cells as u64));
    }
    let mut next = 0usize;
    for _ in 0..cells {
        let m = usize::from(r.u8()?);
        let c = usize::from(r.u8()?);
        if m >= METHODS.len() {
            return Err(invalid("method index", m as u64));
        }
        if c >= STATUS_CLASSES.len() {
            return Err(invalid("status class", c as u64));
        }
        let cell = m * STATUS_CLASSES.len() + c;
        if cell < next {
            return Err(invalid("request cell order", cell as u64));
        }
        next = cell + 1;
        s.requests[m][c] = nonzero(r.u64()?)?;
    }
    s.bytes_sent = r.u64()?;
    let buckets = usize::from(r.u8()?);
    if buckets > BUCKETS {
        return Err(invalid("duration buckets", buckets as u64));
    }
    let mut next = 0usize;
    for _ in 0..buckets {
        let b = usize::from(r.u8()?);
        if b >= BUCKETS || b < next {
            return Err(invalid("duration bucket", b as u64));
        }
        next = b + 1;
        s.duration_buckets[b / DURATION_BUCKETS][b % DURATION_BUCKETS] = nonzero(r.u64()?)?;
    }
    let sums = usize::from(r.u8()?);
    if sums > ROUTE_CLASSES {
        return Err(invalid("duration sums", sums as u64));
    }
    let mut next = 0usize;
    for _ in 0..sums {
        let i = usize::from(r.u8()?);
        if i >= ROUTE_CLASSES || i < next {
            return Err(invalid("route class", i as u64));
        }
        next = i + 1;
        s.duration_sum_us[i] = nonzero(r.u64()?)?;
    }
    get_listed(r, &mut s.closed_unheard, "unheard reason")?;
    get_listed(r, &mut s.storage_faults, "storage fault")
}

/// Reads what [`put_listed`] writes into `table`, which is all zero.
fn get_listed(
    r: &mut Reader<'_>,
    table: &mut [u64],
    field: &'static str,
) -> Result<(), ProtoError> {
    let set = usize::from(r.u8()?);
    if set > table.len() {
        return Err(invalid(field, set as u64));
    }
    let mut next = 0usize;
    for _ in 0..set {
        let i = usize::from(r.u8()?);
        if i >= table.len() || i < next {
            return Err(invalid(field, i as u64));
        }
        next = i + 1;
        table[i] = nonzero(r.u64()?)?;
    }
    Ok(())
}

/// A listed counter is never zero (the encoder leaves those out).
fn nonzero(n: u64) -> Result<u64, ProtoError> {
    if n == 0 {
        Err(invalid("listed counter", 0))
    } else {
        Ok(n)
    }
}

fn invalid(field: &'static str, value: u64) -> ProtoError {
    ProtoError::InvalidValue { field, value }
}
