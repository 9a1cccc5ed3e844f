//! `StreamChunk`: an Arrow `RecordBatch` plus an op per row.
//!
//! An update travels as a delete of the old row followed by an insert of the new one, so
//! every operator only has to understand two ops. Chunks whose ops are all inserts are
//! common (append-only streams), and [`StreamChunk::is_append_only`] lets operators take
//! the cheaper path.

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum Op {
    Insert = 1,
    Delete = -1,
}

impl Op {
    /// +1 for insert, -1 for delete: how the row changes a multiplicity.
    pub fn sign(self) -> i64 {
        self as i8 as i64
    }
    pub fn from_code(code: i8) -> Option<Op> {
        match code {
            1 => Some(Op::Insert),
            -1 => Some(Op::Delete),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct StreamChunk {
    pub ops: Arc<[Op]>,
    pub batch: RecordBatch,
}

/// The columns of rows kept in Arrow's row format by `converter` (whose `fields`
/// columns they hold): keys and rows that operators keep as bytes, back as arrays for
/// output. No columns for no fields (a global aggregate's empty key).
pub fn decode_rows<'r>(
    converter: &arrow::row::RowConverter,
    fields: usize,
    rows: impl IntoIterator<Item = &'r [u8]>,
) -> arrow::error::Result<Vec<ArrayRef>> {
    if fields == 0 {
        return Ok(vec![]);
    }
    let parser = converter.parser();
    converter.convert_rows(rows.into_iter().map(|r| parser.parse(r)))
}

impl StreamChunk {
    pub fn new(ops: Vec<Op>, batch: RecordBatch) -> Self {
        debug_assert_eq!(ops.len(), batch.num_rows());
        Self {
            ops: ops.into(),
            batch,
        }
    }

    /// A chunk from stored op codes (table log, checkpoint files): 1 insert, -1 delete.
    pub fn from_op_codes(codes: &[i8], batch: RecordBatch) -> crate::error::Result<Self> {
        let ops = codes
            .iter()
            .map(|c| {
                Op::from_code(*c).ok_or_else(|| {
                    crate::error::ExecError::Internal(format!("invalid stored op code {c}"))
                })
            })
            .collect::<crate::error::Result<Vec<_>>>()?;
        Ok(Self::new(ops, batch))
    }

    pub fn inserts(batch: RecordBatch) -> Self {
        let ops = vec![Op::Insert; batch.num_rows()];
        Self::new(ops, batch)
    }

    pub fn deletes(batch: RecordBatch) -> Self {
        let ops = vec![Op::Delete; batch.num_rows()];
        Self::new(ops, batch)
    }

    pub fn len(&self) -> usize {
        self.batch.num_rows()
    }

    /// `a`'s changes, then `b`'s, as one chunk (same schema): downstream takes a chunk
    /// whole, so changes that belong together (an update's delete and insert) never
    /// straddle a sink's commit.
    pub fn concat(a: &StreamChunk, b: &StreamChunk) -> arrow::error::Result<StreamChunk> {
        let batch = arrow::compute::concat_batches(&a.schema(), [&a.batch, &b.batch])?;
        let ops: Vec<Op> = a.ops.iter().chain(b.ops.iter()).copied().collect();
        Ok(StreamChunk::new(ops, batch))
    }

    pub fn is_empty(&self) -> bool {
        self.batch.num_rows() == 0
    }

    pub fn schema(&self) -> SchemaRef {
        self.batch.schema()
    }

    pub fn columns(&self) -> &[ArrayRef] {
        self.batch.columns()
    }

    pub fn is_append_only(&self) -> bool {
        self.ops.iter().all(|op| *op == Op::Insert)
    }

    pub fn op_codes(&self) -> Vec<i8> {
        self.ops.iter().map(|op| *op as i8).collect()
    }

    /// The rows at `indices`, in that order (used by exchanges and filters).
    pub fn take(&self, indices: &[u32]) -> arrow::error::Result<StreamChunk> {
        let idx = UInt32Array::from(indices.to_vec());
        let columns = self
            .batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<arrow::error::Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.batch.schema(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(indices.len())),
        )?;
        let ops = indices.iter().map(|&i| self.ops[i as usize]).collect();
        Ok(StreamChunk::new(ops, batch))
    }

    /// A chunk of `ops.len()` rows from operator-built columns, each cast to its field's
    /// type in `schema` where it differs (row decoding and accumulators may produce a
    /// wider or narrower type than the plan declared).
    /// The chunk without its rows whose `column` is below `below` (late rows behind a
    /// watermark; NULLs are kept).
    pub fn without_rows_below(
        self,
        column: usize,
        below: &datafusion::common::ScalarValue,
    ) -> crate::error::Result<StreamChunk> {
        let late = below_mask(&self.columns()[column], below)?;
        let keep: Vec<u32> = (0..self.len())
            .filter(|&i| !late.value(i))
            .map(|i| i as u32)
            .collect();
        Ok(if keep.len() == self.len() {
            self
        } else {
            self.take(&keep)?
        })
    }

    pub fn from_columns(
        ops: Vec<Op>,
        schema: SchemaRef,
        columns: Vec<ArrayRef>,
    ) -> arrow::error::Result<StreamChunk> {
        let columns = columns
            .into_iter()
            .zip(schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    arrow::compute::cast(&c, f.data_type())
                }
            })
            .collect::<arrow::error::Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            schema,
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(ops.len())),
        )?;
        Ok(StreamChunk::new(ops, batch))
    }

    /// Same rows under another schema (names or nullability changed, types equal).
    pub fn with_schema(self, schema: SchemaRef) -> arrow::error::Result<StreamChunk> {
        let batch = RecordBatch::try_new_with_options(
            schema,
            self.batch.columns().to_vec(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(self.len())),
        )?;
        Ok(StreamChunk {
            ops: self.ops,
            batch,
        })
    }
}
/// Whether each value of `col` is below `below` (NULL: not below): which rows a
/// watermark makes late, or which state entries it makes dead.
pub(crate) fn below_mask(
    col: &arrow::array::ArrayRef,
    below: &datafusion::common::ScalarValue,
) -> crate::error::Result<arrow::array::BooleanArray> {
    use arrow::array::Array;
    let m = arrow::compute::kernels::cmp::lt(col, &arrow::array::Scalar::new(below.to_array()?))?;
    Ok(match m.nulls() {
        Some(n) => arrow::array::BooleanArray::new(m.values() & n.inner(), None),
        None => m,
    })
}
