//! Turning a [`StreamGraph`] into running actors: channels for every exchange edge,
//! subscriptions to upstream hubs, and the backfill of existing upstream rows.

use crate::actor::{Actor, ActorOutput, JobHealth, UnalignedSetup};
use crate::barrier::{Barrier, Message};
use crate::buffering::{data_channel, DataReceiver, DataSender, Debloat};
use crate::checkpoint::restore::{load_latest, RestoredJob};
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::exchange::{Dispatcher, ExchangeKind, PriorityLane};
use crate::graph::{FragmentInput, SinkSpec, StreamGraph};
use crate::hub::{RelationHub, Subscription};
use crate::operator::Operator;
use crate::operators::distinct_entries;
use crate::operators::materialize::MaterializeOperator;
use crate::operators::spec::{BuildContext, StateRestore};
use crate::runtime::{RelationRuntime, Runtime, ViewSpec, WriteState};
use crate::store::RelationStore;
use arrow::array::RecordBatch;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use weir_storage::{KeyGroupRange, WriteBatch};

/// Rows per chunk when backfilling a new view from existing contents.
const BACKFILL_CHUNK_ROWS: usize = 4096;

/// One new channel to each downstream actor: returns the senders, and adds each
/// receiver to its actor's inputs.
fn connect_to_all(
    downstream_inputs: &mut [Vec<DataReceiver>],
    debloat: Debloat,
) -> Vec<DataSender> {
    downstream_inputs
        .iter_mut()
        .map(|inputs| {
            let (tx, rx) = data_channel(debloat);
            inputs.push(rx);
            tx
        })
        .collect()
}

/// The uid prefix of the data an unaligned checkpoint overtook at one actor.
pub(crate) fn inflight_uid(view: &str, fragment: usize, actor: usize) -> String {
    format!("{view}.inflight.f{fragment}a{actor}")
}

/// True for the uids of overtaken data: they belong to one checkpoint only (replaced,
/// never chained or carried).
pub(crate) fn is_inflight_uid(uid: &str) -> bool {
    uid.contains(".inflight.f")
}

/// Uids of the keyed state a graph's operators keep.
pub(crate) fn state_uids(graph: &StreamGraph) -> Vec<String> {
    graph
        .fragments
        .iter()
        .flat_map(|f| &f.chain)
        .flat_map(|op| op.state_layouts().into_iter().map(|(uid, _)| uid))
        .collect()
}

/// The last operator of a sink job.
fn sink_operator(
    rt: &Runtime,
    job: u64,
    name: &str,
    graph: &StreamGraph,
    sink: &SinkSpec,
    restored: Option<&RestoredJob>,
) -> Result<Box<dyn Operator>> {
    let ctx = crate::sinks::two_phase::SinkContext {
        job,
        uid: graph.output_uid.clone(),
        restored: restored
            .and_then(|r| r.keyed.get(&graph.output_uid))
            .map(|e| {
                e.iter()
                    .filter_map(|(_, k, v)| Some((k.to_vec(), v?.to_vec())))
                    .collect()
            })
            .unwrap_or_default(),
        completions: rt.checkpoints.completions(),
    };
    sink.connector().build(name, ctx)
}

/// Loads a view's latest checkpoint if it can be used: every relation it reads must be
/// a table whose log position the checkpoint recorded (a view reading another view is
/// rebuilt from that view's contents instead).
async fn restorable(
    rt: &Runtime,
    w: &WriteState,
    job: u64,
    name: &str,
    graph: &StreamGraph,
) -> Option<RestoredJob> {
    let upstream = graph.upstream_relations();
    if !upstream.iter().all(|u| w.has_table(u)) {
        return None;
    }
    let r = load_latest(&rt.checkpoints.storage, job, name, &rt.progress).await?;
    if !upstream.iter().all(|u| r.meta.positions.contains_key(u)) {
        tracing::warn!(
            view = name,
            "checkpoint does not cover every source; rebuilding"
        );
        return None;
    }
    if !same_plan(&r.meta, graph) {
        tracing::warn!(
            view = name,
            "checkpoint of another plan (an upgrade derived other uids); rebuilding"
        );
        return None;
    }
    Some(r)
}

