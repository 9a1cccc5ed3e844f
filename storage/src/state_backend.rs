//! State backends: where operator state lives as bytes.
//!
//! Every entry is addressed by `(uid, key_group, key)` so that state can be split by
//! key-group range when the parallelism changes. The in-memory backend is the embedded
//! default; the RocksDB backend ([`crate::rocksdb_backend`]) plugs in behind the same
//! trait (`state.backend.type`).

use crate::keyed_entries::KeyedEntries;
use crate::{KeyGroup, Result};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateKey {
    pub uid: Arc<str>,
    pub key_group: KeyGroup,
    pub key: Vec<u8>,
}

/// Puts (`Some`) and deletes (`None`) applied atomically by [`StateBackend::write`].
#[derive(Debug, Default)]
pub struct WriteBatch {
    pub entries: Vec<(StateKey, Option<Vec<u8>>)>,
}

impl WriteBatch {
    pub fn put(&mut self, key: StateKey, value: Vec<u8>) {
        self.entries.push((key, Some(value)));
    }
    pub fn delete(&mut self, key: StateKey) {
        self.entries.push((key, None));
    }
    /// The puts that load one operator's restored keyed state (`uid`) into a backend,
    /// for its actors to load their key groups of. Deletions are skipped: merged state
    /// holds none.
    pub fn restoring(uid: &str, entries: &KeyedEntries) -> WriteBatch {
        let uid: Arc<str> = uid.into();
        let mut batch = WriteBatch::default();
        for (kg, key, value) in entries.iter() {
            let Some(value) = value else { continue };
            let key = StateKey {
                uid: uid.clone(),
                key_group: KeyGroup(kg),
                key: key.to_vec(),
            };
            batch.put(key, value.to_vec());
        }
        batch
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

pub trait StateBackend: Send + Sync + 'static {
    fn get(&self, key: &StateKey) -> Result<Option<Vec<u8>>>;
    /// Applies a batch atomically: readers see all of it or none of it.
    fn write(&self, batch: WriteBatch) -> Result<()>;
    /// Every entry of `uid` within `[kg_start, kg_end)`, in key order.
    fn scan(&self, uid: &str, kg_start: u32, kg_end: u32) -> Result<Vec<(StateKey, Vec<u8>)>>;
    /// Removes all state of one operator (used when a view is dropped).
    fn drop_uid(&self, uid: &str) -> Result<()>;
    /// Whether state tables write their flushed entries here. An in-heap backend does
    /// not: the state table's own cache is the working state (Flink's HashMap backend
    /// keeps its state as heap objects too), and checkpoints take their deltas from the
    /// state table; a copy here would only be written, never read. It is still how
    /// restored state reaches the operators (`write` then `scan`).
    fn keeps_flushed_state(&self) -> bool {
        true
    }
    /// Number of entries, for metrics and tests.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Ordered in-memory backend.
#[derive(Default)]
pub struct MemoryStateBackend {
    map: RwLock<BTreeMap<StateKey, Vec<u8>>>,
}

impl MemoryStateBackend {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl StateBackend for MemoryStateBackend {
    fn keeps_flushed_state(&self) -> bool {
        false
    }

    fn get(&self, key: &StateKey) -> Result<Option<Vec<u8>>> {
        Ok(self.map.read().get(key).cloned())
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut map = self.map.write();
        for (k, v) in batch.entries {
            match v {
                Some(v) => {
                    map.insert(k, v);
                }
                None => {
                    map.remove(&k);
                }
            }
        }
        Ok(())
    }

    fn scan(&self, uid: &str, kg_start: u32, kg_end: u32) -> Result<Vec<(StateKey, Vec<u8>)>> {
        let lo = StateKey {
            uid: uid.into(),
            key_group: KeyGroup(kg_start),
            key: vec![],
        };
        Ok(self
            .map
            .read()
            .range(lo..)
            .take_while(|(k, _)| &*k.uid == uid && k.key_group.0 < kg_end)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn drop_uid(&self, uid: &str) -> Result<()> {
        self.map.write().retain(|k, _| &*k.uid != uid);
        Ok(())
    }

    fn len(&self) -> usize {
        self.map.read().len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn key(uid: &str, kg: u32, k: &[u8]) -> StateKey {
        StateKey {
            uid: uid.into(),
            key_group: KeyGroup(kg),
            key: k.to_vec(),
        }
    }

    /// What every backend must do; each backend's tests run it.
    pub(crate) fn backend_contract(b: Arc<dyn StateBackend>) {
        let mut wb = WriteBatch::default();
        wb.put(key("a", 0, b"x"), b"1".to_vec());
        wb.put(key("a", 3, b"y"), b"2".to_vec());
        wb.put(key("a", 3, b"\xff"), b"2b".to_vec());
        wb.put(key("a", 5, b"z"), b"3".to_vec());
        wb.put(key("ab", 3, b"y"), b"5".to_vec());
        wb.put(key("b", 3, b"y"), b"4".to_vec());
        b.write(wb).unwrap();
        assert_eq!(b.get(&key("a", 5, b"z")).unwrap(), Some(b"3".to_vec()));
        assert_eq!(b.get(&key("a", 4, b"z")).unwrap(), None);
        let got: Vec<_> = b
            .scan("a", 1, 5)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.key_group.0, k.key, v))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, b"y".to_vec(), b"2".to_vec()),
                (3, b"\xff".to_vec(), b"2b".to_vec())
            ]
        );
        assert_eq!(b.scan("a", 0, 128).unwrap().len(), 4);
        let mut wb = WriteBatch::default();
        wb.delete(key("a", 3, b"y"));
        wb.delete(key("a", 3, b"\xff"));
        b.write(wb).unwrap();
        assert!(b.scan("a", 1, 5).unwrap().is_empty());
        b.drop_uid("a").unwrap();
        assert!(b.scan("a", 0, 128).unwrap().is_empty());
        assert_eq!(b.len(), 2, "other uids stay");
        assert_eq!(b.scan("ab", 0, 128).unwrap().len(), 1);
    }

    #[test]
    fn memory_backend_meets_the_contract() {
        backend_contract(MemoryStateBackend::new());
    }
}
