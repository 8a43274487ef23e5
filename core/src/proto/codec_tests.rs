//! The codec round-trips every message, rejects malformed frames, and never panics.

use super::*;
use proptest::prelude::*;

fn key() -> impl Strategy<Value = TargetKey> {
    (any::<u64>(), any::<u64>(), ".{0,12}").prop_map(|(d, i, n)| TargetKey {
        dir_device: d,
        dir_inode: i,
        name: n,
    })
}

fn request() -> impl Strategy<Value = BrokerRequest> {
    prop_oneof![
        any::<u64>().prop_map(|bytes| BrokerRequest::ReserveUpload { bytes }),
        (any::<u128>(), any::<u64>()).prop_map(|(id, bytes)| BrokerRequest::GrowReservation {
            id: LeaseId(id),
            bytes
        }),
        any::<u128>().prop_map(|i| BrokerRequest::ReleaseLease { id: LeaseId(i) }),
        key().prop_map(|key| BrokerRequest::AcquireLease { key }),
        (key(), any::<u64>()).prop_map(|(key, bytes)| BrokerRequest::ReservePartial { key, bytes }),
        (
            ".{0,20}",
            any::<bool>(),
            ".{0,8}",
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(resource, inf, owner, exclusive, timeout_ms)| {
                BrokerRequest::DavLock {
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
            }),
        ".{0,40}".prop_map(|record| BrokerRequest::AppendLog { record }),
        any::<u64>().prop_map(|lines| BrokerRequest::LogDroppedLocally { lines }),
        ".{0,50}".prop_map(|token| BrokerRequest::AcmeChallenge { token }),
        any::<u32>().prop_map(|want| BrokerRequest::AcquireProxyGrants { want }),
        any::<u32>().prop_map(|count| BrokerRequest::ReturnProxyGrants { count }),
        any::<u32>().prop_map(|want| BrokerRequest::AcquireCgiGrants { want }),
        any::<u32>().prop_map(|count| BrokerRequest::ReturnCgiGrants { count }),
        (any::<u16>(), any::<bool>())
            .prop_map(|(upstream, ok)| BrokerRequest::UpstreamOutcome { upstream, ok }),
        (
            key(),
            ".{0,20}",
            any::<(bool, bool)>(),
            proptest::collection::vec(any::<u128>(), 0..=crate::proto::MAX_SUBMITTED_TOKENS)
        )
            .prop_map(|(key, resource, (membership, tree), tokens)| {
                BrokerRequest::DavWriteLease {
                    key,
                    check: Box::new(crate::proto::DavWriteCheck {
                        resource,
                        reach: crate::proto::DavReach { membership, tree },
                        submitted: tokens.into_iter().map(LeaseId).collect(),
                    }),
                }
            }),
    ]
}

fn worker_message() -> impl Strategy<Value = WorkerMessage> {
    prop_oneof![
        Just(WorkerMessage::Prepared),
        Just(WorkerMessage::Ready),
        ".{0,30}".prop_map(|error| WorkerMessage::StartupFailed { error }),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            crate::proto::stats_wire_tests::stats()
        )
            .prop_map(
                |(requests, connections, requests_in_progress, memory, stats)| {
                    WorkerMessage::Heartbeat {
                        requests,
                        connections,
                        requests_in_progress,
                        memory,
                        stats: std::sync::Arc::new(stats),
                    }
                }
            ),
        (any::<u64>(), request()).prop_map(|(id, request)| WorkerMessage::Broker { id, request }),
        any::<u32>().prop_map(|pgid| WorkerMessage::ScriptStarted { pgid }),
        any::<u32>().prop_map(|pgid| WorkerMessage::ScriptEnded { pgid }),
    ]
}

fn reply() -> impl Strategy<Value = BrokerReply> {
    prop_oneof![
        (any::<u128>(), any::<u64>()).prop_map(|(i, e)| BrokerReply::Granted {
            id: LeaseId(i),
            expires_in_ms: e
        }),
        Just(BrokerReply::Released),
        Just(BrokerReply::Rejected(Rejection::Saturated)),
        proptest::option::of(".{0,60}").prop_map(BrokerReply::KeyAuthorization),
        any::<u32>().prop_map(|granted| BrokerReply::ProxyGrants { granted }),
        any::<u32>().prop_map(|granted| BrokerReply::CgiGrants { granted }),
        prop::collection::vec((any::<u128>(), ".{0,10}"), 0..4).prop_map(|v| {
            BrokerReply::Locks(
                v.into_iter()
                    .map(|(t, r)| DavLockInfo {
                        token: LeaseId(t),
                        resource: r,
                        depth: DavDepth::Zero,
                        owner: String::new(),
                        exclusive: true,
                        expires_in_ms: 5,
                        generation: Generation(2),
                    })
                    .collect(),
            )
        }),
    ]
}

