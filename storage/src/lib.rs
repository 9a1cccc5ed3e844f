//! Weir storage: durable bytes.
//!
//! Module map:
//! - [`key_group`]: `KeyGroup`, the stable key hash and the key-group → actor assignment
//!   (`key_group = hash(key) % max_parallelism`, `actor = kg * parallelism / max_parallelism`).
//! - [`state_backend`]: the `StateBackend` trait (bytes under `(uid, key_group, key)`) and
//!   the in-memory backend.
//! - [`source_positions`]: connector positions logged with a table's rows.
//! - [`rocksdb_backend`]: the same entries in a local RocksDB (`state.backend.type`).
//! - [`state_table`]: `StateTable`, the one state API operators use: a write-back cache
//!   flushed into the backend as one write batch per barrier.
//! - [`frozen_table`]: a state table frozen by a checkpoint with a large delta, which
//!   the uploader encodes while the actor goes on copy-on-write.
//! - [`table_log`]: `TableLog`, the append-only, fsynced, checksummed log that makes a
//!   table write durable before it is acknowledged, and replays it on recovery.
//! - [`meta_store`]: atomic files under `meta/` (the catalog).
//! - [`codec`]: Arrow IPC encoding of change batches used by the table log.
//! - [`object_storage`]: `ObjectStorage`, checkpoints' home: a local folder or S3;
//!   conditional writes (create-if-absent, replace-if-unchanged) where the store has them.
//! - [`object_writer`]: `ObjectWriter`, an object written piece by piece (a multipart
//!   upload once it is large), so a compacted base is never whole in memory.
//! - [`leader_lease`]: the high-availability leader lease, one object renewed by
//!   conditional writes.
//! - [`cluster_log`]: the high-availability log: table log entries and catalog files
//!   group-committed to create-only segments in the object store, fenced by epoch;
//!   the standby's mirror of it.
//! - [`state_snapshot`]: operator state as Arrow IPC files (deltas and bases).
//! - [`keyed_merge`]: `KeyedMerge`, keyed files applied in order (last write wins) and
//!   streamed out in key order, a batch at a time; an input can also be a stream of
//!   owned batches (a frozen table's changes merged into a compaction).
//! - [`key_order`]: a keyed file's entries put in key order by 16-byte items whose
//!   key digests decide most comparisons.
//! - [`mapped_pages`]: a mapped state file's pages handed back to the kernel once a
//!   merge has read them.
//! - [`keyed_entries`]: `KeyedEntries`, keyed-state changes as the Arrow columns a
//!   state file holds (built without an allocation per entry).
//! - [`checkpoint_meta`]: a checkpoint's `_metadata` (state files, source positions,
//!   checksums, format version).
//! - [`savepoint_meta`]: a savepoint's `_metadata` (one canonical file per uid, source
//!   positions, format version).
//! - [`failpoint`]: test-only failure injection, inert unless `WEIR_FAILPOINTS=1`.
//! - [`test_rng`]: the seeded pseudo-random source of the randomized tests.

pub mod checkpoint_meta;
pub mod cluster_log;
pub mod codec;
pub mod failpoint;
pub mod frozen_table;
pub mod key_group;
pub(crate) mod key_order;
pub mod keyed_entries;
pub mod keyed_merge;
pub mod leader_lease;
pub mod mapped_pages;
pub mod meta_store;
pub mod object_storage;
pub mod object_writer;
pub mod rocksdb_backend;
pub mod savepoint_meta;
pub mod source_positions;
pub mod state_backend;
pub mod state_snapshot;
pub mod state_table;
pub mod table_log;
pub mod test_rng;

pub use key_group::{KeyGroup, KeyGroupRange};
pub use state_backend::{MemoryStateBackend, StateBackend, StateKey, WriteBatch};
pub use state_table::{Replaced, StateTable, Visit};
pub use table_log::{LogOffset, LogSync, TableLog};

/// Errors of the storage layer. I/O and corruption are kept apart because recovery
/// treats a torn tail (expected after `kill -9`) differently from an I/O failure.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("serialization error: {0}")]
    Serde(#[from] serde_json::Error),
    /// This member's leader term is over: a newer leader fenced the cluster log.
    #[error("not the leader: {0}")]
    Fenced(String),
    /// The high-availability storage did not confirm a write in time.
    #[error("high-availability storage unavailable: {0}")]
    Unavailable(String),
}

pub type Result<T> = std::result::Result<T, StorageError>;
