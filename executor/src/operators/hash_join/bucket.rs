//! `Bucket`: the rows of one join side under one join key, each with its copy count and
//! degree, held back to back in one buffer in the layout a checkpoint stores them in.
//!
//! Why one buffer: a checkpoint encodes every bucket an epoch touched, whole. With one
//! heap allocation per row that was a pointer chase and four small copies per row, on
//! the actor's thread, before it could pass the barrier on (q7 at 10M events/s keeps
//! 9M bids under their price; the encode stalled the job for seconds). Here a bucket
//! without holes encodes as one copy, restores as one copy, a new row costs no
//! allocation of its own, and a probe reads the rows in order.
//!
//! An entry is `[row length u32][row][count i64][degree i64]`, little-endian; a bucket
//! encodes as `[live entries u32]` followed by its live entries, the layout the join
//! has always stored, so checkpoints written before this change restore. An entry is
//! named by its byte offset ([`EntryId`]), which stays valid until the bucket changes
//! shape (a compaction or a cleaning). A removed entry becomes a hole with count 0;
//! holes are compacted away once they outweigh the live entries.
//!
//! Rows are distinct in a bucket, except that append-only inputs may store equal rows
//! apart. Counts and degrees may be negative for a while: a row's insert and delete
//! can reach the join through different upstream actors in either order within one
//! epoch; at a barrier they have settled.

use hashbrown::HashTable;
use weir_storage::state_table::StateValue;

/// An entry's byte offset in its bucket.
pub type EntryId = usize;

/// Buckets with at least this many entries get a row -> entry index (hot keys).
pub const INDEX_FROM: usize = 32;

/// Bytes before a row (its length) and after it (count and degree).
const HEAD: usize = 4;
const TAIL: usize = 16;

#[derive(Debug, Default, Clone)]
pub struct Bucket {
    /// The entries, back to back; removed ones stay as holes (count 0).
    bytes: Vec<u8>,
    /// Entries that are not holes.
    live: usize,
    /// Bytes taken by holes.
    hole_bytes: usize,
    /// Entries hashed by their row, for large buckets; rebuilt on demand. It holds
    /// offsets, not rows: a copy of every row of a hot key doubled the join state (q9
    /// at 10M events/s keeps millions of bids).
    index: Option<HashTable<EntryId>>,
    /// Which interval bounds' time indexes hold this bucket (not stored: a restored
    /// join indexes its buckets at its first cleaning).
    pub marks: u8,
}

