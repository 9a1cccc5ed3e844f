//! State snapshots as files: the Arrow IPC encoding of what an operator's state became
//! since the previous checkpoint (a *delta*) or all of it (a *base*).
//!
//! Two kinds of state exist:
//! - keyed state of a [`crate::StateTable`]: rows of `(key_group, key, value)`, where a
//!   null value is a deletion. Applying files in order, last write wins.
//! - rows of a table or view store: change batches with an `__op` column (see
//!   [`crate::codec`]). Applying files in order adds multiplicities.
//!
//! Every row carries its key group, so state written at one parallelism can be loaded
//! at any other: each actor keeps the key groups it owns.

use crate::{Result, StorageError};
use arrow::array::{Array, BinaryArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::writer::StreamWriter;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One keyed-state change: `(key_group, key, Some(value) | None for a deletion)`.
pub type KeyedEntry = (u32, Vec<u8>, Option<Vec<u8>>);

/// One change batch of a row store: op codes (1 insert, -1 delete) and rows.
pub type RowChange = (Vec<i8>, RecordBatch);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    Keyed,
    Rows,
}

#[derive(Debug, Clone)]
pub enum DeltaData {
    Keyed(Vec<KeyedEntry>),
    Rows(Vec<RowChange>),
}

impl DeltaData {
    pub fn kind(&self) -> StateKind {
        match self {
            DeltaData::Keyed(_) => StateKind::Keyed,
            DeltaData::Rows(_) => StateKind::Rows,
        }
    }
    pub fn is_empty(&self) -> bool {
        match self {
            DeltaData::Keyed(e) => e.is_empty(),
            DeltaData::Rows(r) => r.iter().all(|(ops, _)| ops.is_empty()),
        }
    }

    /// The keyed entries (none if this is row data): a uid's files are all one kind.
    pub fn into_keyed(self) -> Vec<KeyedEntry> {
        match self {
            DeltaData::Keyed(e) => e,
            DeltaData::Rows(_) => vec![],
        }
    }

    /// The row changes (none if this is keyed data).
    pub fn into_rows(self) -> Vec<RowChange> {
        match self {
            DeltaData::Rows(r) => r,
            DeltaData::Keyed(_) => vec![],
        }
    }
}

/// The state an operator hands over at a checkpoint barrier, under its uid.
#[derive(Debug, Clone)]
pub struct StateDelta {
    pub uid: String,
    pub data: DeltaData,
}

fn keyed_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("key_group", DataType::UInt32, false),
        Field::new("key", DataType::Binary, false),
        Field::new("value", DataType::Binary, true),
    ]))
}

/// Rows per IPC batch in keyed files: bounds memory when writing and reading.
const KEYED_BATCH_ROWS: usize = 65_536;

pub fn encode(data: &DeltaData) -> Result<Vec<u8>> {
    encode_parts(&[data])
}

/// Encodes several deltas of one uid (in order) as one file, without copying them.
pub fn encode_parts(parts: &[&DeltaData]) -> Result<Vec<u8>> {
    let Some(first) = parts.first() else {
        return Ok(Vec::new());
    };
    match first.kind() {
        StateKind::Keyed => {
            let entries: Vec<&[KeyedEntry]> = parts
                .iter()
                .filter_map(|d| match d {
                    DeltaData::Keyed(e) => Some(e.as_slice()),
                    DeltaData::Rows(_) => None,
                })
                .collect();
            encode_keyed(&entries)
        }
        StateKind::Rows => {
            let batches: Vec<(&[i8], &RecordBatch)> = parts
                .iter()
                .filter_map(|d| match d {
                    DeltaData::Rows(r) => Some(r),
                    DeltaData::Keyed(_) => None,
                })
                .flatten()
                .filter(|(ops, _)| !ops.is_empty())
                .map(|(ops, b)| (ops.as_slice(), b))
                .collect();
            if batches.is_empty() {
                return Ok(Vec::new());
            }
            crate::codec::encode_change_batches(&batches)
        }
    }
}

