//! `RelationStore`: the readable contents of a table or view, at committed epochs.
//!
//! Rows are kept as a multiset keyed by their Arrow row-format bytes; insert-only
//! chunks (append-only sources) are kept as the Arrow batches they came in until a
//! change needs the map. Materialize
//! actors *stage* each epoch's changes here at the barrier; the coordinator *commits*
//! an epoch once every actor has passed its barrier, so a `SELECT` (which snapshots
//! stores under the coordinator's commit lock) sees every view and table at the same
//! epoch. Staged changes commute (only multiplicities are added), so the order in which
//! parallel actors stage within an epoch does not matter.

use crate::barrier::Epoch;
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::store_index::{decode_rows, IndexSpec, KeyRange, StoreIndex};
use ahash::AHashMap as HashMap;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use std::collections::BTreeMap;

/// Appended batches kept before small ones are merged.
const COMPACT_BATCHES: usize = 1024;
/// Batches below this many rows are merged by a compaction.
const SMALL_BATCH_ROWS: usize = 65_536;

/// A multiset of rows of one schema, keyed by row-format bytes.
pub struct RowMultiset {
    schema: SchemaRef,
    converter: RowConverter,
    /// Row bytes are shared (`Arc`) so that a restored table's readable store and its
    /// writer's latest rows can hold one copy (see [`RowMultiset::share`]).
    rows: HashMap<std::sync::Arc<[u8]>, i64>,
    /// Insert-only batches not encoded into `rows` yet. Appending them costs nothing
    /// (no row encoding, no hashing, and the Arrow buffers are shared with whoever
    /// else holds the chunk); they are encoded on the first change that needs the
    /// map: a delete, or an insert while some row has a negative count.
    appended: Vec<RecordBatch>,
    /// Sum of positive multiplicities: the row count a reader sees.
    len: usize,
    /// Rows of `rows` with a negative count (a delete ahead of its insert).
    negative: usize,
    /// The encoding buffer, reused across chunks.
    scratch: Option<arrow::row::Rows>,
}

impl RowMultiset {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            schema,
            rows: HashMap::new(),
            appended: Vec::new(),
            len: 0,
            negative: 0,
            scratch: None,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A second multiset with the same rows, sharing their bytes: no row is encoded
    /// or hashed again (the table's layout is copied as is).
    pub fn share(&self) -> Result<RowMultiset> {
        let mut copy = RowMultiset::new(self.schema.clone())?;
        copy.rows = self.rows.clone();
        copy.appended = self.appended.clone();
        copy.len = self.len;
        copy.negative = self.negative;
        Ok(copy)
    }

    /// Room for `additional` more distinct rows: one allocation instead of a series of
    /// doublings, each of which would hash every row again.
    pub fn reserve(&mut self, additional: usize) {
        self.rows.reserve(additional);
    }

