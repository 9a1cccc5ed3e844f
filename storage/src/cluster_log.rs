//! The cluster log (`high-availability.type = object-store`): every durable change of
//! the leader, written to the HA storage directory before it is acknowledged, so that
//! a standby on another machine can take over with nothing acknowledged lost.
//!
//! - **Segments**: the log is a sequence of objects `<cluster-id>/log/<seq>` (twenty
//!   digits, so they list in order), each created with `If-None-Match: *`: a slot is
//!   written once, by one writer. A segment holds many records from many sessions
//!   (group commit: whatever was submitted while the previous segment was in flight)
//!   and is tagged with the writer's lease epoch.
//! - **Records**: a table log entry at its logical offset ([`Record::Table`]), a table
//!   log moved to a new base ([`Record::Rebase`]), a catalog file ([`Record::Meta`]).
//!   Local table logs and `meta/` are a cache of this log; a standby replays it into its
//!   own ([`Mirror`]).
//! - **Fencing**: a new leader reads every segment, then creates a *fence* segment in
//!   the first free slot (as SlateDB fences writers). A deposed leader's next create
//!   lands on a taken slot and fails, so it can neither commit nor acknowledge; what
//!   it committed before the fence is before the fence, and the new leader has read it.
//! - **Unknown outcomes**: a create whose answer is lost (timeout, 5xx) is resolved by
//!   reading the slot back: our segment (it landed), another's (we are fenced), none
//!   (retry the same bytes).
//! - **Acknowledging**: [`ClusterLog::wait`] returns once the record's segment is
//!   committed *and* the lease is current ([`AckGate`]): a leader that cannot renew stops
//!   acknowledging before a standby may take over. A wait that outlasts
//!   `ack_timeout` fails with [`StorageError::Unavailable`]; the record stays queued and
//!   is committed when the store returns (the client was told the outcome is unknown).
//!
//! Not built yet: deleting segments that no retained checkpoint needs (a cold standby
//! reads the whole history; a running one follows the tail).

use crate::object_storage::{Conditional, ObjectStorage};
use crate::{Result, StorageError};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A segment's number: its slot in the log.
pub type Seq = u64;

/// One durable change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A table log entry (`payload` as the table log frames it) at its logical offset.
    Table {
        table: u64,
        offset: u64,
        payload: Vec<u8>,
    },
    /// A table log that holds no entry now starts at `base`.
    Rebase { table: u64, base: u64 },
    /// A file under `meta/` (the catalog) replaced by `bytes`.
    Meta { name: String, bytes: Vec<u8> },
}

/// One object of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The lease epoch of its writer.
    pub epoch: u64,
    /// Who wrote it: `<member>#<nonce>`, unique per writer (read-back tells ours).
    pub writer: String,
    /// A fence: written by a new leader, holds no record.
    pub fence: bool,
    pub records: Vec<Record>,
}

const MAGIC: &[u8; 8] = b"WEIRSEG1";

/// Largest segment the committer writes (unless one record is larger).
const SEGMENT_BYTES: usize = 8 << 20;

impl Record {
    /// Roughly its encoded size.
    fn size(&self) -> usize {
        match self {
            Record::Table { payload, .. } => payload.len() + 24,
            Record::Rebase { .. } => 17,
            Record::Meta { name, bytes } => name.len() + bytes.len() + 9,
        }
    }
}

pub fn segment_key(cluster: &str, seq: Seq) -> String {
    format!("{cluster}/log/{seq:020}")
}

