//! `KeyedEntries`: keyed-state changes `(key_group, key, value | None)` held as the
//! Arrow columns a state file stores them in.
//!
//! A checkpoint of a large keyed state holds millions of entries. As one `Vec` per key
//! and per value they cost two allocations each, are copied into columns to be
//! written, and are freed together after the upload, which hands their pages back to
//! the kernel only for the next checkpoint to fault them in again (q18's profile: a
//! third of its time clearing fresh pages). Built here, each value is encoded straight
//! into a column buffer ([`KeyedEntriesBuilder::push_with`]), and a decoded file's
//! entries keep pointing into the file's bytes.

use crate::mapped_pages::MappedFile;
use crate::{Result, StorageError};
use arrow::array::{Array, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema};
use std::sync::{Arc, LazyLock};

/// One keyed-state change, owned: `(key_group, key, Some(value) | None for a deletion)`.
pub type KeyedEntry = (u32, Vec<u8>, Option<Vec<u8>>);

/// Rows per column batch: bounds memory when writing and reading a file.
const BATCH_ROWS: usize = 65_536;
/// Value bytes per column batch: keeps a batch's `i32` offsets far from overflowing,
/// and a growing buffer's copies small (each batch after the first starts with the
/// size of the one before, see [`KeyedEntriesBuilder::cut`]).
const BATCH_BYTES: usize = 32 << 20;

static SCHEMA: LazyLock<Arc<Schema>> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("key_group", DataType::UInt32, false),
        Field::new("key", DataType::Binary, false),
        Field::new("value", DataType::Binary, true),
    ]))
});

/// The schema of a keyed state file's batches.
pub fn keyed_schema() -> Arc<Schema> {
    SCHEMA.clone()
}

/// Keyed-state changes in file order (later entries of a key win).
#[derive(Debug, Clone, Default)]
pub struct KeyedEntries {
    batches: Vec<RecordBatch>,
    /// The memory-mapped file the batches were decoded from (zero-copy), kept alive
    /// here: a merge hands its pages back as it reads (see [`crate::mapped_pages`]).
    mapped_file: Option<MappedFile>,
}

impl KeyedEntries {
    /// Batches read from a state file; fails on a schema that is not a keyed file's.
    pub fn from_batches(batches: Vec<RecordBatch>) -> Result<Self> {
        for b in &batches {
            let ok = b.num_columns() == 3
                && b.column(0).as_any().is::<UInt32Array>()
                && b.column(1).as_any().is::<BinaryArray>()
                && b.column(2).as_any().is::<BinaryArray>();
            if !ok {
                return Err(StorageError::Corrupt(
                    "keyed state file has a wrong schema".into(),
                ));
            }
        }
        Ok(Self {
            batches,
            mapped_file: None,
        })
    }

    /// Marks the batches as decoded from `file`.
    pub(crate) fn in_mapped_file(mut self, file: MappedFile) -> Self {
        self.mapped_file = Some(file);
        self
    }

    /// The memory-mapped file the batches point into, if any.
    pub(crate) fn mapped_file(&self) -> Option<&MappedFile> {
        self.mapped_file.as_ref()
    }

    pub fn from_entries(entries: impl IntoIterator<Item = KeyedEntry>) -> Self {
        let mut b = KeyedEntriesBuilder::default();
        for (kg, key, value) in entries {
            b.push(kg, &key, value.as_deref());
        }
        b.finish()
    }

    /// Batches a [`KeyedEntriesBuilder`] sealed (their schema is the keyed one).
    pub(crate) fn from_sealed(batches: Vec<RecordBatch>) -> Self {
        Self {
            batches,
            mapped_file: None,
        }
    }

    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    pub fn into_batches(self) -> Vec<RecordBatch> {
        self.batches
    }

    pub fn len(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, borrowed, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8], Option<&[u8]>)> + '_ {
        self.batches.iter().flat_map(batch_entries)
    }

    /// Every entry, copied out.
    pub fn to_entries(&self) -> Vec<KeyedEntry> {
        self.iter()
            .map(|(kg, k, v)| (kg, k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect()
    }
}

/// The entries of one batch of a keyed file, borrowed, in order.
pub(crate) fn batch_entries(b: &RecordBatch) -> impl Iterator<Item = (u32, &[u8], Option<&[u8]>)> {
    let cols = columns(b);
    (0..b.num_rows()).map(move |i| entry_at(cols, i))
}

/// Borrowed columns of one batch of a keyed file: key group, key, value.
pub(crate) type Columns<'a> = (&'a UInt32Array, &'a BinaryArray, &'a BinaryArray);

