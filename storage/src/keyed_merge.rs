//! `KeyedMerge`: keyed state files applied in order (last write wins, a null value
//! deletes) and streamed out as the live entries in (key group, key) order, one
//! column batch at a time.
//!
//! It is a k-way merge of one sorted run per input. A file written by this merge (a
//! base, or a delta since deltas are written by it too) is in key order and is read
//! in place; a file in another order (a checkpoint's changes in the hash order their
//! state table kept, a delta of an older version) has its entries sorted first (16
//! bytes each, see [`key_order`](crate::key_order)). Nothing is held per key of the base:
//! compacting a chain or restoring it costs the batch being built (and the sorted
//! entries of a file not in key order), not a hash map of the whole state plus a
//! second copy of it (what made compaction q18's peak of memory).
//!
//! An input can also be a stream of owned batches in key order
//! ([`MergeInput::Stream`]): a frozen state table's changes, encoded a batch at a time
//! as they are read. A compaction merges them with the chain's files without encoding
//! them whole first (which had held a copy of a large checkpoint's changes beside the
//! operator's state); only the batch each stream is at is held, and every key of a
//! stream is checked to come after the one before it.
//!
//! The same merge, keeping deletions ([`KeyedMerge::keeping_deletions`]), writes each
//! checkpoint's delta in key order in the first place, so a later compaction reads
//! every file in place and sorts nothing.

use crate::key_order;
use crate::keyed_entries::{
    batch_entries, columns, entry_at, Columns, KeyedEntries, KeyedEntriesBuilder,
};
use crate::mapped_pages;
use arrow::array::{BinaryArray, RecordBatch, UInt32Array};
use std::cmp::Reverse;
use std::collections::VecDeque;

/// Keyed batches in (key group, key) order, each key once: a frozen table's changes,
/// a merge's output. Owned, so a batch lives only while it is read.
pub type KeyedStream<'a> = Box<dyn Iterator<Item = Result<RecordBatch, OutOfKeyOrder>> + Send + 'a>;

/// A keyed stream whose keys did not strictly increase: merged on, it would write a
/// file out of order (a wrong state after restore), so the merge stops with this.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfKeyOrder;

impl From<OutOfKeyOrder> for crate::StorageError {
    fn from(_: OutOfKeyOrder) -> Self {
        crate::StorageError::Corrupt("keyed state streamed out of key order".into())
    }
}

/// `(key group, key, value | None for a deletion)`, borrowed from a file or from the
/// batch a stream is at.
type Entry<'a> = (u32, &'a [u8], Option<&'a [u8]>);

/// One input of a merge; inputs are given oldest first.
pub enum MergeInput<'a> {
    /// A decoded file, in any order (sorted first if it is not in key order).
    File(&'a KeyedEntries),
    /// Owned batches in key order, each key once.
    Stream(KeyedStream<'a>),
}

/// One input's entries in key order, each key once (the input's last write of it).
enum Run<'a> {
    /// A file's entries, borrowed from it.
    File {
        rest: Box<dyn Iterator<Item = Entry<'a>> + Send + 'a>,
        head: Option<Entry<'a>>,
    },
    /// A stream's batches (boxed: its columns make it the large variant).
    Stream(Box<Cursor<'a>>),
}

impl Run<'_> {
    fn head(&self) -> Option<Entry<'_>> {
        match self {
            Run::File { head, .. } => *head,
            Run::Stream(cursor) => cursor.head(),
        }
    }

    /// The head's key group and key (what the heap compares; the value is not read).
    fn key(&self) -> Option<(u32, &[u8])> {
        match self {
            Run::File { head, .. } => head.map(|(kg, key, _)| (kg, key)),
            Run::Stream(cursor) => cursor.key(),
        }
    }

    /// Moves to the next entry (the first, on a new run).
    fn advance(&mut self) -> Result<(), OutOfKeyOrder> {
        match self {
            Run::File { rest, head } => {
                *head = rest.next();
                Ok(())
            }
            Run::Stream(cursor) => cursor.advance(),
        }
    }
}

pub struct KeyedMerge<'a> {
    runs: Vec<Run<'a>>,
    /// The runs with a head, by head.
    heads: Heads,
    started: bool,
    /// `None` once every run is drained (or one failed) and the last batch sealed.
    builder: Option<KeyedEntriesBuilder>,
    sealed: VecDeque<RecordBatch>,
    /// Emit a key whose last write deletes it (a delta's tombstone), not skip it.
    keep_deletions: bool,
    /// The runs a step moves on (the winner and the runs its write overwrites),
    /// kept to spare an allocation per key.
    moved: Vec<usize>,
}

