//! The encoders against the frame limit: exactly at it, one byte over it, and a property
//! that whatever an encoder accepts, the decoder at the same limit takes back.

use super::*;
use proptest::prelude::*;

const MAX: usize = MAX_FRAME_DEFAULT;

/// The payload length of every frame in `bytes` (which holds whole frames only).
fn frame_lengths(mut bytes: &[u8]) -> Vec<usize> {
    let mut lengths = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        lengths.push(len);
        bytes = &bytes[4 + len..];
    }
    lengths
}

fn worker_round_trip(bytes: &[u8], max: usize) -> Vec<WorkerMessage> {
    let mut dec = FrameDecoder::new(max);
    dec.push(bytes);
    let mut got = Vec::new();
    while let Some(m) = dec.next_worker_message().expect("the decoder takes it") {
        got.push(m);
    }
    assert_eq!(dec.buffered(), 0);
    got
}

fn parent_round_trip(bytes: &[u8], max: usize) -> Vec<ParentMessage> {
    let mut dec = FrameDecoder::new(max);
    dec.push(bytes);
    let mut got = Vec::new();
    while let Some(m) = dec.next_parent_message().expect("the decoder takes it") {
        got.push(m);
    }
    assert_eq!(dec.buffered(), 0);
    got
}

fn startup_failed(error: String) -> WorkerMessage {
    WorkerMessage::StartupFailed { error }
}

fn log_record(record: String) -> WorkerMessage {
    WorkerMessage::Broker {
        id: 7,
        request: BrokerRequest::AppendLog { record },
    }
}

fn lease(name: String) -> WorkerMessage {
    WorkerMessage::Broker {
        id: 7,
        request: BrokerRequest::AcquireLease {
            key: TargetKey {
                dir_device: 1,
                dir_inode: 2,
                name,
            },
        },
    }
}

fn lock(token: u128, resource: String, owner: String) -> DavLockInfo {
    DavLockInfo {
        token: LeaseId(token),
        resource,
        depth: DavDepth::Infinity,
        owner,
        exclusive: false,
        expires_in_ms: 1000,
        generation: Generation(3),
    }
}

fn locks_reply(id: u64, locks: Vec<DavLockInfo>) -> ParentMessage {
    ParentMessage::Broker {
        id,
        reply: BrokerReply::Locks(locks),
    }
}

/// What each message needs besides its free text: the text that fills a frame exactly.
const STARTUP_FAILED_FIXED: usize = 1 + 4;
const LOG_RECORD_FIXED: usize = 1 + 8 + 1 + 4;
const LEASE_FIXED: usize = 1 + 8 + 1 + 8 + 8 + 4;

#[test]
fn a_free_text_exactly_at_the_limit_is_sent_whole() {
    for (msg, fixed) in [
        (
            startup_failed("e".repeat(MAX - STARTUP_FAILED_FIXED)),
            STARTUP_FAILED_FIXED,
        ),
        (
            log_record("r".repeat(MAX - LOG_RECORD_FIXED)),
            LOG_RECORD_FIXED,
        ),
    ] {
        let mut bytes = Vec::new();
        encode_worker(&msg, &mut bytes).expect("fits exactly");
        assert_eq!(frame_lengths(&bytes), [MAX], "fixed part {fixed}");
        assert_eq!(worker_round_trip(&bytes, MAX), [msg]);
    }
}

#[test]
fn a_free_text_one_byte_over_the_limit_is_cut_and_marked() {
    for msg in [
        startup_failed("e".repeat(MAX - STARTUP_FAILED_FIXED + 1)),
        log_record("r".repeat(MAX - LOG_RECORD_FIXED + 1)),
    ] {
        let mut bytes = Vec::new();
        encode_worker(&msg, &mut bytes).expect("cut to fit");
        assert_eq!(
            frame_lengths(&bytes),
            [MAX],
            "cut to fill the frame exactly"
        );
        let got = worker_round_trip(&bytes, MAX);
        let (sent, cut) = (
            worker_text(&msg).expect("text"),
            worker_text(&got[0]).expect("text"),
        );
        let kept = cut.strip_suffix(TRUNCATION_MARKER).expect("marked");
        assert!(sent.starts_with(kept));
        assert_eq!(kept.len(), sent.len() - 1 - TRUNCATION_MARKER.len());
    }
}

