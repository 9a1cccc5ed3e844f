//! `StateTable`: the one state API every stateful operator uses.
//!
//! Reads and writes go to a cache of decoded values, which holds the whole state (no
//! eviction). At each barrier the operator calls [`StateTable::flush`]: the entries
//! dirtied since the last barrier join the next checkpoint's delta, which is encoded
//! once when the checkpoint takes it; a backend that keeps flushed state (RocksDB)
//! also gets them as one atomic write batch, so it holds a barrier-consistent image.
//! The in-heap backend keeps no second copy.
//!
//! One hash table holds each key once, with its value and where its change stands
//! (flags in the slot). The changed keys are found again through lists of their
//! hashes, so a change costs one lookup and no copy of the key: q5's end of input
//! closes a million windows, and three maps (values, changed since the flush, changed
//! since the checkpoint) had cost three lookups and three key copies per window.
//!
//! A checkpoint whose delta is a large share of the table freezes it instead of
//! copying the delta ([`crate::frozen_table`]): the hash table moves into an `Arc`
//! the uploader writes the delta from, and the actor goes on with an empty table in
//! front of it, the overlay. Reads look in the overlay, then in the frozen layers,
//! newest first; a change to a key only a frozen layer holds copies its slot into
//! the overlay first. A large delta while a layer is still held (an upload slower
//! than the checkpoint interval: q18's mid-run upload outlasts the rest of its input)
//! freezes the overlay too, as a second layer. Once the uploader lets go of every
//! layer, the next flush folds them and the overlay back in, oldest first.

use crate::frozen_table::FrozenTable;
use crate::keyed_entries::{KeyedEntries, KeyedEntriesBuilder};
use crate::state_snapshot::DeltaData;
use crate::{KeyGroup, StateBackend, StateKey, StorageError, WriteBatch};
use arrow::array::RecordBatch;
use hashbrown::hash_table::{Entry, OccupiedEntry};
use hashbrown::HashTable;
use std::sync::Arc;

/// A value that can be stored in a state table (`Sync`: a large checkpoint delta is
/// encoded on several threads at once; `Clone`: a key changed while its table is
/// frozen is copied first; `Send + 'static`: a frozen table goes to the uploader).
pub trait StateValue: Sized + Clone + Send + Sync + 'static {
    /// Appends the encoding to `out` (a checkpoint encodes every value into one
    /// column buffer this way, with no allocation per value).
    fn encode_into(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Option<Self>;

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }
}

/// What [`StateTable::update_all`]'s visitor did to a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    Kept,
    Changed,
    Removed,
}

/// What [`StateTable::replace_with`] replaced.
#[derive(Debug, PartialEq, Eq)]
pub struct Replaced<V> {
    /// The value before (`None`: the key was absent).
    pub before: Option<V>,
    /// The key's first change since the last flush: `before` is what it held then,
    /// the image an operator diffs its barrier's output against.
    pub first_since_flush: bool,
}

/// One key: its value, or `None` for a removal that a flush or the next checkpoint
/// still has to record (a tombstone), and where its change stands.
pub(crate) struct Slot<V> {
    pub(crate) key: Box<[u8]>,
    pub(crate) value: Option<V>,
    /// Changed since the last flush (its hash is in `dirty`).
    dirty: bool,
    /// Flushed since the last checkpoint: in the next checkpoint's delta (its hash
    /// is in `in_delta`).
    pub(crate) in_delta: bool,
    /// The state the last checkpoint holds has this key, so removing it needs a
    /// tombstone in the next delta. A key born and removed between two checkpoints
    /// needs none (window state created and cleaned in between uploads nothing).
    in_image: bool,
    /// A backend that keeps flushed state (RocksDB) holds this key, so removing it
    /// needs a delete at the next flush.
    in_backend: bool,
    /// A slot in front of an older frozen layer's slot of its key (in the overlay,
    /// or in a second layer): it stays, even as a removal nothing else needs, or the
    /// older value would show again.
    shadows: bool,
}

impl<V> Slot<V> {
    fn new(key: Box<[u8]>, value: V) -> Self {
        Self {
            key,
            value: Some(value),
            dirty: false,
            in_delta: false,
            in_image: false,
            in_backend: false,
            shadows: false,
        }
    }

    /// The last checkpoint's state holds the key: its change in the next delta
    /// replaces or removes an entry of an earlier file.
    pub(crate) fn in_image(&self) -> bool {
        self.in_image
    }

    /// Nothing outside this table knows the key: its removal can be forgotten.
    fn unknown_outside(&self) -> bool {
        !self.in_image && !self.in_backend && !self.shadows
    }

    /// Marks this in-delta slot as taken by a checkpoint; whether the table still
    /// needs it (a tombstone that a flush has yet to record, or the backend holds).
    fn checkpointed(&mut self) -> bool {
        self.in_delta = false;
        self.in_image = self.value.is_some();
        self.value.is_some() || self.dirty || self.in_backend || self.shadows
    }

    /// A removal that nothing records or needs any more.
    fn forgettable(&self) -> bool {
        self.value.is_none() && !self.dirty && !self.in_delta && self.unknown_outside()
    }

    /// This frozen slot as the overlay holds it, in front of it, with `value`: the
    /// flags are those it has once the checkpoint that froze it is taken.
    fn overlay_copy(&self, value: Option<V>) -> Self {
        Slot {
            key: self.key.clone(),
            value,
            dirty: false,
            in_delta: false,
            in_image: if self.in_delta {
                self.value.is_some()
            } else {
                self.in_image
            },
            in_backend: self.in_backend,
            shadows: true,
        }
    }
}

impl<V: StateValue> Slot<V> {
    /// Appends this in-delta slot's change to a checkpoint's delta: its value, or a
    /// tombstone for a key the last checkpoint had. A key created and removed since
    /// the last checkpoint has nothing to undo.
    pub(crate) fn push_change(&self, key_group: u32, out: &mut KeyedEntriesBuilder) {
        match &self.value {
            Some(v) => out.push_with(key_group, &self.key, |buf| v.encode_into(buf)),
            None if self.in_image => out.push(key_group, &self.key, None),
            None => {}
        }
    }
}

pub struct StateTable<V> {
    uid: Arc<str>,
    max_parallelism: u32,
    backend: Arc<dyn StateBackend>,
    /// ahash: the std SipHash showed up as the top cost of aggregation in profiles.
    hasher: ahash::RandomState,
    slots: HashTable<Slot<V>>,
    /// Slots holding a value (the rest are tombstones).
    live: usize,
    /// Hashes of the slots marked `dirty`, once each per flush (a slot forgotten
    /// since leaves a hash that finds nothing).
    dirty: Vec<u64>,
    /// Hashes of the slots marked `in_delta`, once each per checkpoint: the delta
    /// the next checkpoint uploads (encoded then, once, however often the entry
    /// changed in between), so upload size follows the change, not the state.
    in_delta: Vec<u64>,
    /// Off when the job never checkpoints: then nothing is kept for deltas.
    track_changes: bool,
    /// The tables large deltas froze, oldest first, while the uploader may still
    /// read one: `slots` is then the overlay in front of them.
    frozen: Vec<Arc<FrozenTable<V>>>,
    /// A delta of at least this many entries (and a quarter of the table) is large.
    large_delta_min: usize,
}

