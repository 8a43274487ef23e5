//! Step 3: copy an upload's content into a file, in batches written on the blocking pool,
//! renewing the grants as time passes and stopping the moment the parent is gone.

use std::fs::File;
use std::future::Future;
use std::io::Write;

use bytes::{Bytes, BytesMut};
use servery_core::broker::ClientError;

use super::{Grant, WriteError, blocking};
use crate::worker::broker::BrokerHandle;

/// Bytes gathered before one blocking write: large enough that the hop to the blocking
/// pool is noise next to the copy, small enough to bound what one upload holds in memory.
pub const BATCH: usize = 256 * 1024;

/// The batch of a resumable upload: smaller, because what a killed worker had not yet
/// written is what its client must send again.
pub const RESUMABLE_BATCH: usize = 32 * 1024;

/// Where an upload's content comes from: a request body, or one part of a multipart body.
/// The source enforces the byte bound and reports a body that ended early.
pub trait ChunkSource: Send {
    /// The next piece of content; `None` at its end.
    fn next_chunk(&mut self) -> impl Future<Output = Option<Result<Bytes, WriteError>>> + Send;
}

/// What [`copy`] did. The file comes back unless a write to it failed, and `written` counts
/// what reached it even when the copy stopped early: a resumable upload keeps those bytes.
#[derive(Debug)]
pub struct Copied {
    pub file: Option<File>,
    pub written: u64,
    pub result: Result<(), WriteError>,
}

/// Copies `source` into `file` at its current position, dropping the first `skip` bytes
/// (a resumed chunk that overlaps what is already held), writing `batch` bytes at a time.
pub async fn copy<S: ChunkSource>(
    source: &mut S,
    file: File,
    mut skip: u64,
    batch: usize,
    grants: &mut [&mut Grant],
    broker: &BrokerHandle,
) -> Copied {
    let mut file = Some(file);
    let mut written = 0u64;
    let mut pending = BytesMut::new();
    let result = loop {
        let next = tokio::select! {
            biased;
            // Nothing backs our grants once the parent is gone: stop now, so nothing is
            // published by a worker the broker no longer answers for.
            () = broker.closed() => break Err(WriteError::Broker(ClientError::ParentGone)),
            next = source.next_chunk() => next,
        };
        let end = match next {
            Some(Ok(mut chunk)) => {
                if skip > 0 {
                    let drop_now = skip.min(chunk.len() as u64);
                    skip -= drop_now;
                    let _ = chunk.split_to(drop_now as usize);
                }
                pending.extend_from_slice(&chunk);
                if pending.len() < batch {
                    continue;
                }
                None
            }
            Some(Err(e)) => Some(Err(e)),
            None => Some(Ok(())),
        };
        if !pending.is_empty() {
            let mut lost = None;
            for grant in grants.iter_mut() {
                if let Err(e) = grant.renew_if_due().await {
                    lost = Some(e);
                    break;
                }
            }
            if let Some(e) = lost {
                break Err(e);
            }
            // A growing reservation grows before the bytes it must cover are written.
            let covered = written + pending.len() as u64;
            for grant in grants.iter_mut() {
                if let Err(e) = grant.cover(covered).await {
                    lost = Some(e);
                    break;
                }
            }
            if let Some(e) = lost {
                break Err(e);
            }
            let Some(f) = file.take() else {
                break Err(WriteError::Io(std::io::Error::other("file lost")));
            };
            let batch = pending.split().freeze();
            let len = batch.len() as u64;
            match blocking(move || {
                let mut f = f;
                f.write_all(&batch)?;
                Ok(f)
            })
            .await
            {
                Ok(f) => {
                    file = Some(f);
                    written += len;
                }
                Err(e) => break Err(e),
            }
        }
        if let Some(end) = end {
            break end;
        }
    };
    Copied {
        file,
        written,
        result,
    }
}
