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

use crate::barrier::{Barrier, Epoch, Message};
use crate::buffering::DataReceiver;
use crate::checkpoint::{BarrierTiming, CheckpointMode, CheckpointPart};
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
use tokio::sync::mpsc::UnboundedSender;
use weir_storage::state_snapshot::{DeltaData, StateDelta};

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

/// Where an actor reports the barriers it forwarded. A call, not a channel: the
/// coordinator counts the ack (and commits a completed epoch) on the actor's own
/// thread, so a read waiting for the epoch does not also wait for a coordinator task
/// to be scheduled.
pub type AckSink = Arc<dyn Fn(BarrierAck) + Send + Sync>;

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
    /// One dispatcher per consuming fragment (several when the planner shares a
    /// fragment between identical subqueries).
    Exchange(Vec<Dispatcher>),
    Hub {
        hub: Arc<RelationHub>,
        index: usize,
    },
}

impl ActorOutput {
    async fn send(&self, msg: Message) -> Result<()> {
        match self {
            ActorOutput::Exchange(ds) => {
                if let [d] = ds.as_slice() {
                    return d.dispatch(msg).await;
                }
                for d in ds {
                    d.dispatch(msg.clone()).await?;
                }
                Ok(())
            }
            ActorOutput::Hub { hub, index } => hub.publish(*index, msg).await,
        }
    }

    /// Passes the end of the job's backfill on inside the job: another job reading
    /// the hub gets its own from its deploy.
    async fn send_backfill_end(&self) -> Result<()> {
        match self {
            ActorOutput::Exchange(ds) => {
                for d in ds {
                    d.dispatch(Message::BackfillEnd).await?;
                }
                Ok(())
            }
            ActorOutput::Hub { .. } => Ok(()),
        }
    }

    /// Passes an unaligned cut on inside the job. Other jobs reading the hub cut at
    /// the checkpoint barrier itself.
    async fn send_cut(&self, barrier: &Barrier) -> Result<()> {
        match self {
            ActorOutput::Exchange(ds) => {
                for d in ds {
                    d.dispatch_cut(barrier).await?;
                }
                Ok(())
            }
            ActorOutput::Hub { .. } => Ok(()),
        }
    }
}

