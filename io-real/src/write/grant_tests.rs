//! A WebDAV write's lock check and target lease cost the worker one broker round trip:
//! the worker's broker client against the core's broker, every request counted.

use std::sync::{Arc, Mutex};

use servery_core::broker::{Broker, Owner};
use servery_core::config::RawConfig;
use servery_core::proto::{DavDepth, FrameDecoder, MAX_FRAME_DEFAULT, TargetKey, WorkerMessage};
use servery_core::rng::CoreRng;
use servery_core::{Generation, Instant, WorkerId};
use tokio::sync::mpsc::unbounded_channel;

use super::*;

type Log = Arc<Mutex<Vec<BrokerRequest>>>;

/// The worker's client wired to a core broker in this task; returns the client, the log
/// of requests the broker received, and the broker.
fn wired() -> (BrokerHandle, Log, Arc<Mutex<Broker>>) {
    let limits = RawConfig::default()
        .validate()
        .expect("valid")
        .broker()
        .clone();
    let broker = Arc::new(Mutex::new(Broker::new(limits, CoreRng::from_seed([3; 32]))));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, mut rx) = unbounded_channel::<Vec<u8>>();
    let handle = BrokerHandle::new(8, Duration::from_secs(5), move |frame| {
        let _ = tx.send(frame);
    });
    tokio::spawn({
        let (handle, broker, seen) = (handle.clone(), Arc::clone(&broker), Arc::clone(&seen));
        async move {
            let mut decoder = FrameDecoder::new(MAX_FRAME_DEFAULT);
            while let Some(frame) = rx.recv().await {
                decoder.push(&frame);
                while let Ok(Some(WorkerMessage::Broker { id, request })) =
                    decoder.next_worker_message()
                {
                    seen.lock().expect("log").push(request.clone());
                    let mut b = broker.lock().expect("broker");
                    b.handle_request(Instant::ZERO, owner(1), id, request);
                    while let Some((_, id, reply)) = b.poll_reply() {
                        handle.on_reply(id, reply);
                    }
                }
            }
        }
    });
    (handle, seen, broker)
}

fn owner(worker: u64) -> Owner {
    Owner {
        worker: WorkerId(worker),
        generation: Generation(1),
    }
}

fn key() -> TargetKey {
    TargetKey {
        dir_device: 1,
        dir_inode: 2,
        name: "f".into(),
    }
}

fn check(submitted: Vec<LeaseId>) -> LockCheck {
    LockCheck {
        resource: "/d/f".into(),
        reach: DavReach {
            membership: true,
            tree: false,
        },
        submitted,
    }
}

#[tokio::test]
async fn a_dav_write_lease_is_one_round_trip() {
    let (handle, seen, broker) = wired();
    let granted = Grant::lease_checked(&handle, &key(), Duration::ZERO, Some(&check(vec![])))
        .await
        .expect("no lock: granted");
    assert_eq!(seen.lock().expect("log").len(), 1, "one request");
    granted.release().await;

    // A depth-0 lock on the collection protects its membership: refused without its
    // token, in one request again; granted with it.
    let token = {
        let mut b = broker.lock().expect("broker");
        b.handle_request(
            Instant::ZERO,
            owner(2),
            1,
            BrokerRequest::DavLock {
                resource: "/d".into(),
                depth: DavDepth::Zero,
                owner: String::new(),
                exclusive: true,
                timeout_ms: 60_000,
            },
        );
        match b.poll_reply() {
            Some((_, _, BrokerReply::Granted { id, .. })) => id,
            other => panic!("lock: {other:?}"),
        }
    };
    seen.lock().expect("log").clear();
    let refused = Grant::lease_checked(&handle, &key(), Duration::ZERO, Some(&check(vec![]))).await;
    assert!(matches!(refused, Err(WriteError::Locked)), "{refused:?}");
    let granted = Grant::lease_checked(&handle, &key(), Duration::ZERO, Some(&check(vec![token])))
        .await
        .expect("token submitted: granted");
    let requests = seen.lock().expect("log").clone();
    assert_eq!(requests.len(), 2, "one request per write: {requests:?}");
    assert!(
        requests
            .iter()
            .all(|r| matches!(r, BrokerRequest::DavWriteLease { .. })),
        "{requests:?}"
    );
    granted.release().await;
}