#[test]
fn a_cut_falls_on_a_character_boundary() {
    // Three-byte characters: whatever the budget, the cut lands between two of them.
    for extra in 0..3 {
        let error = "€".repeat((MAX + extra) / 3);
        let mut bytes = Vec::new();
        encode_worker(&startup_failed(error.clone()), &mut bytes).expect("cut to fit");
        let len = frame_lengths(&bytes)[0];
        assert!(len <= MAX && len + 3 > MAX, "{len}");
        let got = worker_round_trip(&bytes, MAX);
        let kept = worker_text(&got[0])
            .and_then(|t| t.strip_suffix(TRUNCATION_MARKER))
            .expect("marked");
        assert!(error.starts_with(kept) && kept.chars().all(|c| c == '€'));
    }
}

#[test]
fn a_name_exactly_at_the_limit_is_sent_and_one_byte_over_is_refused() {
    let fits = lease("n".repeat(MAX - LEASE_FIXED));
    assert!(check_worker(&fits).is_ok());
    let mut bytes = vec![0xAA];
    encode_worker(&fits, &mut bytes).expect("fits exactly");
    assert_eq!(frame_lengths(&bytes[1..]), [MAX]);
    assert_eq!(worker_round_trip(&bytes[1..], MAX), [fits]);

    // A name cannot be cut (it would lease another file): refused, nothing written.
    let over = lease("n".repeat(MAX - LEASE_FIXED + 1));
    let mut bytes = vec![0xAA];
    assert_eq!(
        encode_worker(&over, &mut bytes),
        Err(EncodeError::TooLarge {
            what: "a lease request",
            len: MAX + 1,
            max: MAX
        })
    );
    assert_eq!(bytes, [0xAA]);
    assert!(check_worker(&over).is_err());
}

#[test]
fn paths_in_dav_requests_are_refused_not_cut() {
    let resource = "p".repeat(MAX);
    for request in [
        BrokerRequest::DavQuery {
            resource: resource.clone(),
        },
        BrokerRequest::DavLock {
            resource,
            depth: DavDepth::Zero,
            owner: String::new(),
            exclusive: true,
            timeout_ms: 1,
        },
    ] {
        let msg = WorkerMessage::Broker { id: 1, request };
        let mut bytes = Vec::new();
        assert!(matches!(
            encode_worker(&msg, &mut bytes),
            Err(EncodeError::TooLarge { .. })
        ));
        assert!(bytes.is_empty());
    }
}

#[test]
fn a_lock_list_exactly_at_the_limit_is_one_frame_and_one_byte_over_is_two() {
    // Header 14, each lock 42 + its strings.
    let header = 1 + 8 + 1 + 4;
    let a = lock(1, "/a".into(), String::new());
    let fill = MAX - header - (42 + 2) - 42;
    let at = locks_reply(9, vec![a.clone(), lock(2, "b".repeat(fill), String::new())]);
    let mut bytes = Vec::new();
    encode_parent(&at, &mut bytes).expect("fits exactly");
    assert_eq!(frame_lengths(&bytes), [MAX]);
    assert_eq!(parent_round_trip(&bytes, MAX), [at]);

    let over = locks_reply(9, vec![a, lock(2, "b".repeat(fill + 1), String::new())]);
    let mut bytes = Vec::new();
    encode_parent(&over, &mut bytes).expect("split in two");
    let lengths = frame_lengths(&bytes);
    assert_eq!(lengths.len(), 2);
    assert!(lengths.iter().all(|&l| l <= MAX));
    assert_eq!(parent_round_trip(&bytes, MAX), [over]);
}

