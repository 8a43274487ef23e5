//! How a read's window backs off when blocks are lost (RFC 7440 leaves the policy to the
//! sender).
//!
//! The window itself stays what was negotiated: a receiver acknowledges every
//! `windowsize` blocks (or after its own timeout), so a sender that sends fewer before
//! waiting makes the client wait out its timeout for every window. What backs off is the
//! burst: how many blocks go out back to back before a pause of [`PACE_GAP`]. A window
//! that does not fit what lies between us and the client — typically a client's socket
//! buffer smaller than `windowsize` blocks of 64 KB — loses its tail when sent at once,
//! every time, and resending it whole loses the same tail again; sent in smaller bursts
//! with a pause between them, it arrives.
//!
//! The rule: every retransmission timeout halves the burst (down to one block); after
//! [`GROW_AFTER`] windows acknowledged to their last block with no timeout, the burst grows
//! by one block, up to the whole window (where no pause is left and the transfer runs as
//! before). Growth is slow on purpose: a burst that just lost its tail is likely to lose it
//! again, and each loss costs a whole timeout.

use core::time::Duration;

/// The pause between two bursts of one window: long enough for a client on the same host
/// or LAN to be scheduled and drain its socket, short next to a timeout (whole seconds).
pub const PACE_GAP: Duration = Duration::from_millis(2);

/// Windows acknowledged whole, with no timeout between, before the burst grows by one.
pub const GROW_AFTER: u32 = 32;

/// The burst in force for one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    window: u64,
    burst: u64,
    /// Windows acknowledged whole since the burst last changed.
    whole: u32,
}

impl Pacing {
    /// Starts with the whole window in one burst.
    pub fn new(window: u64) -> Self {
        let window = window.max(1);
        Pacing {
            window,
            burst: window,
            whole: 0,
        }
    }

    /// Blocks sent back to back before a pause.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The negotiated window: blocks sent before waiting for an ACK.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The retransmission timer fired: halve the burst, never below one block.
    pub fn timed_out(&mut self) {
        self.burst = (self.burst / 2).max(1);
        self.whole = 0;
    }

    /// A window was acknowledged to its last block: after [`GROW_AFTER`] of them, grow the
    /// burst by one block.
    pub fn acknowledged_whole(&mut self) {
        if self.burst >= self.window {
            return;
        }
        self.whole += 1;
        if self.whole >= GROW_AFTER {
            self.burst += 1;
            self.whole = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_halves_the_burst_down_to_one_block() {
        let mut p = Pacing::new(16);
        let mut seen = Vec::new();
        for _ in 0..6 {
            p.timed_out();
            seen.push(p.burst());
        }
        assert_eq!(
            seen,
            vec![8, 4, 2, 1, 1, 1],
            "rule: each timeout halves the burst, never below one block"
        );
        assert_eq!(p.window(), 16, "the window itself stays as negotiated");
    }

    #[test]
    fn the_burst_grows_back_one_block_per_grow_after_whole_windows() {
        let mut p = Pacing::new(4);
        p.timed_out();
        assert_eq!(p.burst(), 2);
        for _ in 1..GROW_AFTER {
            p.acknowledged_whole();
        }
        assert_eq!(
            p.burst(),
            2,
            "rule: the burst grows only after GROW_AFTER whole windows"
        );
        p.acknowledged_whole();
        assert_eq!(p.burst(), 3, "rule: then it grows by one block");
        for _ in 0..GROW_AFTER * 10 {
            p.acknowledged_whole();
        }
        assert_eq!(p.burst(), 4, "rule: never past the negotiated window");
    }

    #[test]
    fn a_timeout_restarts_the_count_towards_growth() {
        let mut p = Pacing::new(8);
        p.timed_out();
        for _ in 1..GROW_AFTER {
            p.acknowledged_whole();
        }
        p.timed_out();
        p.acknowledged_whole();
        assert_eq!(
            p.burst(),
            2,
            "rule: whole windows count towards growth only since the last timeout"
        );
    }
}