/// The hash a bucket's index files a row under (fixed seeds: an index is rebuilt,
/// never stored).
fn row_hash(row: &[u8]) -> u64 {
    static STATE: std::sync::LazyLock<ahash::RandomState> =
        std::sync::LazyLock::new(|| ahash::RandomState::with_seeds(7, 11, 13, 17));
    STATE.hash_one(row)
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The row of the entry at `at`.
fn row_in(bytes: &[u8], at: EntryId) -> &[u8] {
    let len = u32_at(bytes, at);
    &bytes[at + HEAD..at + HEAD + len]
}

/// Where the count of the entry at `at` is (the degree follows it).
fn tail_of(bytes: &[u8], at: EntryId) -> usize {
    at + HEAD + u32_at(bytes, at)
}

/// The offset just past the entry at `at`.
fn end_of(bytes: &[u8], at: EntryId) -> usize {
    tail_of(bytes, at) + TAIL
}

impl Bucket {
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The live entries, in order.
    pub fn ids(&self) -> impl Iterator<Item = EntryId> + '_ {
        let bytes = &self.bytes;
        let mut at = 0;
        std::iter::from_fn(move || {
            while at < bytes.len() {
                let this = at;
                at = end_of(bytes, this);
                if i64_at(bytes, tail_of(bytes, this)) != 0 {
                    return Some(this);
                }
            }
            None
        })
    }

    /// The live entries' rows, in order.
    pub fn rows(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.ids().map(|at| row_in(&self.bytes, at))
    }

    pub fn row(&self, at: EntryId) -> &[u8] {
        row_in(&self.bytes, at)
    }

    /// How many copies of the row the entry stands for.
    pub fn count(&self, at: EntryId) -> i64 {
        i64_at(&self.bytes, tail_of(&self.bytes, at))
    }

    /// How many rows of the other side the entry matches.
    pub fn degree(&self, at: EntryId) -> i64 {
        i64_at(&self.bytes, tail_of(&self.bytes, at) + 8)
    }

    pub fn set_degree(&mut self, at: EntryId, degree: i64) {
        let t = tail_of(&self.bytes, at) + 8;
        self.bytes[t..t + 8].copy_from_slice(&degree.to_le_bytes());
    }

    fn set_count(&mut self, at: EntryId, count: i64) {
        let t = tail_of(&self.bytes, at);
        self.bytes[t..t + 8].copy_from_slice(&count.to_le_bytes());
    }

    /// The live entry holding `row`, if any.
    pub fn position(&mut self, row: &[u8]) -> Option<EntryId> {
        if self.live < INDEX_FROM {
            return self.ids().find(|&at| self.row(at) == row);
        }
        if self.index.is_none() {
            let mut t = HashTable::with_capacity(self.live);
            let bytes = &self.bytes;
            for at in self.ids() {
                t.insert_unique(row_hash(row_in(bytes, at)), at, |&j| {
                    row_hash(row_in(bytes, j))
                });
            }
            self.index = Some(t);
        }
        let bytes = &self.bytes;
        let index = self.index.as_ref().expect("built above");
        index
            .find(row_hash(row), |&at| row_in(bytes, at) == row)
            .copied()
    }

    /// Adds `sign` copies of `row` (matching `degree` rows of the other side).
    pub fn apply(&mut self, row: &[u8], sign: i64, degree: i64) {
        match self.position(row) {
            Some(at) => {
                let count = self.count(at) + sign;
                self.set_count(at, count);
                self.set_degree(at, degree);
                if count == 0 {
                    self.remove_at(at);
                }
            }
            None => self.push(row, sign, degree),
        }
    }

    /// Adds `count` copies of `row` as a new entry, whether or not an equal one exists.
    /// `count` is not 0 (a count of 0 marks a hole).
    pub fn push(&mut self, row: &[u8], count: i64, degree: i64) {
        debug_assert!(count != 0, "an entry of no copies");
        let need = HEAD + row.len() + TAIL;
        let (len, cap) = (self.bytes.len(), self.bytes.capacity());
        if len + need > cap {
            // Grows by half, not double: most buckets are small and never shrink,
            // and a doubled buffer of 150-byte rows left a third of it unused.
            self.bytes.reserve_exact(need.max(len / 2));
        }
        let at = len;
        self.bytes
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(row);
        self.bytes.extend_from_slice(&count.to_le_bytes());
        self.bytes.extend_from_slice(&degree.to_le_bytes());
        self.live += 1;
        let bytes = &self.bytes;
        if let Some(index) = &mut self.index {
            index.insert_unique(row_hash(row), at, |&j| row_hash(row_in(bytes, j)));
        }
    }

    /// Turns the entry at `at` (its count already 0) into a hole, and compacts the
    /// bucket when holes outweigh its live entries.
    fn remove_at(&mut self, at: EntryId) {
        let bytes = &self.bytes;
        if let Some(index) = &mut self.index {
            if let Ok(slot) = index.find_entry(row_hash(row_in(bytes, at)), |&j| j == at) {
                slot.remove();
            }
        }
        self.live -= 1;
        self.hole_bytes += end_of(bytes, at) - at;
        if self.hole_bytes * 2 > self.bytes.len() {
            self.retain(|_| true);
        }
    }

    /// Keeps the live entries for which `keep(i)` holds (`i`: the entry's rank among
    /// the live ones, in order), dropping holes; entry ids change.
    pub fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let mut kept = Vec::with_capacity(self.bytes.len() - self.hole_bytes);
        let mut live = 0;
        for (i, at) in self.ids().enumerate() {
            if keep(i) {
                kept.extend_from_slice(&self.bytes[at..end_of(&self.bytes, at)]);
                live += 1;
            }
        }
        self.bytes = kept;
        self.live = live;
        self.hole_bytes = 0;
        self.index = None;
    }

    /// Drops the row index (it is rebuilt when next needed).
    #[cfg(test)]
    pub fn drop_index(&mut self) {
        self.index = None;
    }
}

impl StateValue for Bucket {
    fn encode_into(&self, buf: &mut Vec<u8>) {
        buf.reserve(4 + self.bytes.len() - self.hole_bytes);
        buf.extend_from_slice(&(self.live as u32).to_le_bytes());
        if self.hole_bytes == 0 {
            buf.extend_from_slice(&self.bytes);
        } else {
            for at in self.ids() {
                buf.extend_from_slice(&self.bytes[at..end_of(&self.bytes, at)]);
            }
        }
    }