impl<'a> KeyedMerge<'a> {
    /// Prepares the merge of `files` (oldest first) into the live entries (a base);
    /// sorts the files not in key order.
    pub fn new(files: &'a [KeyedEntries]) -> Self {
        Self::merging(files.iter().map(MergeInput::File), false)
    }

    /// The merge of `files` into a delta: a key whose last write deletes it comes out
    /// as a deletion, which the state it is applied to still needs.
    pub fn keeping_deletions(files: &'a [KeyedEntries]) -> Self {
        Self::merging(files.iter().map(MergeInput::File), true)
    }

    /// The merge of `inputs` (oldest first), into a delta if `keep_deletions`, else
    /// into the live entries.
    pub fn merging(inputs: impl IntoIterator<Item = MergeInput<'a>>, keep_deletions: bool) -> Self {
        let runs: Vec<_> = inputs
            .into_iter()
            .map(|input| match input {
                MergeInput::File(file) => run_of(file),
                MergeInput::Stream(stream) => Run::Stream(Box::new(Cursor::new(stream))),
            })
            .collect();
        KeyedMerge {
            heads: Heads(Vec::with_capacity(runs.len())),
            runs,
            started: false,
            builder: Some(KeyedEntriesBuilder::default()),
            sealed: VecDeque::new(),
            keep_deletions,
            moved: Vec::new(),
        }
    }

    /// Every run at its first entry (in the heap, unless it is the only run, which
    /// `step` reads without one).
    fn start(&mut self) -> Result<(), OutOfKeyOrder> {
        self.started = true;
        for i in 0..self.runs.len() {
            self.runs[i].advance()?;
            if self.runs.len() > 1 && self.runs[i].head().is_some() {
                self.heads.push(&self.runs, i);
            }
        }
        Ok(())
    }

    /// Takes the next key's last write into the builder (a deletion only if kept);
    /// `false` once every run is drained.
    fn step(&mut self) -> Result<bool, OutOfKeyOrder> {
        if !self.started {
            self.start()?;
        }
        let builder = self.builder.as_mut().expect("building until drained");
        let keep_deletions = self.keep_deletions;
        let mut take = |(kg, key, value): Entry<'_>| {
            if value.is_some() || keep_deletions {
                builder.push(kg, key, value);
            }
        };
        if let [run] = self.runs.as_mut_slice() {
            // One run is in key order, each key once: no heap, and no comparison that
            // reads the next key (a cache miss per entry of a delta being sorted, a
            // fifth of q18's final upload).
            let Some(entry) = run.head() else {
                return Ok(false);
            };
            take(entry);
            run.advance()?;
            return Ok(true);
        }
        let Some(winner) = self.heads.pop(&self.runs) else {
            return Ok(false);
        };
        // Older writes of the same key are overwritten: their runs move on too.
        let mut moved = std::mem::take(&mut self.moved);
        moved.clear();
        moved.push(winner);
        let entry = self.runs[winner]
            .head()
            .expect("a run in the heap has a head");
        while let Some(next) = self.heads.first() {
            if self.runs[next].key() != Some((entry.0, entry.1)) {
                break;
            }
            self.heads.pop(&self.runs);
            moved.push(next);
        }
        take(entry);
        for &i in &moved {
            self.runs[i].advance()?;
            if self.runs[i].head().is_some() {
                self.heads.push(&self.runs, i);
            }
        }
        self.moved = moved;
        Ok(true)
    }
}

