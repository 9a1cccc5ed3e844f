//! `KeyedMerge`: keyed state files applied in order (last write wins, a null value
//! deletes) and streamed out as the live entries in (key group, key) order, one
//! column batch at a time.
//!
//! It is a k-way merge of one sorted run per file. A file written by this merge (a
//! base, or a delta since deltas are written by it too) is in key order and is read
//! in place; a file in another order (a checkpoint's changes in the hash order their
//! state table kept, a delta of an older version) has its entries sorted first (16
//! bytes each, see [`key_order`](crate::key_order)). Nothing is held per key of the base:
//! compacting a chain or restoring it costs the batch being built (and the sorted
//! entries of a file not in key order), not a hash map of the whole state plus a
//! second copy of it (what made compaction q18's peak of memory).
//!
//! The same merge, keeping deletions ([`KeyedMerge::keeping_deletions`]), writes each
//! checkpoint's delta in key order in the first place, so a later compaction reads
//! every file in place and sorts nothing.
//!
//! [`Overlay`] merges two owned streams of batches in key order (one laid over the
//! other): a frozen state table's changes come as such a stream, encoded a batch at a
//! time, and a compaction lays them over the chain's merge without encoding them
//! whole first (which had held a copy of a large checkpoint's changes beside the
//! operator's state).

use crate::key_order;
use crate::keyed_entries::{
    batch_entries, columns, entry_at, Columns, KeyedEntries, KeyedEntriesBuilder,
};
use crate::mapped_pages;
use arrow::array::RecordBatch;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

/// Keyed batches in (key group, key) order, each key once: a frozen table's changes,
/// a merge's output. Owned, so a batch lives only while it is read.
pub type KeyedStream<'a> = Box<dyn Iterator<Item = Result<RecordBatch, OutOfKeyOrder>> + Send + 'a>;

/// A keyed stream whose keys did not strictly increase: merged on, it would write a
/// file out of order (a wrong state after restore), so the merge stops with this.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfKeyOrder;

/// `(key group, key, value | None for a deletion)`, borrowed from a file.
type Entry<'a> = (u32, &'a [u8], Option<&'a [u8]>);

/// A heap item: the head key of run `i`. Among equal keys the later file (higher
/// `i`) comes out first: its write wins.
type Head<'a> = Reverse<(u32, &'a [u8], Reverse<usize>)>;

/// One file's entries in key order, each key once (the file's last write of it).
struct Run<'a> {
    rest: Box<dyn Iterator<Item = Entry<'a>> + Send + 'a>,
    head: Option<Entry<'a>>,
}

pub struct KeyedMerge<'a> {
    runs: Vec<Run<'a>>,
    heap: BinaryHeap<Head<'a>>,
    /// `None` once every run is drained and the last batch sealed.
    builder: Option<KeyedEntriesBuilder>,
    sealed: VecDeque<RecordBatch>,
    /// Emit a key whose last write deletes it (a delta's tombstone), not skip it.
    keep_deletions: bool,
}

impl<'a> KeyedMerge<'a> {
    /// Prepares the merge of `files` (oldest first) into the live entries (a base);
    /// sorts the files not in key order.
    pub fn new(files: &'a [KeyedEntries]) -> Self {
        Self::merging(files, false)
    }

    /// The merge of `files` into a delta: a key whose last write deletes it comes out
    /// as a deletion, which the state it is applied to still needs.
    pub fn keeping_deletions(files: &'a [KeyedEntries]) -> Self {
        Self::merging(files, true)
    }

    fn merging(files: &'a [KeyedEntries], keep_deletions: bool) -> Self {
        let mut merge = KeyedMerge {
            runs: files.iter().map(run_of).collect(),
            heap: BinaryHeap::with_capacity(files.len()),
            builder: Some(KeyedEntriesBuilder::default()),
            sealed: VecDeque::new(),
            keep_deletions,
        };
        for i in 0..merge.runs.len() {
            merge.advance(i);
        }
        merge
    }