impl<V: StateValue> StateTable<V> {
    pub fn new(uid: &str, max_parallelism: u32, backend: Arc<dyn StateBackend>) -> Self {
        Self {
            uid: uid.into(),
            max_parallelism,
            backend,
            hasher: ahash::RandomState::new(),
            slots: HashTable::new(),
            live: 0,
            dirty: Vec::new(),
            in_delta: Vec::new(),
            track_changes: true,
            frozen: Vec::new(),
            large_delta_min: LARGE_DELTA_MIN,
        }
    }

    /// Whether flushed changes are kept for the next checkpoint's delta.
    pub fn set_track_changes(&mut self, on: bool) {
        self.unfreeze();
        self.track_changes = on;
        if !on {
            self.in_delta.clear();
            self.slots.retain(|s| {
                s.in_delta = false;
                s.value.is_some() || s.dirty
            });
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The slot with hash `h` and the given mark. The lists hold hashes, not keys, so
    /// the hash is checked in full: another slot can share its probe's tag bits.
    fn find_marked(
        &mut self,
        h: u64,
        mark: impl Fn(&Slot<V>) -> bool,
    ) -> Option<OccupiedEntry<'_, Slot<V>>> {
        let hasher = &self.hasher;
        self.slots
            .find_entry(h, |s| mark(s) && hasher.hash_one(&*s.key) == h)
            .ok()
    }

    /// The slot of `key` (hash `h`), or where it goes.
    fn entry<'t>(
        slots: &'t mut HashTable<Slot<V>>,
        hasher: &ahash::RandomState,
        h: u64,
        key: &[u8],
    ) -> Entry<'t, Slot<V>> {
        slots.entry(h, |s| &*s.key == key, |s| hasher.hash_one(&*s.key))
    }

    /// Marks a slot changed since the last flush.
    fn mark_dirty(slot: &mut Slot<V>, h: u64, dirty: &mut Vec<u64>) {
        if !slot.dirty {
            slot.dirty = true;
            dirty.push(h);
        }
    }

    /// The slot of `key` in the newest frozen layer that has it.
    fn layered_slot<'f>(
        layers: &'f [Arc<FrozenTable<V>>],
        h: u64,
        key: &[u8],
    ) -> Option<&'f Slot<V>> {
        layers
            .iter()
            .rev()
            .find_map(|f| f.slots.find(h, |s| &*s.key == key))
    }

    /// The frozen slot of `key`, while a table is frozen.
    fn frozen_slot(&self, h: u64, key: &[u8]) -> Option<&Slot<V>> {
        Self::layered_slot(&self.frozen, h, key)
    }

    /// [`Self::entry`] for a change, copy-on-write: the frozen slot of a key the
    /// overlay lacks is copied into it first.
    fn entry_cow<'t>(
        slots: &'t mut HashTable<Slot<V>>,
        frozen: &[Arc<FrozenTable<V>>],
        hasher: &ahash::RandomState,
        h: u64,
        key: &[u8],
    ) -> Entry<'t, Slot<V>> {
        match Self::entry(slots, hasher, h, key) {
            Entry::Vacant(e) => match Self::layered_slot(frozen, h, key) {
                Some(f) => Entry::Occupied(e.insert(f.overlay_copy(f.value.clone()))),
                None => Entry::Vacant(e),
            },
            occupied => occupied,
        }
    }

    /// Copy-on-write before a change to `key` that does not insert it.
    fn copy_in(&mut self, h: u64, key: &[u8]) {
        if !self.frozen.is_empty() {
            let _ = Self::entry_cow(&mut self.slots, &self.frozen, &self.hasher, h, key);
        }
    }

    /// The slots of frozen layer `layer` that the overlay and the newer layers do
    /// not hide: the keys a read of the whole state reaches through that layer.
    fn visible_in_layer(&self, layer: usize) -> impl Iterator<Item = &Slot<V>> + '_ {
        let newer = &self.frozen[layer + 1..];
        self.frozen[layer].slots.iter().filter(move |s| {
            let h = self.hasher.hash_one(&*s.key);
            self.slots.find(h, |o| o.key == s.key).is_none()
                && Self::layered_slot(newer, h, &s.key).is_none()
        })
    }

    /// Hands a large delta to the uploader without copying it: the table (the whole
    /// table, or the overlay in front of a layer still held) moves into an `Arc`
    /// (O(1)) and the actor goes on with an empty overlay in front of it.
    fn freeze(&mut self) -> DeltaData {
        let frozen = Arc::new(FrozenTable {
            slots: std::mem::take(&mut self.slots),
            max_parallelism: self.max_parallelism,
            entries: std::mem::take(&mut self.in_delta).len(),
            key_groups: Default::default(),
            estimated_size: Default::default(),
        });
        self.frozen.push(frozen.clone());
        DeltaData::Frozen(frozen)
    }

    /// Folds the layers and the overlay back once the uploader has let go of every
    /// layer (a newer layer lies over the older ones, so none folds alone).
    fn fold_if_released(&mut self) {
        if !self.frozen.is_empty() && self.frozen.iter().all(|f| Arc::strong_count(f) == 1) {
            self.unfreeze();
        }
    }

    /// Ends a freeze: one pass resets the oldest layer's delta flags as its
    /// checkpoint would have, then each slot of a newer layer, and last each overlay
    /// slot, replaces its key's. A layer the uploader still reads is copied instead
    /// (the rare paths: loading, switching tracking off, rewriting every value).
    fn unfreeze(&mut self) {
        let mut layers = std::mem::take(&mut self.frozen).into_iter();
        let Some(oldest) = layers.next() else {
            return;
        };
        // How much the copy-on-write cost: the overlay holds a copy of every frozen
        // slot changed while the uploader read it (RUST_LOG=weir_storage=debug).
        tracing::debug!(
            uid = %self.uid,
            frozen_slots = oldest.slots.len(),
            newer_layer_slots = layers.as_slice().iter().map(|l| l.slots.len()).sum::<usize>(),
            layers = layers.len() + 1,
            overlay_slots = self.slots.len(),
            released = Arc::strong_count(&oldest) == 1,
            "state table unfrozen"
        );
        let hasher = &self.hasher;
        let mut table = match Arc::try_unwrap(oldest) {
            Ok(frozen) => {
                let mut slots = frozen.slots;
                slots.retain(|s| !s.in_delta || s.checkpointed());
                slots
            }
            Err(shared) => {
                // Laid over an empty table: what no checkpoint needs is left out.
                let mut slots = HashTable::with_capacity(shared.slots.len());
                fold_over(&mut slots, hasher, settled_copies(&shared));
                slots
            }
        };
        for layer in layers {
            match Arc::try_unwrap(layer) {
                Ok(frozen) => fold_over(&mut table, hasher, frozen.slots.into_iter().map(settle)),
                Err(shared) => fold_over(&mut table, hasher, settled_copies(&shared)),
            }
        }
        fold_over(&mut table, hasher, std::mem::take(&mut self.slots));
        self.slots = table;
    }

    /// Loads the entries of the given key-group range from the backend into the cache
    /// (used when an actor starts on existing state).
    pub fn load(&mut self, kg_start: u32, kg_end: u32) -> crate::Result<usize> {
        self.load_with(kg_start, kg_end, |_, v| Ok(V::decode(v)))
    }

    /// [`Self::load`], each value decoded by `decode(key, value)`: an operator whose
    /// values can be in an older layout converts them here, with what only it knows of
    /// them.
    pub fn load_with<E: From<StorageError>>(
        &mut self,
        kg_start: u32,
        kg_end: u32,
        mut decode: impl FnMut(&[u8], &[u8]) -> std::result::Result<Option<V>, E>,
    ) -> std::result::Result<usize, E> {
        self.unfreeze();
        let mut n = 0;
        let keeps = self.backend.keeps_flushed_state();
        for (k, v) in self.backend.scan(&self.uid, kg_start, kg_end)? {
            if let Some(v) = decode(&k.key, &v)? {
                let h = self.hash(&k.key);
                let mut slot = Slot::new(k.key.into_boxed_slice(), v);
                // Restored state is the last checkpoint's image.
                slot.in_image = true;
                slot.in_backend = keeps;
                let hasher = &self.hasher;
                match self
                    .slots
                    .entry(h, |s| s.key == slot.key, |s| hasher.hash_one(&*s.key))
                {
                    Entry::Occupied(mut e) => {
                        // A tombstone comes back to life.
                        self.live += usize::from(e.get().value.is_none());
                        *e.get_mut() = slot;
                    }
                    Entry::Vacant(e) => {
                        e.insert(slot);
                        self.live += 1;
                    }
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every key holding a value (the whole state: there is no eviction).
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let frozen = (0..self.frozen.len()).flat_map(|l| self.visible_in_layer(l));
        self.slots
            .iter()
            .chain(frozen)
            .filter(|s| s.value.is_some())
            .map(|s| &*s.key)
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let h = self.hash(key);
        match self.slots.find(h, |s| &*s.key == key) {
            Some(s) => s.value.as_ref(),
            None => self.frozen_slot(h, key).and_then(|s| s.value.as_ref()),
        }
    }

    /// Mutable access to a value's parts that are not stored (its encoding does not
    /// change): the key is not marked dirty, so no checkpoint re-encodes it.
    pub fn get_mut_unstored(&mut self, key: &[u8]) -> Option<&mut V> {
        let h = self.hash(key);
        self.copy_in(h, key);
        self.slots
            .find_mut(h, |s| &*s.key == key)
            .and_then(|s| s.value.as_mut())
    }

    /// Rewrites every value in place without marking it dirty: the change must not
    /// alter what it stores (an operator reading an older version's encoding into
    /// its current layout after [`Self::load`]).
    pub fn try_for_each_unstored<E>(
        &mut self,
        mut f: impl FnMut(&[u8], &mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.unfreeze();
        self.slots
            .iter_mut()
            .filter_map(|s| Some((&*s.key, s.value.as_mut()?)))
            .try_for_each(|(k, v)| f(k, v))
    }

    /// Mutable access; marks the key dirty. Inserts `default()` when absent.
    pub fn get_or_insert_with(&mut self, key: &[u8], default: impl FnOnce() -> V) -> &mut V {
        let h = self.hash(key);
        let slot = match Self::entry_cow(&mut self.slots, &self.frozen, &self.hasher, h, key) {
            Entry::Occupied(e) => {
                let slot = e.into_mut();
                if slot.value.is_none() {
                    // A tombstone comes back to life.
                    slot.value = Some(default());
                    self.live += 1;
                }
                slot
            }
            Entry::Vacant(e) => {
                self.live += 1;
                e.insert(Slot::new(key.into(), default())).into_mut()
            }
        };
        Self::mark_dirty(slot, h, &mut self.dirty);
        slot.value.as_mut().expect("a value was just set")
    }

    /// Offers `key` a new value in one lookup: `choose` sees the current value and
    /// returns its replacement, or `None` to leave the key as it is (not marked
    /// dirty). A Top-1 compares a chunk's best row with its partition's and writes
    /// the winner this way, where a read and a write had cost two lookups.
    pub fn replace_with(
        &mut self,
        key: &[u8],
        choose: impl FnOnce(Option<&V>) -> Option<V>,
    ) -> Option<Replaced<V>> {
        let h = self.hash(key);
        let vacant = match Self::entry_cow(&mut self.slots, &self.frozen, &self.hasher, h, key) {
            Entry::Occupied(e) => {
                let slot = e.into_mut();
                let new = choose(slot.value.as_ref())?;
                self.live += usize::from(slot.value.is_none());
                let replaced = Replaced {
                    before: slot.value.replace(new),
                    first_since_flush: !slot.dirty,
                };
                Self::mark_dirty(slot, h, &mut self.dirty);
                return Some(replaced);
            }
            Entry::Vacant(e) => e,
        };
        let new = choose(None)?;
        self.live += 1;
        let inserted = vacant.insert(Slot::new(key.into(), new)).into_mut();
        Self::mark_dirty(inserted, h, &mut self.dirty);
        Some(Replaced {
            before: None,
            first_since_flush: true,
        })
    }

    /// Removes the key. One that nothing outside the table knows (born since the last
    /// checkpoint and not in the backend) leaves no trace: the checkpoint's image
    /// never had it. Any other becomes a tombstone until its removal is recorded.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let h = self.hash(key);
        self.copy_in(h, key);
        let Ok(mut e) = self.slots.find_entry(h, |s| &*s.key == key) else {
            return None;
        };
        let value = e.get_mut().value.take()?;
        self.live -= 1;
        if e.get().unknown_outside() {
            e.remove();
        } else {
            Self::mark_dirty(e.get_mut(), h, &mut self.dirty);
        }
        Some(value)
    }

    /// Removes and returns every entry whose key passes `pred` (a pure test: it may
    /// also be asked about keys the table no longer shows), as [`Self::remove`]
    /// would one by one, in one pass over the table, moving the keys out instead of
    /// copying them where no tombstone stays (a watermark can close millions of
    /// windows at once).
    pub fn take_where(&mut self, mut pred: impl FnMut(&[u8]) -> bool) -> Vec<(Vec<u8>, V)> {
        let mut taken = Vec::new();
        let (hasher, dirty) = (&self.hasher, &mut self.dirty);
        self.slots.retain(|s| {
            if s.value.is_none() || !pred(&s.key) {
                return true;
            }
            let value = s.value.take().expect("checked above");
            if s.unknown_outside() {
                taken.push((std::mem::take(&mut s.key).into_vec(), value));
                return false;
            }
            taken.push((s.key.to_vec(), value));
            Self::mark_dirty(s, hasher.hash_one(&*s.key), dirty);
            true
        });
        // Frozen keys the overlay and the newer layers lack: each leaves a tombstone
        // in front of it.
        let frozen = &self.frozen;
        // `pred` goes first: it is cheap, and most frozen keys fail it (a watermark
        // closes a few windows of many), so it also sees keys a newer layer hides.
        for (layer, f) in frozen.iter().enumerate().flat_map(in_layer) {
            let Some(value) = f.value.as_ref().filter(|_| pred(&f.key)) else {
                continue;
            };
            let h = hasher.hash_one(&*f.key);
            if Self::layered_slot(&frozen[layer + 1..], h, &f.key).is_some() {
                continue;
            }
            if let Entry::Vacant(e) = Self::entry(&mut self.slots, hasher, h, &f.key) {
                taken.push((f.key.to_vec(), value.clone()));
                Self::mark_dirty(e.insert(f.overlay_copy(None)).into_mut(), h, dirty);
            }
        }
        self.live -= taken.len();
        taken
    }

    /// Visits every value in one pass over the table: `f` changes it in place and
    /// says so, or asks for its removal (which leaves a tombstone where
    /// [`Self::remove`] would). A watermark that advances every key's windows at once
    /// (sliced HOP windows) pays one pass instead of a lookup per key.
    pub fn update_all(&mut self, mut f: impl FnMut(&[u8], &mut V) -> Visit) {
        let (hasher, dirty) = (&self.hasher, &mut self.dirty);
        let mut removed = 0;
        self.slots.retain(|s| {
            let Some(value) = s.value.as_mut() else {
                return true;
            };
            match f(&s.key, value) {
                Visit::Kept => return true,
                Visit::Changed => {}
                Visit::Removed => {
                    s.value = None;
                    removed += 1;
                    if s.unknown_outside() {
                        return false;
                    }
                }
            }
            Self::mark_dirty(s, hasher.hash_one(&*s.key), dirty);
            true
        });
        // Frozen keys the overlay and the newer layers lack are visited on a copy,
        // kept if changed.
        let layers = &self.frozen;
        for (layer, frozen) in layers.iter().enumerate().flat_map(in_layer) {
            let Some(value) = &frozen.value else {
                continue;
            };
            let h = hasher.hash_one(&*frozen.key);
            if Self::layered_slot(&layers[layer + 1..], h, &frozen.key).is_some() {
                continue;
            }
            let Entry::Vacant(e) = Self::entry(&mut self.slots, hasher, h, &frozen.key) else {
                continue;
            };
            let mut value = value.clone();
            let value = match f(&frozen.key, &mut value) {
                Visit::Kept => continue,
                Visit::Changed => Some(value),
                Visit::Removed => {
                    removed += 1;
                    None
                }
            };
            Self::mark_dirty(e.insert(frozen.overlay_copy(value)).into_mut(), h, dirty);
        }
        self.live -= removed;
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Ends the barrier's changes: the entries dirtied since the last flush become part
    /// of the next checkpoint's delta and, on a backend that keeps flushed state
    /// (RocksDB), are written to it as one batch. Returns how many entries.
    pub fn flush(&mut self) -> crate::Result<usize> {
        self.fold_if_released();
        let keeps = self.backend.keeps_flushed_state();
        let track = self.track_changes;
        let (uid, max_parallelism) = (self.uid.clone(), self.max_parallelism);
        let mut batch = WriteBatch::default();
        let mut newly_in_delta = Vec::new();
        let mut n = 0;
        for h in std::mem::take(&mut self.dirty) {
            let Some(mut e) = self.find_marked(h, |s| s.dirty) else {
                continue; // forgotten since it was marked
            };
            let slot = e.get_mut();
            slot.dirty = false;
            n += 1;
            if keeps {
                let state_key = StateKey {
                    uid: uid.clone(),
                    key_group: KeyGroup::of_key(&slot.key, max_parallelism),
                    key: slot.key.to_vec(),
                };
                match &slot.value {
                    Some(v) => batch.put(state_key, v.encode()),
                    None => batch.delete(state_key),
                }
                slot.in_backend = slot.value.is_some();
            }
            if track && !slot.in_delta {
                slot.in_delta = true;
                newly_in_delta.push(h);
            }
            // A removal the backend has now and no checkpoint image needs.
            if slot.value.is_none() && !(track && slot.in_image) && !slot.shadows {
                e.remove();
            }
        }
        self.in_delta.extend(newly_in_delta);
        if keeps && n > 0 {
            self.backend.write(batch)?;
        }
        Ok(n)
    }

    /// The changes flushed since the last checkpoint, as keyed-state entries (None:
    /// deleted). Call after [`StateTable::flush`] at a checkpoint. A large delta
    /// freezes the table (or, while a frozen layer is still held by a slow or failed
    /// upload, the overlay as a second layer), and the uploader encodes it; a large
    /// delta while `MAX_FROZEN_LAYERS` are held, and a small one, are encoded now.
    pub fn take_checkpoint_delta(&mut self) -> DeltaData {
        self.fold_if_released();
        let n = self.in_delta.len();
        if n >= self.large_delta_min && n * 4 >= self.slots.len() {
            // A change not yet flushed would be left in the frozen table.
            let freezes = self.frozen.len() < MAX_FROZEN_LAYERS && self.dirty.is_empty();
            tracing::debug!(uid = %self.uid, freezes, entries = n, slots = self.slots.len(),
                frozen_layers = self.frozen.len(), "large checkpoint delta");
            if freezes {
                return self.freeze();
            }
            return DeltaData::Keyed(self.take_large_delta());
        }
        let mut out = KeyedEntriesBuilder::default();
        let max_parallelism = self.max_parallelism;
        let mut superseding = 0;
        for h in std::mem::take(&mut self.in_delta) {
            let Some(mut e) = self.find_marked(h, |s| s.in_delta) else {
                continue;
            };
            let slot = e.get_mut();
            superseding += usize::from(slot.in_image);
            slot.push_change(KeyGroup::of_key(&slot.key, max_parallelism).0, &mut out);
            if !slot.checkpointed() {
                e.remove();
            }
        }
        DeltaData::Keyed(out.finish().with_superseding(superseding))
    }

    /// A delta that is a large share of the table (a final checkpoint's is often all
    /// of it), gathered by one pass over the table instead of a hash probe per entry
    /// (the probes were half of q18's final checkpoint on the actor: 1.1 s of 2.1),
    /// and encoded in table order in pieces, one per core. The uploader puts it in
    /// key order off the data path, as it does a small delta's hash order.
    fn take_large_delta(&mut self) -> KeyedEntries {
        self.in_delta.clear();
        let max_parallelism = self.max_parallelism;
        let changed: Vec<(u32, &Slot<V>)> = self
            .slots
            .iter()
            .filter(|s| s.in_delta)
            .map(|s| (KeyGroup::of_key(&s.key, max_parallelism).0, s))
            .collect();
        let superseding = changed.iter().filter(|(_, s)| s.in_image).count();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let piece = changed.len().div_ceil(cores).max(LARGE_DELTA_MIN);
        let delta = encode_on_every_core(&changed, piece, |c| (c.0, c.1));
        drop(changed);
        self.slots.retain(|s| !s.in_delta || s.checkpointed());
        KeyedEntries::from_sealed(delta).with_superseding(superseding)
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }
}

/// Entries below this many are gathered by their hashes whatever the table's size.
const LARGE_DELTA_MIN: usize = 1 << 16;

/// Frozen layers at most: a large delta while this many are held is scanned and
/// encoded on the actor. Two cover an upload that outlasts one checkpoint interval
/// (a mid-run upload still running at the final checkpoint); more would stack reads
/// behind every miss of the overlay.
const MAX_FROZEN_LAYERS: usize = 2;

/// Each slot of a frozen layer, with the layer's index (for the layers above it).
fn in_layer<V>(
    (layer, f): (usize, &Arc<FrozenTable<V>>),
) -> impl Iterator<Item = (usize, &Slot<V>)> {
    f.slots.iter().map(move |s| (layer, s))
}

/// A slot of a released frozen layer with the flags its checkpoint left it.
fn settle<V>(mut slot: Slot<V>) -> Slot<V> {
    if slot.in_delta {
        slot.checkpointed();
    }
    slot.shadows = false;
    slot
}

/// The slots of a frozen layer the uploader still reads, copied with the flags its
/// checkpoint leaves them.
fn settled_copies<V: Clone>(layer: &FrozenTable<V>) -> impl Iterator<Item = Slot<V>> + '_ {
    layer.slots.iter().map(|s| {
        let mut copy = s.overlay_copy(s.value.clone());
        copy.shadows = false;
        copy
    })
}

/// Lays the slots of a newer layer (or the overlay) over `table`: each replaces its
/// key's, and a removal nothing needs any more takes the key out.
fn fold_over<V>(
    table: &mut HashTable<Slot<V>>,
    hasher: &ahash::RandomState,
    newer: impl IntoIterator<Item = Slot<V>>,
) {
    for mut s in newer {
        s.shadows = false;
        let h = hasher.hash_one(&*s.key);
        match table.entry(h, |t| t.key == s.key, |t| hasher.hash_one(&*t.key)) {
            Entry::Occupied(e) if s.forgettable() => {
                e.remove();
            }
            Entry::Occupied(mut e) => *e.get_mut() = s,
            Entry::Vacant(e) if !s.forgettable() => {
                e.insert(s);
            }
            Entry::Vacant(_) => {}
        }
    }
}

/// Encodes the changes of slots (`entry`: an item's key group and slot) in
/// contiguous pieces of `piece` items, one thread each; the pieces' batches, in
/// order, are the delta. A checkpoint's sync part holds its actor anyway, and at the
/// end of the input the other cores are idle.
pub(crate) fn encode_on_every_core<T: Sync, V: StateValue>(
    items: &[T],
    piece: usize,
    entry: impl for<'a> Fn(&'a T) -> (u32, &'a Slot<V>) + Sync,
) -> Vec<RecordBatch> {
    let encode = |piece: &[T]| {
        let mut out = KeyedEntriesBuilder::default();
        for item in piece {
            let (kg, slot) = entry(item);
            slot.push_change(kg, &mut out);
        }
        out.finish().into_batches()
    };
    let mut pieces = items.chunks(piece);
    let first = pieces.next().unwrap_or(&[]);
    std::thread::scope(|scope| {
        let rest: Vec<_> = pieces.map(|p| scope.spawn(move || encode(p))).collect();
        let mut batches = encode(first);
        for handle in rest {
            match handle.join() {
                Ok(b) => batches.extend(b),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        batches
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frozen_table::{in_turn, parts_in_turn, FrozenDelta};
    use crate::keyed_entries::KeyedEntry;
    use crate::keyed_merge::merge_keyed;
    use crate::keyed_merge::OutOfKeyOrder;
    use crate::MemoryStateBackend;

    /// The next checkpoint's delta as sorted (key, encoded value or tombstone).
    fn delta(t: &mut StateTable<i64>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut d: Vec<_> = t
            .take_checkpoint_delta()
            .into_keyed()
            .to_entries()
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect();
        d.sort();
        d
    }

    impl StateValue for i64 {
        fn encode_into(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.to_le_bytes());
        }
        fn decode(b: &[u8]) -> Option<Self> {
            Some(i64::from_le_bytes(b.try_into().ok()?))
        }
    }

    #[test]
    fn flush_collects_dirty_entries_for_the_checkpoint() {
        let backend = MemoryStateBackend::new();
        let mut t: StateTable<i64> = StateTable::new("agg", 16, backend.clone());
        *t.get_or_insert_with(b"k1", || 0) += 5;
        *t.get_or_insert_with(b"k2", || 0) += 7;
        assert_eq!(t.flush().unwrap(), 2);
        assert_eq!(t.flush().unwrap(), 0);
        t.remove(b"k1");
        *t.get_or_insert_with(b"k2", || 0) += 1;
        // k1 was born since the last checkpoint: its removal is no change to it.
        assert_eq!(t.flush().unwrap(), 1);
        let values = delta(&mut t);
        assert_eq!(
            values,
            vec![(b"k2".to_vec(), Some(8i64.encode()))],
            "one entry per changed key, encoded at the checkpoint; k1 came and went"
        );
        assert!(t.take_checkpoint_delta().is_empty());
        assert_eq!(backend.len(), 0, "an in-heap backend keeps no second copy");
    }

    #[test]
    fn replace_with_reports_the_image_of_the_first_change_since_a_flush() {
        let mut t: StateTable<i64> = StateTable::new("top", 16, MemoryStateBackend::new());
        let larger = |n: i64| move |v: Option<&i64>| v.is_none_or(|v| n > *v).then_some(n);
        let replaced = |before, first_since_flush| {
            Some(Replaced {
                before,
                first_since_flush,
            })
        };
        assert_eq!(t.replace_with(b"k", larger(5)), replaced(None, true));
        assert_eq!(t.replace_with(b"k", larger(7)), replaced(Some(5), false));
        assert_eq!(t.replace_with(b"k", larger(6)), None, "kept: not a change");
        assert_eq!(t.replace_with(b"absent", |_| None), None);
        assert_eq!(t.get(b"absent"), None, "declined: nothing inserted");
        assert_eq!(t.len(), 1);
        assert_eq!(t.flush().unwrap(), 1);
        assert_eq!(t.replace_with(b"k", larger(6)), None);
        assert_eq!(t.flush().unwrap(), 0, "a declined offer dirties nothing");
        assert_eq!(t.replace_with(b"k", larger(9)), replaced(Some(7), true));
        t.flush().unwrap();
        assert_eq!(delta(&mut t), vec![(b"k".to_vec(), Some(9i64.encode()))]);
        // A tombstone the image still needs comes back to life.
        t.remove(b"k");
        assert_eq!(t.len(), 0);
        assert_eq!(t.replace_with(b"k", larger(1)), replaced(None, false));
        assert_eq!((t.len(), t.get(b"k")), (1, Some(&1)));
    }

    #[test]
    fn a_key_of_the_last_checkpoint_removed_recreated_and_removed_keeps_its_tombstone() {
        let mut t: StateTable<i64> = StateTable::new("agg", 16, MemoryStateBackend::new());
        *t.get_or_insert_with(b"k", || 0) += 1;
        t.flush().unwrap();
        let first = t.take_checkpoint_delta().into_keyed();
        assert_eq!(first.len(), 1, "k is in this image");
        t.remove(b"k");
        t.flush().unwrap();
        *t.get_or_insert_with(b"k", || 0) += 2;
        t.flush().unwrap();
        t.remove(b"k");
        *t.get_or_insert_with(b"new", || 0) += 3;
        t.remove(b"new");
        t.flush().unwrap();
        let delta = delta(&mut t);
        assert_eq!(delta, vec![(b"k".to_vec(), None)]);
    }

    #[test]
    fn a_key_born_and_removed_between_checkpoints_leaves_no_change() {
        let mut t: StateTable<i64> = StateTable::new("agg", 16, MemoryStateBackend::new());
        *t.get_or_insert_with(b"old", || 0) += 1;
        t.flush().unwrap();
        assert_eq!(t.take_checkpoint_delta().into_keyed().len(), 1);
        // Born and removed within one barrier, and across a flush.
        *t.get_or_insert_with(b"a", || 0) += 1;
        t.remove(b"a");
        *t.get_or_insert_with(b"b", || 0) += 1;
        assert_eq!(t.flush().unwrap(), 1);
        *t.get_or_insert_with(b"b", || 0) += 1;
        t.remove(b"b");
        assert_eq!(
            t.flush().unwrap(),
            0,
            "b needs no change: the image never had it"
        );
        // A key of the image still leaves its tombstone.
        t.remove(b"old");
        assert_eq!(t.flush().unwrap(), 1);
        let delta = delta(&mut t);
        assert_eq!(delta, vec![(b"old".to_vec(), None)]);
        assert!(t.get(b"b").is_none());
    }

    /// Applies a delta to an image; a tombstone must remove a key the image has.
    fn apply(image: &mut std::collections::BTreeMap<Vec<u8>, i64>, delta: &KeyedEntries) {
        for (kg, k, v) in delta.to_entries() {
            assert_eq!(kg, KeyGroup::of_key(&k, 128).0, "key group of {k:?}");
            match v {
                Some(v) => image.insert(k, i64::decode(&v).unwrap()),
                None => image
                    .remove(&k)
                    .map(Some)
                    .expect("a tombstone of a key it has"),
            };
        }
    }

    /// A fresh table of `keys` (each its own value), frozen by its first checkpoint.
    fn frozen_with(keys: impl Iterator<Item = u32>) -> DeltaData {
        let mut t: StateTable<i64> = StateTable::new("agg", 128, MemoryStateBackend::new());
        for i in keys {
            *t.get_or_insert_with(&i.to_le_bytes(), || 0) = i as i64;
        }
        t.flush().unwrap();
        let delta = t.take_checkpoint_delta();
        assert!(
            matches!(delta, DeltaData::Frozen(_)),
            "a large delta freezes"
        );
        delta
    }

    fn frozen_parts<'a>(deltas: &[&'a DeltaData]) -> Vec<&'a dyn FrozenDelta> {
        let frozen = |d: &&'a DeltaData| match d {
            DeltaData::Frozen(f) => &**f,
            _ => unreachable!("frozen_with freezes"),
        };
        deltas.iter().map(frozen).collect()
    }

    /// A value as large as a join's bucket of rows or a Top-N partition.
    #[derive(Clone, Debug, PartialEq)]
    struct Blob(Vec<u8>);

    impl StateValue for Blob {
        fn encode_into(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0)
        }
        fn decode(b: &[u8]) -> Option<Self> {
            Some(Blob(b.to_vec()))
        }
    }

    /// A frozen delta of large values is encoded in pieces of about `PIECE_BYTES`,
    /// not of a fixed count of entries: the uploader holds a run of pieces whole, and
    /// by entries alone a run of 128 KiB values would be cut only by the column
    /// batch's 32 MiB (256 of them per batch, and every batch of the run held).
    #[test]
    fn a_frozen_delta_of_large_values_is_encoded_in_pieces_by_bytes() {
        let mut t: StateTable<Blob> = StateTable::new("join", 128, MemoryStateBackend::new());
        t.large_delta_min = 1;
        let (n, size) = (300u32, 128 << 10);
        for i in 0..n {
            *t.get_or_insert_with(&i.to_le_bytes(), || Blob(Vec::new())) =
                Blob(vec![i as u8; size]);
        }
        t.flush().unwrap();
        let delta = t.take_checkpoint_delta();
        let DeltaData::Frozen(frozen) = &delta else {
            panic!("a large delta freezes")
        };
        let piece = crate::frozen_table::entries_per_piece(size);
        assert_eq!(piece, 128, "16 MiB of 128 KiB values");
        let rows: Vec<usize> = frozen
            .batches_in_key_order()
            .map(|b| b.num_rows())
            .collect();
        assert!(rows.iter().all(|&r| r <= piece), "batches of {rows:?}");
        assert_eq!(rows.iter().sum::<usize>(), n as usize);
        for (_, key, value) in frozen.to_entries().to_entries() {
            let i = u32::from_le_bytes(key.try_into().unwrap());
            assert_eq!(value, Some(vec![i as u8; size]), "key {i}");
        }
    }

    /// Two actors' frozen parts (the two halves of the key groups, given in reverse)
    /// go in the order of their key groups and stream one after the other as one
    /// delta in key order, the same as their merge. Parts that share key groups have
    /// no such order; streamed anyway, they end with `OutOfKeyOrder`.
    #[test]
    fn frozen_parts_of_disjoint_key_groups_stream_in_turn() {
        let n = 3 * LARGE_DELTA_MIN as u32;
        let low = |i: &u32| KeyGroup::of_key(&i.to_le_bytes(), 128).0 < 64;
        let a = frozen_with((0..n).filter(low));
        let b = frozen_with((0..n).filter(|i| !low(i)));
        let ordered = in_turn(frozen_parts(&[&b, &a])).expect("disjoint parts have an order");
        let low_first = ordered[0].key_groups().unwrap();
        assert!(low_first.1 < 64, "the low half first: {low_first:?}");
        let streamed: Result<Vec<_>, _> = parts_in_turn(ordered).collect();
        let whole = KeyedEntries::from_sealed(streamed.expect("disjoint parts stream"));
        assert_eq!(whole.len(), n as usize);
        let keys: Vec<_> = whole.iter().map(|(kg, k, _)| (kg, k)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order");
        let merged = merge_keyed(&[a.clone().into_keyed(), b.clone().into_keyed()]);
        assert!(
            merged.to_entries() == whole.to_entries(),
            "the parts' merge"
        );

        let both_halves = frozen_with((0..n).step_by(2));
        assert!(in_turn(frozen_parts(&[&a, &both_halves])).is_none());
        let results: Vec<_> = parts_in_turn(frozen_parts(&[&a, &both_halves])).collect();
        assert!(
            matches!(results.last(), Some(Err(OutOfKeyOrder))),
            "parts streamed out of order end with OutOfKeyOrder"
        );
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    }

    /// A large delta freezes the table: the uploader's entries build the image, and
    /// the actor's changes meanwhile go copy-on-write to the overlay, never into the
    /// frozen delta. A large delta while it is still held freezes the overlay as a
    /// second layer; a third, while both are held, is gathered by a scan and encoded
    /// in pieces on every core. Once both are let go, the next flush folds the layers
    /// and the overlay back, and the table is as the probing path leaves it.
    #[test]
    fn a_large_delta_freezes_the_table_and_builds_the_same_image() {
        let mut t: StateTable<i64> = StateTable::new("agg", 128, MemoryStateBackend::new());
        let mut model = std::collections::BTreeMap::<Vec<u8>, i64>::new();
        let mut image = model.clone();
        let n = 3 * LARGE_DELTA_MIN as u32;
        for i in 0..n {
            *t.get_or_insert_with(&i.to_le_bytes(), || 0) += i as i64;
            model.insert(i.to_le_bytes().to_vec(), i as i64);
        }
        t.flush().unwrap();
        let frozen = t.take_checkpoint_delta();
        assert!(
            matches!(frozen, DeltaData::Frozen(_)),
            "a large delta freezes"
        );
        let first = frozen.clone().into_keyed();
        assert!(first.batches().len() > 1, "more than one batch");
        assert_eq!(first.len(), n as usize);
        let keys: Vec<_> = first.iter().map(|(kg, k, _)| (kg, k)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order");
        apply(&mut image, &first);
        assert_eq!(image, model);
        // Removals of keys the image has, updates, and keys born since.
        for i in 0..n + 1_000 {
            let k = i.to_le_bytes();
            if i % 3 == 0 && i < n {
                assert_eq!(t.remove(&k), model.remove(&k[..]));
            } else if i % 3 == 1 || i >= n {
                *t.get_or_insert_with(&k, || 0) += 1;
                *model.entry(k.to_vec()).or_insert(0) += 1;
            }
        }
        assert_eq!(t.len(), model.len());
        for i in (0..n + 1_000).step_by(7) {
            let k = i.to_le_bytes();
            assert_eq!(t.get(&k), model.get(&k[..]), "key {i} through the overlay");
        }
        t.flush().unwrap();
        let second = t.take_checkpoint_delta();
        assert!(
            matches!(second, DeltaData::Frozen(_)),
            "still frozen: the overlay freezes as a second layer"
        );
        let second_entries = second.clone().into_keyed();
        assert_eq!(second_entries.len(), 2 * n as usize / 3 + 1_000);
        apply(&mut image, &second_entries);
        assert_eq!(image, model);
        // Through both layers: removals of keys each layer holds, updates, new keys.
        for i in 0..n + 2_000 {
            let k = i.to_le_bytes();
            if i % 5 == 1 && i < n + 1_000 {
                assert_eq!(t.remove(&k), model.remove(&k[..]), "key {i}");
            } else if i % 5 == 2 || i >= n + 1_000 {
                *t.get_or_insert_with(&k, || 0) += 10;
                *model.entry(k.to_vec()).or_insert(0) += 10;
            }
        }
        // A pass over the whole state reaches keys held by each layer and the overlay.
        let number = |k: &[u8]| u32::from_le_bytes(k.try_into().expect("4-byte keys"));
        let mut taken = t.take_where(|k| number(k) % 7 == 3);
        taken.sort();
        let want: Vec<_> = model.extract_if(.., |k, _| number(k) % 7 == 3).collect();
        assert!(
            !want.is_empty() && taken == want,
            "take_where through two layers"
        );
        t.update_all(|k, v| match number(k) {
            i if i % 11 == 5 => {
                *v += 100;
                Visit::Changed
            }
            i if i % 13 == 6 => Visit::Removed,
            _ => Visit::Kept,
        });
        model.retain(|k, _| number(k) % 11 == 5 || number(k) % 13 != 6);
        model
            .iter_mut()
            .filter(|(k, _)| number(k) % 11 == 5)
            .for_each(|(_, v)| *v += 100);
        assert_eq!(t.len(), model.len());
        for i in (0..n + 2_000).step_by(3) {
            let k = i.to_le_bytes();
            assert_eq!(t.get(&k), model.get(&k[..]), "key {i} through two layers");
        }
        let mut keys: Vec<Vec<u8>> = t.keys().map(<[u8]>::to_vec).collect();
        keys.sort();
        assert!(keys == model.keys().cloned().collect::<Vec<_>>(), "keys");
        t.flush().unwrap();
        let delta = t.take_checkpoint_delta();
        assert!(
            matches!(delta, DeltaData::Keyed(_)),
            "two layers held: encoded now"
        );
        let delta = delta.into_keyed();
        assert!(delta.batches().len() > 1, "more than one piece");
        apply(&mut image, &delta);
        assert_eq!(image, model);
        assert!(
            frozen.into_keyed().to_entries() == first.to_entries(),
            "the frozen delta is as it was taken"
        );
        t.flush().unwrap();
        assert_eq!(t.frozen.len(), 2, "the newer layer is still held");
        assert!(
            second.into_keyed().to_entries() == second_entries.to_entries(),
            "the second layer's delta is as it was taken"
        );
        t.flush().unwrap();
        assert!(t.frozen.is_empty(), "folded once the uploader let go");
        assert_eq!(t.slots.len(), model.len(), "no tombstone is kept");
        assert!(t
            .slots
            .iter()
            .all(|s| !s.in_delta && s.in_image && !s.shadows));
        // A small change after a large one goes the probing way (key 4 is held).
        assert!(model.contains_key(&4u32.to_le_bytes()[..]));
        t.remove(&4u32.to_le_bytes());
        model.remove(&4u32.to_le_bytes()[..]);
        t.flush().unwrap();
        let delta = t.take_checkpoint_delta().into_keyed();
        assert_eq!(
            delta.to_entries(),
            vec![(
                KeyGroup::of_key(&4u32.to_le_bytes(), 128).0,
                4u32.to_le_bytes().to_vec(),
                None
            )]
        );
        apply(&mut image, &delta);
        assert_eq!(image, model);
        assert!(t.take_checkpoint_delta().is_empty());
    }

    #[test]
    fn take_where_removes_like_remove() {
        let mut t: StateTable<i64> = StateTable::new("agg", 16, MemoryStateBackend::new());
        for k in [b"a1", b"a2", b"b1"] {
            *t.get_or_insert_with(k, || 0) += 1;
        }
        t.flush().unwrap();
        t.take_checkpoint_delta();
        *t.get_or_insert_with(b"a3", || 0) += 1;
        let mut taken = t.take_where(|k| k[0] == b'a');
        taken.sort();
        assert_eq!(
            taken,
            vec![
                (b"a1".to_vec(), 1),
                (b"a2".to_vec(), 1),
                (b"a3".to_vec(), 1)
            ]
        );
        assert_eq!(t.len(), 1);
        t.flush().unwrap();
        let delta = delta(&mut t);
        // a3 was born since the checkpoint: no tombstone.
        assert_eq!(delta, vec![(b"a1".to_vec(), None), (b"a2".to_vec(), None)]);
    }

    /// The in-heap backend with `keeps_flushed_state` on, as RocksDB has it.
    struct KeepingBackend(Arc<MemoryStateBackend>);

    impl StateBackend for KeepingBackend {
        fn get(&self, key: &StateKey) -> crate::Result<Option<Vec<u8>>> {
            self.0.get(key)
        }
        fn write(&self, batch: WriteBatch) -> crate::Result<()> {
            self.0.write(batch)
        }
        fn scan(&self, uid: &str, s: u32, e: u32) -> crate::Result<Vec<(StateKey, Vec<u8>)>> {
            self.0.scan(uid, s, e)
        }
        fn drop_uid(&self, uid: &str) -> crate::Result<()> {
            self.0.drop_uid(uid)
        }
        fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// Random changes, flushes and checkpoints against a map: the images the deltas
    /// build, and a keeping backend's contents after each flush, equal the map; a
    /// table loaded from such an image holds the same. Small keys collide often, so
    /// removals, tombstones and revivals all happen. With a low bar for a large
    /// delta, most checkpoints freeze the table; frozen deltas are held (as an
    /// upload in progress or carried) for a random while, across changes, flushes
    /// and checkpoints, and must read the same when let go as when taken.
    #[test]
    fn deltas_and_backend_follow_random_changes() {
        for (keeps, large) in [
            (false, LARGE_DELTA_MIN),
            (true, LARGE_DELTA_MIN),
            (false, 4),
            (true, 4),
        ] {
            let inner = MemoryStateBackend::new();
            let backend: Arc<dyn StateBackend> = if keeps {
                Arc::new(KeepingBackend(inner.clone()))
            } else {
                inner.clone()
            };
            let mut t: StateTable<i64> = StateTable::new("agg", 16, backend.clone());
            t.large_delta_min = large;
            let mut held: Vec<(DeltaData, Vec<KeyedEntry>)> = Vec::new();
            let (mut frozen, mut released, mut layered) = (0, 0, 0);
            let mut forced_over_two = 0;
            let mut model = std::collections::BTreeMap::<Vec<u8>, i64>::new();
            let mut image = std::collections::BTreeMap::<Vec<u8>, i64>::new();
            let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
            for step in 0..20_000 {
                let key = vec![b'k', next(64) as u8];
                match next(100) {
                    0..=49 => {
                        let d = next(9) as i64 + 1;
                        *t.get_or_insert_with(&key, || 0) += d;
                        *model.entry(key).or_insert(0) += d;
                    }
                    50..=79 => assert_eq!(t.remove(&key), model.remove(&key), "step {step}"),
                    80 => {
                        // Ends a freeze while the uploader may hold its layers: they
                        // are copied, and nothing changes.
                        forced_over_two += usize::from(t.frozen.len() == 2);
                        t.try_for_each_unstored(|_, _| Ok::<(), ()>(())).unwrap();
                        assert!(t.frozen.is_empty(), "step {step}");
                    }
                    81 => {
                        // Halve the even values, drop those above a bound, keep the rest.
                        let b = next(64) as i64;
                        t.update_all(|_, v| match *v {
                            v2 if v2 > b => Visit::Removed,
                            v2 if v2 % 2 == 0 => {
                                *v = v2 / 2;
                                Visit::Changed
                            }
                            _ => Visit::Kept,
                        });
                        model.retain(|_, v| *v <= b);
                        model
                            .values_mut()
                            .filter(|v| **v % 2 == 0)
                            .for_each(|v| *v /= 2);
                    }
                    82..=84 => {
                        let b = next(64) as u8;
                        let mut taken = t.take_where(|k| k[1] >= b);
                        taken.sort();
                        let expected: Vec<_> = model.extract_if(.., |k, _| k[1] >= b).collect();
                        assert_eq!(taken, expected, "step {step}");
                    }
                    85..=92 => {
                        t.flush().unwrap();
                        if keeps {
                            let stored: std::collections::BTreeMap<_, _> = backend
                                .scan("agg", 0, 16)
                                .unwrap()
                                .into_iter()
                                .map(|(k, v)| (k.key, i64::decode(&v).unwrap()))
                                .collect();
                            assert_eq!(stored, model, "backend after flush, step {step}");
                        }
                    }
                    93 => {
                        for (delta, taken) in held.drain(..) {
                            assert!(delta.into_keyed().to_entries() == taken, "step {step}");
                            released += 1;
                        }
                    }
                    94 if !held.is_empty() => {
                        // One upload ends, maybe the newer one first.
                        let (delta, taken) = held.remove(next(held.len() as u64) as usize);
                        assert!(delta.into_keyed().to_entries() == taken, "step {step}");
                        released += 1;
                    }
                    _ => {
                        t.flush().unwrap();
                        let delta = t.take_checkpoint_delta();
                        let entries = delta.clone().into_keyed().to_entries();
                        // What the uploader's compaction weighs: the entries whose
                        // key the image before holds (replaced or removed).
                        let superseding = entries
                            .iter()
                            .filter(|(_, k, _)| image.contains_key(k))
                            .count();
                        assert_eq!(
                            delta.superseding().map(|(n, _)| n),
                            Some(superseding),
                            "superseding entries, step {step}"
                        );
                        if matches!(delta, DeltaData::Frozen(_)) {
                            frozen += 1;
                            layered += usize::from(t.frozen.len() > 1);
                            held.push((delta, entries.clone()));
                        }
                        if t.frozen.len() == 2 {
                            let mut keys: Vec<Vec<u8>> = t.keys().map(<[u8]>::to_vec).collect();
                            keys.sort();
                            let want: Vec<_> = model.keys().cloned().collect();
                            assert_eq!(keys, want, "keys through two layers, step {step}");
                        }
                        for (_, k, v) in entries {
                            match v {
                                Some(v) => image.insert(k, i64::decode(&v).unwrap()),
                                None => {
                                    assert!(
                                        image.contains_key(&k),
                                        "a tombstone for {k:?} the image lacks"
                                    );
                                    image.remove(&k)
                                }
                            };
                        }
                        assert_eq!(image, model, "image after checkpoint, step {step}");
                    }
                }
                assert_eq!(t.len(), model.len(), "step {step}");
                let probe = [b'k', next(64) as u8];
                assert_eq!(t.get(&probe), model.get(&probe[..]), "step {step}");
            }
            if large < LARGE_DELTA_MIN {
                assert!(
                    frozen > 50 && released > 20 && layered > 10 && forced_over_two > 0,
                    "froze {frozen} ({layered} over a held layer), let go {released}, \
                     ended {forced_over_two} freezes of two held layers"
                );
            }
            let mut keys: Vec<Vec<u8>> = t.keys().map(<[u8]>::to_vec).collect();
            keys.sort();
            assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
            // A table restored from the last image holds exactly it.
            let restored_backend = MemoryStateBackend::new();
            let mut batch = WriteBatch::default();
            for (k, v) in &image {
                let key_group = KeyGroup::of_key(k, 16);
                batch.put(
                    StateKey {
                        uid: "agg".into(),
                        key_group,
                        key: k.clone(),
                    },
                    v.encode(),
                );
            }
            restored_backend.write(batch).unwrap();
            let mut r: StateTable<i64> = StateTable::new("agg", 16, restored_backend);
            assert_eq!(r.load(0, 16).unwrap(), image.len());
            for (k, v) in &image {
                assert_eq!(r.get(k), Some(v));
            }
        }
    }

    #[test]
    fn restored_entries_load_from_the_backend() {
        let backend = MemoryStateBackend::new();
        let mut batch = WriteBatch::default();
        for (k, v) in [(b"k1", 3i64), (b"k2", 4)] {
            batch.put(
                StateKey {
                    uid: "agg".into(),
                    key_group: KeyGroup::of_key(k, 16),
                    key: k.to_vec(),
                },
                v.encode(),
            );
        }
        backend.write(batch).unwrap();
        let mut t: StateTable<i64> = StateTable::new("agg", 16, backend);
        assert_eq!(t.load(0, 16).unwrap(), 2);
        assert_eq!(t.get(b"k2"), Some(&4));
    }
}
