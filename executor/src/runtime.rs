//! `Runtime`: owns the running dataflow: table writers, jobs (one per view), hubs and
//! stores, the barrier coordinator and the periodic barrier task.
//!
//! Concurrency contract: the graph changes (a table or view created or dropped) only
//! while the caller holds the write lock ([`Runtime::lock_writes`]) and after a flush,
//! so no data or barrier is in flight while channels are rewired.

use crate::actor::{Actor, ActorOutput, JobHealth};
use crate::barrier::{Barrier, Epoch, Message};
use crate::chunk::StreamChunk;
use crate::coordinator::BarrierCoordinator;
use crate::error::{ExecError, Result};
use crate::exchange::CHANNEL_CAPACITY;
use crate::graph::StreamGraph;
use crate::hub::RelationHub;
use crate::operators::materialize::MaterializeOperator;
use crate::store::RelationStore;
use crate::table_writer::TableWriter;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use weir_storage::{MemoryStateBackend, StateBackend, TableLog};

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// `parallelism.default`: actors per parallel fragment.
    pub parallelism: u32,
    /// `pipeline.max-parallelism`: number of key groups.
    pub max_parallelism: u32,
    /// `barrier.interval`: how often a barrier advances the readable epoch.
    pub barrier_interval: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            max_parallelism: weir_storage::key_group::DEFAULT_MAX_PARALLELISM,
            barrier_interval: Duration::from_secs(1),
        }
    }
}

pub(crate) struct RelationRuntime {
    pub hub: Arc<RelationHub>,
    pub store: Arc<RelationStore>,
    /// Actors publishing into the hub (slots per subscription).
    pub publishers: usize,
    pub health: Arc<JobHealth>,
    pub job: u64,
    /// Every actor of the job (for the coordinator's ack count).
    pub actors: usize,
    /// Relations this job subscribes to.
    pub upstream: Vec<String>,
    pub parallelism: u32,
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
    /// The epoch that writes made now belong to: visible once it is committed.
    pub fn write_epoch(&self) -> Epoch {
        self.next_epoch
    }
}

pub struct Runtime {
    pub config: RuntimeConfig,
    pub coordinator: Arc<BarrierCoordinator>,
    writes: tokio::sync::Mutex<WriteState>,
    pub(crate) relations: Mutex<HashMap<String, RelationRuntime>>,
    pub(crate) backend: Arc<dyn StateBackend>,
    next_actor: AtomicU64,
}

