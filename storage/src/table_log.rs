//! `TableLog`: the durable, replayable record of a table's changes.
//!
//! A table write is acknowledged only after its entry is appended and fsynced here; the
//! dataflow is fed afterwards. On recovery the log is replayed from the start (views are
//! rebuilt from it until checkpoints restore them directly).
//!
//! Entry framing: `len: u32 LE | crc32(payload): u32 LE | payload`. A `kill -9` can leave a
//! torn last entry; [`TableLog::open`] detects it by length or checksum and truncates it,
//! which is safe because an entry that was not fully synced was never acknowledged.

use crate::{Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Byte offset of an entry in the log: the position a source rewinds to.
pub type LogOffset = u64;

/// One valid entry read back from the log: its offset and payload.
pub type LogEntry = (LogOffset, Vec<u8>);

pub struct TableLog {
    file: File,
    end: LogOffset,
}

const HEADER: usize = 8;

impl TableLog {
    /// Opens (creating if needed) the log and returns it with every valid entry's payload.
    pub fn open(path: &Path) -> Result<(TableLog, Vec<LogEntry>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut entries = Vec::new();
        let mut pos = 0usize;
        while pos + HEADER <= bytes.len() {
            let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap());
            let start = pos + HEADER;
            if start + len > bytes.len() || crc32fast::hash(&bytes[start..start + len]) != crc {
                break;
            }
            entries.push((pos as LogOffset, bytes[start..start + len].to_vec()));
            pos = start + len;
        }
        if pos < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                valid = pos,
                total = bytes.len(),
                "truncating torn tail of table log"
            );
            file.set_len(pos as u64)?;
            file.sync_data()?;
        }
        file.seek(SeekFrom::End(0))?;
        Ok((
            TableLog {
                file,
                end: pos as LogOffset,
            },
            entries,
        ))
    }

    /// Appends one entry and fsyncs it. Returns the entry's offset.
    pub fn append(&mut self, payload: &[u8]) -> Result<LogOffset> {
        let len: u32 = payload
            .len()
            .try_into()
            .map_err(|_| StorageError::Corrupt("table log entry larger than 4 GiB".into()))?;
        let mut buf = Vec::with_capacity(HEADER + payload.len());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        buf.extend_from_slice(payload);
        let offset = self.end;
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.end += buf.len() as u64;
        Ok(offset)
    }

    pub fn end_offset(&self) -> LogOffset {
        self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_tail_is_truncated_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        {
            let (mut log, entries) = TableLog::open(&path).unwrap();
            assert!(entries.is_empty());
            log.append(b"one").unwrap();
            log.append(b"two").unwrap();
        }
        // Simulate a crash in the middle of a third append.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (mut log, entries) = TableLog::open(&path).unwrap();
        let payloads: Vec<_> = entries.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(payloads, vec![b"one".to_vec(), b"two".to_vec()]);
        log.append(b"three").unwrap();
        drop(log);
        let (_, entries) = TableLog::open(&path).unwrap();
        assert_eq!(entries.len(), 3);
    }

    #[test]
    fn corrupted_entry_stops_replay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        {
            let (mut log, _) = TableLog::open(&path).unwrap();
            log.append(b"good").unwrap();
            log.append(b"flip").unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = TableLog::open(&path).unwrap();
        assert_eq!(entries.len(), 1);
    }
}