/// Entry `row` of a batch's columns, borrowed.
pub(crate) fn entry_at(cols: Columns<'_>, row: usize) -> (u32, &[u8], Option<&[u8]>) {
    let (kg, key, value) = cols;
    let v = (!value.is_null(row)).then(|| value.value(row));
    (kg.value(row), key.value(row), v)
}

/// A keyed file batch's columns: key group, key, value.
pub(crate) fn columns(b: &RecordBatch) -> Columns<'_> {
    let col = |i: usize| b.column(i).as_any();
    (
        col(0).downcast_ref().expect("checked keyed schema"),
        col(1).downcast_ref().expect("checked keyed schema"),
        col(2).downcast_ref().expect("checked keyed schema"),
    )
}

/// Appends entries into column buffers, a batch at a time.
#[derive(Default)]
pub struct KeyedEntriesBuilder {
    key_groups: UInt32Builder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    rows: usize,
    key_bytes: usize,
    value_bytes: usize,
    /// Where [`KeyedEntriesBuilder::push_with`] encodes a value; reused.
    scratch: Vec<u8>,
    done: Vec<RecordBatch>,
}

impl KeyedEntriesBuilder {
    pub fn push(&mut self, key_group: u32, key: &[u8], value: Option<&[u8]>) {
        self.key_groups.append_value(key_group);
        self.keys.append_value(key);
        self.key_bytes += key.len();
        match value {
            Some(v) => {
                self.values.append_value(v);
                self.value_bytes += v.len();
            }
            None => self.values.append_null(),
        }
        self.rows += 1;
        if self.rows >= BATCH_ROWS || self.value_bytes >= BATCH_BYTES {
            self.cut(true);
        }
    }

    /// Appends an entry whose value `encode` writes (no allocation per entry).
    pub fn push_with(&mut self, key_group: u32, key: &[u8], encode: impl FnOnce(&mut Vec<u8>)) {
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        encode(&mut value);
        self.push(key_group, key, Some(&value));
        self.scratch = value;
    }

    /// Seals the current batch; `more` when entries follow.
    fn cut(&mut self, more: bool) {
        if self.rows == 0 {
            return;
        }
        let batch = RecordBatch::try_new(
            keyed_schema(),
            vec![
                Arc::new(self.key_groups.finish()),
                Arc::new(self.keys.finish()),
                Arc::new(self.values.finish()),
            ],
        )
        .expect("columns match the keyed schema");
        // The next batch of a large delta is likely as large: sized up front, its
        // buffers are not copied (and their pages faulted in) once per doubling, a
        // twentieth of q7's time when a checkpoint encoded its join state.
        if more {
            self.key_groups = UInt32Builder::with_capacity(self.rows);
            self.keys = BinaryBuilder::with_capacity(self.rows, self.key_bytes);
            // A batch is cut after the value that crosses the limit: some room for it.
            self.values = BinaryBuilder::with_capacity(self.rows, self.value_bytes + (1 << 16));
        }
        self.done.push(batch);
        self.rows = 0;
        self.key_bytes = 0;
        self.value_bytes = 0;
    }

    /// The batches sealed so far, handed over: a writer can stream them out while
    /// the builder goes on.
    pub fn take_sealed(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.done)
    }

    pub fn finish(mut self) -> KeyedEntries {
        self.cut(false);
        KeyedEntries::from_sealed(self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_columns_across_batches() {
        let entries: Vec<KeyedEntry> = (0..BATCH_ROWS as u32 + 3)
            .map(|i| {
                let v = (i % 7 != 0).then(|| i.to_le_bytes().to_vec());
                (i % 128, format!("k{i}").into_bytes(), v)
            })
            .collect();
        let columns = KeyedEntries::from_entries(entries.clone());
        assert_eq!(columns.batches().len(), 2, "cut at {BATCH_ROWS} rows");
        assert_eq!(columns.len(), entries.len());
        assert_eq!(columns.to_entries(), entries);
        let mut b = KeyedEntriesBuilder::default();
        b.push_with(5, b"x", |out| out.extend_from_slice(b"encoded"));
        b.push_with(6, b"y", |out| out.extend_from_slice(b"2"));
        let built = b.finish().to_entries();
        assert_eq!(
            built,
            vec![
                (5, b"x".to_vec(), Some(b"encoded".to_vec())),
                (6, b"y".to_vec(), Some(b"2".to_vec()))
            ],
            "the scratch buffer is cleared between values"
        );
        assert!(
            KeyedEntries::from_batches(vec![RecordBatch::new_empty(Arc::new(Schema::new(vec![
                Field::new("x", DataType::Int32, false)
            ])))])
            .is_err()
        );
    }
}