proptest! {
    #[test]
    fn worker_messages_round_trip_across_any_split(msgs in prop::collection::vec(worker_message(), 1..8), split in any::<prop::sample::Index>()) {
        let mut bytes = Vec::new();
        for m in &msgs { encode_worker(m, &mut bytes).expect("small messages fit"); }
        let cut = split.index(bytes.len() + 1);
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        let mut got = Vec::new();
        dec.push(&bytes[..cut]);
        while let Some(m) = dec.next_worker_message().expect("valid") { got.push(m); }
        dec.push(&bytes[cut..]);
        while let Some(m) = dec.next_worker_message().expect("valid") { got.push(m); }
        prop_assert_eq!(got, msgs);
        prop_assert_eq!(dec.buffered(), 0);
    }

    #[test]
    fn parent_replies_round_trip(id in any::<u64>(), reply in reply()) {
        let msg = ParentMessage::Broker { id, reply };
        let mut bytes = Vec::new();
        encode_parent(&msg, &mut bytes).expect("small replies fit");
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        dec.push(&bytes);
        prop_assert_eq!(dec.next_parent_message().expect("valid"), Some(msg));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut dec = FrameDecoder::new(1024);
        dec.push(&bytes);
        for _ in 0..10 {
            match dec.next_worker_message() {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
}

#[test]
fn the_default_limit_admits_large_records_and_the_decoder_refuses_larger() {
    let record = "x".repeat(200 * 1024);
    let msg = WorkerMessage::Broker {
        id: 1,
        request: BrokerRequest::AppendLog { record },
    };
    let mut bytes = Vec::new();
    encode_worker(&msg, &mut bytes).expect("fits");
    let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
    dec.push(&bytes);
    assert_eq!(dec.next_worker_message().expect("fits"), Some(msg));
    let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
    dec.push(&(MAX_FRAME_DEFAULT as u32 + 1).to_be_bytes());
    assert!(dec.next_worker_message().is_err());
}

#[test]
fn long_streams_compact_without_losing_a_frame() {
    let beat = |n| WorkerMessage::Heartbeat {
        requests: n,
        connections: 1,
        requests_in_progress: 0,
        memory: 0,
        stats: Default::default(),
    };
    let mut bytes = Vec::new();
    for n in 0..6000 {
        encode_worker(&beat(n), &mut bytes).expect("a heartbeat fits");
    }
    // Everything but the last 5 bytes in one push: compaction happens with a
    // partial frame left in the buffer.
    let cut = bytes.len() - 5;
    let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
    dec.push(&bytes[..cut]);
    let mut got = 0u64;
    while let Some(m) = dec.next_worker_message().expect("valid") {
        assert_eq!(m, beat(got));
        got += 1;
    }
    assert_eq!(got, 5999);
    assert!(
        dec.buf.len() < 64 * 1024,
        "consumed bytes were compacted away ({})",
        dec.buf.len()
    );
    dec.push(&bytes[cut..]);
    assert_eq!(dec.next_worker_message().expect("valid"), Some(beat(5999)));
    assert_eq!(dec.buffered(), 0);
    dec.push(&bytes[..17]);
    assert_eq!(
        dec.buf.len(),
        17,
        "a fully consumed buffer is cleared by the next push"
    );
}

#[test]
fn oversized_and_malformed_frames_are_typed_errors_and_sticky() {
    let mut dec = FrameDecoder::new(16);
    dec.push(&100u32.to_be_bytes());
    assert_eq!(
        dec.next_worker_message(),
        Err(ProtoError::FrameTooLarge { len: 100, max: 16 })
    );
    assert!(
        dec.next_worker_message().is_err(),
        "a failed stream stays failed"
    );

    let mut dec = FrameDecoder::new(16);
    dec.push(&[0, 0, 0, 1, 0x99]);
    assert_eq!(dec.next_worker_message(), Err(ProtoError::UnknownTag(0x99)));

    let mut dec = FrameDecoder::new(16);
    dec.push(&[0, 0, 0, 2, 0x41, 0]);
    assert_eq!(dec.next_worker_message(), Err(ProtoError::TrailingBytes(1)));

    let mut dec = FrameDecoder::new(64);
    dec.push(&[0, 0, 0, 7, 0x42, 0, 0, 0, 2, 0xff, 0xfe]);
    assert_eq!(dec.next_worker_message(), Err(ProtoError::InvalidUtf8));

    let mut dec = FrameDecoder::new(64);
    dec.push(&[0, 0, 0, 0]);
    assert_eq!(dec.next_worker_message(), Err(ProtoError::EmptyFrame));
}

/// Beats whose counters have not moved share the table decoded for the first of them; a
/// beat whose counters moved gets its own, and one with a byte after its counters is
/// refused rather than shared.
#[test]
fn unchanged_counters_decode_to_the_table_already_decoded() {
    use std::sync::Arc;

    use crate::request_stats::RequestStats;

    let beat = |requests, stats: &RequestStats| WorkerMessage::Heartbeat {
        requests,
        connections: 0,
        requests_in_progress: 0,
        memory: 0,
        stats: Arc::new(stats.clone()),
    };
    let busy = RequestStats {
        bytes_sent: 7,
        ..RequestStats::default()
    };
    let idle = RequestStats::default();
    let mut bytes = Vec::new();
    for (n, stats) in [(1, &busy), (2, &busy), (3, &idle), (4, &idle)] {
        encode_worker(&beat(n, stats), &mut bytes).expect("a heartbeat fits");
    }
    let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
    dec.push(&bytes);
    let mut tables = Vec::new();
    while let Some(m) = dec.next_worker_message().expect("valid") {
        let WorkerMessage::Heartbeat { stats, .. } = m else {
            panic!("only heartbeats were sent: {m:?}");
        };
        tables.push(stats);
    }
    assert_eq!(tables.len(), 4);
    assert_eq!((*tables[0] == busy, *tables[2] == idle), (true, true));
    assert!(Arc::ptr_eq(&tables[0], &tables[1]), "unchanged: shared");
    assert!(!Arc::ptr_eq(&tables[1], &tables[2]), "changed: decoded");
    assert!(
        Arc::ptr_eq(&tables[2], &tables[3]),
        "unchanged again: shared"
    );

    let mut frame = Vec::new();
    encode_worker(&beat(5, &idle), &mut frame).expect("a heartbeat fits");
    frame.push(0);
    let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) + 1;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    dec.push(&frame);
    assert_eq!(dec.next_worker_message(), Err(ProtoError::TrailingBytes(1)));
}

/// TLS material crosses whole with as many ticket keys as a message may hold (newest
/// first), and a frame with more is malformed: the bound is `MAX_TICKET_KEYS` itself.
#[test]
fn tls_material_with_the_most_ticket_keys_crosses_and_one_more_is_refused() {
    use crate::tls_material::{
        IdentityPem, MAX_TICKET_KEYS, STATELESS_RESET_KEY_LEN, StatelessResetKey,
        TICKET_KEY_NAME_LEN, TICKET_SECRET_LEN, TicketKey, TlsMaterial,
    };
    let material = |keys: usize| TlsMaterial {
        identity: IdentityPem {
            generation: 3,
            cert_pem: "cert".into(),
            key_pem: "key".into(),
        },
        ticket_keys: (0..keys as u64)
            .rev()
            .map(|g| TicketKey {
                generation: g + 1,
                name: [g as u8; TICKET_KEY_NAME_LEN],
                secret: [7; TICKET_SECRET_LEN],
            })
            .collect(),
        ticket_lifetime_secs: 3600,
        stateless_reset_key: StatelessResetKey([1; STATELESS_RESET_KEY_LEN]),
    };
    let decode = |keys: usize| {
        let mut bytes = Vec::new();
        encode_parent(
            &ParentMessage::TlsMaterial(Box::new(material(keys))),
            &mut bytes,
        )
        .expect("the material fits a frame");
        let mut dec = FrameDecoder::new(MAX_FRAME_DEFAULT);
        dec.push(&bytes);
        dec.next_parent_message()
    };
    match decode(MAX_TICKET_KEYS) {
        Ok(Some(ParentMessage::TlsMaterial(got))) => assert_eq!(
            got.ticket_keys.len(),
            MAX_TICKET_KEYS,
            "ticket key bound: the most a message may hold crosses"
        ),
        other => panic!("ticket key bound: {MAX_TICKET_KEYS} keys refused: {other:?}"),
    }
    assert!(
        decode(MAX_TICKET_KEYS + 1).is_err(),
        "ticket key bound: one more than MAX_TICKET_KEYS is malformed"
    );
}
