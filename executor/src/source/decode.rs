//! Record payloads to Arrow rows of the table's schema.
//!
//! Records are decoded a batch at a time (the fast path). A batch that fails is decoded
//! again record by record, so that exactly the bad records are singled out with their
//! reason and the good ones kept: arrow's JSON decoder reports some errors (a string in
//! a bigint column) only when the batch is flushed, not when the record is read.

use crate::error::{ExecError, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

/// Payload encodings (`FORMAT PLAIN ENCODE JSON | CSV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encode {
    Json,
    Csv,
}

impl Encode {
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            _ => None,
        }
    }
}

fn decode_all(schema: &SchemaRef, encode: Encode, payloads: &[&[u8]]) -> Result<RecordBatch> {
    let err = |e: arrow::error::ArrowError| ExecError::Internal(e.to_string());
    match encode {
        Encode::Json => {
            let mut d = arrow::json::ReaderBuilder::new(schema.clone())
                .with_batch_size(payloads.len().max(1))
                .build_decoder()
                .map_err(err)?;
            // Each record, then a newline to end it: no per-record copy.
            for p in payloads {
                for part in [*p, b"\n"] {
                    if d.decode(part).map_err(err)? != part.len() {
                        return Err(ExecError::Internal(
                            "trailing bytes after the JSON value".into(),
                        ));
                    }
                }
            }
            let batch = d.flush().map_err(err)?;
            batch.ok_or_else(|| ExecError::Internal("no JSON record".into()))
        }
        Encode::Csv => {
            let mut d = arrow::csv::ReaderBuilder::new(schema.clone())
                .with_batch_size(payloads.len().max(1))
                .build_decoder();
            for p in payloads {
                for part in [*p, b"\n"] {
                    let mut rest: &[u8] = part;
                    while !rest.is_empty() {
                        let n = d.decode(rest).map_err(err)?;
                        if n == 0 {
                            break;
                        }
                        rest = &rest[n..];
                    }
                }
            }
            let batch = d.flush().map_err(err)?;
            batch.ok_or_else(|| ExecError::Internal("no CSV record".into()))
        }
    }
}

/// Bad records of a batch: (index in the batch, reason).
pub type BadIndexes = Vec<(usize, String)>;

/// Decodes `payloads`; returns the rows of the good ones and, per bad one, its index
/// and reason. Records larger than `max_bytes` are bad without being parsed.
pub fn decode(
    schema: &SchemaRef,
    encode: Encode,
    payloads: &[&[u8]],
    max_bytes: usize,
) -> Result<(Option<RecordBatch>, BadIndexes)> {
    let mut bad: BadIndexes = payloads
        .iter()
        .enumerate()
        .filter(|(_, p)| p.len() > max_bytes)
        .map(|(i, p)| {
            (
                i,
                format!(
                    "record of {} bytes exceeds max.record.bytes = {max_bytes}",
                    p.len()
                ),
            )
        })
        .collect();
    let sized: Vec<&[u8]> = payloads
        .iter()
        .enumerate()
        .filter(|(i, _)| !bad.iter().any(|(b, _)| b == i))
        .map(|(_, p)| *p)
        .collect();
    if sized.is_empty() {
        return Ok((None, bad));
    }
    if bad.is_empty() {
        if let Ok(batch) = decode_all(schema, encode, &sized) {
            if batch.num_rows() == payloads.len() {
                return Ok((Some(batch), bad));
            }
        }
    }
    // Slow path: one record at a time.
    let mut good = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        if bad.iter().any(|(b, _)| *b == i) {
            continue;
        }
        match decode_all(schema, encode, &[p]) {
            Ok(b) if b.num_rows() == 1 => good.push(b),
            Ok(b) => bad.push((i, format!("decoded into {} rows, not 1", b.num_rows()))),
            Err(e) => bad.push((i, e.to_string())),
        }
    }
    bad.sort_by_key(|(i, _)| *i);
    if good.is_empty() {
        return Ok((None, bad));
    }
    let batch = arrow::compute::concat_batches(schema, &good)
        .map_err(|e| ExecError::Internal(e.to_string()))?;
    Ok((Some(batch), bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn json_bad_records_are_singled_out() {
        let payloads: Vec<&[u8]> = vec![
            br#"{"id": 1, "name": "a"}"#,
            br#"{"id": "#,
            br#"{"id": "not a number", "name": "b"}"#,
            br#"{"id": 4, "name": "d"}"#,
            br#"{"id": 5, "name": "this one is far too long"}"#,
        ];
        let (batch, bad) = decode(&schema(), Encode::Json, &payloads, 30).unwrap();
        let batch = batch.unwrap();
        assert_eq!(batch.num_rows(), 2);
        let bad_idx: Vec<usize> = bad.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad_idx, vec![1, 2, 4], "{bad:?}");
        assert!(bad[2].1.contains("max.record.bytes"), "{bad:?}");
    }

    #[test]
    fn csv_and_the_fast_path() {
        let payloads: Vec<&[u8]> = vec![b"1,a", b"2,b"];
        let (batch, bad) = decode(&schema(), Encode::Csv, &payloads, 1 << 20).unwrap();
        assert!(bad.is_empty());
        assert_eq!(batch.unwrap().num_rows(), 2);
        let payloads: Vec<&[u8]> = vec![b"1,a", b"x,b"];
        let (batch, bad) = decode(&schema(), Encode::Csv, &payloads, 1 << 20).unwrap();
        assert_eq!(batch.unwrap().num_rows(), 1);
        assert_eq!(bad.len(), 1);
    }
}
