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

pub use crate::frozen_table::FrozenDelta;
pub use crate::keyed_entries::{KeyedEntries, KeyedEntriesBuilder, KeyedEntry};
pub use crate::keyed_merge::{merge_keyed, KeyedMerge};
use crate::mapped_pages::MappedFile;
use crate::Result;
use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::ipc::writer::StreamEncoder;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
    /// Keyed changes still in a frozen state table, encoded as they are written.
    Frozen(Arc<dyn FrozenDelta>),
    Rows(Vec<RowChange>),
}

impl DeltaData {
    pub fn kind(&self) -> StateKind {
        match self {
            DeltaData::Keyed(_) | DeltaData::Frozen(_) => StateKind::Keyed,
            DeltaData::Rows(_) => StateKind::Rows,
        }
    }
    pub fn is_empty(&self) -> bool {
        match self {
            DeltaData::Keyed(e) => e.is_empty(),
            DeltaData::Frozen(f) => f.is_empty(),
            DeltaData::Rows(r) => r.iter().all(|(ops, _)| ops.is_empty()),
        }
    }

    /// About the bytes its file would take (its columns' buffers), known before it
    /// is encoded: whether a checkpoint compacts a chain is decided on it.
    pub fn encoded_size(&self) -> usize {
        let columns = |b: &RecordBatch| -> usize {
            b.columns()
                .iter()
                .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
                .sum()
        };
        match self {
            DeltaData::Keyed(e) => e.batches().iter().map(columns).sum(),
            DeltaData::Frozen(f) => f.estimated_size(),
            DeltaData::Rows(r) => r.iter().map(|(ops, b)| ops.len() + columns(b)).sum(),
        }
    }

    /// How many of a keyed delta's entries replace or remove a key that the files
    /// before it hold, and how many entries it has (at most), when known: what its
    /// file makes dead in the chain before it.
    pub fn superseding(&self) -> Option<(usize, usize)> {
        match self {
            DeltaData::Keyed(e) => Some((e.superseding()?, e.len())),
            DeltaData::Frozen(f) => Some((f.superseding()?, f.len())),
            DeltaData::Rows(_) => None,
        }
    }

    /// The keyed entries (none if this is row data): a uid's files are all one kind.
    /// A frozen delta is encoded whole (tests, checks: the uploader streams it).
    pub fn into_keyed(self) -> KeyedEntries {
        match self {
            DeltaData::Keyed(e) => e,
            DeltaData::Frozen(f) => f.to_entries(),
            DeltaData::Rows(_) => KeyedEntries::default(),
        }
    }

    /// A keyed delta's column batches, in file order, encoding a frozen one as they
    /// are read (none if this is row data).
    pub fn keyed_batches(&self) -> Box<dyn Iterator<Item = RecordBatch> + Send + '_> {
        match self {
            DeltaData::Keyed(e) => Box::new(e.batches().iter().cloned()),
            DeltaData::Frozen(f) => f.batches_in_key_order(),
            DeltaData::Rows(_) => Box::new(std::iter::empty()),
        }
    }

    /// The row changes (none if this is keyed data).
    pub fn into_rows(self) -> Vec<RowChange> {
        match self {
            DeltaData::Rows(r) => r,
            DeltaData::Keyed(_) | DeltaData::Frozen(_) => vec![],
        }
    }
}

/// The state an operator hands over at a checkpoint barrier, under its uid.
#[derive(Debug, Clone)]
pub struct StateDelta {
    pub uid: String,
    pub data: DeltaData,
}

pub fn encode(data: &DeltaData) -> Result<EncodedFile> {
    encode_parts(&[data])
}

/// An encoded state file in pieces, uploaded as they are: a keyed file's column
/// buffers are not copied into one contiguous file. The copy had doubled a
/// checkpoint's memory (q18's first checkpoint: ~0.8 GB of columns and as much
/// again of file) and cost a pass over it with fresh pages.
#[derive(Debug, Clone, Default)]
pub struct EncodedFile {
    chunks: Vec<Bytes>,
}

impl EncodedFile {
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces, in file order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// The file in one piece (a copy when it has several).
    pub fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [one] => one.clone(),
            chunks => Bytes::from(chunks.concat()),
        }
    }
}

impl From<Vec<u8>> for EncodedFile {
    fn from(bytes: Vec<u8>) -> Self {
        EncodedFile {
            chunks: vec![Bytes::from(bytes)],
        }
    }
}

/// An Arrow buffer lent to `Bytes` (which needs `AsRef<[u8]>`), without a copy.
struct ArrowBytes(Buffer);

