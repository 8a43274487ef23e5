//! Primitive field encoding: big-endian integers and length-prefixed UTF-8.

use super::ProtoError;

/// Writes a message's fields into a frame of at most `max` payload bytes. It counts every
/// byte the message needs but stops copying at the first field that would not fit, so a
/// message far over the limit costs no more than the limit to measure; the encoder then
/// cuts, splits or refuses it (see `codec`). With `max` 0 it only measures.
pub(crate) struct Writer<'a> {
    buf: &'a mut Vec<u8>,
    /// Bytes the message needs so far, written or not.
    len: usize,
    max: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut Vec<u8>, max: usize) -> Self {
        Writer { buf, len: 0, max }
    }

    /// Bytes the fields written so far need (all of them, also those not copied).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn put(&mut self, bytes: &[u8]) {
        self.len = self.len.saturating_add(bytes.len());
        if self.len <= self.max {
            self.buf.extend_from_slice(bytes);
        }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.put(&v.to_be_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.put(&v.to_be_bytes());
    }
    pub(crate) fn u128(&mut self, v: u128) {
        self.put(&v.to_be_bytes());
    }
    pub(crate) fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    /// A length-prefixed string. One longer than `u32::MAX` bytes is longer than any
    /// frame (`max` never exceeds `u32::MAX`), so its saturated prefix is never copied.
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.put(s.as_bytes());
    }
    /// A count of list items (a list a frame can hold has far fewer than `u32::MAX`).
    pub(crate) fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.buf.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, ProtoError> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_be_bytes(b))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, ProtoError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(b))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, ProtoError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
    pub(crate) fn u128(&mut self) -> Result<u128, ProtoError> {
        let mut b = [0u8; 16];
        b.copy_from_slice(self.take(16)?);
        Ok(u128::from_be_bytes(b))
    }
    pub(crate) fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::InvalidValue {
                field: "bool",
                value: u64::from(v),
            }),
        }
    }
    pub(crate) fn string(&mut self) -> Result<String, ProtoError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        core::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| ProtoError::InvalidUtf8)
    }
    pub(crate) fn finish(self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::TrailingBytes(self.buf.len()))
        }
    }
}