impl Segment {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_slice(MAGIC);
        b.put_u64_le(self.epoch);
        put_bytes(&mut b, self.writer.as_bytes());
        b.put_u8(self.fence as u8);
        b.put_u32_le(self.records.len() as u32);
        for r in &self.records {
            match r {
                Record::Table {
                    table,
                    offset,
                    payload,
                } => {
                    b.put_u8(0);
                    b.put_u64_le(*table);
                    b.put_u64_le(*offset);
                    put_bytes(&mut b, payload);
                }
                Record::Rebase { table, base } => {
                    b.put_u8(1);
                    b.put_u64_le(*table);
                    b.put_u64_le(*base);
                }
                Record::Meta { name, bytes } => {
                    b.put_u8(2);
                    put_bytes(&mut b, name.as_bytes());
                    put_bytes(&mut b, bytes);
                }
            }
        }
        let crc = crc32fast::hash(&b);
        b.put_u32_le(crc);
        b.freeze()
    }

    pub fn decode(bytes: &[u8]) -> Result<Segment> {
        let corrupt = |what: &str| StorageError::Corrupt(format!("cluster log segment: {what}"));
        if bytes.len() < MAGIC.len() + 4 || &bytes[..8] != MAGIC {
            return Err(corrupt("not a segment"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err(corrupt("checksum mismatch"));
        }
        let mut b = &body[8..];
        let short = || corrupt("truncated");
        let epoch = get_u64(&mut b).ok_or_else(short)?;
        let writer = String::from_utf8(get_bytes(&mut b).ok_or_else(short)?)
            .map_err(|_| corrupt("writer is not UTF-8"))?;
        let fence = get_u8(&mut b).ok_or_else(short)? != 0;
        let count = get_u32(&mut b).ok_or_else(short)?;
        let mut records = Vec::with_capacity(count.min(1 << 16) as usize);
        for _ in 0..count {
            let record = match get_u8(&mut b).ok_or_else(short)? {
                0 => Record::Table {
                    table: get_u64(&mut b).ok_or_else(short)?,
                    offset: get_u64(&mut b).ok_or_else(short)?,
                    payload: get_bytes(&mut b).ok_or_else(short)?,
                },
                1 => Record::Rebase {
                    table: get_u64(&mut b).ok_or_else(short)?,
                    base: get_u64(&mut b).ok_or_else(short)?,
                },
                2 => Record::Meta {
                    name: String::from_utf8(get_bytes(&mut b).ok_or_else(short)?)
                        .map_err(|_| corrupt("name is not UTF-8"))?,
                    bytes: get_bytes(&mut b).ok_or_else(short)?,
                },
                t => return Err(corrupt(&format!("unknown record kind {t}"))),
            };
            records.push(record);
        }
        Ok(Segment {
            epoch,
            writer,
            fence,
            records,
        })
    }
}

fn put_bytes(b: &mut BytesMut, bytes: &[u8]) {
    b.put_u32_le(bytes.len() as u32);
    b.put_slice(bytes);
}

fn get_u8(b: &mut &[u8]) -> Option<u8> {
    (b.remaining() >= 1).then(|| b.get_u8())
}

fn get_u32(b: &mut &[u8]) -> Option<u32> {
    (b.remaining() >= 4).then(|| b.get_u32_le())
}

fn get_u64(b: &mut &[u8]) -> Option<u64> {
    (b.remaining() >= 8).then(|| b.get_u64_le())
}

fn get_bytes(b: &mut &[u8]) -> Option<Vec<u8>> {
    let len = get_u32(b)? as usize;
    (b.remaining() >= len).then(|| {
        let v = b[..len].to_vec();
        b.advance(len);
        v
    })
}

/// Until when the leader may acknowledge: moved forward by every lease renewal (to
/// the renewal's send time plus `renew-deadline`), read by every acknowledgement.
#[derive(Debug)]
pub struct AckGate {
    origin: Instant,
    /// Milliseconds after `origin`; 0: never.
    until_ms: AtomicU64,
}

impl Default for AckGate {
    fn default() -> Self {
        AckGate {
            origin: Instant::now(),
            until_ms: AtomicU64::new(0),
        }
    }
}

impl AckGate {
    pub fn allow_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.origin).as_millis() as u64;
        self.until_ms.store(ms, Ordering::Release);
    }

    pub fn revoke(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    pub fn is_open(&self) -> bool {
        (self.origin.elapsed().as_millis() as u64) < self.until_ms.load(Ordering::Acquire)
    }
}

/// A ticket: the number of a submitted record; a wait on it covers every record
/// submitted before it too.
pub type Ticket = u64;

