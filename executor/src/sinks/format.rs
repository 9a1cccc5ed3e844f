//! How a sink turns changes into records: `FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE
//! JSON`. Shared by the Kafka sink's two delivery guarantees.
//!
//! - `PLAIN`: the row as a JSON object; a delete is an error (append-only output).
//! - `UPSERT`: keyed by the `primary_key` columns (a JSON object of them); an insert
//!   carries the row, a delete is a tombstone (no payload). An update arrives as a
//!   delete and an insert of the same key, in that order, so the last record of a key
//!   is its current row.
//! - `DEBEZIUM`: `{"before": row | null, "after": row | null, "op": "c" | "d"}`.

use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use arrow::array::RecordBatch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkFormat {
    Plain,
    /// The key columns' positions in the sink's input.
    Upsert(Vec<usize>),
    Debezium,
}

/// One output record: an optional message key and an optional payload (none is a
/// tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkRecord {
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
}

/// Each row of `batch` as a JSON object (NULLs included as `null`).
fn json_rows(batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
        w.write(batch)
            .map_err(|e| ExecError::Internal(e.to_string()))?;
        w.finish().map_err(|e| ExecError::Internal(e.to_string()))?;
    }
    Ok(buf
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// `chunk` with the sink's column names: a sink of a view runs the view's query, whose
/// columns carry the planner's names.
pub fn named(chunk: StreamChunk, schema: &arrow::datatypes::SchemaRef) -> Result<StreamChunk> {
    if chunk.batch.schema().fields() == schema.fields() {
        return Ok(chunk);
    }
    chunk
        .with_schema(schema.clone())
        .map_err(|e| ExecError::Internal(format!("sink: {e}")))
}

/// The records of one chunk, in order. `sink` names the sink in errors.
pub fn encode(format: &SinkFormat, sink: &str, chunk: &StreamChunk) -> Result<Vec<SinkRecord>> {
    let rows = json_rows(&chunk.batch)?;
    let keys = match format {
        SinkFormat::Upsert(cols) => {
            let projected = chunk
                .batch
                .project(cols)
                .map_err(|e| ExecError::Internal(e.to_string()))?;
            Some(json_rows(&projected)?)
        }
        _ => None,
    };
    let mut out = Vec::with_capacity(rows.len());
    for (i, (row, op)) in rows.into_iter().zip(chunk.ops.iter()).enumerate() {
        let record = match (format, op) {
            (SinkFormat::Plain, Op::Insert) => SinkRecord {
                key: None,
                payload: Some(row),
            },
            (SinkFormat::Plain, Op::Delete) => {
                return Err(ExecError::Internal(format!(
                    "sink {sink} is FORMAT PLAIN (append-only) but its input deleted a row; use FORMAT UPSERT or DEBEZIUM"
                )))
            }
            (SinkFormat::Upsert(_), op) => SinkRecord {
                key: keys.as_ref().map(|k| k[i].clone()),
                payload: (*op == Op::Insert).then_some(row),
            },
            (SinkFormat::Debezium, op) => {
                let row = String::from_utf8_lossy(&row);
                let event = match op {
                    Op::Insert => format!(r#"{{"before":null,"after":{row},"op":"c"}}"#),
                    Op::Delete => format!(r#"{{"before":{row},"after":null,"op":"d"}}"#),
                };
                SinkRecord {
                    key: None,
                    payload: Some(event.into_bytes()),
                }
            }
        };
        out.push(record);
    }
    Ok(out)
}

/// Records as bytes for a sink's checkpointed state: per record a key and a payload,
/// each a little-endian u32 length (`u32::MAX` for none) and the bytes.
pub fn encode_records(records: &[SinkRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        for part in [&r.key, &r.payload] {
            match part {
                Some(b) => {
                    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    out.extend_from_slice(b);
                }
                None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
        }
    }
    out
}

/// The inverse of [`encode_records`]; damaged bytes are an error, never a panic.
pub fn decode_records(mut bytes: &[u8]) -> Result<Vec<SinkRecord>> {
    let damaged = || ExecError::Internal("damaged sink state".into());
    let part = |bytes: &mut &[u8]| -> Result<Option<Vec<u8>>> {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(damaged)?;
        let len = u32::from_le_bytes(*len);
        if len == u32::MAX {
            *bytes = rest;
            return Ok(None);
        }
        let len = len as usize;
        if rest.len() < len {
            return Err(damaged());
        }
        let (b, rest) = rest.split_at(len);
        *bytes = rest;
        Ok(Some(b.to_vec()))
    };
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = part(&mut bytes)?;
        let payload = part(&mut bytes)?;
        out.push(SinkRecord { key, payload });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn chunk(ops: Vec<Op>) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 1])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        StreamChunk::new(ops, batch)
    }

    #[test]
    fn upsert_keys_rows_and_tombstones() {
        let got = encode(
            &SinkFormat::Upsert(vec![0]),
            "k",
            &chunk(vec![Op::Delete, Op::Insert]),
        )
        .unwrap();
        assert_eq!(got[0].key.as_deref(), Some(&br#"{"g":1}"#[..]));
        assert_eq!(got[0].payload, None);
        assert_eq!(
            got[1].payload.as_deref(),
            Some(&br#"{"g":1,"name":null}"#[..])
        );
    }

    #[test]
    fn plain_refuses_a_delete_and_debezium_wraps_it() {
        let c = chunk(vec![Op::Insert, Op::Delete]);
        assert!(encode(&SinkFormat::Plain, "k", &c).is_err());
        let got = encode(&SinkFormat::Debezium, "k", &c).unwrap();
        assert_eq!(
            got[1].payload.as_deref(),
            Some(&br#"{"before":{"g":1,"name":null},"after":null,"op":"d"}"#[..])
        );
    }

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let records = vec![
            SinkRecord {
                key: Some(b"k".to_vec()),
                payload: None,
            },
            SinkRecord {
                key: None,
                payload: Some(vec![]),
            },
        ];
        let bytes = encode_records(&records);
        assert_eq!(decode_records(&bytes).unwrap(), records);
        assert!(decode_records(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_records(&[1, 0, 0, 0]).is_err());
    }
}
