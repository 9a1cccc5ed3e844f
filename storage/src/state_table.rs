//! `StateTable`: the one state API every stateful operator uses.
//!
//! Reads and writes go to a cache of decoded values, which holds the whole state (no
//! eviction). At each barrier the operator calls [`StateTable::flush`]: the entries
//! dirtied since the last barrier join the next checkpoint's delta, which is encoded
//! once when the checkpoint takes it; a backend that keeps flushed state (RocksDB)
//! also gets them as one atomic write batch, so it holds a barrier-consistent image.
//! The in-heap backend keeps no second copy.

use crate::keyed_entries::{KeyedEntries, KeyedEntriesBuilder};
use crate::{KeyGroup, StateBackend, StateKey, WriteBatch};
use hashbrown::hash_map::EntryRef;
use std::sync::Arc;

/// The cache and the change sets look keys up by `&[u8]` and copy a key only when it
/// is new to them (`entry_ref`): one hash per lookup. ahash: the std SipHash showed up
/// as the top cost of aggregation in profiles.
type KeyMap<V> = hashbrown::HashMap<Vec<u8>, V, ahash::RandomState>;

/// A value that can be stored in a state table.
pub trait StateValue: Sized {
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

pub struct StateTable<V> {
    uid: Arc<str>,
    max_parallelism: u32,
    backend: Arc<dyn StateBackend>,
    cache: KeyMap<V>,
    /// Keys changed since the last flush, each with whether it is *born*: absent
    /// from the state the last checkpoint holds (see `since_checkpoint`).
    dirty: KeyMap<bool>,
    /// Keys flushed since the last checkpoint: the delta the next checkpoint uploads
    /// (encoded then, once, however often the entry changed in between), so upload
    /// size follows the change, not the state. A born key removed again before the
    /// next checkpoint needs no entry in its delta (window state that is created and
    /// cleaned between two checkpoints uploads nothing). One map holds both facts, so
    /// each key is stored once.
    since_checkpoint: KeyMap<bool>,
    /// Off when the job never checkpoints: then nothing is kept for deltas.
    track_changes: bool,
}

impl<V: StateValue> StateTable<V> {
    pub fn new(uid: &str, max_parallelism: u32, backend: Arc<dyn StateBackend>) -> Self {
        Self {
            uid: uid.into(),
            max_parallelism,
            backend,
            cache: KeyMap::default(),
            dirty: KeyMap::default(),
            since_checkpoint: KeyMap::default(),
            track_changes: true,
        }
    }

    /// Whether flushed changes are kept for the next checkpoint's delta.
    pub fn set_track_changes(&mut self, on: bool) {
        self.track_changes = on;
        if !on {
            self.since_checkpoint.clear();
        }
    }

