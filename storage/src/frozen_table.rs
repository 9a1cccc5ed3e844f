//! `FrozenTable`: a state table's hash table as a checkpoint froze it, shared with the
//! uploader, which writes its delta from it (copy-on-write state, as Flink's
//! `CopyOnWriteStateMap`).
//!
//! A large delta (a final checkpoint's is often the whole state) had been copied on
//! the actor into columns before the upload: for a while the state existed twice,
//! and the copy (fresh pages, slow on this VM) was most of q18's final checkpoint.
//! Frozen, the table moves into an `Arc` at the barrier (O(1)); the actor goes on with
//! an overlay in front of it (see [`crate::state_table`]), and the uploader sorts the
//! changed slots by key and encodes them a batch at a time into the file it writes,
//! so no whole copy is ever made. A large delta while the uploader still holds a
//! frozen table freezes the overlay as a second layer; the actor folds the layers and
//! the overlay back in once the uploader has let go of all of them.

use crate::key_order;
use crate::keyed_entries::{columns, entry_at, KeyedEntries};
use crate::keyed_merge::{KeyedStream, OutOfKeyOrder};
use crate::state_table::{encode_on_every_core, Slot, StateValue};
use crate::KeyGroup;
use arrow::array::RecordBatch;
use hashbrown::HashTable;
use std::sync::OnceLock;

/// A frozen delta as the uploader sees it, whatever the table's value type.
pub trait FrozenDelta: Send + Sync + std::fmt::Debug {
    /// How many entries the delta has at most.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// About the bytes of its file (from a sample of its values), to decide whether
    /// a checkpoint compacts the chain without encoding the delta first.
    fn estimated_size(&self) -> usize;

    /// The delta's entries in (key group, key) order, each key once, encoded a column
    /// batch at a time as they are read.
    fn batches_in_key_order(&self) -> Box<dyn Iterator<Item = RecordBatch> + Send + '_>;

    /// The delta as entries, whole (in key order): for tests and checks. The
    /// uploader streams it ([`FrozenDelta::batches_in_key_order`]), also where it
    /// merges it with other files (a [`crate::keyed_merge::MergeInput::Stream`]).
    fn to_entries(&self) -> KeyedEntries {
        KeyedEntries::from_sealed(self.batches_in_key_order().collect())
    }

    /// The lowest and the highest key group of its entries (`None` when it has
    /// none).
    fn key_groups(&self) -> Option<(u32, u32)>;

    /// How many entries replace or remove a key that the checkpoint before holds
    /// (see [`crate::keyed_entries::KeyedEntries::superseding`]); `None`: not known.
    fn superseding(&self) -> Option<usize> {
        None
    }
}

/// The frozen parts of one uid in the order in which they can be written one after
/// another, if they can: by key group, when no two share one. Each actor owns its own
/// range of key groups (`actor = kg · p / max_p`), so at p > 1 the parts of a uid
/// never do, and they need no merge; parts that share key groups (two of one actor:
/// a carried part and a later one) are `None`, and the caller merges them.
pub fn in_turn(parts: Vec<&dyn FrozenDelta>) -> Option<Vec<&dyn FrozenDelta>> {
    let mut ranged: Vec<_> = parts
        .into_iter()
        .filter_map(|p| Some((p.key_groups()?, p)))
        .collect();
    ranged.sort_by_key(|((first, _), _)| *first);
    let disjoint = ranged.windows(2).all(|w| w[0].0 .1 < w[1].0 .0);
    disjoint.then(|| ranged.into_iter().map(|(_, p)| p).collect())
}

/// Frozen parts (in the order [`in_turn`] gives) as one delta in (key group, key)
/// order, streamed part after part, each sorted only when its turn comes: no part is
/// ever whole in memory (merged in one heap, every part had been encoded whole
/// first; q18 at p = 2 kept its final checkpoint's old copy that way). Every batch is
/// checked to start after the one before it ended (parts not in the order
/// [`in_turn`] gives), so a wrong order is an error, never a file out of order.
pub fn parts_in_turn<'a>(parts: Vec<&'a dyn FrozenDelta>) -> KeyedStream<'a> {
    let mut batches = parts.into_iter().flat_map(|p| p.batches_in_key_order());
    let mut last: Option<(u32, Vec<u8>)> = None;
    let mut failed = false;
    Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let batch = batches.next()?;
        if batch.num_rows() == 0 {
            return Some(Ok(batch));
        }
        let cols = columns(&batch);
        let (kg, key, _) = entry_at(cols, 0);
        if last
            .as_ref()
            .is_some_and(|(lkg, lkey)| (kg, key) <= (*lkg, lkey.as_slice()))
        {
            failed = true;
            return Some(Err(OutOfKeyOrder));
        }
        let (kg, key, _) = entry_at(cols, batch.num_rows() - 1);
        last = Some((kg, key.to_vec()));
        Some(Ok(batch))
    }))
}

/// The slots of a state table at the checkpoint that froze it. Those marked
/// `in_delta` are the checkpoint's delta; the rest are state the actor still reads.
pub(crate) struct FrozenTable<V> {
    pub(crate) slots: HashTable<Slot<V>>,
    pub(crate) max_parallelism: u32,
    /// The delta's entries at most (hashes listed when the table froze).
    pub(crate) entries: usize,
    /// The lowest and highest key group of the delta, found once when first asked.
    pub(crate) key_groups: OnceLock<Option<(u32, u32)>>,
    /// [`FrozenDelta::estimated_size`], sampled once: the compaction decision and
    /// the encode's piece size both ask for it.
    pub(crate) estimated_size: OnceLock<usize>,
}

