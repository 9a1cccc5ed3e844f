//! Exchanges: how one actor's output reaches the actors of the next fragment.
//!
//! - `Hash`: rows go to the actor owning their key group
//!   (`key_group = hash(key) % max_parallelism`, `actor = kg * parallelism / max_parallelism`).
//!   The chunk is split with Arrow's `take`, one call per destination, not row by row.
//! - `RoundRobin`: whole chunks rotate over the destinations (stateless fragments).
//! - `Single`: everything to one actor (global aggregates).
//!
//! Barriers and watermarks are broadcast to every destination.
//!
//! Unaligned checkpoints: each destination actor of an unaligned job has a *priority
//! lane* (unbounded). [`Dispatcher::dispatch_cut`] sends the checkpoint barrier on the
//! lanes, where it overtakes the queued data, and then a [`Message::Marker`] down each
//! data channel to mark where the sender cut. A dispatcher at a job's source edge (a
//! hub subscription) cuts at the checkpoint barrier itself.

use crate::barrier::{Barrier, Message};
use crate::buffering::DataSender;
use crate::chunk::StreamChunk;
use crate::error::Result;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc::UnboundedSender;
use weir_storage::key_group::{key_hash, KeyGroup};

/// Bounded channel capacity between two actors, in messages. Bounded channels are what
/// turns a slow consumer into backpressure on the producer. Each message is a batch of
/// up to 16,384 rows, so 4 keeps a core busy while halving what light queries hold in
/// flight against 16 (q21: 122 → 61 MiB anonymous memory at the same speed), and a
/// barrier waits behind less data (Flink's buffer debloating aims at the same).
pub const CHANNEL_CAPACITY: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeKind {
    Hash { keys: Vec<usize> },
    RoundRobin,
    Single,
}

/// The priority lane of an actor that runs unaligned checkpoints.
pub type PriorityLane = UnboundedSender<Barrier>;

pub struct Dispatcher {
    senders: Vec<DataSender>,
    /// One per destination when the destinations run unaligned checkpoints, else empty.
    lanes: Vec<PriorityLane>,
    /// Set on a job's source edge: the job whose checkpoint barriers this dispatcher
    /// cuts as it forwards them.
    cuts_for_job: Option<u64>,
    route: Route,
}

enum Route {
    Hash {
        keys: Vec<usize>,
        converter: RowConverter,
        max_parallelism: u32,
    },
    RoundRobin(AtomicUsize),
    Single,
}

impl Dispatcher {
    pub fn new(
        kind: &ExchangeKind,
        key_types: &[DataType],
        senders: Vec<DataSender>,
        max_parallelism: u32,
    ) -> Result<Self> {
        let route = match kind {
            ExchangeKind::Hash { keys } if senders.len() > 1 => Route::Hash {
                keys: keys.clone(),
                converter: RowConverter::new(
                    key_types
                        .iter()
                        .map(|t| SortField::new(t.clone()))
                        .collect(),
                )?,
                max_parallelism,
            },
            ExchangeKind::RoundRobin if senders.len() > 1 => Route::RoundRobin(AtomicUsize::new(0)),
            _ => Route::Single,
        };
        Ok(Self {
            senders,
            lanes: Vec::new(),
            cuts_for_job: None,
            route,
        })
    }

    /// The destinations' priority lanes (unaligned checkpoints), one per sender.
    pub fn with_lanes(mut self, lanes: Vec<PriorityLane>) -> Self {
        if lanes.len() == self.senders.len() {
            self.lanes = lanes;
        }
        self
    }

    /// Makes this the source edge of `job`: its checkpoint barriers are cut here.
    pub fn cutting_for(mut self, job: u64) -> Self {
        self.cuts_for_job = Some(job);
        self
    }

    /// Sends a checkpoint barrier ahead of the queued data (lanes only).
    pub fn overtake(&self, barrier: &Barrier) {
        if self
            .cuts_for_job
            .is_some_and(|job| barrier.checkpoints(job))
        {
            for lane in &self.lanes {
                let _ = lane.send(barrier.clone());
            }
        }
    }

    /// Cuts checkpoint `barrier` here: the barrier on every lane, then a marker in
    /// every data channel. A no-op for aligned destinations.
    pub async fn dispatch_cut(&self, barrier: &Barrier) -> Result<()> {
        if self.lanes.is_empty() {
            return Ok(());
        }
        for lane in &self.lanes {
            // A lane's actor that is gone will be noticed on the data channel.
            let _ = lane.send(barrier.clone());
        }
        for s in &self.senders {
            s.send(Message::Marker(barrier.clone())).await?;
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Sends a message. Errors if a destination has gone away.
    pub async fn dispatch(&self, msg: Message) -> Result<()> {
        match msg {
            Message::Chunk(chunk) => self.dispatch_chunk(chunk).await,
            other => {
                if let (Message::Barrier(b), Some(job)) = (&other, self.cuts_for_job) {
                    if b.checkpoints(job) {
                        self.dispatch_cut(b).await?;
                    }
                }
                for s in &self.senders {
                    s.send(other.clone()).await?;
                }
                Ok(())
            }
        }
    }

    async fn dispatch_chunk(&self, chunk: StreamChunk) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        match &self.route {
            Route::Single => send(&self.senders[0], chunk).await,
            Route::RoundRobin(next) => {
                let i = next.fetch_add(1, Ordering::Relaxed) % self.senders.len();
                send(&self.senders[i], chunk).await
            }
            Route::Hash {
                keys,
                converter,
                max_parallelism,
            } => {
                let n = self.senders.len() as u32;
                let key_cols: Vec<_> = keys.iter().map(|&k| chunk.columns()[k].clone()).collect();
                let rows = converter.convert_columns(&key_cols)?;
                let mut per_actor: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
                for i in 0..chunk.len() {
                    let kg = KeyGroup::of_hash(key_hash(rows.row(i).as_ref()), *max_parallelism);
                    per_actor[kg.actor(n, *max_parallelism) as usize].push(i as u32);
                }
                for (actor, idx) in per_actor.into_iter().enumerate() {
                    if idx.is_empty() {
                        continue;
                    }
                    let part = if idx.len() == chunk.len() {
                        chunk.clone()
                    } else {
                        chunk.take(&idx)?
                    };
                    send(&self.senders[actor], part).await?;
                }
                Ok(())
            }
        }
    }
}

async fn send(sender: &DataSender, chunk: StreamChunk) -> Result<()> {
    sender.send(Message::Chunk(chunk)).await
}
