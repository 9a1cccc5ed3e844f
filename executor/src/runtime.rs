//! `Runtime`: owns the running dataflow: table writers, jobs (one per view), hubs and
//! stores, the barrier coordinator and the periodic barrier task.
//!
//! Concurrency contract: the graph changes (a table or view created or dropped) only
//! while the caller holds the write lock ([`Runtime::lock_writes`]) and after a flush,
//! so no data or barrier is in flight while channels are rewired.

use crate::actor::{Actor, ActorOutput, JobHealth};
use crate::barrier::{Barrier, BarrierKind, Epoch, Message};
use crate::checkpoint::{
    CheckpointCoordinator, FailoverStrategy, JobConfig, JobStart, RestartStrategy,
};
use crate::chunk::StreamChunk;
use crate::coordinator::BarrierCoordinator;
use crate::error::{ExecError, Result};
use crate::graph::StreamGraph;
use crate::hub::RelationHub;
use crate::jobs::{JobInfo, JobStatus};
use crate::operators::materialize::materialize_uid;
use crate::operators::materialize::MaterializeOperator;
use crate::store::RelationStore;
use crate::table_writer::TableWriter;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use weir_storage::object_storage::ObjectStorage;
use weir_storage::{StateBackend, TableLog};

/// Holding the write lock this long stops every other writer, barrier and DDL for a
/// noticeable time: worth a warning in the log, with who held it.
const HELD_LOCK_WARNING: Duration = Duration::from_millis(200);

/// Warns when `what`, done on `table` under the write lock since `started`, held it
/// [`HELD_LOCK_WARNING`] or more.
pub(crate) fn warn_if_lock_held(table: &str, what: &str, started: std::time::Instant) {
    let held = started.elapsed();
    if held >= HELD_LOCK_WARNING {
        tracing::warn!(%table, what, held_ms = held.as_millis() as u64,
            "the write lock was held long");
    }
}

#[derive(Clone)]
pub struct RuntimeConfig {
    /// `parallelism.default`: actors per parallel fragment.
    pub parallelism: u32,
    /// `pipeline.max-parallelism`: number of key groups.
    pub max_parallelism: u32,
    /// `barrier.interval`: how often a barrier advances the readable epoch.
    pub barrier_interval: Duration,
    /// Checkpoint and restart settings of tables (views bring their own).
    pub job: JobConfig,
    /// `jobmanager.execution.failover-strategy`.
    pub failover: FailoverStrategy,
    /// `execution.checkpointing.dir`, opened.
    pub checkpoint_storage: ObjectStorage,
    /// `execution.checkpointing.savepoint-dir`, opened.
    pub savepoint_storage: ObjectStorage,
    /// `state.backend.type`: where operator state's ordered image lives.
    pub state_backend: Arc<dyn StateBackend>,
    /// With high availability: table logs are committed to this cluster log too.
    pub log_replica: Option<weir_storage::cluster_log::ClusterLog>,
}

impl RuntimeConfig {
    pub fn default_parallelism() -> u32 {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    }
}

/// What a view job is built from, kept so that a restart can redeploy it.
#[derive(Clone)]
pub struct ViewSpec {
    pub graph: StreamGraph,
    pub schema: SchemaRef,
    pub parallelism: u32,
    pub config: JobConfig,
}

pub(crate) struct RelationRuntime {
    pub hub: Arc<RelationHub>,
    pub store: Arc<RelationStore>,
    /// While a restarted job catches up, reads keep using the old (frozen) store.
    pub serving: Option<Arc<RelationStore>>,
    /// Set for views: what a restart redeploys.
    pub view: Option<ViewSpec>,
    /// Actors publishing into the hub (slots per subscription).
    pub publishers: usize,
    pub health: Arc<JobHealth>,
    pub job: u64,
    /// Every actor of the job (for the coordinator's ack count).
    pub actors: usize,
    /// Relations this job subscribes to.
    pub upstream: Vec<String>,
    pub parallelism: u32,
    /// Its fragments, operators and actors as deployed (the dashboard's job graph).
    pub topology: crate::topology::JobTopology,
}

/// Everything behind the write lock: the epoch being written and every table writer.
pub struct WriteState {
    next_epoch: Epoch,
    tables: BTreeMap<String, TableWriter>,
}