    /// Moves run `i` to its next entry.
    fn advance(&mut self, i: usize) {
        let run = &mut self.runs[i];
        run.head = run.rest.next();
        if let Some((kg, key, _)) = run.head {
            self.heap.push(Reverse((kg, key, Reverse(i))));
        }
    }

    /// The next key's last write, in key order (deletions skipped unless kept).
    fn next_write(&mut self) -> Option<Entry<'a>> {
        if let [run] = self.runs.as_mut_slice() {
            // One run is in key order, each key once: no heap, and no comparison that
            // reads the next key (a cache miss per entry of a delta being sorted, a
            // fifth of q18's final upload).
            while let Some(entry) = run.head.take() {
                run.head = run.rest.next();
                if entry.2.is_some() || self.keep_deletions {
                    return Some(entry);
                }
            }
            return None;
        }
        loop {
            let Reverse((kg, key, Reverse(winner))) = self.heap.pop()?;
            let value = self.runs[winner].head.and_then(|(_, _, v)| v);
            self.advance(winner);
            // Older writes of the same key are overwritten.
            while let Some(&Reverse((kg2, key2, Reverse(older)))) = self.heap.peek() {
                if (kg2, key2) != (kg, key) {
                    break;
                }
                self.heap.pop();
                self.advance(older);
            }
            if value.is_some() || self.keep_deletions {
                return Some((kg, key, value));
            }
        }
    }
}

impl Iterator for KeyedMerge<'_> {
    type Item = RecordBatch;

    fn next(&mut self) -> Option<RecordBatch> {
        loop {
            if let Some(batch) = self.sealed.pop_front() {
                return Some(batch);
            }
            let Some((kg, key, value)) = self.next_write() else {
                let last = self.builder.take()?.finish();
                self.sealed.extend(last.into_batches());
                continue;
            };
            let builder = self.builder.as_mut().expect("building until drained");
            builder.push(kg, key, value);
            self.sealed.extend(builder.take_sealed());
        }
    }
}

/// Applies keyed files in order and returns the live entries, sorted by key group and
/// key (so a file's key-group ranges are contiguous).
pub fn merge_keyed(files: &[KeyedEntries]) -> KeyedEntries {
    KeyedEntries::from_sealed(KeyedMerge::new(files).collect())
}

/// Two keyed streams merged into one in key order, `upper`'s write of a key winning
/// over `lower`'s: the chain's merge with a checkpoint's changes laid over it, or
/// one part of a delta over the parts before it. Only the batch each stream is at is
/// held; every key is checked to come after the one before it.
pub struct Overlay<'a> {
    lower: Cursor<'a>,
    upper: Cursor<'a>,
    started: bool,
    /// `None` once both streams are drained (or one failed) and the last batch sealed.
    builder: Option<KeyedEntriesBuilder>,
    sealed: VecDeque<RecordBatch>,
    /// Emit a key whose winning write deletes it, not skip it.
    keep_deletions: bool,
}

impl<'a> Overlay<'a> {
    /// `upper` over `lower`, into the live entries: a deletion removes the key.
    pub fn new(lower: KeyedStream<'a>, upper: KeyedStream<'a>) -> Self {
        Self::laying(lower, upper, false)
    }

    /// `upper` over `lower`, into a delta: a key whose winning write deletes it comes
    /// out as a deletion.
    pub fn keeping_deletions(lower: KeyedStream<'a>, upper: KeyedStream<'a>) -> Self {
        Self::laying(lower, upper, true)
    }

    fn laying(lower: KeyedStream<'a>, upper: KeyedStream<'a>, keep_deletions: bool) -> Self {
        Overlay {
            lower: Cursor::new(lower),
            upper: Cursor::new(upper),
            started: false,
            builder: Some(KeyedEntriesBuilder::default()),
            sealed: VecDeque::new(),
            keep_deletions,
        }
    }

