//! State backends: where operator state lives as bytes.
//!
//! Every entry is addressed by `(uid, key_group, key)` so that state can be split by
//! key-group range when the parallelism changes. The in-memory backend is the embedded
//! default for now; the RocksDB backend (incremental checkpoints) plugs in behind the
//! same trait.

use crate::KeyGroup;
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
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

pub trait StateBackend: Send + Sync + 'static {
    fn get(&self, key: &StateKey) -> Option<Vec<u8>>;
    /// Applies a batch atomically: readers see all of it or none of it.
    fn write(&self, batch: WriteBatch);
    /// Every entry of `uid` within `[kg_start, kg_end)`, in key order.
    fn scan(&self, uid: &str, kg_start: u32, kg_end: u32) -> Vec<(StateKey, Vec<u8>)>;
    /// Removes all state of one operator (used when a view is dropped).
    fn drop_uid(&self, uid: &str);
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
    fn get(&self, key: &StateKey) -> Option<Vec<u8>> {
        self.map.read().get(key).cloned()
    }

    fn write(&self, batch: WriteBatch) {
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
    }

    fn scan(&self, uid: &str, kg_start: u32, kg_end: u32) -> Vec<(StateKey, Vec<u8>)> {
        let lo = StateKey {
            uid: uid.into(),
            key_group: KeyGroup(kg_start),
            key: vec![],
        };
        self.map
            .read()
            .range(lo..)
            .take_while(|(k, _)| &*k.uid == uid && k.key_group.0 < kg_end)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn drop_uid(&self, uid: &str) {
        self.map.write().retain(|k, _| &*k.uid != uid);
    }

    fn len(&self) -> usize {
        self.map.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, kg: u32, k: &[u8]) -> StateKey {
        StateKey {
            uid: uid.into(),
            key_group: KeyGroup(kg),
            key: k.to_vec(),
        }
    }

    #[test]
    fn scan_is_bounded_by_uid_and_key_group_range() {
        let b = MemoryStateBackend::new();
        let mut wb = WriteBatch::default();
        wb.put(key("a", 0, b"x"), b"1".to_vec());
        wb.put(key("a", 3, b"y"), b"2".to_vec());
        wb.put(key("a", 5, b"z"), b"3".to_vec());
        wb.put(key("b", 3, b"y"), b"4".to_vec());
        b.write(wb);
        let got: Vec<_> = b.scan("a", 1, 5).into_iter().map(|(_, v)| v).collect();
        assert_eq!(got, vec![b"2".to_vec()]);
        let mut wb = WriteBatch::default();
        wb.delete(key("a", 3, b"y"));
        b.write(wb);
        assert!(b.scan("a", 1, 5).is_empty());
        b.drop_uid("a");
        assert_eq!(b.len(), 1);
    }
}