/// Every uid `graph` keeps state under: its operators' and, unless its rows are
/// derived from an aggregation's state, its stored rows'.
pub(crate) fn plan_uids(graph: &StreamGraph) -> Vec<String> {
    let mut uids = state_uids(graph);
    if !rows_derived_from_state(graph) {
        uids.push(graph.output_uid.clone());
    }
    uids.sort();
    uids
}

/// Whether checkpoint `meta` was written by `graph`'s plan: the uids it recorded are
/// the plan's. A checkpoint from before they were recorded must at least hold state
/// for every uid of the plan; one of an operator that was still empty then makes the
/// view rebuild once, which is slower, never wrong. Restoring a checkpoint whose
/// uids differ would start those operators empty and lose what they held.
fn same_plan(
    meta: &weir_storage::checkpoint_meta::CheckpointMetadata,
    graph: &StreamGraph,
) -> bool {
    let mut had = if meta.plan_uids.is_empty() {
        meta.state.iter().map(|s| s.uid.clone()).collect()
    } else {
        meta.plan_uids.clone()
    };
    had.sort();
    // An aggregation's distinct values got a uid of their own later; a checkpoint
    // from before holds them in its groups (see `distinct_entries`).
    let want = plan_uids(graph)
        .into_iter()
        .filter(|u| had.contains(u) || !distinct_entries::is_entries_of_one_of(u, &had));
    if meta.plan_uids.is_empty() {
        want.into_iter().all(|u| had.contains(&u))
    } else {
        want.eq(had.iter().cloned())
    }
}

/// Where a deployed view's state comes from.
pub enum Restore {
    /// Empty: backfilled from its upstream's current contents.
    Fresh,
    /// Its latest intact checkpoint (falling back to `Fresh`).
    Latest,
    /// Given state, with the positions to replay from (a savepoint).
    From(Box<RestoredJob>),
}

pub(crate) async fn deploy_view(
    rt: &Arc<Runtime>,
    w: &mut WriteState,
    job: u64,
    name: &str,
    spec: ViewSpec,
    restore: Restore,
) -> Result<RelationRuntime> {
    let mut spec = spec;
    crate::append_only::mark(&mut spec.graph, |r| rt.is_append_only(r))?;
    let graph = &spec.graph;
    let parallelism = spec.parallelism;
    let frags = &graph.fragments;
    if frags.is_empty() {
        return Err(ExecError::Internal("empty stream graph".into()));
    }
    let store = Arc::new(RelationStore::new(name, spec.schema.clone())?);
    rt.index_store(name, &store)?;
    let health = Arc::new(JobHealth::new(job, store.clone(), rt.failures_tx.clone()));
    // Whatever a previous run of this job left in the backend is stale.
    for uid in state_uids(graph) {
        rt.backend.drop_uid(&uid)?;
    }
    let restored = match restore {
        Restore::Fresh => None,
        Restore::Latest => restorable(rt, w, job, name, graph).await,
        Restore::From(r) => Some(*r),
    };
    if let Some(r) = &restored {
        load_restored(rt, &store, graph, r)?;
        rt.note_restore(name);
    }
    let hub = RelationHub::new();
    let counts: Vec<usize> = frags
        .iter()
        .map(|f| if f.single { 1 } else { parallelism as usize })
        .collect();
    let mut wiring = wire(rt, w, job, frags, &counts, &spec.config, restored.as_ref())?;
    let last = frags.len() - 1;
    for (d, out) in wiring.outputs[last].iter_mut().enumerate() {
        *out = Some(ActorOutput::Hub {
            hub: hub.clone(),
            index: d,
        });
    }
    let build = ActorBuild {
        rt,
        job,
        name,
        spec: &spec,
        store: &store,
        health: &health,
        restored: restored.as_ref(),
        counts: &counts,
    };
    let actors = build.actors(&mut wiring)?;
    let total = actors.len();
    let actor_ids: Vec<u64> = actors.iter().map(|(a, _, _)| a.id).collect();
    let topology = crate::topology::JobTopology::of_view(&spec, &counts, &actor_ids);
    let Wiring {
        subscriptions,
        backfill,
        upstream_names,
        replayed,
        ..
    } = wiring;
    rt.coordinator.add_actors(total);
    rt.coordinator.register_store(store.clone());
    let sources: Vec<String> = upstream_names
        .iter()
        .filter(|u| w.has_table(u))
        .cloned()
        .collect();
    let mut job_start = restored.map(|r| r.start).unwrap_or_default();
    job_start.plan_uids = plan_uids(&spec.graph);
    rt.checkpoints.register_job(
        job,
        name,
        spec.config.checkpoint.clone(),
        total,
        sources,
        parallelism,
        job_start,
    );
    rt.registry.note_replayed(name, replayed);
    start(rt, name, actors, backfill, subscriptions).await?;
    Ok(RelationRuntime {
        hub,
        store,
        serving: None,
        publishers: counts[last],
        health,
        job,
        actors: total,
        upstream: upstream_names,
        parallelism,
        view: Some(spec),
        topology,
    })
}

