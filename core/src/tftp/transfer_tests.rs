use super::*;

const T: Duration = Duration::from_secs(1);

fn params(blksize: u16, windowsize: u16) -> Negotiated {
    Negotiated {
        blksize,
        windowsize,
        timeout: T,
        client_tsize: None,
    }
}

fn at(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

fn blocks(out: &[Out]) -> Vec<u16> {
    out.iter()
        .filter_map(|o| match o {
            Out::Data { block, .. } => Some(*block),
            _ => None,
        })
        .collect()
}

#[test]
fn lockstep_read_sends_an_empty_final_block_for_an_exact_multiple() {
    let (mut s, out) = Sender::start(at(0), params(512, 1), 1024, false, 3);
    assert_eq!(
        out,
        vec![Out::Data {
            block: 1,
            offset: 0,
            len: 512
        }]
    );
    assert_eq!(blocks(&s.on_ack(at(0), 1)), vec![2]);
    assert_eq!(
        s.on_ack(at(0), 2),
        vec![Out::Data {
            block: 3,
            offset: 1024,
            len: 0
        }]
    );
    assert!(s.on_ack(at(0), 3).is_empty());
    assert_eq!(s.status(), Status::Complete);
}

#[test]
fn a_duplicate_ack_is_not_answered() {
    let (mut s, _) = Sender::start(at(0), params(512, 1), 5000, false, 3);
    assert_eq!(blocks(&s.on_ack(at(0), 1)), vec![2]);
    assert!(s.on_ack(at(0), 1).is_empty(), "sorcerer's apprentice");
    assert!(s.on_ack(at(0), 7).is_empty(), "not outstanding");
}

#[test]
fn oack_comes_first_and_block_0_acknowledges_it() {
    let (mut s, out) = Sender::start(at(0), params(1468, 4), 10_000, true, 3);
    assert_eq!(out, vec![Out::Oack]);
    assert!(s.on_ack(at(0), 1).is_empty());
    assert_eq!(blocks(&s.on_ack(at(0), 0)), vec![1, 2, 3, 4]);
    // A partial ACK restarts the window after it (RFC 7440).
    assert_eq!(blocks(&s.on_ack(at(0), 2)), vec![3, 4, 5, 6]);
    assert_eq!(blocks(&s.on_ack(at(0), 6)), vec![7]);
    assert!(s.on_ack(at(0), 7).is_empty());
    assert_eq!(s.status(), Status::Complete);
}

#[test]
fn block_numbers_roll_over_to_zero() {
    let size = 512 * 70_000 + 3;
    let (mut s, _) = Sender::start(at(0), params(512, 1), size, false, 3);
    let mut block = 1u16;
    let mut sent = 1u64;
    loop {
        let out = s.on_ack(at(0), block);
        let Some(&Out::Data {
            block: next,
            offset,
            ..
        }) = out.first()
        else {
            break;
        };
        sent += 1;
        assert_eq!(offset, (sent - 1) * 512);
        block = next;
    }
    assert_eq!(sent, 70_001);
    assert_eq!(s.status(), Status::Complete);
    assert_eq!(s.acked(), 70_001);
}

#[test]
fn silence_retransmits_then_gives_up() {
    let (mut s, _) = Sender::start(at(0), params(512, 2), 5000, false, 2);
    assert!(s.on_timeout(at(0)).is_empty(), "not yet");
    // Each retransmission starts the window again in a burst backed off (see `window`).
    assert_eq!(blocks(&s.on_timeout(at(1))), vec![1]);
    assert_eq!(blocks(&s.on_timeout(at(2))), vec![1]);
    assert!(s.on_timeout(at(3)).is_empty());
    assert_eq!(s.status(), Status::TimedOut);
    assert_eq!(s.deadline(), None);
}

fn ms(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

#[test]
fn after_a_timeout_the_window_goes_out_in_smaller_bursts_with_pauses() {
    use crate::tftp::window::PACE_GAP;
    let (mut s, out) = Sender::start(at(0), params(512, 4), 100_000, false, 5);
    assert_eq!(
        blocks(&out),
        vec![1, 2, 3, 4],
        "no loss yet: the window at once"
    );
    assert_eq!(s.deadline(), Some(at(1)), "nothing paced without a loss");
    // Block 4 was lost (a client buffer that holds three): the client re-acknowledges 0
    // at most; our timer fires.
    assert_eq!(
        blocks(&s.on_timeout(at(1))),
        vec![1, 2],
        "rule: a timeout halves the burst the window is resent in"
    );
    let pause = at(1) + PACE_GAP;
    assert_eq!(
        s.deadline(),
        Some(pause),
        "the next burst is due after the pause"
    );
    assert!(
        s.on_timeout(ms(1001)).is_empty(),
        "not before the pause ends"
    );
    assert_eq!(
        blocks(&s.on_timeout(pause)),
        vec![3, 4],
        "rule: the rest of the window follows after the pause, the window kept whole"
    );
    assert_eq!(
        s.deadline(),
        Some(at(2)),
        "all out: only the retry deadline"
    );
    // The client's ACK of the whole window: the next one goes out in bursts of two.
    assert_eq!(blocks(&s.on_ack(at(1), 4)), vec![5, 6]);
    assert_eq!(s.burst(), 2);
}

#[test]
fn an_ack_of_a_block_sent_before_the_back_off_is_progress() {
    let (mut s, _) = Sender::start(at(0), params(512, 8), 100_000, false, 5);
    assert_eq!(blocks(&s.on_timeout(at(1))), vec![1, 2, 3, 4]);
    // The first window's ACK arrives late: it names block 8, sent before the timeout.
    assert_eq!(blocks(&s.on_ack(at(1), 8)), vec![9, 10, 11, 12]);
    assert_eq!(s.acked(), 8);
}

#[test]
fn progress_resets_the_retry_count() {
    let (mut s, _) = Sender::start(at(0), params(512, 1), 5000, false, 1);
    assert_eq!(blocks(&s.on_timeout(at(1))), vec![1]);
    assert_eq!(blocks(&s.on_ack(at(1), 1)), vec![2]);
    assert_eq!(s.deadline(), Some(at(2)));
    assert_eq!(blocks(&s.on_timeout(at(2))), vec![2]);
    assert_eq!(s.status(), Status::Running);
}

#[test]
fn write_acks_each_window_and_the_short_final_block() {
    let (mut r, first) = Receiver::start(at(0), params(512, 2), false, 3, 10_000);
    assert_eq!(first, Out::Ack { block: 0 });
    assert_eq!(
        r.on_data(at(0), 1, 512),
        Received::Write {
            offset: 0,
            len: 512,
            ack: None
        }
    );
    assert_eq!(
        r.on_data(at(0), 2, 512),
        Received::Write {
            offset: 512,
            len: 512,
            ack: Some(2)
        }
    );
    // A gap: say where we are.
    assert_eq!(r.on_data(at(0), 4, 512), Received::Skip { ack: Some(2) });
    assert_eq!(
        r.on_data(at(0), 3, 10),
        Received::Write {
            offset: 1024,
            len: 10,
            ack: Some(3)
        }
    );
    assert_eq!(r.status(), Status::Complete);
    assert_eq!(r.bytes(), 1034);
    // The final ACK was lost: the repeat is acknowledged again.
    assert_eq!(r.on_data(at(1), 3, 10), Received::Skip { ack: Some(3) });
}

#[test]
fn write_refuses_more_than_the_limit_and_oversized_blocks() {
    let (mut r, first) = Receiver::start(at(0), params(512, 1), true, 3, 600);
    assert_eq!(first, Out::Oack);
    assert!(matches!(r.on_data(at(0), 1, 512), Received::Write { .. }));
    assert_eq!(r.on_data(at(0), 2, 100), Received::TooLarge);
    assert_eq!(r.status(), Status::Aborted);
    let (mut r, _) = Receiver::start(at(0), params(512, 1), false, 3, 600);
    assert_eq!(r.on_data(at(0), 1, 513), Received::Illegal);
}

#[test]
fn a_write_receives_no_more_than_its_allowance() {
    use crate::tftp::budget::write_allowance;
    // Announced 10 bytes under a 50,000-byte limit: its first full block is refused.
    let allowance = write_allowance(Some(10), 50_000).expect("within the limit");
    let (mut r, _) = Receiver::start(at(0), params(512, 1), true, 3, allowance.bytes);
    assert_eq!(
        r.on_data(at(0), 1, 512),
        Received::TooLarge,
        "rule: a write may not receive past the size it announced"
    );
    let allowance = write_allowance(Some(10), 50_000).expect("within the limit");
    let (mut r, _) = Receiver::start(at(0), params(512, 1), true, 3, allowance.bytes);
    assert!(matches!(r.on_data(at(0), 1, 10), Received::Write { .. }));
    assert_eq!(r.status(), Status::Complete);
}

#[test]
fn a_silent_writer_is_dropped_after_its_retries() {
    let (mut r, _) = Receiver::start(at(0), params(512, 1), true, 1, 600);
    assert_eq!(r.on_timeout(at(1)), Some(Out::Oack));
    assert_eq!(r.on_timeout(at(2)), None);
    assert_eq!(r.status(), Status::TimedOut);
}
