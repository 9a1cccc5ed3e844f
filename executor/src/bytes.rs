//! Reading the little-endian, length-prefixed layouts operators encode their state in,
//! and writing varints (small numbers stored in few bytes).

/// Appends `v` as an unsigned LEB128 varint: 7 bits per byte, low bits first.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded (small magnitudes of either sign in one byte).
pub fn put_signed_varint(out: &mut Vec<u8>, v: i64) {
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// A cursor over encoded bytes; every read is `None` past the end (damaged state).
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
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

    /// An unsigned LEB128 varint ([`put_varint`]).
    pub fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// A zigzag varint ([`put_signed_varint`]).
    pub fn signed_varint(&mut self) -> Option<i64> {
        let z = self.varint()?;
        Some((z >> 1) as i64 ^ -((z & 1) as i64))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_back() {
        let values = [0, 1, -1, 63, -64, 64, 300, i64::MAX, i64::MIN];
        let mut buf = Vec::new();
        for v in values {
            put_signed_varint(&mut buf, v);
        }
        put_varint(&mut buf, u64::MAX);
        assert_eq!(buf[..3], [0, 2, 1], "small counts take one byte");
        let mut r = Reader(&buf);
        for v in values {
            assert_eq!(r.signed_varint(), Some(v));
        }
        assert_eq!(r.varint(), Some(u64::MAX));
        assert!(r.is_empty());
        assert_eq!(Reader(&[0x80]).varint(), None, "cut short");
    }
}