/// What building one view's actors needs.
struct ActorBuild<'a> {
    rt: &'a Arc<Runtime>,
    job: u64,
    name: &'a str,
    spec: &'a ViewSpec,
    store: &'a Arc<RelationStore>,
    health: &'a Arc<JobHealth>,
    restored: Option<&'a RestoredJob>,
    /// Actors per fragment.
    counts: &'a [usize],
}

impl ActorBuild<'_> {
    /// Every fragment's actors on the wired channels, with their unaligned setup and
    /// the data a restored unaligned checkpoint overtook.
    fn actors(&self, wiring: &mut Wiring) -> Result<Vec<ReadyActor>> {
        let frags = &self.spec.graph.fragments;
        let job_name: Arc<str> = self.name.into();
        let mut actors = Vec::new();
        for (gi, frag) in frags.iter().enumerate() {
            for d in (0..self.counts[gi]).rev() {
                let chain = self.chain(gi, d)?;
                let output = wiring.outputs[gi][d].take().ok_or_else(|| {
                    ExecError::Internal(format!("fragment {} has no consumer", frag.id))
                })?;
                let prefix = inflight_uid(self.name, frag.id, d);
                let initial = match self.restored {
                    Some(r) => overtaken_data(r, &prefix, &wiring.sides[gi][d])?,
                    None => Vec::new(),
                };
                let setup = wiring.lane_rx[gi]
                    .get_mut(d)
                    .and_then(Option::take)
                    .map(|lane| UnalignedSetup {
                        lane,
                        aligned_timeout: self.spec.config.checkpoint.aligned_checkpoint_timeout,
                        inflight_uid: prefix,
                    });
                let actor = Actor {
                    id: self.rt.next_actor_id(),
                    job: self.job,
                    job_name: job_name.clone(),
                    inputs: wiring.receivers[gi].pop().expect("receivers per actor"),
                    input_sides: std::mem::take(&mut wiring.sides[gi][d]),
                    chain,
                    output,
                    acks: self.rt.coordinator.ack_sender(),
                    checkpoints: self.rt.checkpoints.part_sender(),
                    mode: self.spec.config.checkpoint.mode,
                    health: self.health.clone(),
                };
                actors.push((actor, setup, initial));
            }
        }
        Ok(actors)
    }

    /// The operators of actor `d` of fragment `gi`, built from their specs; the last
    /// fragment ends in the view's Materialize or the sink.
    fn chain(&self, gi: usize, d: usize) -> Result<Vec<Box<dyn Operator>>> {
        let graph = &self.spec.graph;
        let last = graph.fragments.len() - 1;
        let max_p = self.rt.config.max_parallelism;
        // A job that never checkpoints keeps no deltas.
        let track = self.spec.config.checkpoint.interval.is_some();
        // A sink stores no rows: nothing to derive, and re-emitting an aggregation's
        // rows on restore would send them to the sink again.
        let derived = rows_derived_from_state(graph) && !graph.is_sink();
        // Checkpoints written before rows were derived still carry the rows: use them.
        let reemit = derived
            && self
                .restored
                .is_some_and(|r| !r.rows.contains_key(&graph.output_uid));
        let ctx = BuildContext {
            backend: self.rt.backend.clone(),
            restore: StateRestore {
                max_parallelism: max_p,
                key_groups: KeyGroupRange::for_actor(d as u32, self.counts[gi] as u32, max_p),
                restored: self.restored.is_some(),
                // Only the last fragment's output is the (unstored) view rows; an
                // earlier operator re-emitting would feed state that already counts it.
                reemit: reemit && gi == last,
                track_changes: track,
            },
        };
        let mut chain = graph.fragments[gi]
            .chain
            .iter()
            .map(|s| s.spec().build(&ctx))
            .collect::<Result<Vec<_>>>()?;
        if gi == last {
            chain.push(match &graph.sink {
                None => Box::new(MaterializeOperator::new(
                    self.store.clone(),
                    graph.output_uid.clone(),
                    track && !derived,
                )),
                Some(sink) => {
                    sink_operator(self.rt, self.job, self.name, graph, sink, self.restored)?
                }
            });
        }
        Ok(chain)
    }
}

