//! `Partition`: every row of one Top-N / OVER partition, in (sort key, row) order,
//! each with its count.
//!
//! Most partitions are small: a dedup (`ROW_NUMBER() = 1` per bidder and auction)
//! holds one or two rows, an append-only top N at most 2N. Such a partition is a
//! sorted vector with one allocation per row (a B-tree node alone is ~600 bytes, and
//! millions of partitions are the whole state). Past [`SMALL_ROWS`] entries it becomes
//! a B-tree, so inserts into a large partition (an OVER window over a whole table) stay
//! O(log n). Both encode to the same checkpoint format.

use crate::error::{ExecError, Result};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use weir_storage::state_table::StateValue;

/// Entries past which a partition switches to a B-tree.
const SMALL_ROWS: usize = 32;

/// Every row of one partition: (sort key, row) → copies.
#[derive(Debug, Clone)]
pub struct Partition {
    rows: Rows,
}

#[derive(Debug, Clone)]
enum Rows {
    Small(Vec<SmallEntry>),
    Large(BTreeMap<(Vec<u8>, Vec<u8>), i64>),
    /// A Top-1's first row, once, with its row *short*: without the columns that the
    /// partition key and the sort key already hold (see `partition_rows::ShortRows`).
    /// Its encoding says so, so that state of either form reads back as what it is.
    First(SmallEntry),
}

/// The high bit of an encoded partition's entry count: its one row is short.
const SHORT_ROW: u32 = 1 << 31;
/// The next bit: its rows are in [`crate::plain_rows::RowCodec`]'s layout. State
/// written before that layout has its rows in arrow's row format, and reads back
/// through [`Partition::decode_stored`], which says so.
const CODEC_ROWS: u32 = 1 << 30;

/// A sort key and a row in one allocation.
#[derive(Debug, Clone)]
struct SmallEntry {
    bytes: Box<[u8]>,
    sort_len: u32,
    copies: i64,
}

impl SmallEntry {
    fn new(sort: &[u8], row: &[u8], copies: i64) -> Self {
        let mut bytes = Vec::with_capacity(sort.len() + row.len());
        bytes.extend_from_slice(sort);
        bytes.extend_from_slice(row);
        SmallEntry {
            bytes: bytes.into_boxed_slice(),
            sort_len: sort.len() as u32,
            copies,
        }
    }

    fn key(&self) -> (&[u8], &[u8]) {
        self.bytes.split_at(self.sort_len as usize)
    }
}

impl Default for Partition {
    fn default() -> Self {
        Partition {
            rows: Rows::Small(Vec::new()),
        }
    }
}

impl Partition {
    /// Entries (distinct rows, whatever their count).
    pub fn len(&self) -> usize {
        match &self.rows {
            Rows::Small(v) => v.len(),
            Rows::Large(m) => m.len(),
            Rows::First(_) => 1,
        }
    }

