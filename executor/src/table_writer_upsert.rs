//! Upserts into a primary-key table (`FORMAT UPSERT`): a record replaces the row with
//! its key, a tombstone deletes it. The writer turns a batch of them into ordinary
//! changes — a delete of each old row, an insert of each new one — so the log, the
//! readers and the views see plain inserts and deletes.
//!
//! Finding the old row needs an index from primary key to row. It is built from the
//! table's rows on the first upsert (one pass) and then kept current by every write,
//! SQL ones included; anything that replaces the contents wholesale (a restore) drops
//! it, and the next upsert builds it again.

use super::TableWriter;
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use ahash::AHashMap as HashMap;
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::row::{RowConverter, SortField};
use weir_storage::source_positions::SourcePositions;

pub(crate) struct UpsertIndex {
    /// Encodes whole rows.
    rows: RowConverter,
    /// Primary key -> the row.
    by_key: HashMap<Box<[u8]>, Box<[u8]>>,
}

/// One record of an upsert batch, in arrival order.
#[derive(Debug, Clone, Copy)]
pub enum UpsertOp {
    /// Row `i` of the batch's rows replaces the row with its key.
    Upsert(usize),
    /// Key `i` of the batch's keys (primary-key columns only) is deleted.
    Delete(usize),
}

impl UpsertIndex {
    fn build(w: &TableWriter) -> Result<UpsertIndex> {
        let fields = w
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let mut index = UpsertIndex {
            rows: RowConverter::new(fields)?,
            by_key: HashMap::new(),
        };
        let current = w.latest.to_batch()?;
        let ops = vec![Op::Insert; current.num_rows()];
        index.apply(w, &StreamChunk::new(ops, current))?;
        Ok(index)
    }

    /// Keeps the index current with one change chunk the table applied.
    pub(crate) fn apply(&mut self, w: &TableWriter, chunk: &StreamChunk) -> Result<()> {
        let Some(pk) = &w.pk else { return Ok(()) };
        let keys = pk.converter.convert_columns(&pk_columns(w, &chunk.batch))?;
        let rows = self.rows.convert_columns(chunk.columns())?;
        for (i, op) in chunk.ops.iter().enumerate() {
            let k: Box<[u8]> = keys.row(i).as_ref().into();
            match op {
                Op::Delete => {
                    self.by_key.remove(&k);
                }
                Op::Insert => {
                    self.by_key.insert(k, rows.row(i).as_ref().into());
                }
            }
        }
        Ok(())
    }
}

fn pk_columns(w: &TableWriter, batch: &RecordBatch) -> Vec<ArrayRef> {
    w.pk.as_ref()
        .map(|pk| {
            pk.columns
                .iter()
                .map(|&c| batch.column(c).clone())
                .collect()
        })
        .unwrap_or_default()
}

impl TableWriter {
    /// The latest row with primary key `key` (one-element arrays, in key order),
    /// including writes not committed to any epoch yet: a point UPDATE / DELETE reads
    /// it instead of the whole table. `None` for no such row or no primary key.
    pub fn row_by_key(&mut self, key: &[ArrayRef]) -> Result<Option<RecordBatch>> {
        let Some(pk) = &self.pk else { return Ok(None) };
        if key.len() != pk.columns.len() {
            return Err(ExecError::Internal("primary key arity".into()));
        }
        let encoded = pk.converter.convert_columns(key)?;
        if self.upsert_index.is_none() {
            self.upsert_index = Some(UpsertIndex::build(self)?);
        }
        let index = self.upsert_index.as_ref().expect("built above");
        let Some(row) = index.by_key.get(encoded.row(0).as_ref()) else {
            return Ok(None);
        };
        let parser = index.rows.parser();
        let columns = index.rows.convert_rows([parser.parse(row)])?;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }

    /// Applies a connector's upserts and tombstones (`rows`: whole rows; `keys`: the
    /// primary-key columns of deleted rows; `order`: the records in arrival order, the
    /// last one per key wins), logged with `positions` in one entry.
    pub async fn upsert_from_source(
        &mut self,
        rows: &RecordBatch,
        keys: &RecordBatch,
        order: &[UpsertOp],
        positions: SourcePositions,
    ) -> Result<()> {
        let Some(pk) = &self.pk else {
            return Err(ExecError::Internal(format!(
                "{} has no primary key to upsert by",
                self.name
            )));
        };
        if self.upsert_index.is_none() {
            self.upsert_index = Some(UpsertIndex::build(self)?);
        }
        let row_keys = pk.converter.convert_columns(&pk_columns(self, rows))?;
        let del_keys = pk.converter.convert_columns(keys.columns())?;
        // The last record per key, keys in order of first appearance.
        let mut last: HashMap<Box<[u8]>, UpsertOp> = HashMap::new();
        let mut seen: Vec<Box<[u8]>> = Vec::new();
        for op in order {
            let k: Box<[u8]> = match op {
                UpsertOp::Upsert(i) => row_keys.row(*i).as_ref().into(),
                UpsertOp::Delete(i) => del_keys.row(*i).as_ref().into(),
            };
            if last.insert(k.clone(), *op).is_none() {
                seen.push(k);
            }
        }
        let index = self.upsert_index.as_ref().expect("built above");
        let new_rows = index.rows.convert_columns(rows.columns())?;
        let parser = index.rows.parser();
        let mut old: Vec<Box<[u8]>> = Vec::new();
        let mut inserts: Vec<u32> = Vec::new();
        for k in &seen {
            let before = index.by_key.get(k);
            match last[k] {
                UpsertOp::Upsert(i) => {
                    // The same row again changes nothing.
                    if before.is_some_and(|b| **b == *new_rows.row(i).as_ref()) {
                        continue;
                    }
                    if let Some(b) = before {
                        old.push(b.clone());
                    }
                    inserts.push(i as u32);
                }
                UpsertOp::Delete(_) => {
                    if let Some(b) = before {
                        old.push(b.clone());
                    }
                }
            }
        }
        let deleted: Vec<ArrayRef> = if old.is_empty() {
            vec![]
        } else {
            index
                .rows
                .convert_rows(old.iter().map(|b| parser.parse(b)))?
        };
        let inserted = arrow::compute::take_record_batch(rows, &UInt32Array::from(inserts))?;
        let mut ops = vec![Op::Delete; old.len()];
        ops.extend(std::iter::repeat_n(Op::Insert, inserted.num_rows()));
        let batch = if old.is_empty() {
            inserted.with_schema(self.schema.clone())?
        } else {
            let deleted = RecordBatch::try_new(self.schema.clone(), deleted)?;
            arrow::compute::concat_batches(
                &self.schema,
                &[deleted, inserted.with_schema(self.schema.clone())?],
            )?
        };
        self.write_from_source(StreamChunk::new(ops, batch), positions)
            .await
    }
}