    /// Loads the entries of the given key-group range from the backend into the cache
    /// (used when an actor starts on existing state).
    pub fn load(&mut self, kg_start: u32, kg_end: u32) -> crate::Result<usize> {
        let mut n = 0;
        for (k, v) in self.backend.scan(&self.uid, kg_start, kg_end)? {
            if let Some(v) = V::decode(&v) {
                self.cache.insert(k.key, v);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every key in the cache (the whole state: there is no eviction).
    pub fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.cache.keys()
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.cache.get(key)
    }

    /// Mutable access to a value's parts that are not stored (its encoding does not
    /// change): the key is not marked dirty, so no checkpoint re-encodes it.
    pub fn get_mut_unstored(&mut self, key: &[u8]) -> Option<&mut V> {
        self.cache.get_mut(key)
    }

    /// Rewrites every value in place without marking it dirty: the change must not
    /// alter what it stores (an operator reading an older version's encoding into
    /// its current layout after [`Self::load`]).
    pub fn try_for_each_unstored<E>(
        &mut self,
        mut f: impl FnMut(&mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.cache.values_mut().try_for_each(&mut f)
    }

    /// Mutable access; marks the key dirty. Inserts `default()` when absent.
    pub fn get_or_insert_with(&mut self, key: &[u8], default: impl FnOnce() -> V) -> &mut V {
        let (value, absent) = match self.cache.entry_ref(key) {
            EntryRef::Occupied(e) => (e.into_mut(), false),
            EntryRef::Vacant(e) => (e.insert(default()), true),
        };
        if let EntryRef::Vacant(e) = self.dirty.entry_ref(key) {
            // First change this epoch: born when the last checkpoint cannot hold it.
            let born = self.track_changes && absent && !self.since_checkpoint.contains_key(key);
            e.insert(born);
        }
        value
    }

    /// Removes the key. One born since the last checkpoint that no backend holds
    /// leaves no trace in the change sets: the checkpoint's image never had it (a
    /// window created and closed between two checkpoints costs no further work).
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let removed = self.cache.remove(key);
        self.note_removed(key);
        removed
    }

    /// Removes and returns every entry whose key passes `pred`, as [`Self::remove`]
    /// would one by one, moving the keys out instead of copying them (a watermark can
    /// close millions of windows at once).
    pub fn take_where(&mut self, mut pred: impl FnMut(&[u8]) -> bool) -> Vec<(Vec<u8>, V)> {
        let taken: Vec<(Vec<u8>, V)> = self.cache.extract_if(|k, _| pred(k)).collect();
        for (key, _) in &taken {
            self.note_removed(key);
        }
        taken
    }

    /// Records the removal of `key` in the change sets.
    fn note_removed(&mut self, key: &[u8]) {
        if self.dirty.get(key) == Some(&true) {
            // Born and never flushed: not in `since_checkpoint`, not in any backend.
            self.dirty.remove(key);
        } else if self.since_checkpoint.get(key) == Some(&true)
            && !self.backend.keeps_flushed_state()
        {
            self.since_checkpoint.remove(key);
            self.dirty.remove(key);
        } else {
            self.dirty.entry_ref(key).or_insert(false);
        }
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Ends the barrier's changes: the entries dirtied since the last flush become part
    /// of the next checkpoint's delta and, on a backend that keeps flushed state
    /// (RocksDB), are written to it as one batch. Returns how many entries.
    pub fn flush(&mut self) -> crate::Result<usize> {
        if self.dirty.is_empty() {
            return Ok(0);
        }
        let n = self.dirty.len();
        if self.backend.keeps_flushed_state() {
            let mut batch = WriteBatch::default();
            for key in self.dirty.keys() {
                let state_key = StateKey {
                    uid: self.uid.clone(),
                    key_group: KeyGroup::of_key(key, self.max_parallelism),
                    key: key.clone(),
                };
                match self.cache.get(key) {
                    Some(v) => batch.put(state_key, v.encode()),
                    None => batch.delete(state_key),
                }
            }
            self.backend.write(batch)?;
        }
        if self.track_changes {
            // A key already in the delta keeps what it was at its first change.
            for (key, born) in self.dirty.drain() {
                self.since_checkpoint.entry(key).or_insert(born);
            }
        } else {
            self.dirty.clear();
        }
        Ok(n)
    }

    /// The changes flushed since the last checkpoint, as keyed-state entries (None:
    /// deleted), encoded now. Call after [`StateTable::flush`] at a checkpoint.
    pub fn take_checkpoint_delta(&mut self) -> KeyedEntries {
        let mut out = KeyedEntriesBuilder::default();
        for (k, born) in self.since_checkpoint.drain() {
            let kg = KeyGroup::of_key(&k, self.max_parallelism).0;
            match self.cache.get(&k) {
                Some(v) => out.push_with(kg, &k, |buf| v.encode_into(buf)),
                // Created and removed since the last checkpoint: nothing to undo.
                None if born => {}
                None => out.push(kg, &k, None),
            }
        }
        out.finish()
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStateBackend;

    /// The next checkpoint's delta as sorted (key, encoded value or tombstone).
    fn delta(t: &mut StateTable<i64>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut d: Vec<_> = t
            .take_checkpoint_delta()
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
    fn a_key_of_the_last_checkpoint_removed_recreated_and_removed_keeps_its_tombstone() {
        let mut t: StateTable<i64> = StateTable::new("agg", 16, MemoryStateBackend::new());
        *t.get_or_insert_with(b"k", || 0) += 1;
        t.flush().unwrap();
        assert_eq!(t.take_checkpoint_delta().len(), 1, "k is in this image");
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
        assert_eq!(t.take_checkpoint_delta().len(), 1);
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
