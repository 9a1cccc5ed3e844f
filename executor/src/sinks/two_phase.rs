//! Two-phase commit for exactly-once sinks (Flink's `TwoPhaseCommitSinkFunction`),
//! shared by the Kafka sink and the file sink.
//!
//! - **Stage** (at each checkpoint barrier, on the actor): the records since the
//!   previous checkpoint become a numbered batch in the sink's checkpointed state and
//!   go to the committer, which may *prepare* them at once (the file sink writes a
//!   pending file).
//! - **Commit** (when a checkpoint of the job completes, on the committer task): every
//!   staged batch up to that checkpoint, in order, through the target (a Kafka
//!   transaction; renames of pending files).
//! - **Recover** (at the start of a run): the target fences earlier writers and says
//!   up to which batch number everything is committed; the restored batches after that
//!   are committed again at once (their checkpoint did complete).
//!
//! The sink's state (keyed, key group 0, under its uid): `b` + batch number
//! (big-endian) → checkpoint epoch (big-endian) + records; `n` → the next batch number.
//! Committed batches are deleted at the next checkpoint.

use super::format::{decode_records, encode_records, SinkRecord};
use crate::barrier::Epoch;
use crate::error::{ExecError, Result};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use weir_storage::state_snapshot::{DeltaData, KeyedEntriesBuilder, StateDelta};

/// How long a sink waits at its first checkpoint for recovery to finish; past it the
/// job fails and restarts.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One staged batch: the records of the epochs up to checkpoint `epoch`.
#[derive(Debug, Clone)]
pub struct Staged {
    pub seq: u64,
    pub epoch: Epoch,
    pub records: Arc<Vec<SinkRecord>>,
}

/// Where an exactly-once sink commits.
pub trait TwoPhaseTarget: Send + Sync + 'static {
    /// Fences earlier writers of this sink and returns the number of the last batch
    /// known committed (every earlier one is committed too), if any.
    fn recover<'a>(&'a self, restored: &'a [Staged]) -> BoxFuture<'a, Result<Option<u64>>>;
    /// Pre-commit work that may start before the checkpoint completes.
    fn prepare<'a>(&'a self, _batch: &'a Staged) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    /// Makes `batches` (in order) visible, all or (per batch, in order) a prefix.
    fn commit<'a>(&'a self, batches: &'a [Staged]) -> BoxFuture<'a, Result<()>>;
}

/// What the committer reports back to the sink operator.
#[derive(Default)]
struct CommitStatus {
    /// Recovery is done.
    ready: AtomicBool,
    /// The next batch number must be at least this (one past the last committed).
    min_next_seq: AtomicU64,
    /// Every batch numbered below this is committed: the sink forgets them.
    committed_below: AtomicU64,
    /// Why committing failed; the sink fails its job with it.
    error: Mutex<Option<String>>,
}

impl CommitStatus {
    fn fail(&self, sink: &str, e: String) {
        tracing::error!(sink, error = %e, "sink commit failed");
        self.error.lock().get_or_insert(e);
    }
}

/// The operator side: records since the last checkpoint, and the batches the sink's
/// state still holds.
pub struct Staging {
    uid: String,
    current: Vec<SinkRecord>,
    /// Batch numbers in the state, not yet known to be committed.
    pending: BTreeSet<u64>,
    next_seq: u64,
    committer: mpsc::UnboundedSender<Staged>,
    status: Arc<CommitStatus>,
}

/// What a two-phase sink needs from its deployment.
pub struct SinkContext {
    pub job: u64,
    /// The sink's state uid.
    pub uid: String,
    /// The sink's state from the checkpoint it restarts from: `(key, value)`.
    pub restored: Vec<(Vec<u8>, Vec<u8>)>,
    pub completions: broadcast::Receiver<(u64, Epoch)>,
}

fn batch_key(seq: u64) -> Vec<u8> {
    let mut k = vec![b'b'];
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

impl Staging {
    /// Restores the sink's batches and starts its committer.
    pub fn start(sink: &str, target: Arc<dyn TwoPhaseTarget>, ctx: SinkContext) -> Result<Self> {
        let (restored, next_seq) = staged_from_state(&ctx.restored)?;
        let pending = restored.iter().map(|b| b.seq).collect();
        let (committer, rx) = mpsc::unbounded_channel();
        let status = Arc::new(CommitStatus::default());
        tokio::spawn(run(
            sink.to_string(),
            ctx.job,
            target,
            restored,
            rx,
            ctx.completions,
            status.clone(),
        ));
        Ok(Self {
            uid: ctx.uid,
            current: Vec::new(),
            pending,
            next_seq,
            committer,
            status,
        })
    }

    /// A failed commit fails the job.
    pub fn check(&self) -> Result<()> {
        match self.status.error.lock().clone() {
            Some(e) => Err(ExecError::Internal(e)),
            None => Ok(()),
        }
    }

    pub fn push(&mut self, records: Vec<SinkRecord>) -> Result<()> {
        self.check()?;
        self.current.extend(records);
        Ok(())
    }

    /// Waits (at the first checkpoint of a run) until recovery is done, so that new
    /// batch numbers never reuse a committed one.
    fn await_ready(&self) -> Result<()> {
        let start = Instant::now();
        while !self.status.ready.load(Ordering::SeqCst) {
            self.check()?;
            if start.elapsed() > SETUP_TIMEOUT {
                return Err(ExecError::Internal(
                    "sink: recovery of its committed output did not finish (target unreachable?)"
                        .into(),
                ));
            }
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(10)));
        }
        self.check()
    }

    /// Stages the records since the last checkpoint as batch `next_seq` of checkpoint
    /// `epoch`; returns the state changes.
    pub fn snapshot(&mut self, epoch: Epoch) -> Result<Vec<StateDelta>> {
        self.await_ready()?;
        self.next_seq = self
            .next_seq
            .max(self.status.min_next_seq.load(Ordering::SeqCst));
        let mut entries = KeyedEntriesBuilder::default();
        let below = self.status.committed_below.load(Ordering::SeqCst);
        while let Some(&seq) = self.pending.first() {
            if seq >= below {
                break;
            }
            self.pending.pop_first();
            entries.push(0, &batch_key(seq), None);
        }
        if !self.current.is_empty() {
            let seq = self.next_seq;
            self.next_seq += 1;
            let records = std::mem::take(&mut self.current);
            let mut value = epoch.to_be_bytes().to_vec();
            value.extend_from_slice(&encode_records(&records));
            entries.push(0, &batch_key(seq), Some(&value));
            self.pending.insert(seq);
            self.committer
                .send(Staged {
                    seq,
                    epoch,
                    records: Arc::new(records),
                })
                .map_err(|_| ExecError::Internal("sink: committer stopped".into()))?;
        }
        entries.push(0, b"n", Some(&self.next_seq.to_be_bytes()));
        Ok(vec![StateDelta {
            uid: self.uid.clone(),
            data: DeltaData::Keyed(entries.finish()),
        }])
    }
}