#[derive(Default)]
struct WriterState {
    pending: Vec<Record>,
    /// Tickets handed out so far.
    submitted: Ticket,
    /// Every ticket up to this one is in a committed segment.
    committed: Ticket,
    /// Set once deposed (fenced) or stopped: nothing more commits.
    fatal: Option<String>,
    /// The next free slot.
    next_seq: Seq,
    stop: bool,
}

struct Shared {
    state: Mutex<WriterState>,
    changed: Condvar,
    /// `committed`, for async waiters.
    published: tokio::sync::watch::Sender<Ticket>,
    gate: Arc<AckGate>,
    ack_timeout: Duration,
    /// Seconds each committed segment took to write, for metrics.
    on_commit: Box<dyn Fn(Duration, usize) + Send + Sync>,
}

/// The leader's writer: records submitted from any thread are group-committed, one
/// segment at a time, by a committer thread with its own runtime (so that threads
/// blocked waiting on it can never starve it).
#[derive(Clone)]
pub struct ClusterLog {
    shared: Arc<Shared>,
}

/// How the writer is set up.
pub struct WriterConfig {
    pub storage: ObjectStorage,
    pub cluster: String,
    pub member: String,
    pub epoch: u64,
    /// The first free slot (after the fence this leader wrote).
    pub next_seq: Seq,
    pub gate: Arc<AckGate>,
    /// How long an acknowledgement may wait for the store.
    pub ack_timeout: Duration,
    pub on_commit: Box<dyn Fn(Duration, usize) + Send + Sync>,
}

impl ClusterLog {
    pub fn start(config: WriterConfig) -> Result<ClusterLog> {
        let (published, _) = tokio::sync::watch::channel(0);
        let shared = Arc::new(Shared {
            state: Mutex::new(WriterState {
                next_seq: config.next_seq,
                ..Default::default()
            }),
            changed: Condvar::new(),
            published,
            gate: config.gate,
            ack_timeout: config.ack_timeout,
            on_commit: config.on_commit,
        });
        let writer = format!("{}#{:016x}", config.member, rand_nonce());
        let committer = Committer {
            shared: shared.clone(),
            storage: config.storage,
            cluster: config.cluster,
            writer,
            epoch: config.epoch,
        };
        std::thread::Builder::new()
            .name("cluster-log".into())
            .spawn(move || committer.run())?;
        Ok(ClusterLog { shared })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WriterState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a record for the next segment.
    pub fn submit(&self, record: Record) -> Ticket {
        let mut s = self.lock();
        s.pending.push(record);
        s.submitted += 1;
        let ticket = s.submitted;
        drop(s);
        self.shared.changed.notify_all();
        ticket
    }

    /// The newest ticket handed out.
    pub fn submitted(&self) -> Ticket {
        self.lock().submitted
    }

    pub fn is_committed(&self, ticket: Ticket) -> bool {
        self.lock().committed >= ticket
    }

    /// The slot the next segment goes to (segments before it are committed).
    pub fn next_seq(&self) -> Seq {
        self.lock().next_seq
    }

    /// Why this writer can no longer commit, once it cannot.
    pub fn failure(&self) -> Option<String> {
        self.lock().fatal.clone()
    }

    /// `Some(result)` once the wait for `ticket` is decided.
    fn decided(&self, ticket: Ticket) -> Option<Result<()>> {
        let s = self.lock();
        if let Some(f) = &s.fatal {
            return Some(Err(StorageError::Fenced(f.clone())));
        }
        (s.committed >= ticket && self.shared.gate.is_open()).then_some(Ok(()))
    }

    fn unavailable(&self) -> StorageError {
        StorageError::Unavailable(format!(
            "the high-availability storage did not confirm the write within {:?} (or the \
             leader lease could not be renewed); the write is not acknowledged and may \
             still be applied when the storage returns",
            self.shared.ack_timeout
        ))
    }

    /// Returns once `ticket` is committed while the lease is current.
    pub async fn wait(&self, ticket: Ticket) -> Result<()> {
        let deadline = Instant::now() + self.shared.ack_timeout;
        let mut published = self.shared.published.subscribe();
        loop {
            if let Some(r) = self.decided(ticket) {
                return r;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unavailable());
            }
            // Wakes on a commit, and at least every 50 ms to look at the lease gate.
            let nap = left.min(Duration::from_millis(50));
            let _ = tokio::time::timeout(nap, published.changed()).await;
        }
    }