/// Chunks an actor processes before its inputs, each with the input it came from.
type Overtaken = Vec<(usize, StreamChunk)>;

/// An actor ready to run, with its unaligned-checkpoint setup and overtaken data.
type ReadyActor = (Actor, Option<UnalignedSetup>, Overtaken);

/// Puts a restored job's keyed state into the backend (the operators load their key
/// groups of it when built) and its stored rows into the view's store.
fn load_restored(
    rt: &Runtime,
    store: &RelationStore,
    graph: &StreamGraph,
    r: &RestoredJob,
) -> Result<()> {
    for (uid, entries) in &r.keyed {
        rt.backend.write(WriteBatch::restoring(uid, entries))?;
    }
    if let Some(rows) = r.rows.get(&graph.output_uid) {
        store.restore(&store.chunks_of(rows)?)?;
    }
    Ok(())
}

/// What a new job receives from one upstream relation before it subscribes: the rows
/// (its contents, or its log from the restored position) on the first publisher's
/// channels, then on each publisher's channels the watermarks it last published
/// (see [`crate::hub`]).
struct Backfill {
    chunks: Vec<StreamChunk>,
    /// Per publisher: its channels to the job's actors and its last watermarks.
    publishers: Vec<(Vec<DataSender>, Vec<crate::barrier::Watermark>)>,
}

impl Backfill {
    /// Sends the contents, then the watermarks, then the backfill's end on every
    /// channel, counting the rows in the view's progress `task`.
    async fn send(self, task: &std::sync::Mutex<Option<crate::progress::Task>>) -> Result<()> {
        if let Some((first, _)) = self.publishers.first() {
            for (i, chunk) in self.chunks.into_iter().enumerate() {
                let n = chunk.len() as u64;
                first[i % first.len()].send(Message::Chunk(chunk)).await?;
                if let Some(t) = task.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    t.advance(n);
                }
            }
        }
        for (senders, watermarks) in self.publishers {
            for s in &senders {
                for w in &watermarks {
                    s.send(Message::Watermark(w.clone())).await?;
                }
                s.send(Message::BackfillEnd).await?;
            }
        }
        Ok(())
    }
}

/// The channels of a job: per fragment, per actor, its input receivers (and which of
/// the fragment's inputs each belongs to), its output, its priority lane (unaligned
/// checkpoints); the subscriptions to upstream relations and what to backfill.
struct Wiring {
    receivers: Vec<Vec<Vec<DataReceiver>>>,
    outputs: Vec<Vec<Option<ActorOutput>>>,
    lane_rx: Vec<Vec<Option<UnboundedReceiver<Barrier>>>>,
    sides: Vec<Vec<Vec<usize>>>,
    subscriptions: Vec<(String, Subscription)>,
    /// Per upstream relation: what to send before subscribing.
    backfill: Vec<Backfill>,
    upstream_names: Vec<String>,
    /// Log rows replayed from the restored positions.
    replayed: usize,
}

