//! `TableLog`: the durable, replayable record of a table's changes.
//!
//! A table write is acknowledged only after its entry is appended and fsynced here; the
//! dataflow is fed afterwards. On recovery each job restores its latest checkpoint and
//! replays the log from the offset that checkpoint recorded.
//!
//! Group commit: [`TableLog::append_unsynced`] writes an entry without waiting for
//! the disk; whoever needs it durable calls [`LogSync::sync_to`] with the entry's end.
//! One fsync covers every entry written before it started, so concurrent statements
//! that wait together share it (the first waiter syncs, the others find their entry
//! already covered). [`TableLog::append`] is append plus that wait.
//!
//! Offsets are logical: they stay valid when the log is truncated. A truncated log
//! starts with a header `WEIRLOG1 | base: u64 LE`, and an entry's logical offset is
//! `base + its position after the header`. [`TableLog::truncate_below`] drops entries
//! that no retained checkpoint needs by rewriting the file and renaming it into place.
//!
//! Entry framing: `len: u32 LE | crc32(payload): u32 LE | payload`. A `kill -9` can leave a
//! torn last entry; [`TableLog::open`] detects it by length or checksum and truncates it,
//! which is safe because an entry that was not fully synced was never acknowledged.

use crate::{Result, StorageError};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Byte offset of an entry in the log: the position a source rewinds to.
pub type LogOffset = u64;

/// One valid entry read back from the log: its offset and payload.
pub type LogEntry = (LogOffset, Vec<u8>);

/// The durable end of a log, shared with the statements waiting for it.
pub struct LogSync {
    /// A handle on the log file; held while an fsync runs, so concurrent waiters queue
    /// behind one fsync instead of issuing their own.
    file: Mutex<File>,
    /// Logical end of everything written (synced or not).
    written: AtomicU64,
    /// Logical end of what is known to be on disk.
    synced: AtomicU64,
    /// `synced`, published to async waiters after each fsync.
    published: tokio::sync::watch::Sender<LogOffset>,
    /// Set while a background fsync for async waiters runs: one at a time.
    syncing: std::sync::atomic::AtomicBool,
    /// The last background fsync's error (cleared by a successful one).
    failure: Mutex<Option<String>>,
    /// With high availability: where entries are also committed; durable means
    /// there too.
    replica: std::sync::OnceLock<Replica>,
    /// Callbacks waiting for an end to be on disk (see [`LogSync::on_local_durable`]).
    on_durable: Mutex<Vec<(LogOffset, DurableCallback)>>,
}

/// Run once an end is on disk, on the thread that finished the fsync.
pub type DurableCallback = Box<dyn FnOnce() + Send>;

/// A table's entries in the cluster log.
struct Replica {
    log: crate::cluster_log::ClusterLog,
    table: u64,
    /// The ticket of the newest entry submitted: a wait on it covers every earlier one.
    last: AtomicU64,
}

impl LogSync {
    fn new(file: &File, end: LogOffset) -> Result<Arc<LogSync>> {
        Ok(Arc::new(LogSync {
            file: Mutex::new(file.try_clone()?),
            written: AtomicU64::new(end),
            synced: AtomicU64::new(end),
            published: tokio::sync::watch::channel(end).0,
            syncing: std::sync::atomic::AtomicBool::new(false),
            failure: Mutex::new(None),
            replica: Default::default(),
            on_durable: Mutex::new(Vec::new()),
        }))
    }

    /// Returns once every byte before `end` is durable (on disk, and committed to the
    /// cluster log with high availability), without blocking a thread.
    pub async fn wait_durable(self: &Arc<Self>, end: LogOffset) -> Result<()> {
        self.wait_local(end).await?;
        match self.replica.get() {
            Some(r) => r.log.wait(r.last.load(Ordering::Acquire)).await,
            None => Ok(()),
        }
    }