    /// [`ClusterLog::wait`] for threads outside the async runtime.
    pub fn wait_blocking(&self, ticket: Ticket) -> Result<()> {
        let deadline = Instant::now() + self.shared.ack_timeout;
        loop {
            if let Some(r) = self.decided(ticket) {
                return r;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unavailable());
            }
            let s = self.lock();
            let _ = self
                .shared
                .changed
                .wait_timeout(s, left.min(Duration::from_millis(50)));
        }
    }

    /// Returns once `ticket` is committed, however long the store is away (no lease
    /// check: for writers that acknowledge nobody, such as connectors, whose entries
    /// must not be written twice after an outage). Fails only once deposed.
    pub fn wait_committed_blocking(&self, ticket: Ticket) -> Result<()> {
        let mut s = self.lock();
        loop {
            if let Some(f) = &s.fatal {
                return Err(StorageError::Fenced(f.clone()));
            }
            if s.committed >= ticket {
                return Ok(());
            }
            s = self
                .shared
                .changed
                .wait_timeout(s, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops committing (deposed, or shutting down): waiters fail.
    pub fn stop(&self, why: &str) {
        let mut s = self.lock();
        s.stop = true;
        s.fatal.get_or_insert_with(|| why.to_string());
        drop(s);
        self.shared.changed.notify_all();
        self.shared.published.send_modify(|_| {});
    }
}

fn rand_nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ ((std::process::id() as u64) << 32)
}

struct Committer {
    shared: Arc<Shared>,
    storage: ObjectStorage,
    cluster: String,
    writer: String,
    epoch: u64,
}

impl Committer {
    fn run(self) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return self.fail(format!("cannot start the cluster log writer: {e}")),
        };
        loop {
            let Some((records, upto, seq)) = self.next_batch() else {
                return;
            };
            let segment = Segment {
                epoch: self.epoch,
                writer: self.writer.clone(),
                fence: false,
                records,
            };
            let started = Instant::now();
            match rt.block_on(self.commit(seq, segment.encode())) {
                Ok(()) => {
                    (self.shared.on_commit)(started.elapsed(), segment.records.len());
                    let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
                    s.committed = upto;
                    s.next_seq = seq + 1;
                    drop(s);
                    self.shared.changed.notify_all();
                    self.shared.published.send_replace(upto);
                }
                Err(why) => return self.fail(why),
            }
        }
    }

    /// Waits for records; takes them all (group commit). `None`: stopped.
    fn next_batch(&self) -> Option<(Vec<Record>, Ticket, Seq)> {
        let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if s.stop {
                return None;
            }
            if !s.pending.is_empty() {
                // Everything pending, up to SEGMENT_BYTES (at least one record): a
                // backlog after an outage goes out in PUTs of bounded size.
                let mut bytes = 0;
                let take = s
                    .pending
                    .iter()
                    .take_while(|r| {
                        bytes += r.size();
                        bytes <= SEGMENT_BYTES
                    })
                    .count()
                    .max(1);
                let upto = s.submitted - (s.pending.len() - take) as Ticket;
                let records: Vec<Record> = s.pending.drain(..take).collect();
                return Some((records, upto, s.next_seq));
            }
            s = self
                .shared
                .changed
                .wait(s)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn fail(&self, why: String) {
        tracing::error!(error = %why, "cluster log writer stopped");
        let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        s.fatal.get_or_insert(why);
        s.stop = true;
        drop(s);
        self.shared.changed.notify_all();
        self.shared.published.send_modify(|_| {});
    }

    /// Creates segment `seq`, retrying through errors (the store being down) until it
    /// lands or the slot is someone else's. `Err`: fenced or stopped.
    async fn commit(&self, seq: Seq, bytes: Bytes) -> std::result::Result<(), String> {
        let key = segment_key(&self.cluster, seq);
        let mut backoff = Duration::from_millis(50);
        loop {
            if self
                .shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stop
            {
                return Err("cluster log writer stopped".into());
            }
            let outcome = match self.storage.create(&key, bytes.clone()).await {
                Ok(Conditional::Written(_)) => return Ok(()),
                Ok(Conditional::Conflict) => self.read_back(&key).await,
                Err(e) => {
                    tracing::warn!(seq, error = %e, "cluster log write failed; reading back");
                    self.read_back(&key).await
                }
            };
            match outcome {
                Ok(Some(true)) => return Ok(()),
                Ok(Some(false)) => {
                    return Err(format!(
                        "fenced: slot {seq} of the cluster log was taken by a newer leader \
                         (this member's epoch {} is over)",
                        self.epoch
                    ))
                }
                // Not there (or not readable): try the same bytes again.
                Ok(None) | Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Whose segment is in the slot: `Some(true)` ours, `Some(false)` another's,
    /// `None` empty.
    async fn read_back(&self, key: &str) -> Result<Option<bool>> {
        match self.storage.get(key).await? {
            None => Ok(None),
            Some(bytes) => Ok(Some(Segment::decode(&bytes)?.writer == self.writer)),
        }
    }
}

/// Reads segments in order: a standby follows the leader with it; a new leader
/// reads to the end with it before fencing.
pub struct LogReader {
    storage: ObjectStorage,
    cluster: String,
    next: Seq,
}

impl LogReader {
    /// Starts at the oldest segment in the store (1 for an empty log).
    pub async fn open(storage: ObjectStorage, cluster: &str) -> Result<LogReader> {
        let prefix = format!("{cluster}/log/");
        let first = storage
            .list(&format!("{cluster}/log"))
            .await?
            .iter()
            .filter_map(|(k, _)| k.strip_prefix(&prefix)?.parse::<Seq>().ok())
            .min()
            .unwrap_or(1);
        Ok(LogReader {
            storage,
            cluster: cluster.to_string(),
            next: first,
        })
    }

    /// The slot after the last segment read.
    pub fn next_seq(&self) -> Seq {
        self.next
    }

    /// The next segment, if it exists yet.
    pub async fn next_segment(&mut self) -> Result<Option<Segment>> {
        let key = segment_key(&self.cluster, self.next);
        let Some(bytes) = self.storage.get(&key).await? else {
            return Ok(None);
        };
        let segment = Segment::decode(&bytes)?;
        self.next += 1;
        Ok(Some(segment))
    }

    /// Up to `max` next segments, fetched `PREFETCH` at a time in parallel (a standby
    /// catching up on a long log); stops at the first slot not written yet. The reader
    /// moves past exactly the segments returned: an error after some were read returns
    /// those, and the next call starts at the first one it could not read.
    pub async fn next_segments(&mut self, max: usize) -> Result<Vec<Segment>> {
        const PREFETCH: u64 = 16;
        let mut out = Vec::new();
        // One read first: a follower that is caught up costs one GET per poll.
        let Some(first) = self.next_segment().await? else {
            return Ok(out);
        };
        out.push(first);
        while out.len() < max {
            let keys: Vec<String> = (self.next..self.next + PREFETCH)
                .map(|seq| segment_key(&self.cluster, seq))
                .collect();
            let fetched = futures::future::join_all(keys.iter().map(|k| self.storage.get(k))).await;
            let before = out.len();
            for f in fetched {
                let decoded = match f {
                    Ok(Some(bytes)) => Segment::decode(&bytes),
                    Ok(None) => break,
                    Err(e) => Err(e),
                };
                match decoded {
                    Ok(segment) => {
                        out.push(segment);
                        self.next += 1;
                    }
                    // Keep what was read; the failed slot is read again next call.
                    Err(e) => {
                        tracing::warn!(seq = self.next, error = %e, "cannot read a cluster log segment");
                        return Ok(out);
                    }
                }
            }
            if out.len() - before < PREFETCH as usize {
                break;
            }
        }
        Ok(out)
    }

    /// Writes a fence at the next slot. `true`: placed, the log is ours from the slot
    /// after; `false`: the slot was taken meanwhile (read on, then try again).
    pub async fn fence(&mut self, epoch: u64, member: &str) -> Result<bool> {
        let key = segment_key(&self.cluster, self.next);
        let fence = Segment {
            epoch,
            writer: format!("{member}#fence"),
            fence: true,
            records: vec![],
        };
        let bytes = fence.encode();
        let written = match self.storage.create(&key, bytes.clone()).await {
            Ok(w) => w,
            // Unknown outcome: the slot holds our fence or not.
            Err(e) => match self.storage.get(&key).await? {
                Some(found) if found == bytes => Conditional::Written(Default::default()),
                Some(_) => Conditional::Conflict,
                None => return Err(e),
            },
        };
        match written {
            Conditional::Written(_) => {
                self.next += 1;
                Ok(true)
            }
            Conditional::Conflict => Ok(false),
        }
    }
}

/// A standby's local copy of the log: table logs under `tables/` and files under
/// `meta/` in its data directory, written as the leader wrote its own, so that a
/// takeover opens them like a restart does.
pub struct Mirror {
    dir: std::path::PathBuf,
    meta: crate::meta_store::MetaStore,
    logs: std::collections::HashMap<u64, crate::TableLog>,
}

impl Mirror {
    /// Starts from an empty copy: whatever the data directory held is discarded (it
    /// may hold writes a deposed leader never committed).
    pub fn open_empty(data_dir: &std::path::Path) -> Result<Mirror> {
        for sub in ["tables", "meta"] {
            match std::fs::remove_dir_all(data_dir.join(sub)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        let dir = data_dir.join("tables");
        std::fs::create_dir_all(&dir)?;
        Ok(Mirror {
            dir,
            meta: crate::meta_store::MetaStore::open(data_dir)?,
            logs: Default::default(),
        })
    }

    fn log(&mut self, table: u64) -> Result<&mut crate::TableLog> {
        if !self.logs.contains_key(&table) {
            let (log, _) = crate::TableLog::open(&self.dir.join(format!("{table}.log")))?;
            self.logs.insert(table, log);
        }
        Ok(self.logs.get_mut(&table).expect("inserted above"))
    }

    pub fn apply(&mut self, segment: &Segment) -> Result<()> {
        for record in &segment.records {
            match record {
                Record::Table {
                    table,
                    offset,
                    payload,
                } => {
                    // The copy holds the table's whole history (a standby replays the
                    // log from its first segment, and rebases are records): an entry
                    // anywhere but at its end is a gap, never skipped over.
                    let log = self.log(*table)?;
                    if log.end_offset() != *offset {
                        return Err(StorageError::Corrupt(format!(
                            "cluster log: table {table} entry at offset {offset}, but the \
                             copy ends at {}",
                            log.end_offset()
                        )));
                    }
                    log.append_unsynced(payload)?;
                }
                Record::Rebase { table, base } => {
                    let log = self.log(*table)?;
                    // The leader's log held no entry (it had truncated them); the copy
                    // still may: drop them first.
                    let end = log.end_offset();
                    log.truncate_below(end)?;
                    if end != *base {
                        log.rebase_empty(*base)?;
                    }
                }
                Record::Meta { name, bytes } => self.meta.write(name, bytes)?,
            }
        }
        Ok(())
    }

    /// Makes everything applied durable on the local disk.
    pub fn sync(&mut self) -> Result<()> {
        for log in self.logs.values() {
            let sync = log.sync_handle();
            sync.sync_to(sync.written())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object_storage::S3Settings;

    fn table(table: u64, offset: u64, payload: &[u8]) -> Record {
        Record::Table {
            table,
            offset,
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn segments_round_trip_and_damage_is_detected() {
        let s = Segment {
            epoch: 7,
            writer: "m:1#abc".into(),
            fence: false,
            records: vec![
                table(3, 0, b"hello"),
                Record::Rebase { table: 4, base: 99 },
                Record::Meta {
                    name: "catalog.json".into(),
                    bytes: b"{}".to_vec(),
                },
            ],
        };
        let bytes = s.encode();
        assert_eq!(Segment::decode(&bytes).unwrap(), s);
        let mut torn = bytes.to_vec();
        torn[20] ^= 1;
        assert!(Segment::decode(&torn).is_err());
        assert!(Segment::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    fn writer(storage: &ObjectStorage, epoch: u64, next_seq: Seq) -> ClusterLog {
        let gate = Arc::new(AckGate::default());
        gate.allow_until(Instant::now() + Duration::from_secs(60));
        ClusterLog::start(WriterConfig {
            storage: storage.clone(),
            cluster: "c".into(),
            member: format!("m{epoch}"),
            epoch,
            next_seq,
            gate,
            ack_timeout: Duration::from_secs(5),
            on_commit: Box::new(|_, _| {}),
        })
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn committed_records_are_read_back_and_a_fence_stops_the_old_writer() {
        let dir = tempfile::tempdir().unwrap();
        let storage =
            ObjectStorage::open(dir.path().to_str().unwrap(), &S3Settings::default()).unwrap();
        let log = writer(&storage, 1, 1);
        let mut tickets = vec![];
        for i in 0..50u64 {
            tickets.push(log.submit(table(1, i, &i.to_le_bytes())));
        }
        log.wait(*tickets.last().unwrap()).await.unwrap();
        // A new leader reads everything, then fences.
        let mut reader = LogReader::open(storage.clone(), "c").await.unwrap();
        let mut seen = vec![];
        while let Some(s) = reader.next_segment().await.unwrap() {
            assert_eq!(s.epoch, 1);
            seen.extend(s.records);
        }
        assert_eq!(seen.len(), 50, "group commit keeps every record, in order");
        assert_eq!(seen[49], table(1, 49, &49u64.to_le_bytes()));
        assert!(reader.fence(2, "m2").await.unwrap());
        // The deposed writer can neither commit nor acknowledge.
        let late = log.submit(table(1, 50, b"late"));
        let err = log.wait(late).await.unwrap_err();
        assert!(matches!(err, StorageError::Fenced(_)), "{err}");
        // The new writer continues after the fence.
        let next = writer(&storage, 2, reader.next_seq());
        let t = next.submit(table(1, 50, b"new"));
        next.wait(t).await.unwrap();
        // The reader is past its own fence: the next segment is the new writer's.
        let s = reader.next_segment().await.unwrap().unwrap();
        assert_eq!((s.epoch, s.records), (2, vec![table(1, 50, b"new")]));
    }

    #[test]
    fn the_mirror_has_the_leaders_offsets() {
        let leader_dir = tempfile::tempdir().unwrap();
        let (mut leader, _) = crate::TableLog::open(&leader_dir.path().join("1.log")).unwrap();
        let mut records = vec![];
        for p in [&b"a"[..], b"bb", b"ccc"] {
            let offset = leader.end_offset();
            leader.append(p).unwrap();
            records.push(table(1, offset, p));
        }
        let data = tempfile::tempdir().unwrap();
        let mut mirror = Mirror::open_empty(data.path()).unwrap();
        let segment = Segment {
            epoch: 1,
            writer: "w".into(),
            fence: false,
            records,
        };
        mirror.apply(&segment).unwrap();
        mirror.sync().unwrap();
        let (copy, entries) = crate::TableLog::open(&data.path().join("tables/1.log")).unwrap();
        let (_, originals) = crate::TableLog::open(&leader_dir.path().join("1.log")).unwrap();
        assert_eq!(entries, originals);
        assert_eq!(copy.end_offset(), leader.end_offset());
        // Out of step is an error, never a silent gap.
        let gap = Segment {
            records: vec![table(1, copy.end_offset() + 5, b"x")],
            ..segment
        };
        assert!(mirror.apply(&gap).is_err());
    }
}
