//! `CheckpointCoordinator`: decides which jobs checkpoint at a barrier, collects each
//! actor's state delta, hands complete sets to the job's uploader, and keeps the
//! counters behind `SHOW CHECKPOINTS` and the metrics.
//!
//! Flink's semantics: a job is due when `interval` has passed since its last trigger,
//! `min-pause` since its last completion, and fewer than `max-concurrent-checkpoints`
//! are in progress. A checkpoint not complete within `timeout` is aborted (its files
//! removed). More than `tolerable-failed-checkpoints` consecutive failures fail the
//! job, which then goes through its restart strategy.
//!
//! Deltas of an aborted or failed checkpoint are not lost: they are *carried* into the
//! job's next upload, so the chain of delta files stays complete.

use super::config::CheckpointConfig;
use super::restore::JobStart;
use super::stats::{CheckpointHistory, CheckpointRecord, CheckpointStatus};
use super::uploader::{JobUploader, UploadDone, WorkerMsg};
use crate::actor::ActorId;
use crate::barrier::Epoch;
use crate::jobs::now_ms;
use crate::metrics::metrics;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;
use tokio::sync::{broadcast, mpsc, watch};

use weir_storage::object_storage::ObjectStorage;
use weir_storage::state_snapshot::StateDelta;

/// What one actor hands over at a checkpoint barrier.
pub struct CheckpointPart {
    pub epoch: Epoch,
    pub job: u64,
    pub actor: ActorId,
    /// The actor's state deltas, or why it declined (its job has failed).
    pub result: std::result::Result<Vec<StateDelta>, String>,
    pub timing: BarrierTiming,
}

/// How one actor handled a checkpoint barrier (Flink's per-subtask checkpoint figures).
#[derive(Debug, Clone, Copy, Default)]
pub struct BarrierTiming {
    /// Wall-clock ms when the barrier's first copy reached the actor.
    pub arrived_ms: i64,
    /// From the first copy to the last (aligned) or to the cut (unaligned).
    pub alignment_ms: u64,
    /// The actor's synchronous part: its chain's barrier work and state snapshot,
    /// while its inputs wait.
    pub sync_ms: u64,
}

impl BarrierTiming {
    /// The figures of a checkpoint from its actors' parts: the latest arrival, the
    /// longest alignment and the longest synchronous part.
    fn max(self, other: Self) -> Self {
        BarrierTiming {
            arrived_ms: self.arrived_ms.max(other.arrived_ms),
            alignment_ms: self.alignment_ms.max(other.alignment_ms),
            sync_ms: self.sync_ms.max(other.sync_ms),
        }
    }

    /// A barrier whose first copy arrived at `first`, aligned by now.
    pub fn aligned_since(first: Instant) -> Self {
        let alignment = first.elapsed();
        BarrierTiming {
            arrived_ms: now_ms() - alignment.as_millis() as i64,
            alignment_ms: alignment.as_millis() as u64,
            sync_ms: 0,
        }
    }
}

/// The jobs that take part in one checkpoint barrier.
#[derive(Debug, Default)]
pub struct CheckpointScope {
    pub jobs: HashSet<u64>,
}

struct Pending {
    trigger_ms: i64,
    started: Instant,
    deadline: Instant,
    positions: BTreeMap<String, u64>,
    parts: Vec<StateDelta>,
    received: usize,
    declined: Option<String>,
    /// The parts' timings so far, merged ([`BarrierTiming::max`]).
    timing: BarrierTiming,
}

struct JobEntry {
    name: String,
    config: CheckpointConfig,
    actors: usize,
    /// Tables whose log offsets this job's checkpoints record.
    sources: Vec<String>,
    last_trigger: Option<Instant>,
    last_complete: Option<Instant>,
    in_progress: BTreeMap<Epoch, Pending>,
    /// Handed to the uploader, not yet finished.
    uploading: usize,
    worker: mpsc::UnboundedSender<WorkerMsg>,
    /// The uploader task: it ends once `worker` is dropped and its queue is done.
    uploader: Option<tokio::task::JoinHandle<()>>,
    consecutive_failures: u32,
    /// Positions of each retained checkpoint (what the table logs must keep).
    retained_positions: BTreeMap<Epoch, BTreeMap<String, u64>>,
}