impl WriteState {
    pub fn table(&mut self, name: &str) -> Option<&mut TableWriter> {
        self.tables.get_mut(name)
    }
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
    pub(crate) fn table_ref(&self, name: &str) -> Option<&TableWriter> {
        self.tables.get(name)
    }
    /// The epoch that writes made now belong to: visible once it is committed.
    pub fn write_epoch(&self) -> Epoch {
        self.next_epoch
    }
}

pub struct Runtime {
    pub config: RuntimeConfig,
    pub coordinator: Arc<BarrierCoordinator>,
    pub checkpoints: Arc<CheckpointCoordinator>,
    writes: tokio::sync::Mutex<WriteState>,
    pub(crate) relations: parking_lot::RwLock<HashMap<String, RelationRuntime>>,
    pub(crate) backend: Arc<dyn StateBackend>,
    next_actor: AtomicU64,
    /// Where actors report failures (see [`crate::supervisor`]).
    pub(crate) failures_tx: mpsc::UnboundedSender<(u64, String)>,
    /// Jobs' status and restarts, connectors' bad records: what outlives a deployment.
    pub registry: crate::jobs::JobRegistry,
    /// Long work in progress (backfills, savepoints, restores, recovery).
    pub progress: crate::progress::ProgressBoard,
    /// Off during startup recovery: a table's log must not be truncated below what a
    /// view that is not restored yet still needs.
    truncation: std::sync::atomic::AtomicBool,
    /// Table-log positions each savepoint needs (`savepoint → table → offset`): logs
    /// are never truncated below them.
    pub(crate) savepoint_pins: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    /// Dropped views' kept checkpoints, by job (see [`crate::checkpoint::retained`]).
    pub(crate) retained: Mutex<BTreeMap<u64, crate::checkpoint::retained::RetainedCheckpoint>>,
    /// Dropped views' checkpoints being marked retained.
    pub(crate) retaining: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Held while a savepoint is taken or restored: the two exclude each other.
    pub(crate) savepoint_busy: tokio::sync::Mutex<()>,
    /// `WriteState::next_epoch`, readable without the write lock: a reader that needs
    /// epoch `e` only injects a barrier when none covering `e` was injected yet.
    open_epoch: AtomicU64,
    /// The newest epoch holding an acknowledged write (read-after-write waits for it).
    acknowledged_epoch: AtomicU64,
    /// The newest epoch whose table-log entries are all on disk: checkpoints record
    /// log positions, so one completes only once its epoch is durable.
    durable_tx: tokio::sync::watch::Sender<Epoch>,
    /// Secondary indexes each relation's readable store keeps (`serving`).
    pub(crate) indexes: Mutex<HashMap<String, Vec<crate::store_index::IndexSpec>>>,
}

impl Runtime {}

/// Barriers in flight past which a reader waits for one to commit instead of
/// injecting another (see `Runtime::ensure_committed`).
const ON_DEMAND_BARRIERS: u64 = 2;

/// Moves the durable epoch forward (never back).
fn advance(durable: &mut Epoch, epoch: Epoch) -> bool {
    let moved = epoch > *durable;
    *durable = (*durable).max(epoch);
    moved
}

type UnsyncedLog = (Arc<weir_storage::LogSync>, u64);

/// An epoch's table-log writes are on disk: reported once, by whichever of the fsync
/// callback and the syncing task gets there first.
struct EpochDurable {
    epoch: Epoch,
    fired: AtomicBool,
    coordinator: Arc<BarrierCoordinator>,
    durable: watch::Sender<Epoch>,
}

impl EpochDurable {
    fn fire(&self) {
        if !self.fired.swap(true, Ordering::AcqRel) {
            self.durable.send_if_modified(|d| advance(d, self.epoch));
            self.coordinator.ack_durable(self.epoch);
        }
    }
}