    /// Returns once every byte before `end` is on disk: the first waiter starts one
    /// fsync on a blocking thread, which covers everything written before it starts;
    /// the others await its result (group commit).
    async fn wait_local(self: &Arc<Self>, end: LogOffset) -> Result<()> {
        let mut published = self.published.subscribe();
        loop {
            if self.covers(end) {
                return Ok(());
            }
            if !self.syncing.swap(true, Ordering::AcqRel) {
                let me = self.clone();
                tokio::task::spawn_blocking(move || me.background_sync());
            }
            if published.changed().await.is_err() {
                return Err(StorageError::Corrupt("table log closed".into()));
            }
            // The fsync we waited for failed: report it (a later call tries again).
            let failure = self
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let (false, Some(e)) = (self.covers(end), failure) {
                return Err(StorageError::Io(std::io::Error::other(e)));
            }
        }
    }

    fn background_sync(&self) {
        let result = self.sync_local(self.written());
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) =
            result.err().map(|e| e.to_string());
        self.syncing.store(false, Ordering::Release);
        self.published
            .send_replace(self.synced.load(Ordering::Acquire));
    }

    /// Runs `f` once every byte before `end` is on disk (not the cluster log: only
    /// for logs without a replica, see [`LogSync::has_replica`]): at once if it is,
    /// else on the thread that finishes the covering fsync, with no task to schedule
    /// in between. It does not start an fsync; some waiter must.
    pub fn on_local_durable(&self, end: LogOffset, f: DurableCallback) {
        self.on_durable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((end, f));
        // The fsync may have finished between the caller's check and the push.
        self.run_durable_callbacks();
    }

    /// Whether durable also means committed to the cluster log.
    pub fn has_replica(&self) -> bool {
        self.replica.get().is_some()
    }

    fn run_durable_callbacks(&self) {
        let synced = self.synced.load(Ordering::Acquire);
        let due: Vec<DurableCallback> = {
            let mut waiting = self.on_durable.lock().unwrap_or_else(|p| p.into_inner());
            if waiting.is_empty() {
                return;
            }
            let (due, rest) = std::mem::take(&mut *waiting)
                .into_iter()
                .partition(|(end, _)| *end <= synced);
            *waiting = rest;
            due.into_iter().map(|(_, f)| f).collect()
        };
        for f in due {
            f();
        }
    }

    /// Returns once every byte before logical offset `end` is durable (see
    /// [`LogSync::wait_durable`]). Blocking.
    pub fn sync_to(&self, end: LogOffset) -> Result<()> {
        self.sync_local(end)?;
        match self.replica.get() {
            // Connector batches and replays: they acknowledge nobody, and an entry
            // given up on would be logged again after the outage, so wait it out.
            Some(r) => r
                .log
                .wait_committed_blocking(r.last.load(Ordering::Acquire)),
            None => Ok(()),
        }
    }

    fn sync_local(&self, end: LogOffset) -> Result<()> {
        if self.synced.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if self.synced.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        // Everything written so far rides on this fsync, not only `end`.
        let covered = self.written.load(Ordering::Acquire);
        let started = std::time::Instant::now();
        file.sync_data()?;
        // A slow disk holds every statement of the group commit: say so.
        let took = started.elapsed();
        if took >= std::time::Duration::from_secs(1) {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                "table log fsync was slow"
            );
        }
        self.synced.fetch_max(covered, Ordering::AcqRel);
        drop(file);
        // Before the waiting statements are woken: an epoch committed here is
        // readable by the time a statement it holds is acknowledged, so the
        // client's next read need not wait for it.
        self.run_durable_callbacks();
        Ok(())
    }

    /// Whether every byte before logical offset `end` is on disk.
    pub fn covers(&self, end: LogOffset) -> bool {
        self.synced.load(Ordering::Acquire) >= end
    }

    /// Whether everything written is durable.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) >= self.written.load(Ordering::Acquire)
            && self
                .replica
                .get()
                .is_none_or(|r| r.log.is_committed(r.last.load(Ordering::Acquire)))
    }

    /// Logical end of everything written.
    pub fn written(&self) -> LogOffset {
        self.written.load(Ordering::Acquire)
    }

    /// A rewritten (fully synced) file replaces the old one.
    fn replace(&self, file: &File, end: LogOffset) -> Result<()> {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        *f = file.try_clone()?;
        self.written.store(end, Ordering::Release);
        self.synced.store(end, Ordering::Release);
        self.published.send_replace(end);
        drop(f);
        self.run_durable_callbacks();
        Ok(())
    }
}