/// Connects every exchange edge and upstream relation of `frags` (`counts[i]` actors
/// for fragment `i`). The last fragment's outputs are left to the caller.
fn wire(
    rt: &Runtime,
    w: &WriteState,
    job: u64,
    frags: &[crate::graph::FragmentSpec],
    counts: &[usize],
    config: &crate::checkpoint::JobConfig,
    restored: Option<&RestoredJob>,
) -> Result<Wiring> {
    let max_p = rt.config.max_parallelism;
    let unaligned = config.checkpoint.unaligned;
    let debloat = config.buffering.debloat;
    let pos: HashMap<usize, usize> = frags.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let mut receivers: Vec<Vec<Vec<DataReceiver>>> = counts
        .iter()
        .map(|&c| (0..c).map(|_| Vec::new()).collect())
        .collect();
    let mut outputs: Vec<Vec<Option<ActorOutput>>> = counts
        .iter()
        .map(|&c| (0..c).map(|_| None).collect())
        .collect();
    // Unaligned checkpoints: one priority lane per actor.
    let mut lane_tx: Vec<Vec<PriorityLane>> = Vec::new();
    let mut lane_rx: Vec<Vec<Option<UnboundedReceiver<Barrier>>>> = Vec::new();
    for &c in counts {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..c)
            .filter(|_| unaligned)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                (tx, Some(rx))
            })
            .unzip();
        lane_tx.push(txs);
        lane_rx.push(rxs);
    }
    let mut subscriptions: Vec<(String, Subscription)> = Vec::new();
    let mut backfill: Vec<Backfill> = Vec::new();
    let mut upstream_names = Vec::new();
    let mut replayed = 0usize;

    // Per actor: which of its fragment's inputs each receiver belongs to.
    let mut sides: Vec<Vec<Vec<usize>>> = counts.iter().map(|&c| vec![Vec::new(); c]).collect();
    for (gi, frag) in frags.iter().enumerate() {
        for (k, input) in frag.inputs.iter().enumerate() {
            match input {
                FragmentInput::Fragment { id, exchange } => {
                    let fi = *pos
                        .get(id)
                        .ok_or_else(|| ExecError::Internal(format!("unknown fragment {id}")))?;
                    let key_types: Vec<_> = match exchange {
                        ExchangeKind::Hash { keys } => keys
                            .iter()
                            .map(|&k| frags[fi].output_schema.field(k).data_type().clone())
                            .collect(),
                        _ => vec![],
                    };
                    for out in outputs[fi].iter_mut() {
                        let senders = connect_to_all(&mut receivers[gi], debloat);
                        let d = Dispatcher::new(exchange, &key_types, senders, max_p)?
                            .with_lanes(lane_tx[gi].clone());
                        // A fragment several consumers read sends to each of them.
                        match out {
                            Some(ActorOutput::Exchange(ds)) => ds.push(d),
                            _ => *out = Some(ActorOutput::Exchange(vec![d])),
                        }
                    }
                }
                FragmentInput::Relation(rel_name) => {
                    let (publishers, snapshot, published) = {
                        let relations = rt.relations.write();
                        let rel = relations.get(rel_name).ok_or_else(|| {
                            ExecError::Internal(format!("relation {rel_name} is not running"))
                        })?;
                        let snapshot = match restored {
                            // Rewind the table's log to the checkpoint's position.
                            Some(r) => {
                                let writer = w.table_ref(rel_name).ok_or_else(|| {
                                    ExecError::Internal(format!("{rel_name} is not a table"))
                                })?;
                                let chunks = writer.read_log_from(r.meta.positions[rel_name])?;
                                replayed += chunks.iter().map(|c| c.len()).sum::<usize>();
                                chunks
                            }
                            // An unstored source keeps no rows: they are made again.
                            None if !rel.store.keeps_rows() => w
                                .table_ref(rel_name)
                                .ok_or_else(|| {
                                    ExecError::Internal(format!("{rel_name} is not a table"))
                                })?
                                .generated_contents()?,
                            None => split_inserts(&rel.store.snapshot()?),
                        };
                        let published: Vec<_> =
                            (0..rel.publishers).map(|u| rel.hub.watermarks(u)).collect();
                        (rel.publishers, snapshot, published)
                    };
                    let mut per_upstream = Vec::with_capacity(publishers);
                    let mut channels = Vec::with_capacity(publishers);
                    for last in published {
                        let senders = connect_to_all(&mut receivers[gi], debloat);
                        channels.push((senders.clone(), last));
                        per_upstream.push(
                            Dispatcher::new(&ExchangeKind::RoundRobin, &[], senders, max_p)?
                                .with_lanes(lane_tx[gi].clone())
                                .cutting_for(job),
                        );
                    }
                    subscriptions.push((rel_name.clone(), Subscription { job, per_upstream }));
                    backfill.push(Backfill {
                        chunks: snapshot,
                        publishers: channels,
                    });
                    if !upstream_names.contains(rel_name) {
                        upstream_names.push(rel_name.clone());
                    }
                }
            }
            for (d, side) in sides[gi].iter_mut().enumerate() {
                side.resize(receivers[gi][d].len(), k);
            }
        }
    }
    Ok(Wiring {
        receivers,
        outputs,
        lane_rx,
        sides,
        subscriptions,
        backfill,
        upstream_names,
        replayed,
    })
}

