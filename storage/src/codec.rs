//! Arrow IPC encoding of a change batch: the rows plus one op code per row, stored as a
//! trailing `__op` Int8 column so a whole change batch is one self-describing IPC stream.

use crate::{Result, StorageError};
use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use std::sync::Arc;

const OP_COLUMN: &str = "__op";

pub fn encode_changes(ops: &[i8], batch: &RecordBatch) -> Result<Vec<u8>> {
    encode_change_batches(&[(ops, batch)])
}

/// Several change batches of one schema in one IPC stream: one atomic log entry for a
/// statement that produced many batches, or a checkpoint's delta of one uid.
///
/// Runs of small batches are merged into IPC batches of up to `COALESCE_ROWS` rows: a
/// delta built from thousands of single-row statements would otherwise pay one IPC
/// message (flatbuffer header, padding, allocations) per row. Order is kept.
pub fn encode_change_batches(parts: &[(&[i8], &RecordBatch)]) -> Result<Vec<u8>> {
    let Some((_, first)) = parts.first() else {
        return Err(StorageError::Corrupt("no change batch to encode".into()));
    };
    let schema = with_op_schema(first);
    let mut buf = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut buf, &schema)?;
        for run in coalesced_runs(parts) {
            w.write(&with_ops(&schema, run)?)?;
        }
        w.finish()?;
    }
    Ok(buf)
}

/// Rows per IPC batch up to which consecutive small change batches are merged.
const COALESCE_ROWS: usize = 8192;

/// Splits `parts` into consecutive runs of at most `COALESCE_ROWS` rows (a larger
/// batch stays a run of its own).
fn coalesced_runs<'a>(
    parts: &'a [(&'a [i8], &'a RecordBatch)],
) -> Vec<&'a [(&'a [i8], &'a RecordBatch)]> {
    let mut runs = Vec::new();
    let (mut start, mut rows) = (0, 0);
    for (i, (_, batch)) in parts.iter().enumerate() {
        if i > start && rows + batch.num_rows() > COALESCE_ROWS {
            runs.push(&parts[start..i]);
            (start, rows) = (i, 0);
        }
        rows += batch.num_rows();
    }
    runs.push(&parts[start..]);
    runs
}

/// One run of change batches as a single batch of `schema` (the rows plus `__op`).
fn with_ops(schema: &Arc<Schema>, run: &[(&[i8], &RecordBatch)]) -> Result<RecordBatch> {
    let ops: Vec<i8> = run
        .iter()
        .flat_map(|(ops, _)| ops.iter().copied())
        .collect();
    let columns = (0..schema.fields().len() - 1)
        .map(|c| {
            let arrays: Vec<&dyn Array> = run.iter().map(|(_, b)| b.column(c).as_ref()).collect();
            match arrays.as_slice() {
                [one] => Ok(one.slice(0, one.len())),
                many => arrow::compute::concat(many),
            }
        })
        .chain(std::iter::once(Ok(
            Arc::new(Int8Array::from(ops)) as ArrayRef
        )))
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn with_op_schema(batch: &RecordBatch) -> Arc<Schema> {
    let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(OP_COLUMN, DataType::Int8, false)));
    Arc::new(Schema::new(fields))
}

pub fn decode_changes(bytes: &[u8]) -> Result<(Vec<i8>, RecordBatch)> {
    decode_change_batches(bytes)?
        .into_iter()
        .next()
        .ok_or_else(|| StorageError::Corrupt("empty change batch".into()))
}

pub fn decode_change_batches(bytes: &[u8]) -> Result<Vec<(Vec<i8>, RecordBatch)>> {
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    reader.map(|b| split_ops(b?)).collect::<Result<Vec<_>>>()
}

/// Decodes an IPC stream without copying: the batches' arrays point into `bytes`
/// (a mapped checkpoint file, say) wherever its layout is aligned.
pub fn decode_batches_zero_copy(bytes: bytes::Bytes) -> Result<Vec<RecordBatch>> {
    let mut buffer = arrow::buffer::Buffer::from(bytes);
    let mut decoder = arrow::ipc::reader::StreamDecoder::new();
    let mut out = Vec::new();
    while !buffer.is_empty() {
        if let Some(batch) = decoder.decode(&mut buffer)? {
            out.push(batch);
        }
    }
    decoder.finish()?;
    Ok(out)
}

/// [`decode_change_batches`] without copying the rows.
pub fn decode_change_batches_zero_copy(bytes: bytes::Bytes) -> Result<Vec<(Vec<i8>, RecordBatch)>> {
    decode_batches_zero_copy(bytes)?
        .into_iter()
        .map(split_ops)
        .collect()
}