    /// Takes the next key's winning write into the builder; `false` once both
    /// streams are drained.
    fn step(&mut self) -> Result<bool, OutOfKeyOrder> {
        if !self.started {
            self.started = true;
            self.lower.advance()?;
            self.upper.advance()?;
        }
        let order = match (self.lower.head(), self.upper.head()) {
            (None, None) => return Ok(false),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((lkg, lkey, _)), Some((ukg, ukey, _))) => (lkg, lkey).cmp(&(ukg, ukey)),
        };
        let winner = if order == Ordering::Less {
            &self.lower
        } else {
            &self.upper
        };
        let (kg, key, value) = winner.head().expect("a stream with a head");
        if value.is_some() || self.keep_deletions {
            let builder = self.builder.as_mut().expect("building until drained");
            builder.push(kg, key, value);
            self.sealed.extend(builder.take_sealed());
        }
        if order != Ordering::Greater {
            self.lower.advance()?;
        }
        if order != Ordering::Less {
            self.upper.advance()?;
        }
        Ok(true)
    }
}

impl Iterator for Overlay<'_> {
    type Item = Result<RecordBatch, OutOfKeyOrder>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(batch) = self.sealed.pop_front() {
                return Some(Ok(batch));
            }
            self.builder.as_ref()?;
            match self.step() {
                Ok(true) => {}
                Ok(false) => {
                    let last = self.builder.take().expect("checked above").finish();
                    self.sealed.extend(last.into_batches());
                }
                Err(e) => {
                    self.builder = None;
                    self.sealed.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// A keyed stream's position: the batch it is at (owned) and the row in it.
struct Cursor<'a> {
    stream: KeyedStream<'a>,
    batch: Option<RecordBatch>,
    row: usize,
}

impl<'a> Cursor<'a> {
    fn new(stream: KeyedStream<'a>) -> Self {
        Cursor {
            stream,
            batch: None,
            row: 0,
        }
    }

    fn head(&self) -> Option<Entry<'_>> {
        let batch = self.batch.as_ref()?;
        Some(entry_at(columns(batch), self.row))
    }

    /// Moves to the next entry (the first, on a new cursor), which must come after
    /// the one it leaves.
    fn advance(&mut self) -> Result<(), OutOfKeyOrder> {
        if let Some(b) = self.batch.as_ref().filter(|b| self.row + 1 < b.num_rows()) {
            self.row += 1;
            let cols = columns(b);
            return in_order(entry_at(cols, self.row - 1), entry_at(cols, self.row));
        }
        // The batch it leaves stays alive for the check.
        let left = self.batch.take().map(|b| (b, self.row));
        self.row = 0;
        self.batch = loop {
            match self.stream.next().transpose()? {
                Some(b) if b.num_rows() == 0 => continue,
                next => break next,
            }
        };
        match (&left, self.head()) {
            (Some((b, row)), Some(head)) => in_order(entry_at(columns(b), *row), head),
            _ => Ok(()),
        }
    }
}

/// Whether `next` comes strictly after `prev` in key order.
fn in_order(prev: Entry<'_>, next: Entry<'_>) -> Result<(), OutOfKeyOrder> {
    if (prev.0, prev.1) < (next.0, next.1) {
        Ok(())
    } else {
        Err(OutOfKeyOrder)
    }
}

fn run_of(file: &KeyedEntries) -> Run<'_> {
    let rest: Box<dyn Iterator<Item = Entry<'_>> + Send + '_> = if in_key_order(file) {
        Box::new(in_place(file))
    } else {
        Box::new(sorted(file))
    };
    Run { rest, head: None }
}

/// A file not in key order, each key once (its last write), sorted by key
/// ([`key_order`](crate::key_order): 16-byte items whose key digests decide most
/// comparisons without reading the keys).
fn sorted(file: &KeyedEntries) -> impl Iterator<Item = Entry<'_>> + Send + '_ {
    let cols: Vec<Columns<'_>> = file.batches().iter().map(columns).collect();
    let positions = key_order::last_writes_in_key_order(&cols);
    positions.map(move |p| {
        let (b, row) = key_order::position(p);
        entry_at(cols[b], row)
    })
}

/// A file's entries read in place, front to back. A mapped file's pages are handed
/// back to the kernel a batch behind the reader (an entry still borrowed from that
/// batch only faults its page in again), so the merge's resident set does not grow by
/// the files it reads.
fn in_place(file: &KeyedEntries) -> impl Iterator<Item = Entry<'_>> + Send + '_ {
    let batches = file.batches();
    batches.iter().enumerate().flat_map(move |(i, b)| {
        if let (Some(mapped), Some(done)) = (file.mapped_file(), i.checked_sub(1)) {
            mapped_pages::release(&batches[done], mapped);
        }
        batch_entries(b)
    })
}