/// The data the restored checkpoint's barrier overtook at the actor whose in-flight
/// uids start with `prefix`, in input order, each with the fragment input it came
/// from (`sides`: per receiver).
fn overtaken_data(r: &RestoredJob, prefix: &str, sides: &[usize]) -> Result<Overtaken> {
    let mine = format!("{prefix}.i");
    let mut uids: Vec<&String> = r.rows.keys().filter(|u| u.starts_with(&mine)).collect();
    uids.sort();
    let mut initial = Vec::new();
    for uid in uids {
        let receiver: usize = uid[mine.len()..].parse().unwrap_or(0);
        let side = sides.get(receiver).copied().unwrap_or(0);
        for (codes, batch) in &r.rows[uid] {
            initial.push((side, StreamChunk::from_op_codes(codes, batch.clone())?));
        }
    }
    Ok(initial)
}

/// Starts the actors, sends the backfill, then subscribes to the upstream hubs (so the
/// first live change follows the backfilled contents).
async fn start(
    rt: &Runtime,
    view: &str,
    actors: Vec<ReadyActor>,
    backfill: Vec<Backfill>,
    subscriptions: Vec<(String, Subscription)>,
) -> Result<()> {
    for (a, setup, initial) in actors {
        tokio::spawn(a.run(setup, initial));
    }
    let rows: usize = backfill
        .iter()
        .flat_map(|b| &b.chunks)
        .map(|c| c.len())
        .sum();
    let task = (rows > 0).then(|| {
        rt.progress.start(
            "backfill",
            view,
            crate::progress::Unit::Rows,
            Some(rows as u64),
        )
    });
    // All inputs at once: a held side (a lookup join's stream) is read only after
    // the other sides' backfill ended, so sending it first could wait forever.
    let task = std::sync::Mutex::new(task);
    futures::future::try_join_all(backfill.into_iter().map(|b| b.send(&task))).await?;
    if let Some(t) = task.into_inner().unwrap_or_else(|e| e.into_inner()) {
        t.finish();
    }
    let relations = rt.relations.write();
    for (rel, sub) in subscriptions {
        if let Some(r) = relations.get(&rel) {
            r.hub.subscribe(sub);
        }
    }
    Ok(())
}

/// True when the view's rows are a function of an aggregation's (or Top-N's) state: its
/// last fragment runs one followed only by stateless operators. Such a view's rows
/// are not checkpointed (halving what an aggregation view uploads); on restore the
/// aggregation emits them again.
pub(crate) fn rows_derived_from_state(graph: &StreamGraph) -> bool {
    let Some(last) = graph.fragments.last() else {
        return false;
    };
    match last.chain.iter().rposition(|op| op.spec().rederives_rows()) {
        Some(i) => last.chain[i + 1..]
            .iter()
            .all(|op| op.spec().state_layouts().is_empty()),
        None => false,
    }
}

/// A relation's contents as insert chunks of bounded size.
fn split_inserts(batch: &RecordBatch) -> Vec<StreamChunk> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < batch.num_rows() {
        let len = BACKFILL_CHUNK_ROWS.min(batch.num_rows() - offset);
        out.push(StreamChunk::inserts(batch.slice(offset, len)));
        offset += len;
    }
    out
}
