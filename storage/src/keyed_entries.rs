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
use arrow::array::builder::NullBufferBuilder;
use arrow::array::{Array, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array, UInt32Builder};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
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
    /// How many entries replace or remove a key that the files before this one
    /// hold (a state table's delta counts them); `None`: not known.
    superseding: Option<usize>,
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
            superseding: None,
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
            superseding: None,
        }
    }

    /// Records that `n` of the entries replace or remove a key the earlier files
    /// hold (the uploader's compaction weighs what they make dead).
    pub fn with_superseding(mut self, n: usize) -> Self {
        self.superseding = Some(n);
        self
    }

    pub fn superseding(&self) -> Option<usize> {
        self.superseding
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
pub struct KeyedEntriesBuilder {
    key_groups: UInt32Builder,
    keys: BinaryBuilder,
    /// The value column's bytes, offsets and validity, kept by hand so that
    /// [`KeyedEntriesBuilder::push_with`] encodes a value straight into the column
    /// (a join bucket of a checkpoint's delta is copied once, not twice).
    values: Vec<u8>,
    value_offsets: Vec<i32>,
    value_valid: NullBufferBuilder,
    rows: usize,
    key_bytes: usize,
    done: Vec<RecordBatch>,
}

impl Default for KeyedEntriesBuilder {
    fn default() -> Self {
        Self {
            key_groups: UInt32Builder::new(),
            keys: BinaryBuilder::new(),
            values: Vec::new(),
            value_offsets: vec![0],
            value_valid: NullBufferBuilder::new(0),
            rows: 0,
            key_bytes: 0,
            done: Vec::new(),
        }
    }
}

impl KeyedEntriesBuilder {
    pub fn push(&mut self, key_group: u32, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => self.push_with(key_group, key, |out| out.extend_from_slice(v)),
            None => {
                self.value_valid.append_null();
                self.end_entry(key_group, key);
            }
        }
    }

    /// Appends an entry whose value `encode` appends to the column's bytes (no copy
    /// and no allocation per entry).
    pub fn push_with(&mut self, key_group: u32, key: &[u8], encode: impl FnOnce(&mut Vec<u8>)) {
        encode(&mut self.values);
        self.value_valid.append_non_null();
        self.end_entry(key_group, key);
    }

    /// Records the entry whose value was just appended, and cuts a full batch.
    fn end_entry(&mut self, key_group: u32, key: &[u8]) {
        let end = i32::try_from(self.values.len())
            .expect("a keyed state value below 2 GiB (the batch is cut at 32 MiB)");
        self.value_offsets.push(end);
        self.key_groups.append_value(key_group);
        self.keys.append_value(key);
        self.key_bytes += key.len();
        self.rows += 1;
        if self.rows >= BATCH_ROWS || self.values.len() >= BATCH_BYTES {
            self.cut(true);
        }
    }

    /// Seals the current batch; `more` when entries follow.
    fn cut(&mut self, more: bool) {
        if self.rows == 0 {
            return;
        }
        let value_bytes = self.values.len();
        // The next batch of a large delta is likely as large: sized up front, its
        // buffers are not copied (and their pages faulted in) once per doubling, a
        // twentieth of q7's time when a checkpoint encoded its join state. A batch is
        // cut after the value that crosses the limit: some room for it.
        let (rows, key_bytes) = if more {
            (self.rows, self.key_bytes)
        } else {
            (0, 0)
        };
        let values = BinaryArray::new(
            OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(
                &mut self.value_offsets,
                Vec::with_capacity(rows + 1),
            ))),
            Buffer::from_vec(std::mem::replace(
                &mut self.values,
                Vec::with_capacity(if more { value_bytes + (1 << 16) } else { 0 }),
            )),
            self.value_valid.finish(),
        );
        self.value_offsets.push(0);
        let batch = RecordBatch::try_new(
            keyed_schema(),
            vec![
                Arc::new(self.key_groups.finish()),
                Arc::new(self.keys.finish()),
                Arc::new(values),
            ],
        )
        .expect("columns match the keyed schema");
        if more {
            self.key_groups = UInt32Builder::with_capacity(rows);
            self.keys = BinaryBuilder::with_capacity(rows, key_bytes);
        }
        self.done.push(batch);
        self.rows = 0;
        self.key_bytes = 0;
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
            "each value ends where the next begins"
        );
        assert!(
            KeyedEntries::from_batches(vec![RecordBatch::new_empty(Arc::new(Schema::new(vec![
                Field::new("x", DataType::Int32, false)
            ])))])
            .is_err()
        );
    }
}