impl Iterator for KeyedMerge<'_> {
    type Item = Result<RecordBatch, OutOfKeyOrder>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(batch) = self.sealed.pop_front() {
                return Some(Ok(batch));
            }
            self.builder.as_ref()?;
            match self.step() {
                Ok(true) => {
                    let builder = self.builder.as_mut().expect("checked above");
                    self.sealed.extend(builder.take_sealed());
                }
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

/// The runs that have a head, as a binary heap of their indices: first the run
/// whose head comes out first (the lowest key; of equal keys the later run, whose
/// write wins). A run's head does not change while it is in the heap.
struct Heads(Vec<usize>);

impl Heads {
    fn first(&self) -> Option<usize> {
        self.0.first().copied()
    }

    fn push(&mut self, runs: &[Run<'_>], run: usize) {
        let heap = &mut self.0;
        heap.push(run);
        let mut at = heap.len() - 1;
        while at > 0 {
            let parent = (at - 1) / 2;
            if !comes_first(runs, heap[at], heap[parent]) {
                break;
            }
            heap.swap(at, parent);
            at = parent;
        }
    }

    fn pop(&mut self, runs: &[Run<'_>]) -> Option<usize> {
        let heap = &mut self.0;
        let first = *heap.first()?;
        let last = heap.pop().expect("not empty");
        if heap.is_empty() {
            return Some(first);
        }
        heap[0] = last;
        let mut at = 0;
        loop {
            let left = 2 * at + 1;
            let Some(&l) = heap.get(left) else {
                break;
            };
            let child = match heap.get(left + 1) {
                Some(&r) if comes_first(runs, r, l) => left + 1,
                _ => left,
            };
            if !comes_first(runs, heap[child], heap[at]) {
                break;
            }
            heap.swap(at, child);
            at = child;
        }
        Some(first)
    }
}

/// Whether run `a`'s head comes out before run `b`'s (both have one).
fn comes_first(runs: &[Run<'_>], a: usize, b: usize) -> bool {
    (runs[a].key(), Reverse(a)) < (runs[b].key(), Reverse(b))
}

/// A stream's position: the batch it is at (owned, its columns kept) and the row.
struct Cursor<'a> {
    stream: KeyedStream<'a>,
    columns: Option<OwnedColumns>,
    row: usize,
}

/// A keyed batch's columns, owned (cheap: shared buffers).
type OwnedColumns = (UInt32Array, BinaryArray, BinaryArray);

impl<'a> Cursor<'a> {
    fn new(stream: KeyedStream<'a>) -> Self {
        Cursor {
            stream,
            columns: None,
            row: 0,
        }
    }

    fn head(&self) -> Option<Entry<'_>> {
        let (kg, key, value) = self.columns.as_ref()?;
        Some(entry_at((kg, key, value), self.row))
    }

    fn key(&self) -> Option<(u32, &[u8])> {
        let (kg, key, _) = self.columns.as_ref()?;
        Some((kg.value(self.row), key.value(self.row)))
    }

    /// Moves to the next entry (the first, on a new cursor), which must come after
    /// the one it leaves.
    fn advance(&mut self) -> Result<(), OutOfKeyOrder> {
        if let Some(c) = self.columns.as_ref().filter(|c| self.row + 1 < c.0.len()) {
            self.row += 1;
            let cols = (&c.0, &c.1, &c.2);
            return in_order(entry_at(cols, self.row - 1), entry_at(cols, self.row));
        }
        // The batch it leaves stays alive for the check.
        let left = self.columns.take().map(|c| (c, self.row));
        self.row = 0;
        self.columns = loop {
            match self.stream.next().transpose()? {
                Some(b) if b.num_rows() == 0 => continue,
                Some(b) => {
                    let (kg, key, value) = columns(&b);
                    break Some((kg.clone(), key.clone(), value.clone()));
                }
                None => break None,
            }
        };
        match (&left, self.head()) {
            (Some((c, row)), Some(head)) => in_order(entry_at((&c.0, &c.1, &c.2), *row), head),
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

/// Applies keyed files in order and returns the live entries, sorted by key group and
/// key (so a file's key-group ranges are contiguous).
pub fn merge_keyed(files: &[KeyedEntries]) -> KeyedEntries {
    // Only a stream can go out of key order; files are sorted where they are not.
    let batches = KeyedMerge::new(files).map(|b| b.expect("files merge in key order"));
    KeyedEntries::from_sealed(batches.collect())
}

fn run_of(file: &KeyedEntries) -> Run<'_> {
    let rest: Box<dyn Iterator<Item = Entry<'_>> + Send + '_> = if in_key_order(file) {
        Box::new(in_place(file))
    } else {
        Box::new(sorted(file))
    };
    Run::File { rest, head: None }
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
            let written = KeyedEntries::from_sealed(
                KeyedMerge::keeping_deletions(&deltas)
                    .map(Result::unwrap)
                    .collect(),
            );
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
        let delta = KeyedEntries::from_sealed(
            KeyedMerge::keeping_deletions(&files[..2])
                .map(Result::unwrap)
                .collect(),
        );
        assert_eq!(
            delta.to_entries(),
            vec![e(1, "a", None), e(2, "b", Some("y"))]
        );
    }

    /// A sorted stream of `entries` (each key once), cut into batches of `rows`.
    fn stream(entries: &[KeyedEntry], rows: usize) -> MergeInput<'static> {
        let batches: Vec<_> = entries
            .chunks(rows.max(1))
            .map(|c| KeyedEntries::from_entries(c.to_vec()).into_batches())
            .collect();
        MergeInput::Stream(Box::new(batches.into_iter().flatten().map(Ok)))
    }

    /// Files (in key order or not, repeated keys) and streams (in key order, each
    /// key once, batches of many sizes) merged in any order of inputs agree with
    /// applying every input's writes in that order to a map, into the live state
    /// and into a delta.
    #[test]
    fn files_and_streams_merge_like_a_map() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..40 {
            let mut writes = |n: u64| -> Vec<KeyedEntry> {
                (0..next(n))
                    .map(|_| {
                        let k = next(3_000);
                        let v = (next(4) != 0).then(|| vec![next(256) as u8; 1 + (k % 5) as usize]);
                        ((k % 8) as u32, format!("k{k}").into_bytes(), v)
                    })
                    .collect()
            };
            // Input i is a stream when bit i of the round is set, else a file.
            let inputs: Vec<Vec<KeyedEntry>> = (0..1 + round % 4).map(|_| writes(2_000)).collect();
            let last_writes = |input: &[KeyedEntry]| -> Vec<KeyedEntry> {
                let map: BTreeMap<_, _> = input
                    .iter()
                    .map(|(kg, k, v)| ((*kg, k.clone()), v.clone()))
                    .collect();
                map.into_iter().map(|((kg, k), v)| (kg, k, v)).collect()
            };
            let files: Vec<KeyedEntries> = inputs
                .iter()
                .cloned()
                .map(KeyedEntries::from_entries)
                .collect();
            let mut delta = BTreeMap::new();
            for (kg, k, v) in inputs.iter().flatten().cloned() {
                delta.insert((kg, k), v);
            }
            let delta: Vec<KeyedEntry> = delta.into_iter().map(|((kg, k), v)| (kg, k, v)).collect();
            let live: Vec<KeyedEntry> = delta.iter().filter(|e| e.2.is_some()).cloned().collect();
            let merged = |keep: bool| -> Vec<KeyedEntry> {
                let merge_inputs =
                    inputs
                        .iter()
                        .zip(&files)
                        .enumerate()
                        .map(|(i, (input, file))| {
                            if round >> i & 1 == 1 {
                                stream(&last_writes(input), 1 + (round + i) % 7 * 150)
                            } else {
                                MergeInput::File(file)
                            }
                        });
                let batches: Vec<_> = KeyedMerge::merging(merge_inputs, keep)
                    .map(|b| b.expect("in key order"))
                    .collect();
                KeyedEntries::from_sealed(batches).to_entries()
            };
            assert_eq!(merged(false), live, "round {round}: live state");
            assert_eq!(merged(true), delta, "round {round}: delta");
        }
    }

    /// A stream whose keys go back (within a batch or across two), or repeat, ends
    /// the merge with `OutOfKeyOrder`, once, whether it is the only input or not.
    #[test]
    fn a_stream_out_of_key_order_stops_the_merge() {
        let e = |kg: u32, k: &str| (kg, k.as_bytes().to_vec(), Some(b"v".to_vec()));
        let sorted = vec![e(1, "a"), e(1, "b"), e(2, "a")];
        let unsorted = [
            (vec![e(1, "b"), e(1, "a")], 2),
            (vec![e(1, "a"), e(2, "b"), e(2, "a")], 2),
            (vec![e(2, "a"), e(1, "z")], 1),
            (vec![e(1, "a"), e(1, "a")], 1),
        ];
        let file = KeyedEntries::from_entries(sorted.clone());
        for (bad, rows) in unsorted {
            for with in 0..3 {
                let other = match with {
                    0 => None,
                    1 => Some(MergeInput::File(&file)),
                    _ => Some(stream(&sorted, 2)),
                };
                let inputs = other.into_iter().chain([stream(&bad, rows)]);
                let results: Vec<_> = KeyedMerge::merging(inputs, false).collect();
                assert_eq!(
                    results.last(),
                    Some(&Err(OutOfKeyOrder)),
                    "{bad:?} in batches of {rows}, beside input {with}"
                );
                assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
            }
        }
        let fine = KeyedMerge::merging([stream(&sorted, 2), stream(&[], 1)], false);
        assert!(fine.map(|b| b.unwrap().num_rows()).sum::<usize>() == 3);
    }
}