pub struct CheckpointCoordinator {
    pub storage: ObjectStorage,
    jobs: Mutex<HashMap<u64, JobEntry>>,
    parts_tx: mpsc::UnboundedSender<CheckpointPart>,
    history: Mutex<CheckpointHistory>,
    /// Jobs whose checkpoint failures exceeded their tolerance: (job, reason).
    failures_tx: mpsc::UnboundedSender<(u64, String)>,
    force_next: AtomicBool,
    /// While above zero only forced checkpoints run: a savepoint is copying the files
    /// of one epoch, which a newer periodic checkpoint could garbage-collect.
    held: std::sync::atomic::AtomicUsize,
    /// Bumped whenever a job finishes a checkpoint (either way): waiters re-check.
    progress: watch::Sender<u64>,
    /// Every completed checkpoint as `(job, epoch)`: the commit point of
    /// transactional sinks (Flink's `notifyCheckpointComplete`).
    completed: broadcast::Sender<(u64, Epoch)>,
    max_parallelism: u32,
    /// The newest epoch whose table-log entries are on disk (see `Runtime`).
    durable: watch::Receiver<Epoch>,
    /// Handle to ourselves for timers.
    me: Weak<Self>,
    /// Bytes per state uid in each job's last completed checkpoint (by job name).
    state_sizes: Mutex<HashMap<String, BTreeMap<String, u64>>>,
}

fn elapsed_ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