pub struct TableLog {
    file: File,
    sync: Arc<LogSync>,
    path: std::path::PathBuf,
    /// Logical offset of the first byte after the file header.
    base: LogOffset,
    /// Bytes of file header (0 for a log that was never truncated).
    header_len: u64,
    end: LogOffset,
}

const HEADER: usize = 8;
const MAGIC: &[u8; 8] = b"WEIRLOG1";

/// Parses a log file: `(base, header_len, entries, valid_end_position)`.
fn parse(bytes: &[u8]) -> (LogOffset, usize, Vec<LogEntry>, usize) {
    let (base, start) = if bytes.len() >= 16 && &bytes[..8] == MAGIC {
        (u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 16)
    } else {
        (0, 0)
    };
    let mut entries = Vec::new();
    let mut pos = start;
    while pos + HEADER <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap());
        let body = pos + HEADER;
        if body + len > bytes.len() || crc32fast::hash(&bytes[body..body + len]) != crc {
            break;
        }
        entries.push((
            base + (pos - start) as u64,
            bytes[body..body + len].to_vec(),
        ));
        pos = body + len;
    }
    (base, start, entries, pos)
}

impl TableLog {
    /// Opens (creating if needed) the log and returns it with every valid entry.
    pub fn open(path: &Path) -> Result<(TableLog, Vec<LogEntry>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (base, header_len, entries, pos) = parse(&bytes);
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
        let end = base + (pos - header_len) as LogOffset;
        Ok((
            TableLog {
                sync: LogSync::new(&file, end)?,
                file,
                path: path.to_path_buf(),
                base,
                header_len: header_len as u64,
                end,
            },
            entries,
        ))
    }

    /// Entries at or after logical offset `from` (a source rewinding to a checkpoint).
    /// Fails if `from` was truncated away, or lies beyond the end: a position this log
    /// never reached means the entries it counted are gone, and answering "nothing
    /// since" would silently lose them.
    pub fn read_from(&self, from: LogOffset) -> Result<Vec<LogEntry>> {
        if from < self.base {
            return Err(StorageError::Corrupt(format!(
                "table log {} was truncated to offset {}, cannot rewind to {from}",
                self.path.display(),
                self.base
            )));
        }
        if from > self.end {
            return Err(StorageError::Corrupt(format!(
                "table log {} ends at offset {}, cannot rewind to {from}: entries are missing",
                self.path.display(),
                self.end
            )));
        }
        let bytes = std::fs::read(&self.path)?;
        let (_, _, entries, _) = parse(&bytes);
        Ok(entries.into_iter().filter(|(o, _)| *o >= from).collect())
    }

    /// Drops every entry before logical offset `keep_from` (which must be an entry
    /// boundary or the end).
    pub fn truncate_below(&mut self, keep_from: LogOffset) -> Result<()> {
        if keep_from <= self.base {
            return Ok(());
        }
        let keep_from = keep_from.min(self.end);
        // Only the live tail is read: this runs under the write lock, and the dead
        // prefix is at least as large.
        let mut file = File::open(&self.path)?;
        file.seek(std::io::SeekFrom::Start(
            self.header_len + (keep_from - self.base),
        ))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        self.rewrite(keep_from, &tail)
    }

    /// Makes a log that holds no entry start at logical offset `base`: a table filled
    /// from a savepoint continues the offsets its views' saved positions refer to.
    pub fn rebase_empty(&mut self, base: LogOffset) -> Result<()> {
        if self.end != self.base {
            return Err(StorageError::Corrupt(format!(
                "table log {} holds entries: it cannot be rebased",
                self.path.display()
            )));
        }
        self.end = base;
        self.rewrite(base, &[])?;
        if let Some(r) = self.sync.replica.get() {
            let ticket = r.log.submit(crate::cluster_log::Record::Rebase {
                table: r.table,
                base,
            });
            r.log.wait_blocking(ticket)?;
        }
        Ok(())
    }

    /// Commits every later entry (and rebase) to `log` as table `table`'s too: durable
    /// then means committed there as well (high availability).
    pub fn replicate(&self, log: crate::cluster_log::ClusterLog, table: u64) {
        let _ = self.sync.replica.set(Replica {
            log,
            table,
            last: AtomicU64::new(0),
        });
    }

