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

pub use crate::keyed_entries::{KeyedEntries, KeyedEntriesBuilder, KeyedEntry};
use crate::Result;
use arrow::array::RecordBatch;
use arrow::ipc::writer::StreamWriter;
use serde::{Deserialize, Serialize};

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
    Keyed(KeyedEntries),
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
    pub fn into_keyed(self) -> KeyedEntries {
        match self {
            DeltaData::Keyed(e) => e,
            DeltaData::Rows(_) => KeyedEntries::default(),
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
            let batches: Vec<&RecordBatch> = parts
                .iter()
                .filter_map(|d| match d {
                    DeltaData::Keyed(e) => Some(e.batches()),
                    DeltaData::Rows(_) => None,
                })
                .flatten()
                .collect();
            encode_keyed(&batches)
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

fn encode_keyed(batches: &[&RecordBatch]) -> Result<Vec<u8>> {
    // Sized up front: a growing buffer would copy (and fault in) the file twice.
    let size: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
    let mut buf = Vec::with_capacity(size + 4096);
    {
        let mut w = StreamWriter::try_new(&mut buf, &crate::keyed_entries::keyed_schema())?;
        for b in batches {
            w.write(b)?;
        }
        w.finish()?;
    }
    Ok(buf)
}

/// Decodes a state file. Row batches keep pointing into `bytes` (no copy).
pub fn decode(kind: StateKind, bytes: bytes::Bytes) -> Result<DeltaData> {
    if bytes.is_empty() {
        return Ok(match kind {
            StateKind::Keyed => DeltaData::Keyed(KeyedEntries::default()),
            StateKind::Rows => DeltaData::Rows(vec![]),
        });
    }
    match kind {
        StateKind::Rows => Ok(DeltaData::Rows(
            crate::codec::decode_change_batches_zero_copy(bytes)?,
        )),
        StateKind::Keyed => Ok(DeltaData::Keyed(KeyedEntries::from_batches(
            crate::codec::decode_batches_zero_copy(bytes)?,
        )?)),
    }
}

/// Applies keyed files in order (last write wins) and returns the live entries.
/// The result is sorted by key group and key (so a file's key-group ranges are
/// contiguous). A hash map plus one sort of the survivors costs far less than keeping
/// every write ordered: compaction runs next to the dataflow, on the same cores.
pub fn merge_keyed(files: &[KeyedEntries]) -> KeyedEntries {
    // Borrowed from the files: only the survivors are copied, once, into columns.
    let mut map: ahash::AHashMap<(u32, &[u8]), Option<&[u8]>> =
        ahash::AHashMap::with_capacity(files.iter().map(KeyedEntries::len).max().unwrap_or(0));
    for entries in files {
        for (kg, k, v) in entries.iter() {
            map.insert((kg, k), v);
        }
    }
    let mut live: Vec<_> = map
        .into_iter()
        .filter_map(|((kg, k), v)| v.map(|v| (kg, k, v)))
        .collect();
    live.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut out = KeyedEntriesBuilder::default();
    for (kg, k, v) in live {
        out.push(kg, k, Some(v));
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_round_trip_and_merge() {
        let d1 = DeltaData::Keyed(KeyedEntries::from_entries([
            (1, b"a".to_vec(), Some(b"1".to_vec())),
            (2, b"b".to_vec(), Some(b"2".to_vec())),
        ]));
        let d2 = DeltaData::Keyed(KeyedEntries::from_entries([
            (1, b"a".to_vec(), None),
            (3, b"c".to_vec(), Some(b"3".to_vec())),
        ]));
        let files: Vec<_> = [d1, d2]
            .iter()
            .map(
                |d| match decode(StateKind::Keyed, encode(d).unwrap().into()).unwrap() {
                    DeltaData::Keyed(e) => e,
                    _ => unreachable!(),
                },
            )
            .collect();
        let merged = merge_keyed(&files).to_entries();
        assert_eq!(
            merged,
            vec![
                (2, b"b".to_vec(), Some(b"2".to_vec())),
                (3, b"c".to_vec(), Some(b"3".to_vec()))
            ]
        );
    }
}
