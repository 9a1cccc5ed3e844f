//! Turning a [`StreamGraph`] into running actors: channels for every exchange edge,
//! subscriptions to upstream hubs, and the backfill of existing upstream rows.

use crate::actor::{Actor, ActorOutput, JobHealth};
use crate::barrier::Message;
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::exchange::{Dispatcher, ExchangeKind, CHANNEL_CAPACITY};
use crate::graph::{FragmentInput, OperatorSpec, StreamGraph};
use crate::hub::{RelationHub, Subscription};
use crate::operator::Operator;
use crate::operators::{
    filter::FilterOperator, hash_agg::HashAggOperator, materialize::MaterializeOperator,
    project::ProjectOperator,
};
use crate::runtime::{RelationRuntime, Runtime};
use crate::store::RelationStore;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::{self, Receiver, Sender};

/// Rows per chunk when backfilling a new view from existing contents.
const BACKFILL_CHUNK_ROWS: usize = 4096;

/// One new channel to each downstream actor: returns the senders, and adds each
/// receiver to its actor's inputs.
fn connect_to_all(downstream_inputs: &mut [Vec<Receiver<Message>>]) -> Vec<Sender<Message>> {
    downstream_inputs
        .iter_mut()
        .map(|inputs| {
            let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
            inputs.push(rx);
            tx
        })
        .collect()
}

fn build_operator(rt: &Runtime, spec: &OperatorSpec) -> Result<Box<dyn Operator>> {
    Ok(match spec {
        OperatorSpec::Filter { predicate } => Box::new(FilterOperator::new(predicate.clone())),
        OperatorSpec::Project { exprs, schema } => {
            Box::new(ProjectOperator::new(exprs.clone(), schema.clone()))
        }
        OperatorSpec::HashAgg(spec) => Box::new(HashAggOperator::new(
            spec.clone(),
            rt.backend.clone(),
            rt.config.max_parallelism,
        )?),
    })
}

pub(crate) async fn deploy_view(
    rt: &Arc<Runtime>,
    job: u64,
    name: &str,
    graph: StreamGraph,
    schema: SchemaRef,
    parallelism: u32,
) -> Result<()> {
    let frags = &graph.fragments;
    if frags.is_empty() {
        return Err(ExecError::Internal("empty stream graph".into()));
    }
    let max_p = rt.config.max_parallelism;
    let health = Arc::new(JobHealth::default());
    let store = Arc::new(RelationStore::new(name, schema)?);
    let hub = RelationHub::new();
    let counts: Vec<usize> = frags
        .iter()
        .map(|f| if f.single { 1 } else { parallelism as usize })
        .collect();
    let pos: HashMap<usize, usize> = frags.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let mut receivers: Vec<Vec<Vec<Receiver<Message>>>> = counts
        .iter()
        .map(|&c| (0..c).map(|_| Vec::new()).collect())
        .collect();
    let mut outputs: Vec<Vec<Option<ActorOutput>>> = counts
        .iter()
        .map(|&c| (0..c).map(|_| None).collect())
        .collect();
    let mut subscriptions: Vec<(String, Subscription)> = Vec::new();
    let mut backfill: Vec<(Vec<Sender<Message>>, RecordBatch)> = Vec::new();
    let mut upstream_names = Vec::new();

    for (gi, frag) in frags.iter().enumerate() {
        for input in &frag.inputs {
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
                        let senders = connect_to_all(&mut receivers[gi]);
                        *out = Some(ActorOutput::Exchange(Dispatcher::new(
                            exchange, &key_types, senders, max_p,
                        )?));
                    }
                }
                FragmentInput::Relation(rel_name) => {
                    let (publishers, snapshot) = {
                        let relations = rt.relations.lock();
                        let rel = relations.get(rel_name).ok_or_else(|| {
                            ExecError::Internal(format!("relation {rel_name} is not running"))
                        })?;
                        (rel.publishers, rel.store.snapshot()?)
                    };
                    let mut per_upstream = Vec::with_capacity(publishers);
                    let mut first = Vec::new();
                    for u in 0..publishers {
                        let senders = connect_to_all(&mut receivers[gi]);
                        if u == 0 {
                            first = senders.clone();
                        }
                        per_upstream.push(Dispatcher::new(
                            &ExchangeKind::RoundRobin,
                            &[],
                            senders,
                            max_p,
                        )?);
                    }
                    subscriptions.push((rel_name.clone(), Subscription { job, per_upstream }));
                    backfill.push((first, snapshot));
                    if !upstream_names.contains(rel_name) {
                        upstream_names.push(rel_name.clone());
                    }
                }
            }
        }
    }
    let last = frags.len() - 1;
    for (d, out) in outputs[last].iter_mut().enumerate() {
        *out = Some(ActorOutput::Hub {
            hub: hub.clone(),
            index: d,
        });
    }

    let mut total = 0;
    let mut actors = Vec::new();
    for (gi, frag) in frags.iter().enumerate() {
        for d in (0..counts[gi]).rev() {
            let mut chain = frag
                .chain
                .iter()
                .map(|s| build_operator(rt, s))
                .collect::<Result<Vec<_>>>()?;
            if gi == last {
                chain.push(Box::new(MaterializeOperator::new(store.clone())));
            }
            let output = outputs[gi][d].take().ok_or_else(|| {
                ExecError::Internal(format!("fragment {} has no consumer", frag.id))
            })?;
            actors.push(Actor {
                id: rt.next_actor_id(),
                inputs: receivers[gi].pop().expect("receivers per actor"),
                chain,
                output,
                acks: rt.coordinator.ack_sender(),
                health: health.clone(),
            });
            total += 1;
        }
    }
    rt.coordinator.add_actors(total);
    rt.coordinator.register_store(store.clone());
    for a in actors {
        tokio::spawn(a.run());
    }
    for (senders, batch) in backfill {
        let mut offset = 0;
        let mut i = 0;
        while offset < batch.num_rows() {
            let len = BACKFILL_CHUNK_ROWS.min(batch.num_rows() - offset);
            let chunk = StreamChunk::inserts(batch.slice(offset, len));
            senders[i % senders.len()]
                .send(Message::Chunk(chunk))
                .await
                .map_err(|_| ExecError::ChannelClosed)?;
            offset += len;
            i += 1;
        }
    }
    {
        let relations = rt.relations.lock();
        for (rel, sub) in subscriptions {
            if let Some(r) = relations.get(&rel) {
                r.hub.subscribe(sub);
            }
        }
    }
    rt.relations.lock().insert(
        name.to_string(),
        RelationRuntime {
            hub,
            store,
            publishers: counts[last],
            health,
            job,
            actors: total,
            upstream: upstream_names,
            parallelism,
        },
    );
    Ok(())
}