#[test]
fn a_long_lock_list_is_split_and_joined_whatever_the_reads() {
    let locks: Vec<_> = (0..40)
        .map(|i| {
            lock(
                i,
                format!("/{i}/{}", "d".repeat(20_000)),
                "o".repeat(i as usize),
            )
        })
        .collect();
    let reply = locks_reply(5, locks);
    let mut bytes = Vec::new();
    encode_parent(&reply, &mut bytes).expect("split");
    encode_parent(&ParentMessage::Commit, &mut bytes).expect("fits");
    let lengths = frame_lengths(&bytes);
    assert!(lengths.len() >= 4, "{lengths:?}");
    assert!(lengths.iter().all(|&l| l <= MAX));
    // Byte by byte in odd-sized reads: nothing comes out before the last part.
    let mut dec = FrameDecoder::new(MAX);
    let mut got = Vec::new();
    for chunk in bytes.chunks(7919) {
        dec.push(chunk);
        while let Some(m) = dec.next_parent_message().expect("valid") {
            got.push(m);
        }
    }
    assert_eq!(got, [reply, ParentMessage::Commit]);
}

#[test]
fn a_lock_list_beyond_the_frame_budget_or_a_lock_beyond_a_frame_is_refused() {
    // At a 100-byte limit two 42-byte locks share a frame: 128 locks take exactly the 64
    // frames a message may have, 130 would take 65.
    let small = |n: u128| {
        (0..n)
            .map(|t| lock(t, String::new(), String::new()))
            .collect()
    };
    let most = locks_reply(1, small(128));
    let mut bytes = Vec::new();
    encode_parent_within(&most, 100, &mut bytes).expect("64 frames");
    assert_eq!(frame_lengths(&bytes).len(), MAX_FRAMES_PER_MESSAGE);
    assert_eq!(parent_round_trip(&bytes, 100), [most]);

    let mut bytes = vec![1, 2, 3];
    assert!(matches!(
        encode_parent_within(&locks_reply(1, small(130)), 100, &mut bytes),
        Err(EncodeError::TooLarge {
            what: "a DAV lock list",
            ..
        })
    ));
    assert_eq!(bytes, [1, 2, 3]);

    let huge = vec![lock(1, "h".repeat(MAX), String::new())];
    assert!(matches!(
        encode_parent(&locks_reply(1, huge.clone()), &mut bytes),
        Err(EncodeError::TooLarge {
            what: "a DAV lock in a lock list",
            ..
        })
    ));
    assert_eq!(bytes, [1, 2, 3]);
    assert!(check_reply(&BrokerReply::Locks(huge)).is_err());
    assert!(check_lock_reportable(&"h".repeat(MAX), "").is_err());
    assert!(check_lock_reportable("/a", "me").is_ok());
}

#[test]
fn the_decoder_refuses_a_split_list_broken_off_or_too_long() {
    let part = |id: u64| {
        let mut bytes = Vec::new();
        frame(&mut bytes, MAX, |w| put_locks_part(w, id, &[])).expect("small");
        bytes
    };
    // A part, then another message before the list's last frame.
    let mut dec = FrameDecoder::new(MAX);
    dec.push(&part(1));
    encode_parent(&ParentMessage::Commit, &mut dec.buf).expect("fits");
    assert_eq!(
        dec.next_parent_message(),
        Err(ProtoError::UnfinishedMessage)
    );
    assert!(dec.next_parent_message().is_err(), "sticky");

    // A part for another request.
    let mut dec = FrameDecoder::new(MAX);
    dec.push(&part(1));
    dec.push(&part(2));
    assert_eq!(
        dec.next_parent_message(),
        Err(ProtoError::UnfinishedMessage)
    );

    // More parts than a message may have.
    let mut dec = FrameDecoder::new(MAX);
    for _ in 0..MAX_FRAMES_PER_MESSAGE {
        dec.push(&part(1));
    }
    assert_eq!(
        dec.next_parent_message(),
        Err(ProtoError::TooManyFrames(MAX_FRAMES_PER_MESSAGE))
    );

    // A part is never a worker message.
    let mut dec = FrameDecoder::new(MAX);
    dec.push(&part(1));
    assert_eq!(
        dec.next_worker_message(),
        Err(ProtoError::UnknownTag(LOCKS_PART))
    );
}

#[test]
fn a_limit_below_the_smallest_message_refuses_everything() {
    let mut bytes = Vec::new();
    assert!(encode_worker_within(&WorkerMessage::Prepared, 0, &mut bytes).is_err());
    assert!(encode_worker_within(&startup_failed("x".into()), 3, &mut bytes).is_err());
    assert!(encode_parent_within(&locks_reply(1, Vec::new()), 13, &mut bytes).is_err());
    assert!(bytes.is_empty());
    encode_parent_within(&locks_reply(1, Vec::new()), 14, &mut bytes).expect("header only");
    assert_eq!(frame_lengths(&bytes), [14]);
}

