//! Reading the little-endian, length-prefixed layouts operators encode their state in.

/// A cursor over encoded bytes; every read is `None` past the end (damaged state).
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// A `u32` length, then that many bytes.
    pub fn prefixed(&mut self) -> Option<Vec<u8>> {
        let len = self.u32()? as usize;
        Some(self.take(len)?.to_vec())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