impl CheckpointCoordinator {
    pub fn start(
        storage: ObjectStorage,
        failures_tx: mpsc::UnboundedSender<(u64, String)>,
        max_parallelism: u32,
        durable: watch::Receiver<Epoch>,
    ) -> Arc<Self> {
        let (parts_tx, mut parts_rx) = mpsc::unbounded_channel::<CheckpointPart>();
        let (progress, _) = watch::channel(0);
        let c = Arc::new_cyclic(|me| Self {
            storage,
            jobs: Mutex::new(HashMap::new()),
            parts_tx,
            history: Mutex::new(CheckpointHistory::default()),
            failures_tx,
            force_next: AtomicBool::new(false),
            held: std::sync::atomic::AtomicUsize::new(0),
            progress,
            completed: broadcast::channel(256).0,
            max_parallelism,
            durable,
            me: me.clone(),
            state_sizes: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&c);
        tokio::spawn(async move {
            while let Some(part) = parts_rx.recv().await {
                let Some(c) = weak.upgrade() else { return };
                c.on_part(part);
            }
        });
        c
    }

    pub fn part_sender(&self) -> mpsc::UnboundedSender<CheckpointPart> {
        self.parts_tx.clone()
    }

    /// Completed checkpoints from now on, as `(job, epoch)`. A receiver that lags
    /// behind loses old notices, which is harmless: completion of a later checkpoint
    /// covers every earlier one.
    pub fn completions(&self) -> broadcast::Receiver<(u64, Epoch)> {
        self.completed.subscribe()
    }

    /// Registers a job (a table or a view) with the state it was restored from.
    #[allow(clippy::too_many_arguments)]
    pub fn register_job(
        self: &Arc<Self>,
        job: u64,
        name: &str,
        config: CheckpointConfig,
        actors: usize,
        sources: Vec<String>,
        parallelism: u32,
        start: JobStart,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let retained_positions = start
            .retained
            .iter()
            .map(|m| (m.epoch, m.positions.clone()))
            .collect();
        let uploader = JobUploader::new(
            job,
            name,
            self.storage.clone(),
            config.clone(),
            parallelism,
            self.max_parallelism,
            start,
        )
        .waiting_for(self.durable.clone());
        let weak: Weak<Self> = Arc::downgrade(self);
        let uploader = tokio::spawn(uploader.run(rx, move |done| {
            if let Some(c) = weak.upgrade() {
                c.on_upload_done(done);
            }
        }));
        let mut jobs = self.jobs.lock();
        jobs.insert(
            job,
            JobEntry {
                name: name.to_string(),
                config,
                actors,
                sources,
                last_trigger: None,
                last_complete: None,
                in_progress: BTreeMap::new(),
                uploading: 0,
                worker: tx,
                uploader: Some(uploader),
                consecutive_failures: 0,
                retained_positions,
            },
        );
    }

    /// Forgets a job (dropped, or about to be redeployed). In-flight parts are ignored.
    /// Forgets a job; returns its uploader, which finishes what it was given (an
    /// upload in flight, its garbage collection) and then ends. A job deployed again
    /// awaits it first, so it never reads files that upload is about to collect.
    pub fn unregister_job(&self, job: u64) -> Option<tokio::task::JoinHandle<()>> {
        let mut e = self.jobs.lock().remove(&job)?;
        metrics()
            .in_progress_checkpoints
            .with_label_values(&[e.name.as_str()])
            .set(0);
        e.uploader.take()
    }

    /// Makes the next barrier a checkpoint of every job that has checkpointing on,
    /// whatever its interval.
    pub fn force_next(&self) {
        self.force_next.store(true, Ordering::SeqCst);
    }

    /// Holds periodic checkpoints until the guard drops.
    pub fn hold_periodic(self: &Arc<Self>) -> PeriodicHold {
        self.held.fetch_add(1, Ordering::SeqCst);
        PeriodicHold(self.clone())
    }

    /// Called while injecting barrier `epoch` (under the write lock): returns the jobs
    /// that checkpoint at it, having recorded their source positions.
    pub fn trigger(
        &self,
        epoch: Epoch,
        positions: &BTreeMap<String, u64>,
    ) -> Option<Arc<CheckpointScope>> {
        let force = self.force_next.swap(false, Ordering::SeqCst);
        let held = self.held.load(Ordering::SeqCst) > 0;
        let now = Instant::now();
        let mut scope = CheckpointScope::default();
        let mut jobs = self.jobs.lock();
        for (&id, j) in jobs.iter_mut() {
            // A job with checkpointing off keeps no deltas: even a forced checkpoint
            // (the CHECKPOINT statement) skips it.
            let due = match j.config.interval {
                None => false,
                Some(_) if force => true,
                Some(_) if held => false,
                Some(interval) => {
                    j.in_progress.len() + j.uploading < j.config.max_concurrent.max(1)
                        && j.last_trigger
                            .is_none_or(|t| now.duration_since(t) >= interval)
                        && j.last_complete
                            .is_none_or(|t| now.duration_since(t) >= j.config.min_pause)
                }
            };
            if !due {
                continue;
            }
            let mut job_positions: BTreeMap<String, u64> = j
                .sources
                .iter()
                .filter_map(|s| positions.get(s).map(|p| (s.clone(), *p)))
                .collect();
            // A table's own checkpoint also records its connector's positions
            // (`<table>#<key>`); views only record the tables' log positions.
            let own = format!("{}#", j.name);
            if j.sources.contains(&j.name) {
                job_positions.extend(
                    positions
                        .range(own.clone()..)
                        .take_while(|(k, _)| k.starts_with(&own))
                        .map(|(k, v)| (k.clone(), *v)),
                );
            }
            let trigger_ms = now_ms();
            j.last_trigger = Some(now);
            j.in_progress.insert(
                epoch,
                Pending {
                    trigger_ms,
                    started: now,
                    deadline: now + j.config.timeout,
                    positions: job_positions,
                    parts: Vec::new(),
                    received: 0,
                    declined: None,
                    timing: BarrierTiming {
                        arrived_ms: trigger_ms,
                        ..Default::default()
                    },
                },
            );
            metrics()
                .in_progress_checkpoints
                .with_label_values(&[j.name.as_str()])
                .set((j.in_progress.len() + j.uploading) as i64);
            self.history.lock().push(CheckpointRecord {
                id: epoch,
                job: id,
                job_name: j.name.clone(),
                status: CheckpointStatus::InProgress,
                trigger_time_ms: trigger_ms,
                duration_ms: None,
                alignment_ms: 0,
                start_delay_ms: 0,
                sync_ms: 0,
                upload_ms: None,
                full_size: 0,
                incremental_size: 0,
                path: self
                    .storage
                    .location(&super::restore::checkpoint_dir(id, epoch)),
                failure: None,
            });
            scope.jobs.insert(id);
            if j.actors == 0 {
                // Nothing will report: complete right away with no new state.
                self.complete_parts(id, j, epoch);
            }
            let timeout = j.config.timeout;
            let weak = self.me.clone();
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                if let Some(c) = weak.upgrade() {
                    c.expire(id, epoch);
                }
            });
        }
        (!scope.jobs.is_empty()).then(|| Arc::new(scope))
    }

    fn on_part(&self, part: CheckpointPart) {
        let mut jobs = self.jobs.lock();
        let Some(j) = jobs.get_mut(&part.job) else {
            return;
        };
        let Some(p) = j.in_progress.get_mut(&part.epoch) else {
            // The checkpoint already expired: keep the delta for the next one.
            if let Ok(deltas) = part.result {
                let _ = j.worker.send(WorkerMsg::Carry(deltas));
            }
            return;
        };
        p.received += 1;
        p.timing = p.timing.max(part.timing);
        match part.result {
            Ok(d) => p.parts.extend(d),
            Err(reason) => {
                p.declined.get_or_insert(reason);
            }
        }
        if p.received >= j.actors {
            let id = part.job;
            self.complete_parts(id, j, part.epoch);
        }
    }

    /// Every actor reported: hand the deltas to the uploader (or fail the checkpoint).
    fn complete_parts(&self, id: u64, j: &mut JobEntry, epoch: Epoch) {
        let Some(p) = j.in_progress.remove(&epoch) else {
            return;
        };
        if let Some(reason) = p.declined {
            let _ = j.worker.send(WorkerMsg::Carry(p.parts));
            self.fail(
                id,
                j,
                epoch,
                elapsed_ms(p.started),
                format!("declined: {reason}"),
            );
            return;
        }
        j.uploading += 1;
        self.history.lock().update(id, epoch, |r| {
            r.alignment_ms = p.timing.alignment_ms;
            r.sync_ms = p.timing.sync_ms;
            r.start_delay_ms = (p.timing.arrived_ms - p.trigger_ms).max(0) as u64;
        });
        let _ = j.worker.send(WorkerMsg::Upload {
            epoch,
            trigger_ms: p.trigger_ms,
            started: p.started,
            deadline: p.deadline,
            positions: p.positions,
            parts: p.parts,
        });
    }

    fn expire(&self, id: u64, epoch: Epoch) {
        let mut jobs = self.jobs.lock();
        let Some(j) = jobs.get_mut(&id) else { return };
        if let Some(p) = j.in_progress.remove(&epoch) {
            let _ = j.worker.send(WorkerMsg::Carry(p.parts));
            self.fail(
                id,
                j,
                epoch,
                elapsed_ms(p.started),
                "checkpoint expired before completing".into(),
            );
        }
    }

    fn fail(&self, id: u64, j: &mut JobEntry, epoch: Epoch, duration_ms: u64, reason: String) {
        tracing::warn!(job = %j.name, epoch, %reason, "checkpoint failed");
        let m = metrics();
        m.failed_checkpoints
            .with_label_values(&[j.name.as_str()])
            .inc();
        m.in_progress_checkpoints
            .with_label_values(&[j.name.as_str()])
            .set((j.in_progress.len() + j.uploading) as i64);
        self.history.lock().update(id, epoch, |r| {
            r.status = CheckpointStatus::Failed;
            r.duration_ms = Some(duration_ms);
            r.failure = Some(reason.clone());
        });
        j.consecutive_failures += 1;
        if j.consecutive_failures > j.config.tolerable_failed {
            j.consecutive_failures = 0;
            let _ = self.failures_tx.send((
                id,
                format!(
                    "exceeded tolerable-failed-checkpoints ({}): {reason}",
                    j.config.tolerable_failed
                ),
            ));
        }
        self.progress.send_modify(|v| *v += 1);
    }

    fn on_upload_done(&self, done: UploadDone) {
        let mut jobs = self.jobs.lock();
        let Some(j) = jobs.get_mut(&done.job) else {
            return;
        };
        j.uploading = j.uploading.saturating_sub(1);
        match done.result {
            Ok(meta) => {
                j.consecutive_failures = 0;
                j.last_complete = Some(Instant::now());
                j.retained_positions = done.retained.iter().map(|(e, p)| (*e, p.clone())).collect();
                let m = metrics();
                let name = [j.name.as_str()];
                m.completed_checkpoints.with_label_values(&name).inc();
                m.last_checkpoint_duration
                    .with_label_values(&name)
                    .set(done.duration_ms as i64);
                m.last_checkpoint_size
                    .with_label_values(&name)
                    .set(meta.incremental_size as i64);
                m.last_checkpoint_full_size
                    .with_label_values(&name)
                    .set(meta.full_size as i64);
                m.in_progress_checkpoints
                    .with_label_values(&name)
                    .set((j.in_progress.len() + j.uploading) as i64);
                let sizes = meta
                    .state
                    .iter()
                    .map(|u| (u.uid.clone(), u.files.iter().map(|f| f.size).sum::<u64>()))
                    .collect();
                self.state_sizes.lock().insert(j.name.clone(), sizes);
                self.history.lock().update(done.job, done.epoch, |r| {
                    r.status = CheckpointStatus::Completed;
                    r.duration_ms = Some(done.duration_ms);
                    r.upload_ms = Some(done.upload_ms);
                    r.full_size = meta.full_size;
                    r.incremental_size = meta.incremental_size;
                });
                self.progress.send_modify(|v| *v += 1);
                let _ = self.completed.send((done.job, done.epoch));
            }
            Err(reason) => {
                self.fail(done.job, j, done.epoch, done.duration_ms, reason);
            }
        }
    }

    /// Bytes per state uid in job `name`'s last completed checkpoint.
    pub fn state_sizes(&self, name: &str) -> BTreeMap<String, u64> {
        self.state_sizes
            .lock()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until every job in `jobs` has finished checkpoint `epoch`, either way.
    pub async fn wait_finished(&self, epoch: Epoch, jobs: &[u64]) {
        let mut rx = self.progress.subscribe();
        loop {
            // Lock order is jobs before history everywhere; take them one at a time.
            let all = self.history.lock().all();
            let live: HashSet<u64> = self.jobs.lock().keys().copied().collect();
            let done = jobs.iter().all(|job| {
                all.iter().any(|r| {
                    r.id == epoch && r.job == *job && r.status != CheckpointStatus::InProgress
                }) || !live.contains(job)
            });
            if done {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history.lock().all()
    }

    /// For each table, the lowest log offset any retained checkpoint still needs.
    /// Tables some job reads but has never checkpointed get no entry (keep all).
    pub fn log_retention(&self) -> BTreeMap<String, u64> {
        let jobs = self.jobs.lock();
        let mut keep: BTreeMap<String, Option<u64>> = BTreeMap::new();
        for j in jobs.values() {
            for s in &j.sources {
                let lowest = j
                    .retained_positions
                    .values()
                    .filter_map(|p| p.get(s).copied())
                    .min();
                let e = keep.entry(s.clone()).or_insert(Some(u64::MAX));
                *e = match (*e, lowest) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    _ => None,
                };
            }
        }
        keep.into_iter()
            .filter_map(|(k, v)| v.filter(|v| *v != u64::MAX).map(|v| (k, v)))
            .collect()
    }
}

/// See [`CheckpointCoordinator::hold_periodic`].
pub struct PeriodicHold(Arc<CheckpointCoordinator>);

impl Drop for PeriodicHold {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::restore::load_latest;
    use weir_storage::object_storage::S3Settings;
    use weir_storage::state_snapshot::{DeltaData, KeyedEntries};

    /// One actor's part of checkpoint `epoch`: one keyed entry in key group `kg`.
    fn part(epoch: Epoch, actor: ActorId, kg: u32, value: &[u8]) -> CheckpointPart {
        CheckpointPart {
            epoch,
            job: 7,
            actor,
            result: Ok(vec![StateDelta {
                uid: "v.hashagg.x".into(),
                data: DeltaData::Keyed(KeyedEntries::from_entries([(
                    kg,
                    vec![b'k', kg as u8],
                    Some(value.to_vec()),
                )])),
            }]),
            timing: BarrierTiming::default(),
        }
    }

    /// The path of a checkpoint: triggered by the interval (or forced), complete only
    /// once every actor handed its state, then announced, listed and restorable with
    /// its source positions and every actor's state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_completes_with_every_actors_state_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let storage =
            ObjectStorage::open(dir.path().to_str().unwrap(), &S3Settings::default()).unwrap();
        let (failures, _failures_rx) = mpsc::unbounded_channel();
        let (_durable_tx, durable) = watch::channel(Epoch::MAX);
        let c = CheckpointCoordinator::start(storage, failures, 128, durable);
        let mut completions = c.completions();
        let config = CheckpointConfig::default(); // every 10 s
        c.register_job(7, "v", config, 2, vec!["t".into()], 2, JobStart::default());
        let positions = BTreeMap::from([("t".to_string(), 42u64)]);
        let scope = c
            .trigger(1, &positions)
            .expect("the first checkpoint is due");
        assert!(scope.jobs.contains(&7));
        assert!(
            c.trigger(2, &positions).is_none(),
            "not due within the interval"
        );
        c.part_sender().send(part(1, 1, 3, b"one")).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let status = |c: &CheckpointCoordinator| {
            c.history()
                .iter()
                .find(|r| r.id == 1 && r.job == 7)
                .map(|r| r.status)
        };
        assert_eq!(
            status(&c),
            Some(CheckpointStatus::InProgress),
            "one actor of two"
        );
        c.part_sender().send(part(1, 2, 90, b"two")).unwrap();
        let finished =
            tokio::time::timeout(std::time::Duration::from_secs(20), c.wait_finished(1, &[7]))
                .await;
        assert!(finished.is_ok(), "not finished: {:?}", c.history());
        assert_eq!(status(&c), Some(CheckpointStatus::Completed));
        assert_eq!(completions.recv().await.unwrap(), (7, 1));
        let board = crate::progress::ProgressBoard::default();
        let restored = load_latest(&c.storage, 7, "v", &board)
            .await
            .expect("restorable");
        assert_eq!(restored.meta.epoch, 1);
        assert_eq!(restored.meta.positions["t"], 42);
        let mut entries = restored.keyed["v.hashagg.x"].to_entries();
        entries.sort();
        assert_eq!(
            entries,
            vec![
                (3, b"k\x03".to_vec(), Some(b"one".to_vec())),
                (90, b"k\x5a".to_vec(), Some(b"two".to_vec()))
            ]
        );
        // Forced (a CHECKPOINT or SAVEPOINT statement): due at once.
        c.force_next();
        assert!(c.trigger(3, &positions).is_some());
    }
}