// ---------------------------------------------------------------------------------------
// Any message, sizes around the limit included.

/// Short texts, texts around the frame limit, and long ones, of one- to four-byte
/// characters (long ones are a repeated character: generating 300 KiB of regex text per
/// case would be slow).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,16}",
        1 => (any::<char>(), (MAX - 64)..(MAX + 64))
            .prop_map(|(c, n)| c.to_string().repeat(n / c.len_utf8())),
        1 => (any::<char>(), 0..(2 * MAX))
            .prop_map(|(c, n)| c.to_string().repeat(n / c.len_utf8())),
    ]
}

fn key() -> impl Strategy<Value = TargetKey> {
    (any::<u64>(), any::<u64>(), text()).prop_map(|(d, i, name)| TargetKey {
        dir_device: d,
        dir_inode: i,
        name,
    })
}

fn request() -> impl Strategy<Value = BrokerRequest> {
    prop_oneof![
        any::<u64>().prop_map(|bytes| BrokerRequest::ReserveUpload { bytes }),
        (any::<u128>(), any::<u64>()).prop_map(|(id, bytes)| BrokerRequest::GrowReservation {
            id: LeaseId(id),
            bytes
        }),
        any::<u128>().prop_map(|i| BrokerRequest::ReleaseReservation { id: LeaseId(i) }),
        key().prop_map(|key| BrokerRequest::AcquireLease { key }),
        any::<u128>().prop_map(|i| BrokerRequest::RenewLease { id: LeaseId(i) }),
        (key(), any::<u64>()).prop_map(|(key, bytes)| BrokerRequest::ReservePartial { key, bytes }),
        key().prop_map(|key| BrokerRequest::AdoptPartial { key }),
        (text(), any::<bool>(), text(), any::<bool>(), any::<u64>()).prop_map(
            |(resource, inf, owner, exclusive, timeout_ms)| BrokerRequest::DavLock {
                resource,
                depth: if inf {
                    DavDepth::Infinity
                } else {
                    DavDepth::Zero
                },
                owner,
                exclusive,
                timeout_ms,
            }
        ),
        (any::<u128>(), any::<u64>()).prop_map(|(t, timeout_ms)| BrokerRequest::DavRefresh {
            token: LeaseId(t),
            timeout_ms
        }),
        text().prop_map(|resource| BrokerRequest::DavQuery { resource }),
        text().prop_map(|record| BrokerRequest::AppendLog { record }),
        any::<u64>().prop_map(|lines| BrokerRequest::LogDroppedLocally { lines }),
        text().prop_map(|token| BrokerRequest::AcmeChallenge { token }),
        (any::<u16>(), any::<bool>())
            .prop_map(|(upstream, ok)| BrokerRequest::UpstreamOutcome { upstream, ok }),
    ]
}

fn worker_message() -> impl Strategy<Value = WorkerMessage> {
    prop_oneof![
        Just(WorkerMessage::Prepared),
        Just(WorkerMessage::Ready),
        text().prop_map(|error| WorkerMessage::StartupFailed { error }),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()).prop_map(
            |(requests, connections, requests_in_progress, memory)| WorkerMessage::Heartbeat {
                requests,
                connections,
                requests_in_progress,
                memory,
                stats: Default::default(),
            }
        ),
        (any::<u64>(), request()).prop_map(|(id, request)| WorkerMessage::Broker { id, request }),
    ]
}