    /// Whether this is a Top-1's first row with its row short ([`Self::first`]).
    pub fn is_short(&self) -> bool {
        matches!(self.rows, Rows::First(_))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry in order: (sort key, row, copies).
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8], i64)> {
        let (small, large) = match &self.rows {
            Rows::Small(v) => (Some(v.iter()), None),
            Rows::First(e) => (Some(std::slice::from_ref(e).iter()), None),
            Rows::Large(m) => (None, Some(m.iter())),
        };
        let small = small.into_iter().flatten().map(|e| {
            let (sort, row) = e.key();
            (sort, row, e.copies)
        });
        let large = large
            .into_iter()
            .flatten()
            .map(|((sort, row), n)| (sort.as_slice(), row.as_slice(), *n));
        small.chain(large)
    }

    /// The partition's rows in order, each as many times as it is present (rows with a
    /// negative count, a delete ahead of its insert, are not present yet).
    pub fn present(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries()
            .flat_map(|(sort, row, n)| std::iter::repeat_n((sort, row), n.max(0) as usize))
    }

    /// Adds `sign` copies of a row (negative: a delete, which may arrive before its
    /// insert through another upstream actor within an epoch).
    pub fn add(&mut self, sort: &[u8], row: &[u8], sign: i64) {
        if let Rows::First(e) = &self.rows {
            // (Operators read a short row back into their own form at load; this
            // only keeps the partition whole if one ever gets here.)
            self.rows = Rows::Small(vec![e.clone()]);
        }
        match &mut self.rows {
            Rows::Small(v) => {
                match v.binary_search_by(|e| e.key().cmp(&(sort, row))) {
                    Ok(i) => {
                        v[i].copies += sign;
                        if v[i].copies == 0 {
                            v.remove(i);
                        }
                    }
                    Err(i) => v.insert(i, SmallEntry::new(sort, row, sign)),
                }
                if v.len() > SMALL_ROWS {
                    self.grow();
                }
            }
            Rows::Large(m) => match m.entry((sort.to_vec(), row.to_vec())) {
                Entry::Occupied(mut e) => {
                    *e.get_mut() += sign;
                    if *e.get() == 0 {
                        e.remove();
                    }
                }
                Entry::Vacant(e) => {
                    e.insert(sign);
                }
            },
            Rows::First(_) => unreachable!("made small above"),
        }
    }

    /// A partition of one row, once. A Top-1 over an append-only input keeps just
    /// its first row: one entry in a vector of one (a vector grown by inserts holds
    /// room for four, 96 bytes more per partition, and q18 has millions).
    pub fn only(sort: &[u8], row: &[u8]) -> Self {
        // `vec![x]` allocates exactly one slot.
        Partition {
            rows: Rows::Small(vec![SmallEntry::new(sort, row, 1)]),
        }
    }

    /// A Top-1's first row, once, its row short (the columns the key and the sort
    /// key hold left out): one entry, without a vector around it.
    pub fn first(sort: &[u8], row: &[u8]) -> Self {
        Partition {
            rows: Rows::First(SmallEntry::new(sort, row, 1)),
        }
    }

    /// This partition with its rows replaced by what `convert` makes of them (all
    /// rows in one call, in entry order, one row back for each); the sort keys and
    /// counts stay.
    pub fn map_rows(
        &self,
        convert: impl FnOnce(Vec<&[u8]>) -> Result<Vec<Vec<u8>>>,
    ) -> Result<Partition> {
        let rows = convert(self.entries().map(|(_, row, _)| row).collect())?;
        if rows.len() != self.len() {
            return Err(ExecError::Internal(format!(
                "{} rows converted into {}",
                self.len(),
                rows.len()
            )));
        }
        let mut entries = self.entries().zip(rows);
        if self.is_short() || self.len() == 1 {
            let ((sort, _, copies), row) = entries.next().expect("one entry, counted");
            return Ok(match (self.is_short(), copies) {
                (true, _) => Partition::first(sort, &row),
                // One row once (a Top-1 keeping whole rows): no vector room to spare.
                (false, 1) => Partition::only(sort, &row),
                (false, _) => Partition::default().with(sort, &row, copies),
            });
        }
        Ok(
            entries.fold(Partition::default(), |p, ((sort, _, copies), row)| {
                p.with(sort, &row, copies)
            }),
        )
    }

    /// This partition with `copies` of a row added.
    fn with(mut self, sort: &[u8], row: &[u8], copies: i64) -> Self {
        self.add(sort, row, copies);
        self
    }

    /// An encoded partition, and whether its rows are in arrow's row format (state
    /// written before [`CODEC_ROWS`], converted with [`Self::map_rows`]).
    pub fn decode_stored(bytes: &[u8]) -> Option<(Self, bool)> {
        let mut r = crate::bytes::Reader(bytes);
        let count = r.u32()?;
        let ordered_rows = count & CODEC_ROWS == 0;
        let entries = count & !(SHORT_ROW | CODEC_ROWS);
        if count & SHORT_ROW != 0 {
            let (sort, row) = (r.prefixed()?, r.prefixed()?);
            let copies = r.i64()?;
            let p = (entries == 1 && copies == 1).then(|| Partition::first(&sort, &row))?;
            return Some((p, ordered_rows));
        }
        let mut p = Partition::default();
        for _ in 0..entries {
            let sort = r.prefixed()?;
            let row = r.prefixed()?;
            p.add(&sort, &row, r.i64()?);
        }
        Some((p, ordered_rows))
    }

    /// Encoded as a build before [`CODEC_ROWS`] wrote it (its rows must already be in
    /// arrow's row format): tests of reading such state.
    #[cfg(test)]
    pub(crate) fn encode_as_before_codec_rows(&self) -> Vec<u8> {
        let mut bytes = self.encode();
        let count = u32::from_le_bytes(bytes[..4].try_into().expect("a count"));
        bytes[..4].copy_from_slice(&(count & !CODEC_ROWS).to_le_bytes());
        bytes
    }

    fn grow(&mut self) {
        if let Rows::Small(v) = &mut self.rows {
            let m = std::mem::take(v)
                .into_iter()
                .map(|e| {
                    let (sort, row) = e.key();
                    ((sort.to_vec(), row.to_vec()), e.copies)
                })
                .collect();
            self.rows = Rows::Large(m);
        }
    }

    /// Drops the rows past the first `rows` present ones (and, with `ties`, past those
    /// tied with the last kept). Runs once the partition holds twice as many entries,
    /// so an insert costs O(1) amortised.
    pub fn keep_leading(&mut self, rows: u64, ties: bool) {
        if (self.len() as u64) <= rows.saturating_mul(2).max(2) {
            return;
        }
        // The entry holding the `rows`-th present copy stays whole (its other copies
        // are duplicates of a kept row); with `ties`, so do those with its sort key.
        let kept = {
            let mut seen = 0u64;
            let mut entries = self.entries().enumerate();
            let Some((boundary, (boundary_sort, _, _))) = entries.find(|(_, (_, _, n))| {
                seen += (*n).max(0) as u64;
                seen >= rows
            }) else {
                return;
            };
            let tied = entries.take_while(|(_, (sort, _, _))| ties && *sort == boundary_sort);
            boundary + 1 + tied.count()
        };
        match &mut self.rows {
            Rows::Small(v) => v.truncate(kept),
            Rows::Large(m) => {
                if let Some(first_dropped) = m.keys().nth(kept).cloned() {
                    m.split_off(&first_dropped);
                }
            }
            Rows::First(_) => {}
        }
    }
}