impl AsRef<[u8]> for ArrowBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Encodes several deltas of one uid (in order) as one file, without copying them.
pub fn encode_parts(parts: &[&DeltaData]) -> Result<EncodedFile> {
    let Some(first) = parts.first() else {
        return Ok(EncodedFile::default());
    };
    match first.kind() {
        StateKind::Keyed => encode_keyed(parts.iter().flat_map(|d| d.keyed_batches())),
        StateKind::Rows => {
            let batches: Vec<(&[i8], &RecordBatch)> = parts
                .iter()
                .filter_map(|d| match d {
                    DeltaData::Rows(r) => Some(r),
                    DeltaData::Keyed(_) | DeltaData::Frozen(_) => None,
                })
                .flatten()
                .filter(|(ops, _)| !ops.is_empty())
                .map(|(ops, b)| (ops.as_slice(), b))
                .collect();
            if batches.is_empty() {
                return Ok(EncodedFile::default());
            }
            Ok(crate::codec::encode_change_batches(&batches)?.into())
        }
    }
}

/// The Arrow IPC stream of keyed batches, its body pieces the batches' own buffers.
fn encode_keyed(batches: impl IntoIterator<Item = RecordBatch>) -> Result<EncodedFile> {
    let mut encoder = KeyedFileEncoder::new()?;
    let mut chunks = Vec::new();
    for b in batches {
        chunks.extend(encoder.encode(&b)?);
    }
    chunks.extend(encoder.finish()?);
    Ok(EncodedFile { chunks })
}

/// A keyed state file encoded a batch at a time, for a writer that streams it out
/// (a compaction, see [`crate::object_writer`]): the same bytes as [`encode_parts`].
pub struct KeyedFileEncoder {
    encoder: StreamEncoder,
}

impl KeyedFileEncoder {
    pub fn new() -> Result<Self> {
        Ok(KeyedFileEncoder {
            encoder: StreamEncoder::try_new(&crate::keyed_entries::keyed_schema())?,
        })
    }

    /// The file's next pieces: `batch` (after the schema, the first time).
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<Bytes>> {
        Ok(coalesced(self.encoder.encode(batch)?))
    }

    /// The file's last pieces (the schema too, if no batch came).
    pub fn finish(self) -> Result<Vec<Bytes>> {
        Ok(coalesced(self.encoder.finish()?))
    }
}

/// Pieces below this size (messages' metadata, padding, small columns) are copied
/// together into one: a file of a few entries is then a piece or two, not a dozen.
const SMALL_PIECE: usize = 64 << 10;

/// Large buffers as they are, runs of small ones copied together.
fn coalesced(buffers: Vec<Buffer>) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut small: Vec<u8> = Vec::new();
    for b in buffers {
        if b.len() < SMALL_PIECE {
            small.extend_from_slice(b.as_slice());
            continue;
        }
        if !small.is_empty() {
            chunks.push(Bytes::from(std::mem::take(&mut small)));
        }
        chunks.push(Bytes::from_owner(ArrowBytes(b)));
    }
    if !small.is_empty() {
        chunks.push(Bytes::from(small));
    }
    chunks
}

/// [`decode`] of a memory-mapped file (see [`crate::mapped_pages`]): the pages the
/// decoder touched (each batch's header, and the kernel's window around it) are
/// handed back, and keyed entries remember the file, so that a merge hands back the
/// pages it reads too.
pub fn decode_mapped(kind: StateKind, file: MappedFile) -> Result<DeltaData> {
    let data = decode(kind, file.bytes().clone())?;
    crate::mapped_pages::release_all(&file);
    Ok(match data {
        DeltaData::Keyed(e) => DeltaData::Keyed(e.in_mapped_file(file)),
        rows => rows,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Files from before keyed files were encoded in pieces came from arrow's
    /// `StreamWriter`: the pieces must concatenate to exactly its bytes.
    #[test]
    fn keyed_pieces_are_the_stream_writers_file() {
        let big = vec![7u8; SMALL_PIECE * 3];
        let entries = KeyedEntries::from_entries((0..100_000u32).map(|i| {
            let v = match i % 3 {
                0 => None,
                1 => Some(i.to_le_bytes().to_vec()),
                _ => Some(big[..(i as usize % 97)].to_vec()),
            };
            (i % 128, format!("k{i}").into_bytes(), v)
        }));
        let with_big = KeyedEntries::from_entries([(5, b"big".to_vec(), Some(big.clone()))]);
        let parts = [DeltaData::Keyed(entries), DeltaData::Keyed(with_big)];
        let file = encode_parts(&[&parts[0], &parts[1]]).unwrap();
        let mut expected = Vec::new();
        {
            let schema = crate::keyed_entries::keyed_schema();
            let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut expected, &schema).unwrap();
            for p in &parts {
                for b in p.clone().into_keyed().batches() {
                    w.write(b).unwrap();
                }
            }
            w.finish().unwrap();
        }
        assert!(
            file.chunks().len() > 2,
            "large columns stay separate pieces"
        );
        assert_eq!(file.to_bytes().as_ref(), expected.as_slice());
        assert_eq!(file.len(), expected.len());
        let mut crc = crc32fast::Hasher::new();
        file.chunks().iter().for_each(|c| crc.update(c));
        assert_eq!(crc.finalize(), crc32fast::hash(&expected));
    }

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
                |d| match decode(StateKind::Keyed, encode(d).unwrap().to_bytes()).unwrap() {
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
