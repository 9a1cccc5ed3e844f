//! Record payloads to Arrow rows of the table's schema.
//!
//! Records are decoded a batch at a time (the fast path). A batch that fails is decoded
//! again record by record, so that exactly the bad records are singled out with their
//! reason and the good ones kept: arrow's JSON decoder reports some errors (a string in
//! a bigint column) only when the batch is flushed, not when the record is read.

use crate::error::{ExecError, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

/// Payload encodings (`FORMAT PLAIN ENCODE JSON | CSV | AVRO`).
#[derive(Debug, Clone)]
pub enum Encode {
    Json,
    Csv,
    /// Avro binary datums written with this schema (fields matched to columns by name).
    Avro(Arc<apache_avro::Schema>),
}

impl Encode {
    /// JSON or CSV by name (AVRO needs its schema: [`Encode::avro`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Some(Self::Json),
            "csv" => Some(Self::Csv),
            _ => None,
        }
    }

    /// AVRO with the writer's schema (JSON text). Only record schemas describe rows.
    pub fn avro(schema_json: &str) -> std::result::Result<Self, String> {
        let schema = apache_avro::Schema::parse_str(schema_json)
            .map_err(|e| format!("invalid Avro schema: {e}"))?;
        if !matches!(schema, apache_avro::Schema::Record(_)) {
            return Err("the Avro schema must be a record".into());
        }
        Ok(Self::Avro(Arc::new(schema)))
    }
}

/// An Avro value as JSON that arrow's JSON decoder reads into the column types:
/// timestamps and dates become text (as numbers they would be read in the column's
/// unit, not Avro's).
fn avro_to_json(v: apache_avro::types::Value) -> Result<serde_json::Value> {
    use apache_avro::types::Value as A;
    use arrow::temporal_conversions as t;
    let text = |d: Option<chrono::NaiveDateTime>| -> Result<serde_json::Value> {
        d.map(|d| serde_json::Value::String(d.format("%Y-%m-%dT%H:%M:%S%.f").to_string()))
            .ok_or_else(|| ExecError::Internal("Avro timestamp out of range".into()))
    };
    Ok(match v {
        A::TimestampMillis(ms) | A::LocalTimestampMillis(ms) => {
            text(t::timestamp_ms_to_datetime(ms))?
        }
        A::TimestampMicros(us) | A::LocalTimestampMicros(us) => {
            text(t::timestamp_us_to_datetime(us))?
        }
        A::Date(days) => match t::date32_to_datetime(days) {
            Some(d) => serde_json::Value::String(d.format("%Y-%m-%d").to_string()),
            None => return Err(ExecError::Internal("Avro date out of range".into())),
        },
        A::Union(_, inner) => avro_to_json(*inner)?,
        A::Record(fields) => serde_json::Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| Ok((k, avro_to_json(v)?)))
                .collect::<Result<_>>()?,
        ),
        A::Decimal(_) | A::BigDecimal(_) => {
            return Err(ExecError::Internal(
                "Avro decimals are not supported yet".into(),
            ))
        }
        other => serde_json::Value::try_from(other)
            .map_err(|e| ExecError::Internal(format!("Avro value: {e}")))?,
    })
}

/// One Avro datum as a JSON record.
fn avro_record(schema: &apache_avro::Schema, payload: &[u8]) -> Result<Vec<u8>> {
    let mut rest = payload;
    let value = apache_avro::from_avro_datum(schema, &mut rest, None)
        .map_err(|e| ExecError::Internal(format!("malformed Avro record: {e}")))?;
    if !rest.is_empty() {
        return Err(ExecError::Internal(format!(
            "{} trailing bytes after the Avro record",
            rest.len()
        )));
    }
    serde_json::to_vec(&avro_to_json(value)?).map_err(|e| ExecError::Internal(e.to_string()))
}

fn decode_all(schema: &SchemaRef, encode: &Encode, payloads: &[&[u8]]) -> Result<RecordBatch> {
    let err = |e: arrow::error::ArrowError| ExecError::Internal(e.to_string());
    match encode {
        Encode::Avro(avro) => {
            let records = payloads
                .iter()
                .map(|p| avro_record(avro, p))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            decode_all(schema, &Encode::Json, &refs)
        }
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
    encode: &Encode,
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
        let (batch, bad) = decode(&schema(), &Encode::Json, &payloads, 30).unwrap();
        let batch = batch.unwrap();
        assert_eq!(batch.num_rows(), 2);
        let bad_idx: Vec<usize> = bad.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad_idx, vec![1, 2, 4], "{bad:?}");
        assert!(bad[2].1.contains("max.record.bytes"), "{bad:?}");
    }

    #[test]
    fn csv_and_the_fast_path() {
        let payloads: Vec<&[u8]> = vec![b"1,a", b"2,b"];
        let (batch, bad) = decode(&schema(), &Encode::Csv, &payloads, 1 << 20).unwrap();
        assert!(bad.is_empty());
        assert_eq!(batch.unwrap().num_rows(), 2);
        let payloads: Vec<&[u8]> = vec![b"1,a", b"x,b"];
        let (batch, bad) = decode(&schema(), &Encode::Csv, &payloads, 1 << 20).unwrap();
        assert_eq!(batch.unwrap().num_rows(), 1);
        assert_eq!(bad.len(), 1);
    }
}
