//! The actor run loop: the only place that knows about channels and barriers.
//!
//! An actor reads from its inputs, drives a linear chain of operators and hands output
//! to its [`ActorOutput`]. Barrier alignment (exactly-once mode) lives here: once
//! barrier `n` arrived on an input, that input is not read again until barrier `n` has
//! arrived on every other open input; then every operator gets `on_barrier`, at a
//! checkpoint barrier hands its state delta to the checkpoint coordinator, and the
//! barrier is forwarded and acknowledged. The actor also keeps the per-actor metrics.
//!
//! An operator error fails the job: the actor stops processing data but keeps passing
//! barriers, so the rest of the server keeps committing epochs, and the job's
//! [`JobHealth`] makes reads of the view report the failure.

use crate::barrier::{Barrier, Message};
use crate::checkpoint::{CheckpointMode, CheckpointPart};
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::exchange::Dispatcher;
use crate::hub::RelationHub;
use crate::metrics::metrics;
use crate::operator::Operator;
use futures::future::select_all;
use parking_lot::Mutex;
use prometheus::IntCounter;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{Receiver, UnboundedSender};
use weir_storage::state_snapshot::StateDelta;

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
///
/// When an actor fails, its job's store freezes at the last committed epoch (the
/// failed epoch's partial changes are discarded, so reads stay consistent) and the
/// supervisor is told, which applies the job's restart strategy.
pub struct JobHealth {
    failure: Mutex<Option<String>>,
    pub job: u64,
    store: Option<Arc<crate::store::RelationStore>>,
    supervisor: Option<UnboundedSender<(u64, String)>>,
}

impl std::fmt::Debug for JobHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobHealth({}, {:?})", self.job, self.failure.lock())
    }
}

impl JobHealth {
    pub fn new(
        job: u64,
        store: Arc<crate::store::RelationStore>,
        supervisor: UnboundedSender<(u64, String)>,
    ) -> Self {
        Self {
            failure: Mutex::new(None),
            job,
            store: Some(store),
            supervisor: Some(supervisor),
        }
    }

    pub fn fail(&self, reason: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            tracing::error!(job = self.job, %reason, "job failed");
            if let Some(s) = &self.store {
                s.freeze();
            }
            if let Some(sup) = &self.supervisor {
                let _ = sup.send((self.job, reason.clone()));
            }
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
    pub job: u64,
    /// The job's name: metric label and failpoint suffix.
    pub job_name: Arc<str>,
    pub inputs: Vec<Receiver<Message>>,
    pub chain: Vec<Box<dyn Operator>>,
    pub output: ActorOutput,
    pub acks: UnboundedSender<BarrierAck>,
    pub checkpoints: UnboundedSender<CheckpointPart>,
    pub mode: CheckpointMode,
    pub health: Arc<JobHealth>,
}

/// Time accounting for the busy / idle / back-pressured metrics.
struct ActorClock {
    busy: Duration,
    idle: Duration,
    backpressured: Duration,
    since: Instant,
    records_in: IntCounter,
    records_out: IntCounter,
    labels: [String; 2],
}

impl ActorClock {
    fn new(job: &str, actor: ActorId) -> Self {
        let labels = [job.to_string(), actor.to_string()];
        let m = metrics();
        Self {
            busy: Duration::ZERO,
            idle: Duration::ZERO,
            backpressured: Duration::ZERO,
            since: Instant::now(),
            records_in: m.records_in.with_label_values(&[&labels[0], &labels[1]]),
            records_out: m.records_out.with_label_values(&[&labels[0], &labels[1]]),
            labels,
        }
    }