/// Lock lists from empty to several frames long.
fn parent_message() -> impl Strategy<Value = ParentMessage> {
    let any_lock = (any::<u128>(), 0..30_000usize, ".{0,8}", any::<bool>()).prop_map(
        |(t, n, owner, exclusive)| DavLockInfo {
            exclusive,
            ..lock(t, "r".repeat(n), owner)
        },
    );
    prop_oneof![
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(w, g, h, d)| {
            ParentMessage::Hello {
                worker: WorkerId(w),
                generation: Generation(g),
                heartbeat_interval_ms: h,
                drain_timeout_ms: d,
            }
        }),
        Just(ParentMessage::Commit),
        any::<u64>().prop_map(|deadline_ms| ParentMessage::Drain { deadline_ms }),
        prop::collection::vec(any::<u16>(), 0..300)
            .prop_map(|down| ParentMessage::UpstreamHealth { down }),
        (any::<u64>(), any::<u128>(), any::<u64>()).prop_map(|(id, t, e)| {
            ParentMessage::Broker {
                id,
                reply: BrokerReply::Granted {
                    id: LeaseId(t),
                    expires_in_ms: e,
                },
            }
        }),
        (any::<u64>(), prop::collection::vec(any_lock, 0..48))
            .prop_map(|(id, locks)| locks_reply(id, locks)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever `encode_worker` accepts, the decoder at the default limit takes back: the
    /// message itself when it fits, its free text cut and marked when it did not. What
    /// it refuses it leaves unwritten, and `check_worker` says so beforehand.
    #[test]
    fn any_encodable_worker_message_round_trips_at_the_default_limit(msg in worker_message()) {
        let mut bytes = vec![0xEE];
        let encoded = encode_worker(&msg, &mut bytes);
        prop_assert_eq!(encoded.is_ok(), check_worker(&msg).is_ok());
        if let WorkerMessage::Broker { request, .. } = &msg {
            prop_assert_eq!(encoded.is_ok(), check_request(request).is_ok());
        }
        let needed = measure(|w| put_worker(w, &msg));
        match encoded {
            Ok(()) => {
                let lengths = frame_lengths(&bytes[1..]);
                prop_assert_eq!(lengths.len(), 1);
                prop_assert!(lengths[0] <= MAX);
                let got = worker_round_trip(&bytes[1..], MAX);
                prop_assert_eq!(got.len(), 1);
                if needed <= MAX {
                    prop_assert_eq!(&got[0], &msg);
                } else {
                    let (sent, cut) = (worker_text(&msg), worker_text(&got[0]));
                    prop_assert!(sent.is_some() && cut.is_some(), "only free texts are cut");
                    let kept = cut.and_then(|c| c.strip_suffix(TRUNCATION_MARKER));
                    prop_assert!(kept.is_some_and(|k| sent.is_some_and(|s| s.starts_with(k))));
                    // Nothing but the text changed.
                    let restored = match &got[0] {
                        WorkerMessage::StartupFailed { .. } => {
                            startup_failed(sent.unwrap_or_default().into())
                        }
                        WorkerMessage::Broker { id, .. } => WorkerMessage::Broker {
                            id: *id,
                            request: BrokerRequest::AppendLog {
                                record: sent.unwrap_or_default().into(),
                            },
                        },
                        other => other.clone(),
                    };
                    prop_assert_eq!(restored, msg);
                }
            }
            Err(EncodeError::TooLarge { len, max, .. }) => {
                prop_assert_eq!(bytes, vec![0xEE]);
                prop_assert_eq!((len, max), (needed, MAX));
                prop_assert!(needed > MAX && worker_text(&msg).is_none());
            }
        }
    }

    /// Whatever `encode_parent` accepts comes back unchanged — a lock list split over
    /// frames is joined again — and no frame is over the limit.
    #[test]
    fn any_encodable_parent_message_round_trips_at_the_default_limit(
        msg in parent_message(),
        split in any::<prop::sample::Index>(),
    ) {
        let mut bytes = Vec::new();
        let encoded = encode_parent(&msg, &mut bytes);
        if let ParentMessage::Broker { reply, .. } = &msg {
            prop_assert_eq!(encoded.is_ok(), check_reply(reply).is_ok());
        }
        match encoded {
            Ok(()) => {
                prop_assert!(frame_lengths(&bytes).iter().all(|&l| (1..=MAX).contains(&l)));
                let cut = split.index(bytes.len() + 1);
                let mut dec = FrameDecoder::new(MAX);
                dec.push(&bytes[..cut]);
                let mut got = Vec::new();
                while let Some(m) = dec.next_parent_message().expect("valid") { got.push(m); }
                dec.push(&bytes[cut..]);
                while let Some(m) = dec.next_parent_message().expect("valid") { got.push(m); }
                prop_assert_eq!(got, vec![msg]);
            }
            Err(_) => prop_assert!(bytes.is_empty()),
        }
    }
}