fn split_ops(batch: RecordBatch) -> Result<(Vec<i8>, RecordBatch)> {
    let n = batch.num_columns();
    if n == 0 || batch.schema().field(n - 1).name() != OP_COLUMN {
        return Err(StorageError::Corrupt(
            "change batch without op column".into(),
        ));
    }
    let ops = batch
        .column(n - 1)
        .as_any()
        .downcast_ref::<Int8Array>()
        .ok_or_else(|| StorageError::Corrupt("op column is not Int8".into()))?;
    let ops: Vec<i8> = (0..ops.len()).map(|i| ops.value(i)).collect();
    let mut fields: Vec<Arc<Field>> = batch.schema().fields().iter().cloned().collect();
    fields.pop();
    let schema = Arc::new(Schema::new(fields));
    let rows = RecordBatch::try_new_with_options(
        schema,
        batch.columns()[..n - 1].to_vec(),
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?;
    Ok((ops, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};

    #[test]
    fn round_trip() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("x"), Some("y")])),
            ],
        )
        .unwrap();
        let bytes = encode_changes(&[1, -1], &batch).unwrap();
        let (ops, back) = decode_changes(&bytes).unwrap();
        assert_eq!(ops, vec![1, -1]);
        assert_eq!(back, batch);
    }

    fn ints(values: Vec<i32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(values))]).unwrap()
    }

    #[test]
    fn many_small_batches_are_merged_in_order() {
        // 20,000 single-row changes (a delta of single-row statements), then a large one.
        let small: Vec<(Vec<i8>, RecordBatch)> = (0..20_000)
            .map(|i| (vec![if i % 3 == 0 { -1 } else { 1 }], ints(vec![i])))
            .collect();
        let large = (vec![1i8; 10_000], ints((20_000..30_000).collect()));
        let mut parts: Vec<(&[i8], &RecordBatch)> =
            small.iter().map(|(o, b)| (o.as_slice(), b)).collect();
        parts.push((large.0.as_slice(), &large.1));
        let back = decode_change_batches(&encode_change_batches(&parts).unwrap()).unwrap();
        // 8192 + 8192 + 3616 single rows, then the large batch on its own.
        let sizes: Vec<usize> = back.iter().map(|(_, b)| b.num_rows()).collect();
        assert_eq!(sizes, vec![8192, 8192, 3616, 10_000]);
        let ops: Vec<i8> = back.iter().flat_map(|(o, _)| o.clone()).collect();
        let expected_ops: Vec<i8> = parts.iter().flat_map(|(o, _)| o.to_vec()).collect();
        assert_eq!(ops, expected_ops);
        let values: Vec<i32> = back
            .iter()
            .flat_map(|(_, b)| {
                let a = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        assert_eq!(values, (0..30_000).collect::<Vec<i32>>());
    }
}

/// Marks a table-log entry of an unstored generator source: instead of rows it holds
/// the index range `from..to` they were generated from (the rows are a function of the
/// index, so a replay regenerates them). An Arrow IPC stream starts with `0xFFFFFFFF`,
/// so the two cannot be mistaken for each other.
const GENERATED_RANGE_MAGIC: &[u8; 8] = b"WEIRGEN1";

/// The log payload of generated rows `from..to` (see [`GENERATED_RANGE_MAGIC`]).
pub fn encode_generated_range(from: i64, to: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(GENERATED_RANGE_MAGIC);
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&to.to_le_bytes());
    out
}

/// The range of a generated-range payload, or `None` for a change batch.
pub fn decode_generated_range(bytes: &[u8]) -> Option<(i64, i64)> {
    if bytes.len() != 24 || &bytes[..8] != GENERATED_RANGE_MAGIC {
        return None;
    }
    let from = i64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let to = i64::from_le_bytes(bytes[16..24].try_into().ok()?);
    Some((from, to))
}

#[cfg(test)]
mod generated_range_tests {
    use super::*;

    #[test]
    fn a_generated_range_round_trips_and_is_never_a_change_batch() {
        let bytes = encode_generated_range(50_000, 100_000);
        assert_eq!(decode_generated_range(&bytes), Some((50_000, 100_000)));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int8, false)])),
            vec![Arc::new(Int8Array::from(vec![1i8]))],
        )
        .unwrap();
        let changes = encode_changes(&[1], &batch).unwrap();
        assert_eq!(decode_generated_range(&changes), None);
        assert!(decode_change_batches(&bytes).is_err());
    }
}