async fn run(
    sink: String,
    job: u64,
    target: Arc<dyn TwoPhaseTarget>,
    restored: Vec<Staged>,
    mut staged: mpsc::UnboundedReceiver<Staged>,
    mut completions: broadcast::Receiver<(u64, Epoch)>,
    status: Arc<CommitStatus>,
) {
    let marker = match target.recover(&restored).await {
        Ok(m) => m,
        Err(e) => return status.fail(&sink, e.to_string()),
    };
    let mut queue: BTreeMap<u64, Staged> = BTreeMap::new();
    let mut completed: Epoch = 0;
    let mut below = marker.map_or(0, |m| m + 1);
    for b in restored {
        if marker.is_some_and(|m| b.seq <= m) {
            below = below.max(b.seq + 1);
        } else {
            // The checkpoint that holds it completed: commit it now.
            completed = completed.max(b.epoch);
            queue.insert(b.seq, b);
        }
    }
    tracing::info!(
        sink,
        marker = ?marker,
        recommit = ?queue.keys().collect::<Vec<_>>(),
        "sink recovered: batches up to the marker were committed"
    );
    status.committed_below.store(below, Ordering::SeqCst);
    status.min_next_seq.store(
        below.max(queue.keys().last().map_or(0, |s| s + 1)),
        Ordering::SeqCst,
    );
    status.ready.store(true, Ordering::SeqCst);
    let mut open = true;
    loop {
        let due: Vec<Staged> = queue
            .values()
            .take_while(|b| b.epoch <= completed)
            .cloned()
            .collect();
        if !due.is_empty() {
            if let Err(e) = target.commit(&due).await {
                return status.fail(&sink, e.to_string());
            }
            for b in &due {
                queue.remove(&b.seq);
            }
            let next = due.last().map_or(0, |b| b.seq + 1);
            status.committed_below.fetch_max(next, Ordering::SeqCst);
            continue;
        }
        if !open {
            // The sink stopped: what is still staged is in its checkpoint, and the next
            // run commits it after recovery.
            return;
        }
        tokio::select! {
            b = staged.recv() => match b {
                Some(b) => {
                    if let Err(e) = target.prepare(&b).await {
                        return status.fail(&sink, e.to_string());
                    }
                    queue.insert(b.seq, b);
                }
                None => open = false,
            },
            done = completions.recv() => match done {
                // A completed checkpoint covers every batch staged up to it.
                Ok((j, epoch)) if j == job => completed = completed.max(epoch),
                Ok(_) => {}
                // Missed notices: a later completion of this job covers them.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => open = false,
            },
        }
    }
}

/// Batches by number from a sink's restored state, and the next batch number.
fn staged_from_state(entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(Vec<Staged>, u64)> {
    let damaged = || ExecError::Internal("damaged sink state".into());
    let mut batches = HashMap::new();
    let mut next = 0;
    for (key, value) in entries {
        match key.split_first() {
            Some((b'n', _)) => {
                next = u64::from_be_bytes(value.as_slice().try_into().map_err(|_| damaged())?)
            }
            Some((b'b', seq)) => {
                let seq = u64::from_be_bytes(seq.try_into().map_err(|_| damaged())?);
                let (epoch, records) = value.split_first_chunk::<8>().ok_or_else(damaged)?;
                batches.insert(
                    seq,
                    Staged {
                        seq,
                        epoch: u64::from_be_bytes(*epoch),
                        records: Arc::new(decode_records(records)?),
                    },
                );
            }
            _ => return Err(damaged()),
        }
    }
    let mut batches: Vec<Staged> = batches.into_values().collect();
    batches.sort_by_key(|b| b.seq);
    Ok((batches, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_damage_is_an_error() {
        let records = vec![SinkRecord {
            key: None,
            payload: Some(b"{}".to_vec()),
        }];
        let mut value = 7u64.to_be_bytes().to_vec();
        value.extend_from_slice(&encode_records(&records));
        let entries = vec![
            (batch_key(3), value),
            (b"n".to_vec(), 4u64.to_be_bytes().to_vec()),
        ];
        let (batches, next) = staged_from_state(&entries).unwrap();
        assert_eq!(next, 4);
        assert_eq!((batches[0].seq, batches[0].epoch), (3, 7));
        assert_eq!(*batches[0].records, records);
        assert!(staged_from_state(&[(b"x".to_vec(), vec![])]).is_err());
        assert!(staged_from_state(&[(batch_key(1), vec![0; 3])]).is_err());
    }
}