    pub fn apply(&mut self, chunk: &StreamChunk) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        if self.negative == 0 && chunk.is_append_only() {
            self.appended
                .push(chunk.batch.clone().with_schema(self.schema.clone())?);
            self.len += chunk.len();
            if self.appended.len() >= COMPACT_BATCHES {
                self.compact_appended()?;
            }
            return Ok(());
        }
        self.index_appended()?;
        self.encode_and_add(chunk)
    }

    /// Many small appended batches (single-row INSERTs) are merged into one, so that
    /// their count stays bounded; each row is copied at most once per
    /// `COMPACT_BATCHES` appends and only while it sits in a small batch.
    fn compact_appended(&mut self) -> Result<()> {
        let (small, large): (Vec<RecordBatch>, Vec<RecordBatch>) =
            std::mem::take(&mut self.appended)
                .into_iter()
                .partition(|b| b.num_rows() < SMALL_BATCH_ROWS);
        self.appended = large;
        if !small.is_empty() {
            self.appended
                .push(arrow::compute::concat_batches(&self.schema, &small)?);
        }
        Ok(())
    }

    /// Encodes the appended batches into the map.
    fn index_appended(&mut self) -> Result<()> {
        for batch in std::mem::take(&mut self.appended) {
            self.len -= batch.num_rows();
            self.encode_and_add(&StreamChunk::inserts(batch))?;
        }
        Ok(())
    }

    fn encode_and_add(&mut self, chunk: &StreamChunk) -> Result<()> {
        // Encode a slice at a time: the encoded rows are copied into the map anyway,
        // and one small reused buffer beats one as large as the chunk (a restored
        // checkpoint arrives as a single chunk of every row).
        const SLICE_ROWS: usize = 8192;
        let mut rows = self
            .scratch
            .take()
            .unwrap_or_else(|| self.converter.empty_rows(SLICE_ROWS, 0));
        for start in (0..chunk.len()).step_by(SLICE_ROWS) {
            let len = SLICE_ROWS.min(chunk.len() - start);
            let columns: Vec<_> = chunk
                .columns()
                .iter()
                .map(|c| c.slice(start, len))
                .collect();
            rows.clear();
            self.converter.append(&mut rows, &columns)?;
            for (i, op) in chunk.ops[start..start + len].iter().enumerate() {
                self.add_indexed(rows.row(i).as_ref(), op.sign());
            }
        }
        // Kept for the next chunk: a fresh buffer costs page faults and zeroing.
        self.scratch = Some(rows);
        Ok(())
    }

    /// Adds `delta` copies of an encoded row.
    pub fn add(&mut self, row: &[u8], delta: i64) -> Result<()> {
        self.index_appended()?;
        self.add_indexed(row, delta);
        Ok(())
    }

    fn add_indexed(&mut self, row: &[u8], delta: i64) {
        let (before, after) = match self.rows.get_mut(row) {
            Some(c) => {
                let before = *c;
                *c += delta;
                let after = *c;
                if after == 0 {
                    self.rows.remove(row);
                }
                (before, after)
            }
            None => {
                if delta != 0 {
                    self.rows.insert(row.into(), delta);
                }
                (0, delta)
            }
        };
        self.len = self.len + after.max(0) as usize - before.max(0) as usize;
        self.negative = self.negative + usize::from(after < 0) - usize::from(before < 0);
    }

    /// Materializes the rows (each repeated by its multiplicity) as one batch.
    pub fn to_batch(&self) -> Result<RecordBatch> {
        let parser = self.converter.parser();
        let mut selected = Vec::with_capacity(self.len);
        for (bytes, count) in &self.rows {
            for _ in 0..(*count).max(0) {
                selected.push(parser.parse(bytes));
            }
        }
        let mut batches = Vec::with_capacity(self.appended.len() + 1);
        if !selected.is_empty() {
            let columns = self.converter.convert_rows(selected)?;
            batches.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        }
        batches.extend(self.appended.iter().cloned());
        match batches.len() {
            0 => Ok(RecordBatch::new_empty(self.schema.clone())),
            1 => Ok(batches.pop().expect("one batch")),
            _ => Ok(arrow::compute::concat_batches(&self.schema, &batches)?),
        }
    }
}

struct StoreInner {
    committed: RowMultiset,
    /// Indexes over `committed` (see [`crate::store_index`]), with the codec that
    /// encodes whole rows for them.
    indexes: Vec<StoreIndex>,
    row_codec: Option<RowConverter>,
    committed_epoch: Epoch,
    /// Wall-clock ms of the last commit: how fresh the contents are (dashboard, jobs).
    committed_at_ms: i64,
    staged: BTreeMap<Epoch, Vec<StreamChunk>>,
    cached: Option<RecordBatch>,
    /// Set when the job failed: the contents stay at the last committed epoch.
    frozen: bool,
}

pub struct RelationStore {
    name: String,
    inner: parking_lot::RwLock<StoreInner>,
    /// False for an unstored source (`CREATE SOURCE` over a generator): its rows are a
    /// function of their index and are regenerated where needed, never kept here, so
    /// reading its contents is refused instead of answering with nothing.
    keeps_rows: bool,
}

impl RelationStore {
    pub fn new(name: &str, schema: SchemaRef) -> Result<Self> {
        Ok(Self {
            name: name.to_string(),
            inner: parking_lot::RwLock::new(StoreInner {
                committed: RowMultiset::new(schema)?,
                indexes: Vec::new(),
                row_codec: None,
                committed_epoch: 0,
                committed_at_ms: crate::jobs::now_ms(),
                staged: BTreeMap::new(),
                cached: None,
                frozen: false,
            }),
            keeps_rows: true,
        })
    }

    /// The store of an unstored source: nothing is staged, and a read is refused
    /// (0A000) with a hint.
    pub fn unstored(name: &str, schema: SchemaRef) -> Result<Self> {
        Ok(Self {
            keeps_rows: false,
            ..Self::new(name, schema)?
        })
    }