/// Waits for the next event: a lane barrier first, then the alignment timeout, then
/// any readable input. `None` when nothing can ever arrive again.
async fn next_event(
    inputs: &mut [DataReceiver],
    readable: &[usize],
    lane: Option<&mut tokio::sync::mpsc::UnboundedReceiver<Barrier>>,
    timeout_at: Option<Instant>,
) -> Option<Event> {
    let input = async {
        if readable.is_empty() {
            return std::future::pending::<Option<Event>>().await;
        }
        if inputs.len() == 1 {
            return Some(Event::Input(0, inputs[0].recv().await, false));
        }
        let futs: Vec<_> = inputs
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| readable.contains(i))
            .map(|(i, rx)| Box::pin(async move { (i, rx.recv().await) }))
            .collect();
        let ((i, m), _, _) = select_all(futs).await;
        Some(Event::Input(i, m, false))
    };
    let has_lane = lane.is_some();
    if readable.is_empty() && !has_lane && timeout_at.is_none() {
        return None;
    }
    let lane_next = async {
        match lane {
            Some(l) => match l.recv().await {
                Some(b) => Some(b),
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    };
    let timer = async {
        match timeout_at {
            Some(t) => tokio::time::sleep_until(t.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        b = lane_next => b.map(Event::Lane),
        _ = timer => Some(Event::AlignmentTimeout),
        e = input => e,
    }
}

pub struct Actor {
    pub id: ActorId,
    pub job: u64,
    /// The job's name: metric label and failpoint suffix.
    pub job_name: Arc<str>,
    pub inputs: Vec<DataReceiver>,
    /// Per receiver: which of the fragment's inputs it belongs to (a join's side).
    pub input_sides: Vec<usize>,
    pub chain: Vec<Box<dyn Operator>>,
    pub output: ActorOutput,
    pub acks: AckSink,
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
    /// The counters' values at the last publish (for the per-second rates).
    published_in: u64,
    published_out: u64,
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
            published_in: 0,
            published_out: 0,
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
        let (records_in, records_out) = (self.records_in.get(), self.records_out.get());
        let rate = |now: u64, was: u64| (now.saturating_sub(was) as f64 / elapsed) as i64;
        m.records_in_per_s
            .with_label_values(&l)
            .set(rate(records_in, self.published_in));
        m.records_out_per_s
            .with_label_values(&l)
            .set(rate(records_out, self.published_out));
        (self.published_in, self.published_out) = (records_in, records_out);
        self.busy = Duration::ZERO;
        self.idle = Duration::ZERO;
        self.backpressured = Duration::ZERO;
        self.since = Instant::now();
    }
}

/// An actor that stops (its job dropped or restarted with new actors) takes its
/// series out of `/metrics`, so that they do not pile up across restarts.
impl Drop for ActorClock {
    fn drop(&mut self) {
        let m = metrics();
        let l = [self.labels[0].as_str(), self.labels[1].as_str()];
        let _ = m.records_in.remove_label_values(&l);
        let _ = m.records_out.remove_label_values(&l);
        for g in [
            &m.records_in_per_s,
            &m.records_out_per_s,
            &m.busy_ms_per_s,
            &m.idle_ms_per_s,
            &m.backpressured_ms_per_s,
            &m.alignment_time,
        ] {
            let _ = g.remove_label_values(&l);
        }
    }
}

/// An unaligned checkpoint in progress at one actor.
struct Cut {
    barrier: Barrier,
    /// When its first copy (lane or marker) arrived.
    first_arrival: Instant,
    /// The operators' state at the cut; `None` while still aligning (only with an
    /// `aligned-checkpoint-timeout`).
    state: Option<std::result::Result<Vec<StateDelta>, String>>,
    timing: BarrierTiming,
    /// Inputs whose marker has not arrived yet.
    waiting: Vec<bool>,
    /// Per input: the chunks received after the cut and before the marker, i.e. the
    /// data the barrier overtook.
    inflight: Vec<Vec<StreamChunk>>,
}

/// What woke the actor up.
enum Event {
    Lane(Barrier),
    /// A message from input `i`; `true` when it came from the stash.
    Input(usize, Option<Message>, bool),
    /// The aligned phase of a checkpoint timed out: switch to unaligned.
    AlignmentTimeout,
}

/// Settings of an actor whose job runs unaligned checkpoints.
pub struct UnalignedSetup {
    pub lane: tokio::sync::mpsc::UnboundedReceiver<Barrier>,
    /// `execution.checkpointing.aligned-checkpoint-timeout`: zero cuts at the first
    /// arrival; otherwise the actor first aligns on the markers for this long.
    pub aligned_timeout: Duration,
    /// Uid prefix of this actor's overtaken data: `<prefix>.i<input>`.
    pub inflight_uid: String,
}

/// What [`Actor::run`]'s loop keeps between events.
struct Loop {
    /// Exactly-once: an input that delivered barrier `done + 1` is not read meanwhile.
    align: bool,
    open: Vec<bool>,
    /// Barriers each input delivered.
    seen: Vec<usize>,
    /// Barriers this actor processed.
    done: usize,
    /// Barriers not yet delivered by every open input, with their first arrival.
    pending: VecDeque<(Barrier, Instant)>,
    /// The unaligned checkpoint in progress, and the epoch of the last one.
    cut: Option<Cut>,
    last_cut: u64,
    /// Messages taken off a channel early (while a cut waits for its markers), in
    /// channel order; read before the channel itself. `None`: the channel closed.
    stash: Vec<VecDeque<Option<Message>>>,
    /// Each input's side: a join's two sides have different columns, so watermarks
    /// combine per side.
    sides: Vec<usize>,
    watermarks: Vec<crate::watermark::InputWatermarks>,
    /// Which stashed input goes first next.
    rotate: usize,
    /// Inputs not read yet: the operator's held side until every other input
    /// delivered its backfill's end, its first barrier or a cut's marker
    /// (`Operator::held_side`).
    held: Vec<bool>,
    /// Inputs that delivered [`Message::BackfillEnd`].
    backfilled: Vec<bool>,
    /// The backfill's end was passed on downstream.
    backfill_passed: bool,
}

impl Loop {
    fn new(actor: &Actor) -> Self {
        let n = actor.inputs.len();
        // A fragment whose first operator does not tell its inputs apart (a union of
        // HOP's branches, say) has one side: each input's watermark alone would run
        // ahead of the others' rows, and state downstream would be cleaned too early.
        let distinct = actor.chain.first().map_or(1, |op| op.sides());
        let sides: Vec<usize> = (0..n)
            .map(|i| match distinct {
                1 => 0,
                _ => actor.input_sides.get(i).copied().unwrap_or(0),
            })
            .collect();
        let watermarks = (0..=sides.iter().copied().max().unwrap_or(0))
            .map(|_| crate::watermark::InputWatermarks::new(n))
            .collect();
        let held_side = actor.chain.first().and_then(|op| op.held_side());
        let held = (0..n)
            .map(|i| held_side.is_some_and(|h| actor.input_sides.get(i) == Some(&h)))
            .collect();
        Loop {
            held,
            backfilled: vec![false; n],
            backfill_passed: false,
            align: actor.mode == CheckpointMode::ExactlyOnce,
            open: vec![true; n],
            seen: vec![0; n],
            done: 0,
            pending: VecDeque::new(),
            cut: None,
            last_cut: 0,
            stash: vec![VecDeque::new(); n],
            sides,
            watermarks,
            rotate: 0,
        }
    }
}

impl Actor {
    /// The loop. Inputs deliver barriers in epoch order; `seen[i]` counts the barriers
    /// input `i` delivered and `done` those this actor processed. Barrier `done + 1`
    /// is processed once every open input has delivered it. In exactly-once mode an
    /// input that already delivered it is not read meanwhile (alignment); in
    /// at-least-once mode it is, so records after the barrier may be counted in the
    /// snapshot and replayed again after a restore.
    ///
    /// Unaligned checkpoints decouple the checkpoint from that alignment: the
    /// barrier's copy on the priority lane triggers the snapshot at once (after
    /// `on_checkpoint_cut`), the cut is passed on downstream, and every chunk that
    /// still arrives on an input before that input's marker is both processed and
    /// recorded as in-flight data of the checkpoint. The data barrier keeps its role of
    /// committing the epoch for readers, aligned as before.
    pub async fn run(
        mut self,
        mut unaligned: Option<UnalignedSetup>,
        initial: Vec<(usize, StreamChunk)>,
    ) {
        let mut l = Loop::new(&self);
        let mut clock = ActorClock::new(&self.job_name, self.id);
        // Data an unaligned checkpoint overtook: processed before anything new.
        for (side, chunk) in initial {
            if let Err(e) = self.on_chunk(side, chunk, &mut clock).await {
                self.health.fail(e.to_string());
            }
        }
        loop {
            if let Some(c) = &mut l.cut {
                self.drain_overtaken(c, &mut l.stash);
            }
            self.advance_cut(&mut l, &unaligned, &mut clock).await;
            let waited = Instant::now();
            let event = self.next_event(&mut l, &mut unaligned).await;
            clock.idle += waited.elapsed();
            let Some(event) = event else {
                return;
            };
            if !self.on_event(event, &mut l, &mut clock).await {
                return;
            }
            self.advance_cut(&mut l, &unaligned, &mut clock).await;
            self.process_aligned_barriers(&mut l, unaligned.is_none(), &mut clock)
                .await;
        }
    }

    /// The next thing to handle: the priority lane first, then stashed messages, then
    /// the inputs that may be read (not those already aligned on a barrier, nor, while
    /// a cut aligns, those whose marker is in). `None` once there is nothing more.
    async fn next_event(
        &mut self,
        l: &mut Loop,
        unaligned: &mut Option<UnalignedSetup>,
    ) -> Option<Event> {
        let n = l.open.len();
        // The backfill's end, a barrier or a cut's marker on an input comes after
        // all its backfill.
        let marked = |i: usize| l.cut.as_ref().is_some_and(|c| !c.waiting[i]);
        let in_past_backfill =
            |i: usize| l.backfilled[i] || l.seen[i] > 0 || !l.open[i] || marked(i);
        if l.held.contains(&true) && (0..n).all(|i| l.held[i] || in_past_backfill(i)) {
            l.held.fill(false);
        }
        let aligning_cut = l.cut.as_ref().filter(|c| c.state.is_none());
        let readable: Vec<usize> = (0..n)
            .filter(|&i| l.open[i] && !l.held[i] && !(l.align && l.seen[i] > l.done))
            .filter(|&i| aligning_cut.is_none_or(|c| c.waiting[i]))
            .collect();
        let timeout_at = match (aligning_cut, &unaligned) {
            (Some(c), Some(u)) => Some(c.first_arrival + u.aligned_timeout),
            _ => None,
        };
        // Stashed inputs take turns, so one cannot starve the others.
        l.rotate = l.rotate.wrapping_add(1);
        let stashed = (0..n)
            .map(|k| (k + l.rotate) % n)
            .find(|i| readable.contains(i) && !l.stash[*i].is_empty());
        // The lane goes first, also ahead of stashed data.
        let lane_now = unaligned.as_mut().and_then(|u| u.lane.try_recv().ok());
        match (lane_now, stashed) {
            (Some(b), _) => Some(Event::Lane(b)),
            (None, Some(i)) => Some(Event::Input(i, l.stash[i].pop_front().flatten(), true)),
            (None, None) => {
                let lane = unaligned.as_mut().map(|u| &mut u.lane);
                next_event(&mut self.inputs, &readable, lane, timeout_at).await
            }
        }
    }

    /// Handles one event; `false` once every input has closed.
    async fn on_event(&mut self, event: Event, l: &mut Loop, clock: &mut ActorClock) -> bool {
        match event {
            Event::Lane(b) => {
                if b.checkpoints(self.job) && b.epoch > l.last_cut && l.cut.is_none() {
                    l.cut = Some(self.begin_cut(b, &l.open));
                }
            }
            Event::AlignmentTimeout => {}
            Event::Input(idx, None, _) => {
                l.open[idx] = false;
                if let Some(c) = &mut l.cut {
                    c.waiting[idx] = false;
                }
                self.pass_backfill_end(l).await;
                return l.open.iter().any(|o| *o);
            }
            Event::Input(idx, Some(Message::BackfillEnd), _) => {
                l.backfilled[idx] = true;
                self.pass_backfill_end(l).await;
            }
            Event::Input(idx, Some(Message::Chunk(chunk)), stashed) => {
                let started = Instant::now();
                clock.records_in.inc_by(chunk.len() as u64);
                // Stashed chunks were recorded when they were taken off the channel.
                if let Some(c) = l
                    .cut
                    .as_mut()
                    .filter(|c| !stashed && c.state.is_some() && c.waiting[idx])
                {
                    c.inflight[idx].push(chunk.clone());
                }
                if let Err(e) = self.on_chunk(l.sides[idx], chunk, clock).await {
                    self.health.fail(e.to_string());
                }
                clock.busy += started.elapsed();
            }
            Event::Input(idx, Some(Message::Watermark(w)), _) => {
                // Closing windows is work: it counts as busy time.
                let started = Instant::now();
                self.on_input_watermark(idx, w, l, clock).await;
                clock.busy += started.elapsed();
            }
            Event::Input(idx, Some(Message::Marker(b)), _) => {
                // A marker can beat its lane copy: then it starts the cut.
                if b.epoch > l.last_cut && l.cut.is_none() {
                    l.cut = Some(self.begin_cut(b.clone(), &l.open));
                }
                if let Some(c) = l.cut.as_mut().filter(|c| c.barrier.epoch == b.epoch) {
                    c.waiting[idx] = false;
                }
            }
            Event::Input(idx, Some(Message::Barrier(b)), _) => {
                l.seen[idx] += 1;
                if l.seen[idx] > l.done + l.pending.len() {
                    l.pending.push_back((b, Instant::now()));
                }
            }
        }
        true
    }

    /// Passes the backfill's end on once every input delivered it (or closed), so
    /// that a held side downstream in the job may be read.
    async fn pass_backfill_end(&mut self, l: &mut Loop) {
        let ended = (0..l.open.len()).all(|i| l.backfilled[i] || !l.open[i]);
        if l.backfill_passed || !ended || !l.backfilled.contains(&true) {
            return;
        }
        l.backfill_passed = true;
        let _ = self.output.send_backfill_end().await;
    }

    /// Combines input `idx`'s watermark with the other inputs of its side; a new
    /// combined watermark passes through the chain and on downstream, after any rows
    /// it made an operator emit (windows it closed).
    async fn on_input_watermark(
        &mut self,
        idx: usize,
        w: crate::barrier::Watermark,
        l: &mut Loop,
        clock: &mut ActorClock,
    ) {
        let side = l.sides[idx];
        let side_open: Vec<bool> = (0..l.open.len())
            .map(|k| l.open[k] && l.sides[k] == side)
            .collect();
        let combined = l.watermarks[side].observe(idx, w, &side_open);
        let (Some(w), None) = (combined, self.health.failure()) else {
            return;
        };
        let (chunks, ws) = match self.run_watermark(side, w) {
            Ok(out) => out,
            Err(e) => {
                self.health.fail(e.to_string());
                return;
            }
        };
        for c in chunks {
            clock.records_out.inc_by(c.len() as u64);
            if self.output.send(Message::Chunk(c)).await.is_err() {
                return;
            }
        }
        for w in ws {
            let _ = self.output.send(Message::Watermark(w)).await;
        }
    }

    /// Runs a watermark through the chain: each operator first gets the rows the one
    /// before it emitted for the watermark, then the watermark.
    fn run_watermark(
        &mut self,
        side: usize,
        w: crate::barrier::Watermark,
    ) -> Result<(Vec<StreamChunk>, Vec<crate::barrier::Watermark>)> {
        self.run_watermarks_from(0, side, vec![w])
    }

    /// [`Self::run_watermark`] of `ws` from operator `start` on.
    fn run_watermarks_from(
        &mut self,
        start: usize,
        side: usize,
        mut ws: Vec<crate::barrier::Watermark>,
    ) -> Result<(Vec<StreamChunk>, Vec<crate::barrier::Watermark>)> {
        let mut carried: Vec<StreamChunk> = Vec::new();
        for (k, op) in self.chain.iter_mut().enumerate().skip(start) {
            let mut chunks = Vec::new();
            for c in carried {
                guard(|| op.process_chunk(c, &mut chunks))?;
            }
            let mut next = Vec::new();
            for w in ws {
                next.extend(guard(|| {
                    if k == 0 {
                        op.process_watermark_from(side, w, &mut chunks)
                    } else {
                        op.process_watermark(w, &mut chunks)
                    }
                })?);
            }
            (carried, ws) = (chunks, next);
        }
        Ok((carried, ws))
    }

    /// Processes every barrier that all open inputs have delivered, in order.
    async fn process_aligned_barriers(
        &mut self,
        l: &mut Loop,
        snapshot_here: bool,
        clock: &mut ActorClock,
    ) {
        while !l.pending.is_empty() && l.open.iter().zip(&l.seen).all(|(o, s)| !*o || *s > l.done) {
            let (b, first_arrival) = l.pending.pop_front().expect("non-empty");
            l.done += 1;
            let timing = BarrierTiming::aligned_since(first_arrival);
            metrics()
                .alignment_time
                .with_label_values(&[&clock.labels[0], &clock.labels[1]])
                .set(timing.alignment_ms as i64);
            self.on_barrier(b, timing, snapshot_here, clock).await;
            clock.publish();
        }
    }

    /// Takes the cut when it is due, and reports it once every marker is in.
    async fn advance_cut(
        &mut self,
        l: &mut Loop,
        unaligned: &Option<UnalignedSetup>,
        clock: &mut ActorClock,
    ) {
        let Loop {
            cut,
            last_cut,
            stash,
            ..
        } = l;
        let Some(c) = cut else {
            return;
        };
        let all_in = !c.waiting.iter().any(|w| *w);
        let timed_out = unaligned
            .as_ref()
            .is_some_and(|u| c.first_arrival.elapsed() >= u.aligned_timeout);
        if c.state.is_none() && (all_in || timed_out) {
            self.take_cut(c, clock).await;
            // Chunks taken off a channel earlier and not processed yet precede the
            // cut on their input: they are overtaken data too, ahead of what follows.
            for (i, queued) in stash.iter().enumerate() {
                let mut overtaken: Vec<StreamChunk> = queued
                    .iter()
                    .filter_map(|m| match m {
                        Some(Message::Chunk(chunk)) => Some(chunk.clone()),
                        _ => None,
                    })
                    .collect();
                overtaken.append(&mut c.inflight[i]);
                c.inflight[i] = overtaken;
            }
        }
        if c.state.is_some() && all_in {
            let c = cut.take().expect("cut in progress");
            *last_cut = c.barrier.epoch;
            let prefix = unaligned
                .as_ref()
                .map(|u| u.inflight_uid.as_str())
                .unwrap_or_default();
            self.finish_cut(c, prefix);
        }
    }

    /// After the cut, takes whatever is already queued on the inputs still waiting for
    /// their marker, without processing it: that is the data the barrier overtook. It
    /// is recorded now and processed later from the stash, in order. Emptying the
    /// queues is what lets the markers (and the upstream actors) through quickly under
    /// backpressure, so the checkpoint does not wait for the queued data to be
    /// processed.
    fn drain_overtaken(&mut self, c: &mut Cut, stash: &mut [VecDeque<Option<Message>>]) {
        if c.state.is_none() {
            return;
        }
        for (i, rx) in self.inputs.iter_mut().enumerate() {
            while c.waiting[i] {
                match rx.try_recv() {
                    Ok(Message::Marker(b)) if b.epoch == c.barrier.epoch => c.waiting[i] = false,
                    Ok(m) => {
                        if let Message::Chunk(chunk) = &m {
                            c.inflight[i].push(chunk.clone());
                        }
                        stash[i].push_back(Some(m));
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                        c.waiting[i] = false;
                        stash[i].push_back(None);
                    }
                }
            }
        }
    }

    fn begin_cut(&self, barrier: Barrier, open: &[bool]) -> Cut {
        tracing::debug!(
            actor = self.id,
            epoch = barrier.epoch,
            "unaligned cut begins"
        );
        Cut {
            barrier,
            first_arrival: Instant::now(),
            state: None,
            timing: BarrierTiming::default(),
            waiting: open.to_vec(),
            inflight: vec![Vec::new(); open.len()],
        }
    }

    /// The cut itself: deferred output out, state snapshot, then the cut passed on
    /// downstream (lanes first, then markers after the output it follows).
    async fn take_cut(&mut self, c: &mut Cut, clock: &mut ActorClock) {
        c.timing = BarrierTiming::aligned_since(c.first_arrival);
        let began = Instant::now();
        if self.health.failure().is_none() {
            if let Err(e) = self.run_chain_cut(clock).await {
                self.health.fail(e.to_string());
            }
        }
        c.state = Some(match self.health.failure() {
            Some(reason) => Err(reason),
            None => self.snapshot_chain(c.barrier.epoch),
        });
        c.timing.sync_ms = began.elapsed().as_millis() as u64;
        if self.output.send_cut(&c.barrier).await.is_err() {
            tracing::debug!(actor = self.id, "downstream gone while passing a cut");
        }
    }

    fn finish_cut(&mut self, c: Cut, inflight_prefix: &str) {
        tracing::debug!(
            actor = self.id,
            epoch = c.barrier.epoch,
            overtaken_chunks = c.inflight.iter().map(Vec::len).sum::<usize>(),
            since_first_arrival_ms = c.first_arrival.elapsed().as_millis() as u64,
            "unaligned cut complete"
        );
        let result = c.state.expect("cut taken").map(|mut deltas| {
            for (i, chunks) in c.inflight.into_iter().enumerate() {
                if !chunks.is_empty() {
                    deltas.push(StateDelta {
                        uid: format!("{inflight_prefix}.i{i}"),
                        data: DeltaData::Rows(
                            chunks
                                .into_iter()
                                .map(|c| (c.op_codes(), c.batch))
                                .collect(),
                        ),
                    });
                }
            }
            deltas
        });
        let _ = self.checkpoints.send(CheckpointPart {
            epoch: c.barrier.epoch,
            job: self.job,
            actor: self.id,
            result,
            timing: c.timing,
        });
    }

    async fn run_chain_cut(&mut self, clock: &mut ActorClock) -> Result<()> {
        let mut carried: Vec<StreamChunk> = Vec::new();
        for op in &mut self.chain {
            let mut next = Vec::new();
            for c in carried {
                guard(|| op.process_chunk(c, &mut next))?;
            }
            guard(|| op.on_checkpoint_cut(&mut next))?;
            carried = next;
        }
        for c in carried {
            clock.records_out.inc_by(c.len() as u64);
            self.output.send(Message::Chunk(c)).await?;
        }
        Ok(())
    }

    async fn on_chunk(
        &mut self,
        side: usize,
        chunk: StreamChunk,
        clock: &mut ActorClock,
    ) -> Result<()> {
        if self.health.failure().is_some() {
            return Ok(());
        }
        failpoints(&self.job_name).await?;
        let mut current = vec![chunk];
        for (k, op) in self.chain.iter_mut().enumerate() {
            let mut next = Vec::new();
            for c in current {
                if k == 0 {
                    guard(|| op.process_chunk_from(side, c, &mut next))?;
                } else {
                    guard(|| op.process_chunk(c, &mut next))?;
                }
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
    /// and acknowledges the barrier.
    async fn on_barrier(
        &mut self,
        barrier: Barrier,
        mut timing: BarrierTiming,
        snapshot_here: bool,
        clock: &mut ActorClock,
    ) {
        let began = Instant::now();
        if self.health.failure().is_none() {
            if let Err(e) = self.send_clock_watermarks(clock).await {
                self.health.fail(e.to_string());
            }
        }
        if self.health.failure().is_none() {
            if let Err(e) = self.flush_chain(&barrier, clock).await {
                self.health.fail(e.to_string());
            }
        }
        if snapshot_here && barrier.checkpoints(self.job) {
            let result = match self.health.failure() {
                Some(reason) => Err(reason),
                None => self.snapshot_chain(barrier.epoch),
            };
            timing.sync_ms = began.elapsed().as_millis() as u64;
            let _ = self.checkpoints.send(CheckpointPart {
                epoch: barrier.epoch,
                job: self.job,
                actor: self.id,
                result,
                timing,
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
        (self.acks)(BarrierAck {
            epoch: barrier.epoch,
            actor: self.id,
        });
    }

    /// The chain's clock watermarks (`Operator::clock_watermarks`), each run through
    /// the operators after the one that made it, and sent on after the rows they
    /// made those emit (windows they closed).
    async fn send_clock_watermarks(&mut self, clock: &mut ActorClock) -> Result<()> {
        for k in 0..self.chain.len() {
            let ws = guard(|| Ok(self.chain[k].clock_watermarks()))?;
            if ws.is_empty() {
                continue;
            }
            let (chunks, ws) = self.run_watermarks_from(k + 1, 0, ws)?;
            for c in chunks {
                clock.records_out.inc_by(c.len() as u64);
                self.output.send(Message::Chunk(c)).await?;
            }
            for w in ws {
                self.output.send(Message::Watermark(w)).await?;
            }
        }
        Ok(())
    }

    fn snapshot_chain(&mut self, epoch: Epoch) -> std::result::Result<Vec<StateDelta>, String> {
        let mut out = Vec::new();
        for op in &mut self.chain {
            match guard(|| op.snapshot(epoch)) {
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

#[cfg(test)]
mod tests {
    //! A harness that feeds one actor scripted messages on its inputs and records what
    //! comes out, what it acknowledges and what it snapshots.

    use super::*;
    use crate::barrier::BarrierKind;
    use crate::checkpoint::CheckpointScope;
    use crate::exchange::ExchangeKind;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use tokio::sync::mpsc;
    use weir_storage::state_snapshot::KeyedEntries;

    /// Passes chunks on and snapshots how many rows it has seen (as one keyed entry).
    struct Counter(i64);

    impl Operator for Counter {
        fn name(&self) -> &str {
            "Counter"
        }
        fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
            self.0 += chunk.len() as i64;
            out.push(chunk);
            Ok(())
        }
        fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
            Ok(vec![StateDelta {
                uid: "counter".into(),
                data: DeltaData::Keyed(KeyedEntries::from_entries([(
                    0,
                    b"n".to_vec(),
                    Some(self.0.to_be_bytes().to_vec()),
                )])),
            }])
        }
    }

    fn rows(values: &[i64]) -> Message {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))])
            .unwrap();
        Message::Chunk(StreamChunk::inserts(batch))
    }

    fn checkpoint(epoch: Epoch, job: u64) -> Message {
        Message::Barrier(Barrier {
            epoch,
            kind: BarrierKind::Checkpoint(Arc::new(CheckpointScope {
                jobs: [job].into_iter().collect(),
            })),
        })
    }

    /// What came out of the actor: values of chunks, and barriers as `-epoch`.
    fn shown(m: &Message) -> Vec<i64> {
        match m {
            Message::Chunk(c) => {
                let a = c
                    .batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                a.values().to_vec()
            }
            Message::Barrier(b) => vec![-(b.epoch as i64)],
            _ => vec![],
        }
    }

    struct Harness {
        inputs: Vec<mpsc::Sender<Message>>,
        output: mpsc::Receiver<Message>,
        acks: mpsc::UnboundedReceiver<BarrierAck>,
        parts: mpsc::UnboundedReceiver<CheckpointPart>,
    }

    fn start(n_inputs: usize, mode: CheckpointMode) -> Harness {
        start_with_sides(vec![0; n_inputs], mode)
    }

    /// `sides`: per input, the fragment input it belongs to (as deploy numbers them).
    fn start_with_sides(sides: Vec<usize>, mode: CheckpointMode) -> Harness {
        start_with_chain(sides, mode, Box::new(Counter(0)))
    }

    fn start_with_chain(sides: Vec<usize>, mode: CheckpointMode, op: Box<dyn Operator>) -> Harness {
        let n_inputs = sides.len();
        let (inputs, receivers): (Vec<_>, Vec<_>) =
            (0..n_inputs).map(|_| mpsc::channel(16)).unzip();
        let (out_tx, output) = mpsc::channel(64);
        let (acks_tx, acks) = mpsc::unbounded_channel();
        let (parts_tx, parts) = mpsc::unbounded_channel();
        let actor = Actor {
            id: 1,
            job: 7,
            job_name: "test".into(),
            inputs: receivers.into_iter().map(DataReceiver::from).collect(),
            input_sides: sides,
            chain: vec![op],
            output: ActorOutput::Exchange(vec![Dispatcher::new(
                &ExchangeKind::Single,
                &[],
                vec![out_tx.into()],
                128,
            )
            .unwrap()]),
            acks: Arc::new(move |ack| {
                let _ = acks_tx.send(ack);
            }),
            checkpoints: parts_tx,
            mode,
            health: Arc::new(JobHealth {
                failure: Mutex::new(None),
                job: 7,
                store: None,
                supervisor: None,
            }),
        };
        tokio::spawn(actor.run(None, Vec::new()));
        Harness {
            inputs,
            output,
            acks,
            parts,
        }
    }

    /// Aligned (exactly once): rows after a barrier on one input wait until every input
    /// delivered it; the snapshot counts exactly the rows before the barrier; the
    /// barrier is acknowledged once.
    #[tokio::test]
    async fn aligned_barriers_hold_back_later_rows_and_cut_a_consistent_snapshot() {
        let mut h = start(2, CheckpointMode::ExactlyOnce);
        for m in [rows(&[1]), checkpoint(1, 7), rows(&[2, 3])] {
            h.inputs[0].send(m).await.unwrap();
        }
        // Input 0 is blocked after its barrier: only its first rows come out.
        assert_eq!(shown(&h.output.recv().await.unwrap()), vec![1]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            h.output.try_recv().is_err(),
            "rows after the barrier came out early"
        );
        for m in [rows(&[10]), checkpoint(1, 7)] {
            h.inputs[1].send(m).await.unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..3 {
            out.extend(shown(&h.output.recv().await.unwrap()));
        }
        assert_eq!(
            out,
            vec![10, -1, 2, 3],
            "before the barrier, the barrier, after"
        );
        let part = h.parts.recv().await.unwrap();
        assert_eq!((part.epoch, part.job), (1, 7));
        let deltas = part.result.unwrap();
        let DeltaData::Keyed(entries) = &deltas[0].data else {
            panic!("keyed")
        };
        let n = i64::from_be_bytes(
            entries.to_entries()[0]
                .2
                .clone()
                .unwrap()
                .try_into()
                .unwrap(),
        );
        assert_eq!(n, 2, "the snapshot counts the rows before the barrier only");
        let ack = h.acks.recv().await.unwrap();
        assert_eq!(ack.epoch, 1);
        assert!(h.acks.try_recv().is_err(), "one ack per barrier");
    }

    /// A counter that holds side 0, as a lookup join does.
    struct HoldsLeft;

    impl Operator for HoldsLeft {
        fn name(&self) -> &str {
            "HoldsLeft"
        }
        fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
            out.push(chunk);
            Ok(())
        }
        fn sides(&self) -> usize {
            2
        }
        fn held_side(&self) -> Option<usize> {
            Some(0)
        }
    }

    /// A held side is not read until every other input delivered its first barrier
    /// (a new view's backfill comes before it), in both checkpoint modes.
    #[tokio::test]
    async fn a_held_side_waits_for_the_other_sides_first_barrier() {
        for mode in [CheckpointMode::ExactlyOnce, CheckpointMode::AtLeastOnce] {
            let mut h = start_with_chain(vec![0, 1, 1], mode, Box::new(HoldsLeft));
            h.inputs[0].send(rows(&[1])).await.unwrap();
            h.inputs[1].send(rows(&[10])).await.unwrap();
            assert_eq!(shown(&h.output.recv().await.unwrap()), vec![10]);
            for m in [rows(&[11]), checkpoint(1, 7)] {
                h.inputs[2].send(m).await.unwrap();
            }
            assert_eq!(shown(&h.output.recv().await.unwrap()), vec![11]);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                h.output.try_recv().is_err(),
                "the held side was read before input 1's first barrier ({mode:?})"
            );
            h.inputs[1].send(checkpoint(1, 7)).await.unwrap();
            assert_eq!(shown(&h.output.recv().await.unwrap()), vec![1]);
            h.inputs[0].send(checkpoint(1, 7)).await.unwrap();
            assert_eq!(shown(&h.output.recv().await.unwrap()), vec![-1]);
        }
    }

    /// A new view's backfill ends with [`Message::BackfillEnd`] on every channel: the
    /// held side is read once the other sides' backfill ended, before any barrier
    /// (which comes only after the whole backfill is sent), and the end is passed on
    /// once every input delivered it.
    #[tokio::test]
    async fn a_held_side_is_read_once_the_other_sides_backfill_ended() {
        let mut h = start_with_chain(
            vec![0, 1, 1],
            CheckpointMode::ExactlyOnce,
            Box::new(HoldsLeft),
        );
        h.inputs[0].send(rows(&[1])).await.unwrap();
        for i in [1, 2] {
            h.inputs[i].send(rows(&[10 + i as i64])).await.unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..2 {
            out.extend(shown(&h.output.recv().await.unwrap()));
        }
        out.sort();
        assert_eq!(out, vec![11, 12]);
        h.inputs[1].send(Message::BackfillEnd).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            h.output.try_recv().is_err(),
            "the held side was read before input 2's backfill ended"
        );
        h.inputs[2].send(Message::BackfillEnd).await.unwrap();
        assert_eq!(shown(&h.output.recv().await.unwrap()), vec![1]);
        h.inputs[0].send(Message::BackfillEnd).await.unwrap();
        assert!(matches!(
            h.output.recv().await.unwrap(),
            Message::BackfillEnd
        ));
        h.inputs[0].send(rows(&[2])).await.unwrap();
        assert_eq!(shown(&h.output.recv().await.unwrap()), vec![2]);
    }

    /// At least once: no input is blocked, so rows after a barrier on one input may
    /// pass before the other input's barrier (and count in that snapshot).
    #[tokio::test]
    async fn at_least_once_does_not_block_an_input_after_its_barrier() {
        let mut h = start(2, CheckpointMode::AtLeastOnce);
        for m in [rows(&[1]), checkpoint(1, 7), rows(&[2])] {
            h.inputs[0].send(m).await.unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..2 {
            out.extend(shown(&h.output.recv().await.unwrap()));
        }
        assert_eq!(out, vec![1, 2], "the row after the barrier passed at once");
        h.inputs[1].send(checkpoint(1, 7)).await.unwrap();
        assert_eq!(shown(&h.output.recv().await.unwrap()), vec![-1]);
        assert_eq!(h.acks.recv().await.unwrap().epoch, 1);
    }

    /// A union's inputs (the fragment's inputs 0 and 1, as HOP's branches are) pass on
    /// the minimum of their watermarks, not each one alone: a watermark of one branch
    /// that ran ahead would let state downstream be cleaned under the other's rows.
    #[tokio::test]
    async fn a_union_passes_on_the_minimum_of_its_inputs_watermarks() {
        use datafusion::common::ScalarValue;
        let mut h = start_with_sides(vec![0, 1], CheckpointMode::ExactlyOnce);
        let wm = |v: i64| {
            Message::Watermark(crate::barrier::Watermark {
                column: 0,
                value: ScalarValue::Int64(Some(v)),
            })
        };
        let value = |m: Message| match m {
            Message::Watermark(w) => w.value,
            other => panic!("not a watermark: {other:?}"),
        };
        h.inputs[0].send(wm(100)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            h.output.try_recv().is_err(),
            "one input's watermark passed alone"
        );
        h.inputs[1].send(wm(40)).await.unwrap();
        assert_eq!(
            value(h.output.recv().await.unwrap()),
            ScalarValue::Int64(Some(40))
        );
        h.inputs[1].send(wm(300)).await.unwrap();
        assert_eq!(
            value(h.output.recv().await.unwrap()),
            ScalarValue::Int64(Some(100))
        );
    }
}