impl Runtime {
    pub fn start(config: RuntimeConfig, last_epoch: Epoch) -> Arc<Runtime> {
        let rt = Arc::new(Runtime {
            coordinator: BarrierCoordinator::start(last_epoch),
            writes: tokio::sync::Mutex::new(WriteState {
                next_epoch: last_epoch + 1,
                tables: BTreeMap::new(),
            }),
            relations: Mutex::new(HashMap::new()),
            backend: MemoryStateBackend::new(),
            next_actor: AtomicU64::new(1),
            config,
        });
        let weak = Arc::downgrade(&rt);
        let interval = rt.config.barrier_interval;
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
            }
        });
        rt
    }

    pub async fn lock_writes(&self) -> tokio::sync::MutexGuard<'_, WriteState> {
        self.writes.lock().await
    }

    pub(crate) fn next_actor_id(&self) -> u64 {
        self.next_actor.fetch_add(1, Ordering::Relaxed)
    }

    /// Injects the barrier that closes the current epoch into every table source.
    pub async fn inject_barrier(&self, w: &mut WriteState) -> Result<Epoch> {
        let epoch = w.next_epoch;
        w.next_epoch += 1;
        self.coordinator.begin_epoch(epoch);
        for t in w.tables.values() {
            t.send(Message::Barrier(Barrier::plain(epoch))).await?;
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
        if self.coordinator.committed_epoch() >= epoch {
            return Ok(());
        }
        {
            let mut w = self.writes.lock().await;
            if w.next_epoch <= epoch {
                self.inject_barrier(&mut w).await?;
            }
        }
        self.coordinator.wait_committed(epoch).await;
        Ok(())
    }

    /// Creates a table's pipeline (writer → source actor → materialize → hub) and
    /// returns the changes in its log, which the caller replays with `write(.., true)`.
    pub async fn create_table(
        &self,
        w: &mut WriteState,
        id: u64,
        name: &str,
        schema: SchemaRef,
        primary_key: Vec<usize>,
        log_path: &Path,
    ) -> Result<Vec<StreamChunk>> {
        let (log, entries) = TableLog::open(log_path)?;
        let mut replay = Vec::with_capacity(entries.len());
        for (_, payload) in entries {
            for (codes, batch) in weir_storage::codec::decode_change_batches(&payload)? {
                let ops = codes
                    .into_iter()
                    .map(|c| {
                        crate::chunk::Op::from_code(c)
                            .ok_or_else(|| ExecError::Internal("bad op in table log".into()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let batch = batch.with_schema(schema.clone()).map_err(|e| {
                    ExecError::Internal(format!(
                        "table log of {name} does not match its schema: {e}"
                    ))
                })?;
                replay.push(StreamChunk::new(ops, batch));
            }
        }
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let writer = TableWriter::new(id, name, schema.clone(), primary_key, log, tx)?;
        let store = Arc::new(RelationStore::new(name, schema)?);
        let hub = RelationHub::new();
        let health = Arc::new(JobHealth::default());
        let actor = Actor {
            id: self.next_actor_id(),
            inputs: vec![rx],
            chain: vec![Box::new(MaterializeOperator::new(store.clone()))],
            output: ActorOutput::Hub {
                hub: hub.clone(),
                index: 0,
            },
            acks: self.coordinator.ack_sender(),
            health: health.clone(),
        };
        self.coordinator.add_actors(1);
        self.coordinator.register_store(store.clone());
        tokio::spawn(actor.run());
        w.tables.insert(name.to_string(), writer);
        self.relations.lock().insert(
            name.to_string(),
            RelationRuntime {
                hub,
                store,
                publishers: 1,
                health,
                job: id,
                actors: 1,
                upstream: vec![],
                parallelism: 1,
            },
        );
        Ok(replay)
    }

    /// Drops a table's pipeline. The caller has checked that no view depends on it.
    pub fn drop_table(&self, w: &mut WriteState, name: &str) {
        // Dropping the writer closes the source channel; the source actor then exits.
        w.tables.remove(name);
        self.remove_relation(name);
    }

    /// Deploys a view's graph, backfilled from its upstream relations' committed
    /// contents. Call under the write lock, after `flush_locked`.
    pub async fn create_view(
        self: &Arc<Self>,
        _w: &mut WriteState,
        job: u64,
        name: &str,
        graph: StreamGraph,
        schema: SchemaRef,
        parallelism: u32,
    ) -> Result<()> {
        crate::deploy::deploy_view(self, job, name, graph, schema, parallelism).await
    }

    /// Stops a view's job and forgets its state. Caller holds the write lock and has
    /// checked dependencies.
    pub fn drop_view(&self, _w: &mut WriteState, name: &str) {
        self.remove_relation(name);
    }

    fn remove_relation(&self, name: &str) {
        let removed = self.relations.lock().remove(name);
        if let Some(rel) = removed {
            let relations = self.relations.lock();
            for up in &rel.upstream {
                if let Some(u) = relations.get(up) {
                    u.hub.unsubscribe(rel.job);
                }
            }
            drop(relations);
            self.coordinator.remove_actors(rel.actors);
            self.coordinator.unregister_store(&rel.store);
        }
    }

    /// Committed contents of the named relations, all at one epoch.
    pub fn snapshot(&self, names: &[String]) -> Result<(Epoch, Vec<(String, RecordBatch)>)> {
        let relations = self.relations.lock();
        let _consistent = self.coordinator.read_lock();
        let epoch = self.coordinator.committed_epoch();
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let rel = relations
                .get(n)
                .ok_or_else(|| ExecError::Internal(format!("relation {n} is not running")))?;
            if let Some(reason) = rel.health.failure() {
                return Err(ExecError::JobFailed(format!(
                    "materialized view \"{n}\" failed and cannot be read: {reason}"
                )));
            }
            out.push((n.clone(), rel.store.snapshot()?));
        }
        Ok((epoch, out))
    }

    pub fn job_failure(&self, name: &str) -> Option<String> {
        self.relations
            .lock()
            .get(name)
            .and_then(|r| r.health.failure())
    }

    pub fn view_parallelism(&self, name: &str) -> Option<u32> {
        self.relations.lock().get(name).map(|r| r.parallelism)
    }
}
