//! The RocksDB state backend (`state.backend.type = 'rocksdb'`): the barrier-consistent
//! image of operator state in a local RocksDB instead of an in-memory ordered map.
//!
//! What it is and is not, so nobody is surprised:
//! - It holds the same `(uid, key_group, key) -> value` entries as the in-memory
//!   backend; operators still keep their working state in a cache (no eviction yet).
//!   What moves to disk is the ordered second copy that actors load from.
//! - Durability comes from checkpoints, not from RocksDB: the write-ahead log is off
//!   and the instance is wiped at startup, because recovery always restores from the
//!   latest checkpoint (and savepoints from their Arrow files). So checkpoints and
//!   savepoints are identical whatever the backend, which is what makes a savepoint
//!   taken on one backend restorable on the other.
//!
//! Keys are `uid length (u16 BE) | uid | key group (u32 BE) | key`: one uid's entries
//! are contiguous and ordered by key group, so a key-group range is one range scan.

use crate::state_backend::{StateBackend, StateKey, WriteBatch};
use crate::{KeyGroup, Result, StorageError};
use rocksdb::{IteratorMode, Options, ReadOptions, WriteOptions, DB};
use std::path::Path;
use std::sync::Arc;

pub struct RocksDbStateBackend {
    db: DB,
}

fn rocks_err(e: rocksdb::Error) -> StorageError {
    StorageError::Io(std::io::Error::other(format!("rocksdb: {e}")))
}

fn uid_prefix(uid: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + uid.len());
    out.extend_from_slice(&(uid.len() as u16).to_be_bytes());
    out.extend_from_slice(uid.as_bytes());
    out
}

fn encode(key: &StateKey) -> Vec<u8> {
    let mut out = uid_prefix(&key.uid);
    out.extend_from_slice(&key.key_group.0.to_be_bytes());
    out.extend_from_slice(&key.key);
    out
}

/// The smallest byte string greater than every string that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl RocksDbStateBackend {
    /// Opens a fresh instance in `dir`, removing whatever a previous run left there.
    pub fn open(dir: &Path) -> Result<Arc<Self>> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.increase_parallelism(2);
        let db = DB::open(&opts, dir).map_err(rocks_err)?;
        Ok(Arc::new(Self { db }))
    }

    fn write_options() -> WriteOptions {
        let mut w = WriteOptions::default();
        // Checkpoints, not RocksDB's WAL, make state durable (see the module docs).
        w.disable_wal(true);
        w
    }
}

impl StateBackend for RocksDbStateBackend {
    fn get(&self, key: &StateKey) -> Result<Option<Vec<u8>>> {
        self.db.get(encode(key)).map_err(rocks_err)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in batch.entries {
            match v {
                Some(v) => b.put(encode(&k), v),
                None => b.delete(encode(&k)),
            }
        }
        self.db
            .write_opt(b, &Self::write_options())
            .map_err(rocks_err)
    }

    fn scan(&self, uid: &str, kg_start: u32, kg_end: u32) -> Result<Vec<(StateKey, Vec<u8>)>> {
        let prefix = uid_prefix(uid);
        let mut lower = prefix.clone();
        lower.extend_from_slice(&kg_start.to_be_bytes());
        let upper = match kg_end.checked_sub(1) {
            None => return Ok(vec![]),
            Some(last) => {
                let mut u = prefix.clone();
                u.extend_from_slice(&last.to_be_bytes());
                prefix_end(&u)
            }
        };
        let mut read = ReadOptions::default();
        if let Some(u) = upper {
            read.set_iterate_upper_bound(u);
        }
        let uid: Arc<str> = uid.into();
        let mut out = Vec::new();
        let iter = self.db.iterator_opt(
            IteratorMode::From(&lower, rocksdb::Direction::Forward),
            read,
        );
        for item in iter {
            let (k, v) = item.map_err(rocks_err)?;
            let rest = &k[prefix.len()..];
            if rest.len() < 4 {
                return Err(StorageError::Corrupt("rocksdb state key too short".into()));
            }
            let kg = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes"));
            out.push((
                StateKey {
                    uid: uid.clone(),
                    key_group: KeyGroup(kg),
                    key: rest[4..].to_vec(),
                },
                v.to_vec(),
            ));
        }
        Ok(out)
    }

    fn drop_uid(&self, uid: &str) -> Result<()> {
        let prefix = uid_prefix(uid);
        let mut b = rocksdb::WriteBatch::default();
        match prefix_end(&prefix) {
            Some(end) => b.delete_range(&prefix, &end),
            None => {
                return Err(StorageError::Corrupt(format!(
                    "uid {uid} has no key range end"
                )))
            }
        }
        self.db
            .write_opt(b, &Self::write_options())
            .map_err(rocks_err)
    }

    fn len(&self) -> usize {
        self.db
            .iterator(IteratorMode::Start)
            .take_while(|i| i.is_ok())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_backend::tests::backend_contract;

    #[test]
    fn meets_the_backend_contract() {
        let dir = tempfile::tempdir().unwrap();
        backend_contract(RocksDbStateBackend::open(&dir.path().join("db")).unwrap());
    }

    #[test]
    fn prefix_end_orders_after_every_extension() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 255]), Some(vec![2]));
        assert_eq!(prefix_end(&[255, 255]), None);
    }
}