    /// False for an unstored source.
    pub fn keeps_rows(&self) -> bool {
        self.keeps_rows
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn schema(&self) -> SchemaRef {
        self.inner.read().committed.schema().clone()
    }

    /// Called by a materialize actor at barrier `epoch` with its changes of that epoch.
    pub fn stage(&self, epoch: Epoch, chunks: Vec<StreamChunk>) {
        if chunks.is_empty() || !self.keeps_rows {
            return;
        }
        let mut inner = self.inner.write();
        if inner.frozen {
            return;
        }
        inner.staged.entry(epoch).or_default().extend(chunks);
    }

    /// The job failed: drop changes of epochs not yet committed (they may be partial)
    /// and stop accepting new ones, so readers keep the last consistent contents.
    pub fn freeze(&self) {
        let mut inner = self.inner.write();
        inner.frozen = true;
        inner.staged.clear();
    }

    /// Loads restored rows (from a checkpoint) as committed contents.
    pub fn restore(&self, changes: &[StreamChunk]) -> Result<()> {
        let mut inner = self.inner.write();
        inner
            .committed
            .reserve(changes.iter().map(|c| c.len()).sum());
        for chunk in changes {
            inner.committed.apply(chunk)?;
            inner.apply_indexes(chunk)?;
        }
        inner.cached = None;
        Ok(())
    }

    /// The committed rows as a separate multiset sharing their bytes.
    pub fn committed_rows(&self) -> Result<RowMultiset> {
        self.inner.write().committed.share()
    }

    /// Stored change batches (a checkpoint's rows) as chunks of this store's schema.
    pub fn chunks_of(&self, changes: &[(Vec<i8>, RecordBatch)]) -> Result<Vec<StreamChunk>> {
        let schema = self.schema();
        changes
            .iter()
            .map(|(codes, batch)| {
                StreamChunk::from_op_codes(codes, batch.clone().with_schema(schema.clone())?)
            })
            .collect()
    }

    /// Applies every staged change up to and including `epoch`.
    pub fn commit(&self, epoch: Epoch) -> Result<()> {
        let mut inner = self.inner.write();
        if inner.frozen {
            return Ok(());
        }
        let later = inner.staged.split_off(&(epoch + 1));
        let ready = std::mem::replace(&mut inner.staged, later);
        for chunk in ready.into_values().flatten() {
            inner.committed.apply(&chunk)?;
            inner.apply_indexes(&chunk)?;
            inner.cached = None;
        }
        inner.committed_epoch = epoch;
        inner.committed_at_ms = crate::jobs::now_ms();
        Ok(())
    }

    /// Wall-clock ms of the last committed epoch (frozen stores stop moving).
    pub fn committed_at_ms(&self) -> i64 {
        self.inner.read().committed_at_ms
    }

    /// The committed contents. Cached until the next commit that changes them.
    pub fn snapshot(&self) -> Result<RecordBatch> {
        if !self.keeps_rows {
            return Err(ExecError::Unsupported(format!(
                    "source \"{}\" does not keep its rows: query it through a materialized view, or declare it with CREATE TABLE ... WITH (connector = ...) to keep them",
                    self.name
                ),
            ));
        }
        let mut inner = self.inner.write();
        if let Some(b) = &inner.cached {
            return Ok(b.clone());
        }
        let batch = inner.committed.to_batch()?;
        inner.cached = Some(batch.clone());
        Ok(batch)
    }

    pub fn row_count(&self) -> usize {
        self.inner.read().committed.len()
    }

    /// Builds an index over the committed rows; commits keep it current from now on.
    /// Replaces an index of the same name.
    pub fn add_index(&self, spec: IndexSpec) -> Result<()> {
        if !self.keeps_rows {
            return Ok(());
        }
        let mut inner = self.inner.write();
        let schema = inner.committed.schema().clone();
        let mut index = StoreIndex::new(spec, &schema)?;
        let current = inner.committed.to_batch()?;
        let codec = inner.row_codec()?;
        let rows = codec.convert_columns(current.columns())?;
        index.apply(&StreamChunk::inserts(current), &rows)?;
        inner.indexes.retain(|i| i.spec.name != index.spec.name);
        inner.indexes.push(index);
        Ok(())
    }

    pub fn drop_index(&self, name: &str) {
        self.inner.write().indexes.retain(|i| i.spec.name != name);
    }

    /// The committed rows `range` selects through index `index`, with their epoch;
    /// `None` when the store has no such index.
    pub fn lookup(&self, index: &str, range: &KeyRange) -> Result<Option<(Epoch, RecordBatch)>> {
        // A read lock: concurrent lookups do not exclude each other.
        let inner = self.inner.read();
        let Some(idx) = inner.indexes.iter().find(|i| i.spec.name == index) else {
            return Ok(None);
        };
        let rows = idx.lookup(range)?;
        let codec = inner
            .row_codec
            .as_ref()
            .ok_or_else(|| ExecError::Internal("index without a row codec".into()))?;
        let batch = decode_rows(codec, inner.committed.schema(), &rows)?;
        Ok(Some((inner.committed_epoch, batch)))
    }
}

impl StoreInner {
    /// The whole-row codec indexes share (made with the first index).
    fn row_codec(&mut self) -> Result<&RowConverter> {
        if self.row_codec.is_none() {
            let fields = self
                .committed
                .schema()
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            self.row_codec = Some(RowConverter::new(fields)?);
        }
        Ok(self.row_codec.as_ref().expect("made above"))
    }

