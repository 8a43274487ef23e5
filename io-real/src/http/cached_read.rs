//! Reads that never wait for the disk. `preadv2` with `RWF_NOWAIT` copies what the page
//! cache already holds and refuses, instead of blocking, for the rest. Request handling
//! runs these on the worker's async thread and hands only what is not cached to the
//! blocking pool: a hot file costs a copy, not a wake-up of a pool thread and another of
//! the async thread (which cost more CPU than the read itself, measured in
//! docs/benchmarks.md), while a cold file still never stalls the event loop on a disk.
//! See docs/decisions/0007-file-reads-on-the-event-loop.md.

use std::fs::File;
use std::io::IoSliceMut;

use rustix::io::{Errno, ReadWriteFlags};

/// Fills as much of `buf` as the page cache holds, from `offset` on, and returns how many
/// bytes that was. Stops early at end of file, and at the first byte that would have to
/// come from the disk; a file system (or kernel) without `RWF_NOWAIT` reads nothing here.
pub(crate) fn fill_cached(file: &File, offset: u64, buf: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buf.len() {
        let mut slices = [IoSliceMut::new(&mut buf[filled..])];
        match rustix::io::preadv2(
            file,
            &mut slices,
            offset + filled as u64,
            ReadWriteFlags::NOWAIT,
        ) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            // EAGAIN: not cached; EOPNOTSUPP/EINVAL/NOSYS: no RWF_NOWAIT here. Either way
            // the blocking pool reads the rest.
            Err(_) => break,
        }
    }
    filled
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn reads_what_is_cached_and_stops_at_the_end() {
        let dir = std::env::temp_dir().join(format!("servery-cached-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("f");
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&content))
            .expect("write");
        let file = File::open(&path).expect("open");
        // Just written, so cached (or, on a file system without RWF_NOWAIT, nothing).
        let mut buf = vec![0u8; 4_000];
        let n = fill_cached(&file, 3_000, &mut buf);
        assert!(n == 4_000 || n == 0, "{n}");
        if n > 0 {
            assert_eq!(&buf[..], &content[3_000..7_000]);
        }
        let mut tail = vec![0u8; 4_000];
        let n = fill_cached(&file, 8_000, &mut tail);
        assert!(
            n == 2_000 || n == 0,
            "reads stop at the end of the file: {n}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
