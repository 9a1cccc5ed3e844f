//! The actor run loop: the only place that knows about channels and barriers.
//!
//! An actor reads from its inputs, drives a linear chain of operators and hands output
//! to its [`ActorOutput`]. Barrier alignment (exactly-once mode) lives here: once
//! barrier `n` arrived on an input, that input is not read again until barrier `n` has
//! arrived on every other open input; then every operator gets `on_barrier`, the barrier
//! is forwarded and acknowledged to the coordinator.
//!
//! An operator error fails the job: the actor stops processing data but keeps passing
//! barriers, so the rest of the server keeps committing epochs, and the job's
//! [`JobHealth`] makes reads of the view report the failure.

use crate::barrier::{Barrier, Message};
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::exchange::Dispatcher;
use crate::hub::RelationHub;
use crate::operator::Operator;
use futures::future::select_all;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::mpsc::{Receiver, UnboundedSender};

pub type ActorId = u64;

/// Runs an operator call, turning a panic into an error so that a bug in one operator
/// fails its job (visibly) instead of silently killing the actor and stalling every
/// epoch.
fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(crate::error::ExecError::Internal(format!(
                "operator panicked: {msg}"
            )))
        }
    }
}

#[derive(Debug, Clone)]
pub struct BarrierAck {
    pub epoch: u64,
    pub actor: ActorId,
}

/// Shared, visible health of one job (one view or table pipeline).
#[derive(Default, Debug)]
pub struct JobHealth {
    failure: Mutex<Option<String>>,
}

impl JobHealth {
    pub fn fail(&self, reason: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            tracing::error!(%reason, "job failed");
            *f = Some(reason);
        }
    }
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }
}

pub enum ActorOutput {
    Exchange(Dispatcher),
    Hub { hub: Arc<RelationHub>, index: usize },
}

impl ActorOutput {
    async fn send(&self, msg: Message) -> Result<()> {
        match self {
            ActorOutput::Exchange(d) => d.dispatch(msg).await,
            ActorOutput::Hub { hub, index } => hub.publish(*index, msg).await,
        }
    }
}

pub struct Actor {
    pub id: ActorId,
    pub inputs: Vec<Receiver<Message>>,
    pub chain: Vec<Box<dyn Operator>>,
    pub output: ActorOutput,
    pub acks: UnboundedSender<BarrierAck>,
    pub health: Arc<JobHealth>,
}

impl Actor {
    pub async fn run(mut self) {
        let n = self.inputs.len();
        let mut open = vec![true; n];
        let mut blocked = vec![false; n];
        let mut pending: Option<Barrier> = None;
        loop {
            let (idx, msg) = if n == 1 {
                (0, self.inputs[0].recv().await)
            } else {
                let futs: Vec<_> = self
                    .inputs
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| open[*i] && !blocked[*i])
                    .map(|(i, rx)| Box::pin(async move { (i, rx.recv().await) }))
                    .collect();
                if futs.is_empty() {
                    return;
                }
                select_all(futs).await.0
            };
            match msg {
                None => {
                    open[idx] = false;
                    if !open.iter().any(|o| *o) {
                        return;
                    }
                    // A closed input no longer takes part in alignment.
                    if let Some(b) = pending.take() {
                        if self.all_arrived(&open, &blocked) {
                            blocked.iter_mut().for_each(|b| *b = false);
                            if self.on_barrier(b).await {
                                return;
                            }
                        } else {
                            pending = Some(b);
                        }
                    }
                }
                Some(Message::Chunk(chunk)) => {
                    if let Err(e) = self.on_chunk(chunk).await {
                        self.health.fail(e.to_string());
                    }
                }
                Some(Message::Watermark(w)) => {
                    if n == 1 && self.health.failure().is_none() {
                        let mut w = Some(w);
                        for op in &mut self.chain {
                            w = match w {
                                Some(w) => op.process_watermark(w).unwrap_or(None),
                                None => None,
                            };
                        }
                        if let Some(w) = w {
                            let _ = self.output.send(Message::Watermark(w)).await;
                        }
                    }
                }
                Some(Message::Barrier(b)) => {
                    if n == 1 {
                        if self.on_barrier(b).await {
                            return;
                        }
                        continue;
                    }
                    blocked[idx] = true;
                    pending = Some(b);
                    if self.all_arrived(&open, &blocked) {
                        blocked.iter_mut().for_each(|b| *b = false);
                        let b = pending.take().expect("pending barrier");
                        if self.on_barrier(b).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    fn all_arrived(&self, open: &[bool], blocked: &[bool]) -> bool {
        open.iter().zip(blocked).all(|(o, b)| !*o || *b)
    }

    async fn on_chunk(&mut self, chunk: StreamChunk) -> Result<()> {
        if self.health.failure().is_some() {
            return Ok(());
        }
        let mut current = vec![chunk];
        for op in &mut self.chain {
            let mut next = Vec::new();
            for c in current {
                guard(|| op.process_chunk(c, &mut next))?;
            }
            current = next;
            if current.is_empty() {
                return Ok(());
            }
        }
        for c in current {
            self.output.send(Message::Chunk(c)).await?;
        }
        Ok(())
    }

    /// Runs the barrier through the chain, forwards and acknowledges it. Returns true
    /// when the actor should stop.
    async fn on_barrier(&mut self, barrier: Barrier) -> bool {
        if self.health.failure().is_none() {
            if let Err(e) = self.flush_chain(&barrier).await {
                self.health.fail(e.to_string());
            }
        }
        if self
            .output
            .send(Message::Barrier(barrier.clone()))
            .await
            .is_err()
        {
            tracing::debug!(actor = self.id, "downstream gone while forwarding barrier");
        }
        let _ = self.acks.send(BarrierAck {
            epoch: barrier.epoch,
            actor: self.id,
        });
        barrier.is_stop()
    }

    async fn flush_chain(&mut self, barrier: &Barrier) -> Result<()> {
        let mut carried: Vec<StreamChunk> = Vec::new();
        for op in &mut self.chain {
            let mut next = Vec::new();
            for c in carried {
                guard(|| op.process_chunk(c, &mut next))?;
            }
            guard(|| op.on_barrier(barrier, &mut next))?;
            carried = next;
        }
        for c in carried {
            self.output.send(Message::Chunk(c)).await?;
        }
        Ok(())
    }
}