fn encode_keyed(parts: &[&[KeyedEntry]]) -> Result<Vec<u8>> {
    let schema = keyed_schema();
    let mut buf = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut buf, &schema)?;
        for part in parts.iter().flat_map(|p| p.chunks(KEYED_BATCH_ROWS)) {
            let kg = UInt32Array::from_iter_values(part.iter().map(|e| e.0));
            let key = BinaryArray::from_iter_values(part.iter().map(|e| e.1.as_slice()));
            let value: BinaryArray = part.iter().map(|e| e.2.as_deref()).collect();
            w.write(&RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(kg), Arc::new(key), Arc::new(value)],
            )?)?;
        }
        w.finish()?;
    }
    Ok(buf)
}

/// Decodes a state file. Row batches keep pointing into `bytes` (no copy).
pub fn decode(kind: StateKind, bytes: bytes::Bytes) -> Result<DeltaData> {
    if bytes.is_empty() {
        return Ok(match kind {
            StateKind::Keyed => DeltaData::Keyed(vec![]),
            StateKind::Rows => DeltaData::Rows(vec![]),
        });
    }
    match kind {
        StateKind::Rows => Ok(DeltaData::Rows(
            crate::codec::decode_change_batches_zero_copy(bytes)?,
        )),
        StateKind::Keyed => {
            let mut out = Vec::new();
            for batch in crate::codec::decode_batches_zero_copy(bytes)? {
                let bad = || StorageError::Corrupt("keyed state file has a wrong schema".into());
                let kg = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<UInt32Array>()
                    .ok_or_else(bad)?;
                let key = batch
                    .column(1)
                    .as_any()
                    .downcast_ref::<BinaryArray>()
                    .ok_or_else(bad)?;
                let value = batch
                    .column(2)
                    .as_any()
                    .downcast_ref::<BinaryArray>()
                    .ok_or_else(bad)?;
                for i in 0..batch.num_rows() {
                    let v = (!value.is_null(i)).then(|| value.value(i).to_vec());
                    out.push((kg.value(i), key.value(i).to_vec(), v));
                }
            }
            Ok(DeltaData::Keyed(out))
        }
    }
}

/// Applies keyed files in order (last write wins) and returns the live entries.
/// The result is sorted by key group and key (so a file's key-group ranges are
/// contiguous). A hash map plus one sort of the survivors costs far less than keeping
/// every write ordered: compaction runs next to the dataflow, on the same cores.
pub fn merge_keyed(files: Vec<Vec<KeyedEntry>>) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    let mut map: ahash::AHashMap<(u32, Vec<u8>), Option<Vec<u8>>> =
        ahash::AHashMap::with_capacity(files.iter().map(Vec::len).max().unwrap_or(0));
    for entries in files {
        for (kg, k, v) in entries {
            map.insert((kg, k), v);
        }
    }
    let mut live: Vec<_> = map
        .into_iter()
        .filter_map(|((kg, k), v)| v.map(|v| (kg, k, v)))
        .collect();
    live.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_round_trip_and_merge() {
        let d1 = DeltaData::Keyed(vec![
            (1, b"a".to_vec(), Some(b"1".to_vec())),
            (2, b"b".to_vec(), Some(b"2".to_vec())),
        ]);
        let d2 = DeltaData::Keyed(vec![
            (1, b"a".to_vec(), None),
            (3, b"c".to_vec(), Some(b"3".to_vec())),
        ]);
        let files: Vec<_> = [d1, d2]
            .iter()
            .map(
                |d| match decode(StateKind::Keyed, encode(d).unwrap().into()).unwrap() {
                    DeltaData::Keyed(e) => e,
                    _ => unreachable!(),
                },
            )
            .collect();
        let merged = merge_keyed(files);
        assert_eq!(
            merged,
            vec![
                (2, b"b".to_vec(), b"2".to_vec()),
                (3, b"c".to_vec(), b"3".to_vec())
            ]
        );
    }
}