    /// Publishes the per-second rates (called at barriers, about once a second).
    fn publish(&mut self) {
        let elapsed = self.since.elapsed().as_secs_f64();
        if elapsed < 0.5 {
            return;
        }
        let per_s = |d: Duration| (d.as_secs_f64() * 1000.0 / elapsed) as i64;
        let m = metrics();
        let l = [self.labels[0].as_str(), self.labels[1].as_str()];
        m.busy_ms_per_s.with_label_values(&l).set(per_s(self.busy));
        m.idle_ms_per_s.with_label_values(&l).set(per_s(self.idle));
        m.backpressured_ms_per_s
            .with_label_values(&l)
            .set(per_s(self.backpressured));
        self.busy = Duration::ZERO;
        self.idle = Duration::ZERO;
        self.backpressured = Duration::ZERO;
        self.since = Instant::now();
    }
}

impl Actor {
    /// The loop. Inputs deliver barriers in epoch order; `seen[i]` counts the barriers
    /// input `i` delivered and `done` those this actor processed. Barrier `done + 1`
    /// is processed once every open input has delivered it. In exactly-once mode an
    /// input that already delivered it is not read meanwhile (alignment); in
    /// at-least-once mode it is, so records after the barrier may be counted in the
    /// snapshot and replayed again after a restore.
    pub async fn run(mut self) {
        let n = self.inputs.len();
        let mut open = vec![true; n];
        let mut seen = vec![0usize; n];
        let mut done = 0usize;
        let mut pending: VecDeque<(Barrier, Instant)> = VecDeque::new();
        let mut clock = ActorClock::new(&self.job_name, self.id);
        let align = self.mode == CheckpointMode::ExactlyOnce;
        loop {
            let waited = Instant::now();
            let (idx, msg) = if n == 1 {
                (0, self.inputs[0].recv().await)
            } else {
                let futs: Vec<_> = self
                    .inputs
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| open[*i] && !(align && seen[*i] > done))
                    .map(|(i, rx)| Box::pin(async move { (i, rx.recv().await) }))
                    .collect();
                if futs.is_empty() {
                    return;
                }
                select_all(futs).await.0
            };
            clock.idle += waited.elapsed();
            match msg {
                None => {
                    open[idx] = false;
                    if !open.iter().any(|o| *o) {
                        return;
                    }
                }
                Some(Message::Chunk(chunk)) => {
                    let started = Instant::now();
                    clock.records_in.inc_by(chunk.len() as u64);
                    if let Err(e) = self.on_chunk(chunk, &mut clock).await {
                        self.health.fail(e.to_string());
                    }
                    clock.busy += started.elapsed();
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
                    seen[idx] += 1;
                    if seen[idx] > done + pending.len() {
                        pending.push_back((b, Instant::now()));
                    }
                }
            }
            // Process every barrier that all open inputs have delivered.
            while !pending.is_empty() && open.iter().zip(&seen).all(|(o, s)| !*o || *s > done) {
                let (b, first_arrival) = pending.pop_front().expect("non-empty");
                done += 1;
                let alignment_ms = first_arrival.elapsed().as_millis() as u64;
                metrics()
                    .alignment_time
                    .with_label_values(&[&clock.labels[0], &clock.labels[1]])
                    .set(alignment_ms as i64);
                let stop = self.on_barrier(b, alignment_ms, &mut clock).await;
                clock.publish();
                if stop {
                    return;
                }
            }
        }
    }

    async fn on_chunk(&mut self, chunk: StreamChunk, clock: &mut ActorClock) -> Result<()> {
        if self.health.failure().is_some() {
            return Ok(());
        }
        failpoints(&self.job_name).await?;
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
            clock.records_out.inc_by(c.len() as u64);
            let sent = Instant::now();
            self.output.send(Message::Chunk(c)).await?;
            clock.backpressured += sent.elapsed();
        }
        Ok(())
    }

    /// Runs the barrier through the chain, hands over state at a checkpoint, forwards
    /// and acknowledges the barrier. Returns true when the actor should stop.
    async fn on_barrier(
        &mut self,
        barrier: Barrier,
        alignment_ms: u64,
        clock: &mut ActorClock,
    ) -> bool {
        if self.health.failure().is_none() {
            if let Err(e) = self.flush_chain(&barrier, clock).await {
                self.health.fail(e.to_string());
            }
        }
        if barrier.checkpoints(self.job) {
            let result = match self.health.failure() {
                Some(reason) => Err(reason),
                None => self.snapshot_chain(),
            };
            let _ = self.checkpoints.send(CheckpointPart {
                epoch: barrier.epoch,
                job: self.job,
                actor: self.id,
                result,
                alignment_ms,
            });
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

    fn snapshot_chain(&mut self) -> std::result::Result<Vec<StateDelta>, String> {
        let mut out = Vec::new();
        for op in &mut self.chain {
            match guard(|| op.snapshot()) {
                Ok(d) => out.extend(d),
                Err(e) => {
                    self.health.fail(e.to_string());
                    return Err(e.to_string());
                }
            }
        }
        Ok(out)
    }

    async fn flush_chain(&mut self, barrier: &Barrier, clock: &mut ActorClock) -> Result<()> {
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
            clock.records_out.inc_by(c.len() as u64);
            self.output.send(Message::Chunk(c)).await?;
        }
        Ok(())
    }
}

/// Test-only failure injection (inert unless `WEIR_FAILPOINTS=1`).
async fn failpoints(job_name: &str) -> Result<()> {
    if !weir_storage::failpoint::enabled() {
        return Ok(());
    }
    if let Some(action) = weir_storage::failpoint::take_once(&format!("actor.fail.{}", job_name)) {
        return Err(crate::error::ExecError::Internal(format!(
            "failpoint actor.fail.{} ({action}): injected actor failure",
            job_name
        )));
    }
    if let Some(ms) = weir_storage::failpoint::get(&format!("operator.slow.{}", job_name)) {
        let ms: u64 = ms.parse().unwrap_or(10);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    Ok(())
}