impl StateValue for Partition {
    fn encode_into(&self, buf: &mut Vec<u8>) {
        let size = 4 + self
            .entries()
            .map(|(sort, row, _)| 16 + sort.len() + row.len())
            .sum::<usize>();
        buf.reserve(size);
        let short = if self.is_short() { SHORT_ROW } else { 0 };
        buf.extend_from_slice(&(self.len() as u32 | short | CODEC_ROWS).to_le_bytes());
        for (sort, row, n) in self.entries() {
            for part in [sort, row] {
                buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
                buf.extend_from_slice(part);
            }
            buf.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// Rows in either layout, as stored: operators load through
    /// [`Partition::decode_stored`], which tells them apart.
    fn decode(bytes: &[u8]) -> Option<Self> {
        Self::decode_stored(bytes).map(|(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(entries: &[(&str, &str, i64)]) -> Partition {
        let mut p = Partition::default();
        for (s, r, n) in entries {
            p.add(s.as_bytes(), r.as_bytes(), *n);
        }
        p
    }

    fn sorts(p: &Partition) -> Vec<(String, i64)> {
        p.entries()
            .map(|(s, r, n)| {
                let s = String::from_utf8_lossy(s);
                (format!("{s}{}", String::from_utf8_lossy(r)), n)
            })
            .collect()
    }

    #[test]
    fn append_only_top_keeps_the_leading_rows_and_ties() {
        let rows = [
            ("a", "1", 1),
            ("b", "1", 2),
            ("c", "1", 1),
            ("c", "2", 1),
            ("d", "1", 1),
            ("e", "1", 1),
            ("f", "1", 1),
        ];
        // Top 3 by row number: a, b (two copies) — the entry holding the 3rd copy.
        let mut p = partition(&rows);
        p.keep_leading(3, false);
        assert_eq!(sorts(&p), vec![("a1".into(), 1), ("b1".into(), 2)]);
        // Top 3 by rank: c1 is 3rd, and c2 ties with it.
        let mut single = rows;
        single[1].2 = 1;
        let mut p = partition(&single);
        p.keep_leading(3, true);
        assert_eq!(
            sorts(&p),
            vec![
                ("a1".into(), 1),
                ("b1".into(), 1),
                ("c1".into(), 1),
                ("c2".into(), 1)
            ]
        );
        // Small partitions are left alone (trimming is amortised), and so is an
        // unbounded top.
        let mut p = partition(&rows[..4]);
        p.keep_leading(3, false);
        assert_eq!(p.len(), 4);
        let mut p = partition(&rows);
        p.keep_leading(u64::MAX, false);
        assert_eq!(p.len(), 7);
    }

    /// The same adds, in a shuffled order, give the same entries whether the
    /// partition stays small or grows into a B-tree, and both trim alike.
    #[test]
    fn small_and_large_partitions_agree() {
        for n in [5usize, SMALL_ROWS, 3 * SMALL_ROWS] {
            let mut p = Partition::default();
            let mut expected = BTreeMap::new();
            for i in 0..n {
                let k = (i * 7919) % n;
                let (sort, row) = (vec![(k / 3) as u8], vec![k as u8]);
                p.add(&sort, &row, 1);
                *expected.entry((sort.clone(), row.clone())).or_insert(0) += 1;
                if k % 4 == 0 {
                    p.add(&sort, &row, -1);
                    expected.remove(&(sort, row));
                }
            }
            let got: Vec<_> = p
                .entries()
                .map(|(s, r, n)| ((s.to_vec(), r.to_vec()), n))
                .collect();
            let want: Vec<_> = expected.into_iter().collect();
            assert_eq!(got, want, "{n} rows");
            let mut q = Partition::decode(&p.encode()).unwrap();
            assert_eq!(sorts(&q), sorts(&p));
            q.keep_leading(3, true);
            p.keep_leading(3, true);
            assert_eq!(sorts(&q), sorts(&p));
            assert!(
                p.len() >= 3 && p.len() < n.max(4),
                "{n} rows trimmed to {}",
                p.len()
            );
        }
    }

    #[test]
    fn partition_state_round_trips() {
        let mut p = Partition::default();
        p.add(&[1], &[2, 3], 2);
        p.add(&[0], &[], -1);
        let back = Partition::decode(&p.encode()).unwrap();
        assert_eq!(sorts(&back), sorts(&p));
        assert_eq!(back.present().count(), 2);
    }

    #[test]
    fn a_short_first_row_round_trips_as_short() {
        let p = Partition::first(&[7, 8], &[9]);
        let back = Partition::decode(&p.encode()).unwrap();
        assert!(back.is_short());
        assert_eq!(sorts(&back), vec![("\u{7}\u{8}\u{9}".to_string(), 1)]);
        let full = Partition::only(&[7, 8], &[9]);
        assert!(!Partition::decode(&full.encode()).unwrap().is_short());
        assert_ne!(p.encode(), full.encode(), "the encoding says which");
    }

    /// State from before the plain row layout (no `CODEC_ROWS` bit) says so, and its
    /// rows convert with their sort keys, counts and shortness kept.
    #[test]
    fn rows_stored_in_arrow_s_format_are_told_apart_and_convert() {
        let legacy = Partition::encode_as_before_codec_rows;
        let now = partition(&[("a", "1", 2), ("b", "2", -1)]);
        assert!(!Partition::decode_stored(&now.encode()).unwrap().1);
        let (old, ordered) = Partition::decode_stored(&legacy(&now)).unwrap();
        assert!(ordered);
        let doubled = old
            .map_rows(|rows| Ok(rows.iter().map(|r| [*r, *r].concat()).collect()))
            .unwrap();
        assert_eq!(sorts(&doubled), vec![("a11".into(), 2), ("b22".into(), -1)]);
        let short = Partition::first(b"s", b"r");
        let (old, ordered) = Partition::decode_stored(&legacy(&short)).unwrap();
        assert!(ordered && old.is_short());
        let converted = old.map_rows(|_| Ok(vec![b"q".to_vec()])).unwrap();
        assert!(old.map_rows(|_| Ok(vec![])).is_err(), "a row per row");
        assert!(converted.is_short());
        assert_eq!(sorts(&converted), vec![("sq".into(), 1)]);
    }
}