impl<V> std::fmt::Debug for FrozenTable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrozenTable")
            .field("slots", &self.slots.len())
            .field("entries", &self.entries)
            .finish()
    }
}

/// Values whose encoding is measured to estimate a delta's size.
const SIZE_SAMPLE: usize = 1_024;

/// Entries encoded per piece of work at most: a column batch's rows.
const PIECE: usize = 65_536;
/// Encoded bytes a piece of work aims at. A run (a piece per core) is held whole
/// until the uploader has written it, and a value can be a whole join bucket or
/// Top-N partition: by entries alone, q20's final checkpoint held runs of 131,072
/// join buckets of about 3.7 KB each, half a gigabyte beside the state.
const PIECE_BYTES: usize = 16 << 20;
/// Entries per piece at least, however large the values: a piece is a thread's
/// work, and a thread per handful of entries would cost more than it saves.
const MIN_PIECE: usize = 64;

/// Entries per piece for values that encode to `bytes_per_entry` on average.
pub(crate) fn entries_per_piece(bytes_per_entry: usize) -> usize {
    (PIECE_BYTES / bytes_per_entry.max(1)).clamp(MIN_PIECE, PIECE)
}

impl<V: StateValue> FrozenTable<V> {
    /// About the bytes of the delta's file, from the encoded size of a sample of its
    /// values.
    fn sampled_size(&self) -> usize {
        let (mut sampled, mut value_bytes, mut buf) = (0usize, 0usize, Vec::new());
        let (mut n, mut key_bytes) = (0usize, 0usize);
        for s in self.slots.iter().filter(|s| s.in_delta) {
            n += 1;
            key_bytes += s.key.len();
            if let (Some(v), true) = (&s.value, sampled < SIZE_SAMPLE) {
                buf.clear();
                v.encode_into(&mut buf);
                value_bytes += buf.len();
                sampled += 1;
            }
        }
        // Key group, two offsets and validity: 13 bytes of columns per entry.
        let values = (value_bytes / sampled.max(1)).saturating_mul(n);
        key_bytes + values + 13 * n
    }

    /// The changed slots, each with its key group and key digest, in key order:
    /// split into one range of key groups per core and sorted on every core at once
    /// (the upload of a final checkpoint has the machine to itself).
    fn changed_in_key_order(&self) -> Vec<Vec<Sorted<'_, V>>> {
        let changed = || self.slots.iter().filter(|s| s.in_delta);
        let positions = key_order::digest_positions_of(changed().map(|s| &*s.key));
        // The ranges split the delta's own key groups: an actor's table at p > 1
        // holds only its share of them, which split over all of them fell into a
        // single range, sorted on one core.
        let (lo, hi) = self.key_groups().unwrap_or((0, 0));
        let span = (hi - lo) as usize + 1;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ranges = cores.min(span);
        let mut by_range: Vec<Vec<Sorted<'_, V>>> = (0..ranges)
            .map(|_| Vec::with_capacity(self.entries / ranges + 1))
            .collect();
        for s in changed() {
            let kg = KeyGroup::of_key(&s.key, self.max_parallelism).0;
            let range = (kg - lo) as usize * ranges / span;
            by_range[range].push((kg, key_order::digest(&s.key, &positions), s));
        }
        // Keys are unique in a table: equal digests are decided by the keys.
        let sort = |items: &mut Vec<Sorted<'_, V>>| {
            items.sort_unstable_by(|a, b| {
                (a.0, a.1)
                    .cmp(&(b.0, b.1))
                    .then_with(|| a.2.key.cmp(&b.2.key))
            })
        };
        std::thread::scope(|scope| {
            let mut rest = by_range.iter_mut();
            let first = rest.next();
            for items in rest {
                scope.spawn(move || sort(items));
            }
            first.map(sort);
        });
        by_range
    }
}

/// A changed slot with its key group and key digest.
type Sorted<'a, V> = (u32, u64, &'a Slot<V>);

impl<V: StateValue> FrozenDelta for FrozenTable<V> {
    fn len(&self) -> usize {
        self.entries
    }

    /// Counted by the uploader, off the actor (the freeze itself is O(1)).
    fn superseding(&self) -> Option<usize> {
        Some(
            self.slots
                .iter()
                .filter(|s| s.in_delta && s.in_image())
                .count(),
        )
    }

    fn estimated_size(&self) -> usize {
        *self.estimated_size.get_or_init(|| self.sampled_size())
    }

    fn key_groups(&self) -> Option<(u32, u32)> {
        *self.key_groups.get_or_init(|| {
            let changed = self.slots.iter().filter(|s| s.in_delta);
            let kgs = changed.map(|s| KeyGroup::of_key(&s.key, self.max_parallelism).0);
            kgs.fold(None, |range, kg| match range {
                None => Some((kg, kg)),
                Some((lo, hi)) => Some((kg.min(lo), kg.max(hi))),
            })
        })
    }

    fn batches_in_key_order(&self) -> Box<dyn Iterator<Item = RecordBatch> + Send + '_> {
        let piece = entries_per_piece(self.estimated_size() / self.entries.max(1));
        let ranges = self.changed_in_key_order();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Runs of a piece per core, range after range (each range in key order).
        let runs = ranges.into_iter().flat_map(move |items| {
            let mut next = 0;
            std::iter::from_fn(move || {
                let run = (next < items.len()).then(|| {
                    let end = (next + cores * piece).min(items.len());
                    encode_on_every_core(&items[next..end], piece, |i| (i.0, i.2))
                });
                next += cores * piece;
                run
            })
        });
        Box::new(runs.flatten())
    }
}
