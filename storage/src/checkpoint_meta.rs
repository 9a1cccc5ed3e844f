//! Checkpoint and savepoint metadata (`_metadata`): for one job at one epoch, every
//! operator's state files by uid, every source's position, and checksums.
//!
//! The file is written last; its presence marks the checkpoint complete. It carries its
//! own checksum (first line) so that a torn or edited file is refused on restore, and
//! every state file's size and crc32 so that a damaged file is refused too.

use crate::state_snapshot::StateKind;
use crate::{Result, StorageError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the checkpoint format this build writes. Readers accept any version up
/// to their own.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    /// Key of the file in object storage.
    pub path: String,
    pub size: u64,
    pub crc32: u32,
    /// Epoch at which the file was written (its changes reach up to that epoch).
    pub epoch: u64,
    /// About the bytes of the files before it in its chain that this file makes
    /// dead (entries it replaces or removes): 0 for a base, absent when not known
    /// (row state, or written before 2026-12-07). Compaction weighs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_before: Option<u64>,
}

impl StateFile {
    /// The entry for an object just written at `path`.
    pub fn new(path: String, written: crate::object_writer::Written, epoch: u64) -> Self {
        StateFile {
            path,
            size: written.size,
            crc32: written.crc32,
            epoch,
            dead_before: None,
        }
    }

    /// With the bytes of earlier files it makes dead (see `dead_before`).
    pub fn making_dead(mut self, bytes: Option<u64>) -> Self {
        self.dead_before = bytes;
        self
    }
}

/// The state of one operator (uid): files to apply in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UidState {
    pub uid: String,
    pub kind: StateKind,
    pub files: Vec<StateFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub format_version: u32,
    pub job_id: u64,
    pub job_name: String,
    pub epoch: u64,
    pub trigger_time_ms: i64,
    pub completed_time_ms: i64,
    /// Source positions at the barrier: table name → table-log offset.
    pub positions: BTreeMap<String, u64>,
    pub state: Vec<UidState>,
    /// Bytes of every state file this checkpoint references.
    pub full_size: u64,
    /// Bytes uploaded for this checkpoint (new files only).
    pub incremental_size: u64,
    pub parallelism: u32,
    pub max_parallelism: u32,
    /// Every uid the job's plan keeps state under, stored or still empty: recovery
    /// uses the checkpoint only for the same plan (an upgrade may derive other uids).
    /// Empty in checkpoints of builds before it was recorded.
    #[serde(default)]
    pub plan_uids: Vec<String>,
}

impl CheckpointMetadata {
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        to_checksummed_json(self)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<CheckpointMetadata> {
        let meta: CheckpointMetadata = from_checksummed_json(bytes)?;
        if meta.format_version > FORMAT_VERSION {
            return Err(StorageError::Corrupt(format!(
                "format version {} is newer than this Weir's {}",
                meta.format_version, FORMAT_VERSION
            )));
        }
        Ok(meta)
    }

    /// Every state file key this checkpoint needs.
    pub fn files(&self) -> impl Iterator<Item = &StateFile> {
        self.state.iter().flat_map(|u| u.files.iter())
    }
}

/// JSON with its crc32 on a first line: a torn or edited file is refused when read.
pub fn to_checksummed_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    let body = serde_json::to_vec_pretty(value)?;
    let mut out = format!("{:08x}\n", crc32fast::hash(&body)).into_bytes();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads what [`to_checksummed_json`] wrote, checking the checksum.
pub fn from_checksummed_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| StorageError::Corrupt("metadata has no checksum line".into()))?;
    let want = std::str::from_utf8(&bytes[..nl])
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim(), 16).ok())
        .ok_or_else(|| StorageError::Corrupt("metadata checksum line unreadable".into()))?;
    let body = &bytes[nl + 1..];
    if crc32fast::hash(body) != want {
        return Err(StorageError::Corrupt("metadata checksum mismatch".into()));
    }
    Ok(serde_json::from_slice(body)?)
}

/// Checks a state file read back against its handle.
pub fn verify(file: &StateFile, bytes: &[u8]) -> Result<()> {
    check(file, bytes.len(), crc32fast::hash(bytes))
}

/// [`verify`] of a memory-mapped file, its pages handed back as they are hashed (see
/// [`crate::mapped_pages`]).
pub fn verify_mapped(file: &StateFile, mapped: &crate::mapped_pages::MappedFile) -> Result<()> {
    check(
        file,
        mapped.bytes().len(),
        crate::mapped_pages::crc32(mapped),
    )
}

fn check(file: &StateFile, len: usize, crc32: u32) -> Result<()> {
    if len as u64 != file.size || crc32 != file.crc32 {
        return Err(StorageError::Corrupt(format!(
            "state file {} is damaged (size or checksum mismatch)",
            file.path
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_checksum_detects_damage() {
        let m = CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job_id: 3,
            job_name: "v".into(),
            epoch: 7,
            trigger_time_ms: 1,
            completed_time_ms: 2,
            positions: BTreeMap::from([("t".to_string(), 42)]),
            state: vec![],
            full_size: 0,
            incremental_size: 0,
            parallelism: 1,
            max_parallelism: 128,
            plan_uids: vec!["v.hashagg.1".into()],
        };
        let mut b = m.to_bytes().unwrap();
        assert_eq!(CheckpointMetadata::from_bytes(&b).unwrap(), m);
        let last = b.len() - 3;
        b[last] ^= 1;
        assert!(CheckpointMetadata::from_bytes(&b).is_err());
    }
}