    fn apply_indexes(&mut self, chunk: &StreamChunk) -> Result<()> {
        if self.indexes.is_empty() || chunk.is_empty() {
            return Ok(());
        }
        let chunk = chunk.clone().with_schema(self.committed.schema().clone())?;
        let rows = self.row_codec()?.convert_columns(chunk.columns())?;
        for index in &mut self.indexes {
            index.apply(&chunk, &rows)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::Op;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn chunk(ops: Vec<Op>, vals: Vec<i64>) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vals))]).unwrap();
        StreamChunk::new(ops, b)
    }

    #[test]
    fn staged_changes_are_invisible_until_commit() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let s = RelationStore::new("t", schema).unwrap();
        s.stage(1, vec![chunk(vec![Op::Insert, Op::Insert], vec![1, 1])]);
        s.stage(2, vec![chunk(vec![Op::Delete], vec![1])]);
        assert_eq!(s.snapshot().unwrap().num_rows(), 0);
        s.commit(1).unwrap();
        assert_eq!(s.snapshot().unwrap().num_rows(), 2);
        s.commit(2).unwrap();
        assert_eq!(s.snapshot().unwrap().num_rows(), 1);
        assert_eq!(s.row_count(), 1);
    }

    #[test]
    fn order_within_an_epoch_does_not_matter() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let mut m = RowMultiset::new(schema).unwrap();
        m.apply(&chunk(vec![Op::Delete], vec![7])).unwrap();
        m.apply(&chunk(vec![Op::Insert], vec![7])).unwrap();
        assert_eq!(m.len(), 0);
        assert_eq!(m.to_batch().unwrap().num_rows(), 0);
    }

    #[test]
    fn appended_rows_are_indexed_when_a_delete_comes() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let mut m = RowMultiset::new(schema).unwrap();
        m.apply(&chunk(vec![Op::Insert, Op::Insert], vec![1, 2]))
            .unwrap();
        m.apply(&chunk(vec![Op::Insert], vec![1])).unwrap();
        assert_eq!((m.len(), m.to_batch().unwrap().num_rows()), (3, 3));
        m.apply(&chunk(vec![Op::Delete], vec![1])).unwrap();
        m.apply(&chunk(vec![Op::Insert], vec![3])).unwrap();
        assert_eq!((m.len(), m.to_batch().unwrap().num_rows()), (3, 3));
        let copy = m.share().unwrap();
        m.apply(&chunk(vec![Op::Delete], vec![2])).unwrap();
        assert_eq!(copy.to_batch().unwrap().num_rows(), 3);
        assert_eq!(m.to_batch().unwrap().num_rows(), 2);
        // A delete ahead of its insert: the insert must cancel it, not be appended.
        let mut m = RowMultiset::new(m.schema().clone()).unwrap();
        m.apply(&chunk(vec![Op::Delete], vec![9])).unwrap();
        m.apply(&chunk(vec![Op::Insert, Op::Insert], vec![9, 8]))
            .unwrap();
        assert_eq!((m.len(), m.to_batch().unwrap().num_rows()), (1, 1));
    }
}
