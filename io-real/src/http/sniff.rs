//! The type of a file whose name says nothing, from its first bytes (decision 0066): text
//! is shown as text, anything else stays a download.

use tokio::runtime::Handle;

use super::lookup::{Content, OpenFile};
use super::mime;

/// The `Content-Type` of `file`: by its name, or, when the name says nothing, by its
/// first [`mime::SNIFF_LEN`] bytes (read on the blocking pool unless already in memory).
/// A read that fails leaves it a download.
pub(super) async fn content_type(file: &OpenFile, runtime: &Handle) -> &'static str {
    if let Some(named) = mime::by_extension(&file.name) {
        return named;
    }
    match &file.content {
        Content::Read(bytes) => mime::content_type_sniffed(&file.name, bytes),
        Content::Handle(handle, _) => {
            let (Ok(handle), Ok(len)) = (handle.try_clone(), usize::try_from(file.len)) else {
                return mime::content_type(&file.name);
            };
            let name = file.name.clone();
            let sniffed = runtime.spawn_blocking(move || {
                let mut head = vec![0u8; len.min(mime::SNIFF_LEN)];
                let read = read_head(&handle, &mut head).ok()?;
                Some(mime::content_type_sniffed(&name, &head[..read]))
            });
            match sniffed.await {
                Ok(Some(ty)) => ty,
                _ => mime::content_type(&file.name),
            }
        }
    }
}

/// Fills `buf` from the start of the file, or as much of it as the file holds.
#[cfg(unix)]
fn read_head(file: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt as _;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(not(unix))]
fn read_head(_: &std::fs::File, _: &mut [u8]) -> std::io::Result<usize> {
    Err(std::io::Error::other("not sniffed on this platform"))
}