/// Strictly increasing keys: sorted, each key once. A mapped file's pages are handed
/// back as it is checked (the merge reads them again).
fn in_key_order(file: &KeyedEntries) -> bool {
    let mut prev: Option<(u32, &[u8])> = None;
    for b in file.batches() {
        for (kg, key, _) in batch_entries(b) {
            if prev.is_some_and(|p| (kg, key) <= p) {
                return false;
            }
            prev = Some((kg, key));
        }
        if let Some(mapped) = file.mapped_file() {
            mapped_pages::release(b, mapped);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed_entries::KeyedEntry;
    use std::collections::BTreeMap;

    /// The oracle: every write applied in order to an ordered map.
    fn applied(files: &[Vec<KeyedEntry>]) -> Vec<KeyedEntry> {
        let mut state = BTreeMap::new();
        for (kg, key, value) in files.iter().flatten().cloned() {
            state.insert((kg, key), value);
        }
        state
            .into_iter()
            .filter_map(|((kg, key), v)| v.map(|v| (kg, key, Some(v))))
            .collect()
    }

    /// Bases (in key order, read in place) and deltas (in any order, repeated keys,
    /// deletions) merged over many rounds agree with applying every write in order;
    /// the output is cut into batches and is a valid base for the next round.
    #[test]
    fn merge_applies_files_in_order_like_a_map() {
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
        let mut writes: Vec<Vec<KeyedEntry>> = Vec::new();
        let mut base = KeyedEntries::default();
        for round in 0..6 {
            let deltas: Vec<Vec<KeyedEntry>> = (0..1 + round % 3)
                .map(|_| {
                    (0..next(60_000))
                        .map(|_| {
                            let k = next(200_000);
                            let v = (next(5) != 0)
                                .then(|| k.to_le_bytes()[..1 + (k % 7) as usize].to_vec());
                            ((k % 16) as u32, format!("k{}", k / 3).into_bytes(), v)
                        })
                        .collect()
                })
                .collect();
            writes.extend(deltas.iter().cloned());
            let deltas: Vec<KeyedEntries> =
                deltas.into_iter().map(KeyedEntries::from_entries).collect();
            // The uploader writes a checkpoint's deltas as one file in key order,
            // deletions kept: merged with the base it must read in place and agree.
            let written =
                KeyedEntries::from_sealed(KeyedMerge::keeping_deletions(&deltas).collect());
            assert!(
                in_key_order(&written),
                "round {round}: a delta in key order"
            );
            assert_eq!(
                merge_keyed(&[base.clone(), written]).to_entries(),
                applied(&writes),
                "round {round}: base + sorted delta"
            );
            let mut files = vec![base.clone()];
            files.extend(deltas);
            base = merge_keyed(&files);
            assert_eq!(base.to_entries(), applied(&writes), "round {round}");
            assert!(in_key_order(&base));
        }
        assert!(base.batches().len() > 1, "the merge seals several batches");
    }

    #[test]
    fn a_later_deletion_removes_and_a_later_write_revives() {
        let e = |kg: u32, k: &str, v: Option<&str>| {
            (kg, k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))
        };
        let files = [
            KeyedEntries::from_entries([e(1, "a", Some("1")), e(2, "b", Some("2"))]),
            KeyedEntries::from_entries([
                e(1, "a", None),
                e(2, "b", Some("x")),
                e(2, "b", Some("y")),
            ]),
            KeyedEntries::from_entries([e(3, "c", Some("3")), e(1, "a", Some("again"))]),
        ];
        assert_eq!(
            merge_keyed(&files).to_entries(),
            vec![
                e(1, "a", Some("again")),
                e(2, "b", Some("y")),
                e(3, "c", Some("3"))
            ]
        );
        assert!(merge_keyed(&[]).is_empty());
        assert!(merge_keyed(&[KeyedEntries::from_entries([e(1, "a", None)])]).is_empty());
        // A delta keeps the last write of each key, a deletion too.
        let delta = KeyedEntries::from_sealed(KeyedMerge::keeping_deletions(&files[..2]).collect());
        assert_eq!(
            delta.to_entries(),
            vec![e(1, "a", None), e(2, "b", Some("y"))]
        );
    }

    /// A sorted stream of `entries` (each key once), cut into batches of `rows`.
    fn stream(entries: &[KeyedEntry], rows: usize) -> KeyedStream<'static> {
        let batches: Vec<_> = entries
            .chunks(rows.max(1))
            .map(|c| KeyedEntries::from_entries(c.to_vec()).into_batches())
            .collect();
        Box::new(batches.into_iter().flatten().map(Ok))
    }

    /// Random lower and upper streams (each in key order, deletions, batches of
    /// many sizes) laid one over the other agree with applying lower's writes and
    /// then upper's to a map, into the live state and into a delta.
    #[test]
    fn an_overlay_applies_the_upper_stream_over_the_lower() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..40 {
            let mut side = |n: u64| -> Vec<KeyedEntry> {
                let map: BTreeMap<_, _> = (0..next(n))
                    .map(|_| {
                        let k = next(3_000);
                        let v = (next(4) != 0).then(|| vec![next(256) as u8; 1 + (k % 5) as usize]);
                        (((k % 8) as u32, format!("k{k}").into_bytes()), v)
                    })
                    .collect();
                map.into_iter().map(|((kg, k), v)| (kg, k, v)).collect()
            };
            let (lower, upper) = (side(2_000), side(2_000));
            let rows = 1 + (round % 7) * 150;
            let mut delta = BTreeMap::new();
            for (kg, k, v) in lower.iter().chain(&upper).cloned() {
                delta.insert((kg, k), v);
            }
            let delta: Vec<KeyedEntry> = delta.into_iter().map(|((kg, k), v)| (kg, k, v)).collect();
            let live: Vec<KeyedEntry> = delta.iter().filter(|e| e.2.is_some()).cloned().collect();
            let laid = |keep: bool| -> Vec<KeyedEntry> {
                let (l, u) = (stream(&lower, rows), stream(&upper, rows * 3));
                let overlay = if keep {
                    Overlay::keeping_deletions(l, u)
                } else {
                    Overlay::new(l, u)
                };
                let batches: Vec<_> = overlay.map(|b| b.expect("in key order")).collect();
                KeyedEntries::from_sealed(batches).to_entries()
            };
            assert_eq!(laid(false), live, "round {round}: live state");
            assert_eq!(laid(true), delta, "round {round}: delta");
        }
    }

    /// A stream whose keys go back (within a batch or across two), or repeat, ends
    /// the overlay with `OutOfKeyOrder`.
    #[test]
    fn an_overlay_stops_at_a_stream_out_of_key_order() {
        let e = |kg: u32, k: &str| (kg, k.as_bytes().to_vec(), Some(b"v".to_vec()));
        let sorted = vec![e(1, "a"), e(1, "b"), e(2, "a")];
        let unsorted = [
            (vec![e(1, "b"), e(1, "a")], 2),
            (vec![e(1, "a"), e(2, "b"), e(2, "a")], 2),
            (vec![e(2, "a"), e(1, "z")], 1),
            (vec![e(1, "a"), e(1, "a")], 1),
        ];
        for (bad, rows) in unsorted {
            for bad_is_upper in [false, true] {
                let (l, u) = (stream(&sorted, 2), stream(&bad, rows));
                let overlay = if bad_is_upper {
                    Overlay::new(l, u)
                } else {
                    Overlay::new(u, l)
                };
                let results: Vec<_> = overlay.collect();
                assert_eq!(
                    results.last(),
                    Some(&Err(OutOfKeyOrder)),
                    "{bad:?} in batches of {rows}"
                );
                assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
            }
        }
        let fine: Vec<_> = Overlay::new(stream(&sorted, 2), stream(&[], 1)).collect();
        assert!(fine.iter().all(Result::is_ok));
    }
}