impl Runtime {
    pub fn start(config: RuntimeConfig, last_epoch: Epoch) -> Arc<Runtime> {
        let (failures_tx, failures_rx) = mpsc::unbounded_channel();
        let (ckpt_failures_tx, ckpt_failures_rx) = mpsc::unbounded_channel();
        // Every log is synced when opened: all earlier epochs are durable.
        let (durable_tx, durable_rx) = tokio::sync::watch::channel(last_epoch);
        let rt = Arc::new(Runtime {
            coordinator: BarrierCoordinator::start(last_epoch),
            checkpoints: CheckpointCoordinator::start(
                config.checkpoint_storage.clone(),
                ckpt_failures_tx,
                config.max_parallelism,
                durable_rx,
            ),
            writes: tokio::sync::Mutex::new(WriteState {
                next_epoch: last_epoch + 1,
                tables: BTreeMap::new(),
            }),
            relations: parking_lot::RwLock::new(HashMap::new()),
            backend: config.state_backend.clone(),
            next_actor: AtomicU64::new(1),
            failures_tx,
            registry: Default::default(),
            progress: Default::default(),
            truncation: std::sync::atomic::AtomicBool::new(false),
            savepoint_pins: Mutex::new(BTreeMap::new()),
            retained: Mutex::new(BTreeMap::new()),
            retaining: Mutex::new(Vec::new()),
            savepoint_busy: tokio::sync::Mutex::new(()),
            open_epoch: AtomicU64::new(last_epoch + 1),
            durable_tx,
            acknowledged_epoch: AtomicU64::new(0),
            indexes: Mutex::new(HashMap::new()),
            config,
        });
        crate::supervisor::spawn(&rt, failures_rx, ckpt_failures_rx);
        let weak = Arc::downgrade(&rt);
        let interval = match rt.config.job.checkpoint.interval {
            Some(c) => rt.config.barrier_interval.min(c),
            None => rt.config.barrier_interval,
        };
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(rt) = weak.upgrade() else { return };
                let mut w = rt.writes.lock().await;
                if let Err(e) = rt.inject_barrier(&mut w).await {
                    tracing::error!(error = %e, "barrier injection failed");
                }
                rt.truncate_logs(&mut w);
            }
        });
        rt
    }

    /// Drops table-log entries that no retained checkpoint needs any more.
    fn truncate_logs(&self, w: &mut WriteState) {
        if !self.truncation.load(Ordering::SeqCst) {
            return;
        }
        let pins = self.savepoint_pins.lock().clone();
        for (table, offset) in self.checkpoints.log_retention() {
            let pinned = pins.values().filter_map(|p| p.get(&table)).min().copied();
            let offset = pinned.map_or(offset, |p| p.min(offset));
            if let Some(t) = w.tables.get_mut(&table) {
                if let Err(e) = t.truncate_log(offset) {
                    tracing::warn!(%table, error = %e, "table log truncation failed");
                }
            }
        }
    }

    /// Called once every job has been restored at startup: from now on table logs are
    /// truncated below what retained checkpoints need.
    pub fn recovery_done(&self) {
        self.truncation.store(true, Ordering::SeqCst);
    }

    /// `CHECKPOINT`: checkpoints every job now and waits until each has finished.
    /// Returns the checkpoint id (epoch).
    pub async fn checkpoint_now(&self) -> Result<Epoch> {
        let (epoch, jobs) = {
            let mut w = self.writes.lock().await;
            self.checkpoints.force_next();
            let epoch = self.inject_barrier(&mut w).await?;
            // The jobs this checkpoint covers (those with checkpointing on).
            let jobs: Vec<u64> = self
                .checkpoints
                .history()
                .iter()
                .filter(|r| r.id == epoch)
                .map(|r| r.job)
                .collect();
            (epoch, jobs)
        };
        self.coordinator.wait_committed(epoch).await;
        self.checkpoints.wait_finished(epoch, &jobs).await;
        Ok(epoch)
    }

    pub async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, WriteState> {
        self.writes.lock().await
    }

    /// The write lock, taken once table `table` has room on its channel for a write
    /// of `rows` rows and the barrier after it. A writer of a back-pressured table
    /// waits for room without the lock: holding it meanwhile would stop writes to
    /// every other table, barriers (so checkpoints and reads) and DDL for as long as
    /// the slowest consumer takes. Room may be gone again by the time the lock is
    /// taken (a barrier took it): then the lock is released and the wait repeats.
    pub async fn lock_writes_for(
        &self,
        table: &str,
        rows: usize,
    ) -> tokio::sync::MutexGuard<'_, WriteState> {
        loop {
            let w = self.writes.lock().await;
            let Some(room) = w.table_ref(table).and_then(|t| t.wait_for_room(rows)) else {
                return w;
            };
            drop(w);
            if room.await.is_err() {
                // The table's actor is gone: the write itself reports it.
                return self.writes.lock().await;
            }
        }
    }

    pub(crate) fn next_actor_id(&self) -> u64 {
        self.next_actor.fetch_add(1, Ordering::Relaxed)
    }

    /// Injects the barrier that closes the current epoch into every table source.
    pub async fn inject_barrier(&self, w: &mut WriteState) -> Result<Epoch> {
        let epoch = w.next_epoch;
        w.next_epoch += 1;
        self.open_epoch.store(w.next_epoch, Ordering::Release);
        // Group-committed writes may not be on disk yet: the epoch commits (becomes
        // readable) and its checkpoints complete only once they are. The fsync runs
        // beside the barrier's trip through the dataflow, not under the write lock.
        let unsynced: Vec<_> = w.tables.values().filter_map(|t| t.unsynced_log()).collect();
        self.coordinator.begin_epoch(epoch, !unsynced.is_empty());
        if unsynced.is_empty() {
            // Everything logged so far is on disk: this epoch and every earlier one.
            self.durable_tx.send_if_modified(|d| advance(d, epoch));
        } else {
            self.spawn_log_sync(epoch, unsynced);
        }
        let mut positions: BTreeMap<String, u64> = BTreeMap::new();
        for (n, t) in &w.tables {
            positions.insert(n.clone(), t.log_position());
            // A connector's positions ride along in the table's own checkpoint.
            for (k, v) in t.source_positions() {
                positions.insert(format!("{}{k}", source_position_prefix(n)), *v);
            }
        }
        let barrier = match self.checkpoints.trigger(epoch, &positions) {
            Some(scope) => Barrier {
                epoch,
                kind: BarrierKind::Checkpoint(scope),
            },
            None => Barrier::plain(epoch),
        };
        if matches!(barrier.kind, BarrierKind::Checkpoint(_)) {
            // Unaligned subscribers take their snapshot now, ahead of queued rows.
            let relations = self.relations.write();
            for name in w.tables.keys() {
                if let Some(r) = relations.get(name) {
                    r.hub.overtake(&barrier);
                }
            }
        }
        for (name, t) in &w.tables {
            let started = std::time::Instant::now();
            t.send(Message::Barrier(barrier.clone())).await?;
            // Writers leave a slot for the barrier, so this never waits unless a write
            // filled the channel (one larger than it): then every writer waited too.
            warn_if_lock_held(name, "a barrier waiting for room", started);
        }
        Ok(epoch)
    }

    /// Makes every write so far visible (used by DDL, which already holds the lock).
    pub async fn flush_locked(&self, w: &mut WriteState) -> Result<Epoch> {
        let epoch = self.inject_barrier(w).await?;
        self.coordinator.wait_committed(epoch).await;
        Ok(epoch)
    }

    /// `FLUSH`: every write so far, by anyone, becomes visible in every view.
    pub async fn flush(&self) -> Result<Epoch> {
        let epoch = {
            let mut w = self.writes.lock().await;
            self.inject_barrier(&mut w).await?
        };
        self.coordinator.wait_committed(epoch).await;
        Ok(epoch)
    }

    /// Waits until `epoch` is readable, injecting a barrier if none covers it yet
    /// (read-your-writes without waiting for the next periodic barrier).
    pub async fn ensure_committed(&self, epoch: Epoch) -> Result<()> {
        loop {
            if self.coordinator.committed_epoch() >= epoch {
                return Ok(());
            }
            let open = self.open_epoch.load(Ordering::Acquire);
            // A barrier covering `epoch` is on its way already: share it.
            if open > epoch {
                self.coordinator.wait_committed(epoch).await;
                return Ok(());
            }
            // At most ON_DEMAND_BARRIERS in flight: readers that arrive meanwhile share
            // the next one, so the barrier rate stays bounded under load.
            let committed = self.coordinator.committed_epoch();
            if (open - 1).saturating_sub(committed) >= ON_DEMAND_BARRIERS {
                self.coordinator.wait_committed(committed + 1).await;
                continue;
            }
            {
                let mut w = self.writes.lock().await;
                if w.next_epoch <= epoch {
                    self.inject_barrier(&mut w).await?;
                }
            }
            self.coordinator.wait_committed(epoch).await;
            return Ok(());
        }
    }

    /// Starts the barrier that makes the write just logged under `w` visible, unless
    /// `ON_DEMAND_BARRIERS` are on their way already (one of those, or the reader's
    /// own, will cover it). Called for sessions that read after they write: the
    /// barrier travels while the write waits for its fsync, so the read that follows
    /// finds it committed instead of starting it.
    pub async fn hasten_visibility(&self, w: &mut WriteState) -> Result<()> {
        let open = self.open_epoch.load(Ordering::Acquire);
        let committed = self.coordinator.committed_epoch();
        if (open - 1).saturating_sub(committed) < ON_DEMAND_BARRIERS {
            self.inject_barrier(w).await?;
        }
        Ok(())
    }

    /// Syncs the logs barrier `epoch` passed, then lets the epoch commit. An fsync
    /// error is retried: the epoch stays unreadable rather than exposing writes that
    /// may be lost.
    fn spawn_log_sync(&self, epoch: Epoch, unsynced: Vec<UnsyncedLog>) {
        let done = Arc::new(EpochDurable {
            epoch,
            fired: AtomicBool::new(false),
            coordinator: self.coordinator.clone(),
            durable: self.durable_tx.clone(),
        });
        // The common case, one table's local log: the thread that finishes the fsync
        // commits the epoch, without a task hop in between (under load, a woken task
        // waits behind every connection's).
        if let [(sync, end)] = unsynced.as_slice() {
            if !sync.has_replica() {
                let done = done.clone();
                sync.on_local_durable(*end, Box::new(move || done.fire()));
            }
        }
        // Drives the fsync (and is the only path with several logs or a replica).
        tokio::spawn(async move {
            for (sync, end) in &unsynced {
                // Shares the fsync with the statements waiting on the same log.
                while let Err(e) = sync.wait_durable(*end).await {
                    if matches!(e, weir_storage::StorageError::Fenced(_)) {
                        // A deposed leader: this epoch never commits here.
                        tracing::warn!(epoch, "epoch abandoned: {e}");
                        return;
                    }
                    tracing::error!(epoch, error = %e, "table log sync failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
            done.fire();
        });
    }

    /// A write of `epoch` was acknowledged (durable): read-after-write readers wait
    /// until it is committed.
    pub fn note_acknowledged(&self, epoch: Epoch) {
        self.acknowledged_epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Waits until every write acknowledged so far, by any session, is readable
    /// (read-after-write): one barrier serves every reader waiting at once.
    pub async fn ensure_acknowledged_visible(&self) -> Result<()> {
        let epoch = self.acknowledged_epoch.load(Ordering::Acquire);
        self.ensure_committed(epoch).await
    }

    /// Creates a table's pipeline (writer → source actor → materialize → hub), restored
    /// from the table's latest checkpoint when there is one, and returns the log entries
    /// after that checkpoint, which the caller must replay with `write(.., true)` before
    /// releasing the write lock (the table's checkpoint position is its log's end).
    #[allow(clippy::too_many_arguments)]
    pub async fn create_table(
        &self,
        w: &mut WriteState,
        id: u64,
        name: &str,
        schema: SchemaRef,
        primary_key: Vec<usize>,
        log_path: &Path,
        restore: bool,
        unstored: Option<crate::source::generated::GeneratedRows>,
    ) -> Result<Vec<StreamChunk>> {
        let started = std::time::Instant::now();
        let (mut log, entries) = TableLog::open(log_path)?;
        if let Some(replica) = &self.config.log_replica {
            log.replicate(replica.clone(), id);
        }
        let restored = if restore {
            crate::checkpoint::restore::load_latest(
                &self.checkpoints.storage,
                id,
                name,
                &self.progress,
            )
            .await
        } else {
            None
        };
        let read_ms = started.elapsed().as_millis() as u64;
        let from = restored
            .as_ref()
            .and_then(|r| r.meta.positions.get(name).copied())
            .unwrap_or(0);
        if from < log.start_offset() {
            return Err(ExecError::Internal(format!(
                "table log of {name} starts at {} but its checkpoint needs {from}",
                log.start_offset()
            )));
        }
        continue_log_after_checkpoint(&mut log, name, from)?;
        let entries: Vec<_> = entries.into_iter().filter(|(o, _)| *o >= from).collect();
        // A connector's positions: the checkpoint's, then the last logged entry's.
        let mut source_positions = restored
            .as_ref()
            .map(|r| source_positions_of(name, &r.meta.positions))
            .unwrap_or_default();
        for (_, payload) in &entries {
            if let (Some(p), _) = weir_storage::source_positions::split(payload)? {
                source_positions = p;
            }
        }
        // An unstored source's own contents are nothing: its range entries are skipped.
        let replay = crate::table_writer::decode_log_entries(name, &schema, entries, None)?;
        let (tx, rx) = crate::buffering::data_channel(self.config.job.buffering.debloat);
        let mut writer = TableWriter::new(id, name, schema.clone(), primary_key, log, tx)?;
        writer.set_source_positions(source_positions);
        let store = Arc::new(match unstored {
            Some(generated) => {
                writer.set_unstored(generated);
                RelationStore::unstored(name, schema)?
            }
            None => RelationStore::new(name, schema)?,
        });
        self.index_store(name, &store)?;
        let uid = materialize_uid(name);
        let start = match &restored {
            Some(r) => {
                let chunks = match r.rows.get(&uid) {
                    Some(rows) => store.chunks_of(rows)?,
                    None => vec![],
                };
                let rows = load_table_rows(&mut writer, &store, &chunks)?;
                tracing::info!(
                    table = name,
                    read_ms = read_ms,
                    load_ms = started.elapsed().as_millis() as u64 - read_ms,
                    rows,
                    "table restored from its checkpoint"
                );
                self.note_restore(name);
                r.start.clone()
            }
            None => JobStart::default(),
        };
        let hub = RelationHub::new();
        let health = Arc::new(JobHealth::new(id, store.clone(), self.failures_tx.clone()));
        let actor_id = self.next_actor_id();
        let actor = Actor {
            id: actor_id,
            job: id,
            job_name: name.into(),
            inputs: vec![rx],
            input_sides: vec![0],
            chain: vec![Box::new(MaterializeOperator::new(
                store.clone(),
                uid.clone(),
                self.config.job.checkpoint.interval.is_some(),
            ))],
            output: ActorOutput::Hub {
                hub: hub.clone(),
                index: 0,
            },
            acks: self.coordinator.ack_sender(),
            checkpoints: self.checkpoints.part_sender(),
            mode: self.config.job.checkpoint.mode,
            health: health.clone(),
        };
        self.coordinator.add_actors(1);
        self.coordinator.register_store(store.clone());
        self.checkpoints.register_job(
            id,
            name,
            self.config.job.checkpoint.clone(),
            1,
            vec![name.to_string()],
            1,
            start,
        );
        tokio::spawn(actor.run(None, Vec::new()));
        w.tables.insert(name.to_string(), writer);
        self.relations.write().insert(
            name.to_string(),
            RelationRuntime {
                hub,
                store,
                serving: None,
                view: None,
                publishers: 1,
                health,
                job: id,
                actors: 1,
                upstream: vec![],
                parallelism: 1,
                topology: crate::topology::JobTopology::of_table(name, Some(actor_id)),
            },
        );
        self.registry.start(name, RestartStrategy::None);
        Ok(replay)
    }

    pub(crate) fn note_restore(&self, name: &str) {
        let ms = crate::jobs::now_ms();
        crate::metrics::metrics()
            .last_restore_timestamp
            .with_label_values(&[name])
            .set(ms);
    }

    /// Drops a table's pipeline. The caller has checked that no view depends on it.
    pub fn drop_table(self: &Arc<Self>, w: &mut WriteState, name: &str) {
        // Dropping the writer closes the source channel; the source actor then exits.
        w.tables.remove(name);
        self.remove_relation(name);
    }

    /// Deploys a view's graph. With `Restore::Latest` the job starts from its latest
    /// intact checkpoint, with `Restore::From` from given (savepoint) state, and replays
    /// its tables' logs from the positions recorded there; with `Restore::Fresh` (or
    /// when it reads another view) it is backfilled from its upstream relations'
    /// committed contents. Call under the write lock, after `flush_locked`.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_view(
        self: &Arc<Self>,
        w: &mut WriteState,
        job: u64,
        name: &str,
        spec: ViewSpec,
        from: crate::deploy::Restore,
    ) -> Result<()> {
        let strategy = spec.config.restart.clone();
        let rel = crate::deploy::deploy_view(self, w, job, name, spec, from).await?;
        self.relations.write().insert(name.to_string(), rel);
        self.registry.start(name, strategy);
        Ok(())
    }

    /// Stops a view's job and forgets its state. Caller holds the write lock and has
    /// checked dependencies.
    pub fn drop_view(self: &Arc<Self>, _w: &mut WriteState, name: &str) {
        if let Some(view) = self
            .relations
            .write()
            .get(name)
            .and_then(|r| r.view.clone())
        {
            for uid in crate::deploy::state_uids(&view.graph) {
                // The view is gone either way; leftover entries are dropped again
                // before any job with the uid deploys.
                if let Err(e) = self.backend.drop_uid(&uid) {
                    tracing::warn!(uid, error = %e, "could not drop operator state");
                }
            }
        }
        self.remove_relation(name);
    }

    fn remove_relation(self: &Arc<Self>, name: &str) {
        let removed = self.relations.write().remove(name);
        self.registry.forget(name);
        self.indexes.lock().remove(name);
        if let Some(rel) = removed {
            let uploader = self.teardown_job(rel.job, rel.actors, &rel.upstream, &rel.store);
            let job = rel.job;
            if let Some(spec) = &rel.view {
                if self.retain_on_drop(job, name, spec, uploader) {
                    return;
                }
            }
            // A dropped job's checkpoints are of no further use.
            let storage = self.checkpoints.storage.clone();
            tokio::spawn(async move {
                let _ = storage.delete_prefix(&format!("checkpoints/{job}/")).await;
            });
        }
    }

    /// Stops a job's actors (by closing their inputs) and forgets its registrations;
    /// returns its uploader, which finishes a last upload on its own. Call under the
    /// write lock after a flush, so no barrier of it is in flight. Do not hold the
    /// relations lock when calling this.
    pub(crate) fn teardown_job(
        &self,
        job: u64,
        actors: usize,
        upstream: &[String],
        store: &Arc<RelationStore>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let relations = self.relations.write();
        for up in upstream {
            if let Some(u) = relations.get(up) {
                u.hub.unsubscribe(job);
            }
        }
        drop(relations);
        self.coordinator.remove_actors(actors);
        self.coordinator.unregister_store(store);
        self.checkpoints.unregister_job(job)
    }

    /// Registers index `spec` on `relation` and builds it in the relation's stores;
    /// stores made later (a restarted job) get it too.
    pub fn add_index(&self, relation: &str, spec: crate::store_index::IndexSpec) -> Result<()> {
        {
            let mut indexes = self.indexes.lock();
            let specs = indexes.entry(relation.to_string()).or_default();
            specs.retain(|s| s.name != spec.name);
            specs.push(spec.clone());
        }
        for store in self.stores_of(relation) {
            store.add_index(spec.clone())?;
        }
        Ok(())
    }

    pub fn drop_index(&self, relation: &str, name: &str) {
        if let Some(specs) = self.indexes.lock().get_mut(relation) {
            specs.retain(|s| s.name != name);
        }
        for store in self.stores_of(relation) {
            store.drop_index(name);
        }
    }

    /// Builds the indexes registered for `name` in its new store.
    pub(crate) fn index_store(&self, name: &str, store: &RelationStore) -> Result<()> {
        let specs = self.indexes.lock().get(name).cloned().unwrap_or_default();
        specs.into_iter().try_for_each(|s| store.add_index(s))
    }

    /// Whether nothing can delete from `relation`: an unstored generator source (it
    /// refuses DML). Views over it and operators that keep less state rely on this.
    pub fn is_append_only(&self, relation: &str) -> bool {
        self.relations
            .read()
            .get(relation)
            .is_some_and(|r| !r.store.keeps_rows())
    }

    /// A relation's store and, while a restarted job catches up, the one serving.
    fn stores_of(&self, relation: &str) -> Vec<Arc<RelationStore>> {
        let relations = self.relations.read();
        relations
            .get(relation)
            .map(|r| {
                std::iter::once(&r.store)
                    .chain(&r.serving)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The committed rows of `relation` that `range` selects through `index`, with
    /// their epoch: a point read without a snapshot. `None` when the relation is not
    /// running or has no such index.
    pub fn lookup(
        &self,
        relation: &str,
        index: &str,
        range: &crate::store_index::KeyRange,
    ) -> Result<Option<(Epoch, RecordBatch)>> {
        let store = {
            let relations = self.relations.read();
            let Some(r) = relations.get(relation) else {
                return Ok(None);
            };
            r.serving.as_ref().unwrap_or(&r.store).clone()
        };
        store.lookup(index, range)
    }

    /// Committed contents of the named relations, all at one epoch.
    pub fn snapshot(&self, names: &[String]) -> Result<(Epoch, Vec<(String, RecordBatch)>)> {
        let relations = self.relations.read();
        let _consistent = self.coordinator.read_lock();
        let epoch = self.coordinator.committed_epoch();
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let rel = relations
                .get(n)
                .ok_or_else(|| ExecError::Internal(format!("relation {n} is not running")))?;
            // A failed job's store is frozen at its last committed epoch: reads get
            // its last consistent contents (SHOW JOBS says it failed).
            let store = rel.serving.as_ref().unwrap_or(&rel.store);
            out.push((n.clone(), store.snapshot()?));
        }
        Ok((epoch, out))
    }

    /// Every job's status, for `SHOW JOBS`.
    pub fn jobs(&self) -> Vec<JobInfo> {
        let relations = self.relations.write();
        relations
            .iter()
            .map(|(name, r)| {
                let life = self.registry.state(name);
                JobInfo {
                    name: name.clone(),
                    status: life
                        .as_ref()
                        .map_or(JobStatus::Running, |l| l.status.clone()),
                    parallelism: r.parallelism,
                    restarts: life.as_ref().map_or(0, |l| l.restarts),
                    last_failure: life
                        .and_then(|l| l.last_failure)
                        .or_else(|| r.health.failure()),
                    committed_at_ms: r.serving.as_ref().unwrap_or(&r.store).committed_at_ms(),
                    topology: r.topology.clone(),
                }
            })
            .collect()
    }
}

/// Loads restored rows into a table's readable store and its writer; returns how many.
/// The store loads them while the writer rebuilds its primary-key index on another
/// thread (recovery time is what users wait for); the writer's latest rows then share
/// the store's.
pub(crate) fn load_table_rows(
    writer: &mut TableWriter,
    store: &RelationStore,
    chunks: &[StreamChunk],
) -> Result<usize> {
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let readable = scope.spawn(|| store.restore(chunks));
            let keys = writer.restore_keys(chunks);
            let readable = readable
                .join()
                .map_err(|_| ExecError::Internal("store restore panicked".into()))?;
            readable.and(keys)
        })
    })?;
    writer.set_latest(store.committed_rows()?);
    Ok(chunks.iter().map(|c| c.len()).sum())
}

