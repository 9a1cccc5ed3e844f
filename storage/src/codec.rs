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
/// statement that produced many batches.
pub fn encode_change_batches(parts: &[(&[i8], &RecordBatch)]) -> Result<Vec<u8>> {
    let Some((_, first)) = parts.first() else {
        return Err(StorageError::Corrupt("no change batch to encode".into()));
    };
    let schema = with_op_schema(first);
    let mut buf = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut buf, &schema)?;
        for (ops, batch) in parts {
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            columns.push(Arc::new(Int8Array::from(ops.to_vec())));
            w.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        }
        w.finish()?;
    }
    Ok(buf)
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