    /// Replaces the file with a header for logical offset `base` followed by
    /// `entries`. Crash-safe: the new file is written and synced beside the old one
    /// and renamed over it.
    fn rewrite(&mut self, base: LogOffset, entries: &[u8]) -> Result<()> {
        let tmp = self.path.with_extension("log.tmp");
        {
            let mut f = File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&base.to_le_bytes())?;
            f.write_all(entries)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)?;
        file.seek(SeekFrom::End(0))?;
        // The rewrite was synced whole: every entry it holds is durable.
        self.sync.replace(&file, self.end)?;
        self.file = file;
        self.base = base;
        self.header_len = 16;
        Ok(())
    }

    /// Logical offset of the oldest entry still in the log.
    pub fn start_offset(&self) -> LogOffset {
        self.base
    }

    /// Appends one entry and fsyncs it. Returns the entry's offset.
    pub fn append(&mut self, payload: &[u8]) -> Result<LogOffset> {
        let offset = self.end;
        let end = self.append_unsynced(payload)?;
        self.sync.sync_to(end)?;
        Ok(offset)
    }

    /// Appends one entry without waiting for the disk; returns the logical end after
    /// it, which [`LogSync::sync_to`] takes. Not durable (and not to be acknowledged)
    /// until then.
    pub fn append_unsynced(&mut self, payload: &[u8]) -> Result<LogOffset> {
        let len: u32 = payload
            .len()
            .try_into()
            .map_err(|_| StorageError::Corrupt("table log entry larger than 4 GiB".into()))?;
        let mut buf = Vec::with_capacity(HEADER + payload.len());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        buf.extend_from_slice(payload);
        self.file.write_all(&buf)?;
        if let Some(r) = self.sync.replica.get() {
            let ticket = r.log.submit(crate::cluster_log::Record::Table {
                table: r.table,
                offset: self.end,
                payload: payload.to_vec(),
            });
            r.last.store(ticket, Ordering::Release);
        }
        self.end += buf.len() as u64;
        self.sync.written.store(self.end, Ordering::Release);
        Ok(self.end)
    }

    /// The log's durable end, for waiting on a group commit without the log itself.
    pub fn sync_handle(&self) -> Arc<LogSync> {
        self.sync.clone()
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
    fn rewinding_beyond_the_end_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = TableLog::open(&dir.path().join("t.log")).unwrap();
        log.append(b"one").unwrap();
        let end = log.end_offset();
        assert!(log.read_from(end).unwrap().is_empty());
        assert!(
            log.read_from(end + 1).is_err(),
            "a position the log never reached means lost entries"
        );
    }

    #[test]
    fn truncation_keeps_logical_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let (mut log, _) = TableLog::open(&path).unwrap();
        log.append(b"one").unwrap();
        let second = log.append(b"two").unwrap();
        let third = log.append(b"three").unwrap();
        log.truncate_below(second).unwrap();
        assert!(
            log.read_from(0).is_err(),
            "rewinding below the cut must fail"
        );
        let fourth = log.append(b"four").unwrap();
        let got: Vec<_> = log.read_from(third).unwrap();
        assert_eq!(
            got,
            vec![(third, b"three".to_vec()), (fourth, b"four".to_vec())]
        );
        drop(log);
        let (log, entries) = TableLog::open(&path).unwrap();
        assert_eq!(entries.first().unwrap().0, second);
        assert_eq!(log.end_offset(), fourth + 8 + 4);
    }

    #[test]
    fn one_sync_covers_every_entry_written_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let (mut log, _) = TableLog::open(&path).unwrap();
        let sync = log.sync_handle();
        let first = log.append_unsynced(b"one").unwrap();
        let second = log.append_unsynced(b"two").unwrap();
        assert!(!sync.is_synced());
        sync.sync_to(first).unwrap();
        // The fsync for the first entry covered the second, written before it.
        assert!(sync.is_synced());
        assert_eq!(sync.written(), second);
        // A rewrite leaves the log synced, and later appends still count.
        log.truncate_below(first).unwrap();
        assert!(sync.is_synced());
        let third = log.append_unsynced(b"three").unwrap();
        assert!(!sync.is_synced());
        sync.sync_to(third).unwrap();
        assert!(sync.is_synced());
        drop(log);
        let (_, entries) = TableLog::open(&path).unwrap();
        assert_eq!(entries.len(), 2);
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