    /// Checks the layout entry by entry, then takes the entries as they are.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = crate::bytes::Reader(bytes);
        let n = r.u32()? as usize;
        let body = r.0;
        let (mut live, mut hole_bytes) = (0, 0);
        for _ in 0..n {
            let before = r.0.len();
            let len = r.u32()? as usize;
            r.take(len)?;
            let count = r.i64()?;
            r.i64()?; // degree
            if count == 0 {
                hole_bytes += before - r.0.len();
            } else {
                live += 1;
            }
        }
        r.is_empty().then(|| Bucket {
            bytes: body.to_vec(),
            live,
            hole_bytes,
            index: None,
            marks: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The bucket as (row, count, degree) triples, in order.
    fn entries(b: &Bucket) -> Vec<(Vec<u8>, i64, i64)> {
        b.ids()
            .map(|at| (b.row(at).to_vec(), b.count(at), b.degree(at)))
            .collect()
    }

    /// The layout the join stored before rows shared one buffer, written out by hand.
    fn old_encoding(entries: &[(Vec<u8>, i64, i64)]) -> Vec<u8> {
        let mut buf = (entries.len() as u32).to_le_bytes().to_vec();
        for (row, count, degree) in entries {
            buf.extend_from_slice(&(row.len() as u32).to_le_bytes());
            buf.extend_from_slice(row);
            buf.extend_from_slice(&count.to_le_bytes());
            buf.extend_from_slice(&degree.to_le_bytes());
        }
        buf
    }

    /// A hot key's bucket (indexed past `INDEX_FROM` rows) agrees with a plain count
    /// per row through inserts, repeats, deletes that leave holes, compactions and
    /// rebuilds of the index; its encoding is always the stored layout of its live
    /// entries and decodes to the same entries.
    #[test]
    fn an_indexed_bucket_counts_like_a_map() {
        let mut bucket = Bucket::default();
        let mut model: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut seed = 42u64;
        let mut saw_holes = false;
        for step in 0..20_000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let row = format!("row{}", (seed >> 33) % 300).into_bytes();
            let have = model.get(&row).copied().unwrap_or(0);
            let sign = if have > 0 && (seed >> 20).is_multiple_of(3) {
                -1
            } else {
                1
            };
            bucket.apply(&row, sign, 0);
            saw_holes |= bucket.hole_bytes > 0;
            let n = model.entry(row).or_insert(0);
            *n += sign;
            if *n == 0 {
                model.retain(|_, n| *n != 0);
            }
            if step.is_multiple_of(5_000) {
                bucket.drop_index(); // as after watermark cleaning
            }
            if step.is_multiple_of(997) {
                let mut seen: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
                for (row, count, _) in entries(&bucket) {
                    assert!(seen.insert(row, count).is_none(), "one entry per row");
                }
                assert_eq!(seen, model, "step {step}");
                assert_eq!(bucket.ids().count(), model.len());
                for (row, n) in &model {
                    let at = bucket.position(row).expect("indexed row found");
                    assert_eq!(bucket.count(at), *n);
                }
                assert!(bucket.position(b"absent").is_none());
                let encoded = bucket.encode();
                assert_eq!(encoded, old_encoding(&entries(&bucket)), "step {step}");
                let decoded = Bucket::decode(&encoded).expect("decodes");
                assert_eq!(entries(&decoded), entries(&bucket));
            }
        }
        assert!(bucket.live > INDEX_FROM, "the index was in use");
        assert!(saw_holes, "deletes left holes");
    }

    /// Appended equal rows stay apart; degrees change in place; a cleaning keeps the
    /// chosen entries in order; a bucket with holes decodes from a stored encoding
    /// that has them (count 0) as the same live entries.
    #[test]
    fn pushes_degrees_retain_and_holes() {
        let mut b = Bucket::default();
        for (i, row) in [b"a".as_slice(), b"bb", b"a", b"cccc"].iter().enumerate() {
            b.push(row, 1, i as i64);
        }
        assert_eq!(b.ids().count(), 4);
        let second = b.ids().nth(1).unwrap();
        b.set_degree(second, 7);
        assert_eq!(b.degree(second), 7);
        assert_eq!(
            b.rows().collect::<Vec<_>>(),
            [b"a".as_slice(), b"bb", b"a", b"cccc"]
        );
        b.retain(|i| i != 0);
        assert_eq!(
            entries(&b),
            [
                (b"bb".to_vec(), 1, 7),
                (b"a".to_vec(), 1, 2),
                (b"cccc".to_vec(), 1, 3)
            ]
        );
        b.apply(b"bb", -1, 0);
        assert_eq!(b.ids().count(), 2);
        assert_eq!(
            entries(&b),
            [(b"a".to_vec(), 1, 2), (b"cccc".to_vec(), 1, 3)]
        );
        assert_eq!(
            Bucket::decode(&b.encode()).map(|d| entries(&d)),
            Some(entries(&b))
        );

        let with_hole = old_encoding(&[(b"x".to_vec(), 0, 0), (b"y".to_vec(), 2, 1)]);
        let d = Bucket::decode(&with_hole).expect("decodes");
        assert_eq!(entries(&d), [(b"y".to_vec(), 2, 1)]);
        assert_eq!(d.encode(), old_encoding(&[(b"y".to_vec(), 2, 1)]));
        assert!(Bucket::decode(&with_hole[..with_hole.len() - 1]).is_none());
        assert!(Bucket::decode(&old_encoding(&[(b"y".to_vec(), 2, 1)])[..3]).is_none());
        let mut wrong_count = with_hole.clone();
        wrong_count[0] = 3;
        assert!(Bucket::decode(&wrong_count).is_none());
    }
}
