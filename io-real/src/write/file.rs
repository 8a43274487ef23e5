//! One whole file through steps 2–5, for `PUT` and each file of a multipart `POST`.

use std::sync::Arc;

use servery_core::broker::ClientError;

use super::publish::{Published, publish};
use super::stream::{BATCH, ChunkSource, copy};
use super::target::{Existing, Target};
use super::{Grant, WriteError, Writer, blocking, temp};

/// Writes `source` to `target`. The caller holds `reservation` (taken before any byte of
/// the body was read); the target lease is taken here, before any byte of this file's
/// content is read.
pub async fn write_file<S: ChunkSource>(
    w: &Writer,
    target: &Target,
    reservation: &mut Grant,
    if_none_match_star: bool,
    source: &mut S,
) -> Result<Published, WriteError> {
    let mut lease = Grant::lease(&w.broker, &target.key, w.settings.write_lock_timeout).await?;
    // `If-None-Match: *` asks for "only if absent" even where overwriting is allowed.
    let overwrite = w.settings.allow_overwrite && !if_none_match_star;
    let worker = w.settings.worker_id;
    let t = target.clone();
    let (temp, file) = blocking(move || {
        match t.existing()? {
            Existing::Directory => return Err(WriteError::IsDirectory),
            Existing::File if if_none_match_star => return Err(WriteError::PreconditionFailed),
            Existing::File if !overwrite => return Err(WriteError::Exists),
            _ => {}
        }
        Ok(temp::create(&t.dir, worker)?)
    })
    .await?;
    let copied = copy(
        source,
        file,
        0,
        BATCH,
        &mut [&mut lease, reservation],
        &w.broker,
    )
    .await;
    copied.result?;
    let Some(file) = copied.file else {
        return Err(WriteError::Io(std::io::Error::other("upload file lost")));
    };
    // A lease confirmed less than a third of its TTL ago cannot have expired; one older
    // than that (a client that stalled, then sent its last bytes) is confirmed now, so
    // nothing is published under a lease the broker has already given to someone else.
    lease.renew_if_due().await?;
    if w.broker.is_closed() {
        return Err(WriteError::Broker(ClientError::ParentGone));
    }
    let root = Arc::clone(&w.root);
    let t = target.clone();
    // The lease and the temporary file's guard go into the blocking job: if hyper drops
    // this handler while the rename runs, the lease is still released only after it.
    let (published, lease) = blocking(move || {
        let mut temp = temp;
        let published = publish(&root, &t, &file, temp.name(), overwrite)?;
        temp.disarm();
        Ok((published, lease))
    })
    .await?;
    lease.release().await;
    Ok(published)
}