/// A table's checkpoint covers its log up to `from`; a log that ends before that lost
/// its file (or its tail) after the checkpoint was taken. An empty log continues at
/// `from`, so that later writes get offsets after everything the checkpoint (and every
/// view's saved position) covers, instead of reusing offsets that mean older writes;
/// a log that still holds some entries but not the checkpoint's is refused.
fn continue_log_after_checkpoint(log: &mut TableLog, name: &str, from: u64) -> Result<()> {
    if from <= log.end_offset() {
        return Ok(());
    }
    if log.start_offset() != log.end_offset() {
        return Err(ExecError::Internal(format!(
            "table log of {name} ends at {} but its checkpoint covers it up to {from}",
            log.end_offset()
        )));
    }
    tracing::warn!(
        table = name,
        offset = from,
        "the table's log is missing (or empty); it continues after its checkpoint, \
         and restores that need its older entries are refused"
    );
    Ok(log.rebase_empty(from)?)
}

/// Checkpoint-position keys of a table's connector positions: `<table>#<key>`.
fn source_position_prefix(table: &str) -> String {
    format!("{table}#")
}

/// A table's connector positions among a checkpoint's (or savepoint's) positions.
pub(crate) fn source_positions_of(
    table: &str,
    positions: &BTreeMap<String, u64>,
) -> weir_storage::source_positions::SourcePositions {
    let prefix = source_position_prefix(table);
    positions
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_string(), *v)))
        .collect()
}
