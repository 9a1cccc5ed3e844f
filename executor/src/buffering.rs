//! Latency against throughput: how long rows wait to be batched where they enter the
//! dataflow (Flink's `execution.buffer-timeout.interval`), and how much data may queue
//! on a channel between two actors (Flink's buffer debloating).
//!
//! Where Weir batches: a chunk is an Arrow batch, and operators and exchanges forward
//! what they produce as soon as they produce it (a hash exchange splits a chunk, it
//! does not hold parts back). Batches are formed by the sources, so the buffer timeout
//! applies there: a generator paced to a wall-clock rate and the Kafka reader write a
//! batch when it is full or when its oldest row has waited the timeout.
//!
//! Debloating ([`InFlight`]): channels are bounded in messages, and a message can hold
//! one row or 50,000. Under backpressure a checkpoint barrier waits behind everything
//! queued, so with debloating on each channel also bounds the *rows* queued on it to
//! what its consumer processed in the last `target` (measured, not configured): a
//! barrier then waits about `target` per channel, whatever the batch sizes.

use crate::barrier::Message;
use crate::error::{ExecError, Result};
use crate::exchange::CHANNEL_CAPACITY;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{self, error::TryRecvError};
use tokio::sync::Notify;

/// `execution.buffer-timeout.interval`: how long a source waits to fill a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferTimeout {
    /// `0`: every row is sent as soon as it is there (smallest latency, most batches).
    Immediate,
    /// A batch is sent when full or when its oldest row has waited this long
    /// (Flink's default, 100 ms).
    After(Duration),
    /// `-1`: only full batches are sent (most throughput; a slow source's rows wait).
    FullOnly,
}

impl Default for BufferTimeout {
    fn default() -> Self {
        BufferTimeout::After(Duration::from_millis(100))
    }
}

impl BufferTimeout {
    /// When a batch whose oldest row arrived at `oldest` (an instant, or a time since
    /// a run's start) must be sent at the latest; `None`: only when full.
    pub fn deadline<T: std::ops::Add<Duration, Output = T>>(&self, oldest: T) -> Option<T> {
        match self {
            BufferTimeout::Immediate => Some(oldest),
            BufferTimeout::After(d) => Some(oldest + *d),
            BufferTimeout::FullOnly => None,
        }
    }
}

/// Buffer debloating (`taskmanager.network.memory.buffer-debloat.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debloat {
    /// `...buffer-debloat.enabled` (default false, as in Flink).
    pub enabled: bool,
    /// `...buffer-debloat.target` (default 1 s): the time a channel's queued rows
    /// should take its consumer.
    pub target: Duration,
}

impl Default for Debloat {
    fn default() -> Self {
        Self {
            enabled: false,
            target: Duration::from_secs(1),
        }
    }
}

/// Both knobs, as a job runs with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Buffering {
    pub timeout: BufferTimeout,
    pub debloat: Debloat,
}

/// The fewest rows a debloated channel admits, so that a consumer that has processed
/// nothing yet (or is idle) is never starved of work.
const MIN_BUDGET_ROWS: usize = 1_024;
/// How often the consumer's throughput is measured (Flink's
/// `buffer-debloat.period`, 200 ms).
const PERIOD: Duration = Duration::from_millis(200);

/// The rows queued on one channel and the most it may hold, shared by the sender and
/// the receiving actor. The budget only changes when debloating is on.
pub struct InFlight {
    queued: AtomicUsize,
    budget: AtomicUsize,
    /// Rows the consumer took since the last measurement, and when that started (ns
    /// since `epoch`).
    taken: AtomicUsize,
    period_start_ns: AtomicU64,
    epoch: Instant,
    target: Duration,
    freed: Notify,
}

impl InFlight {
    /// `None` when debloating is off: channels are then bounded in messages only.
    pub fn new(debloat: Debloat) -> Option<Arc<Self>> {
        debloat.enabled.then(|| {
            Arc::new(Self {
                queued: AtomicUsize::new(0),
                budget: AtomicUsize::new(MIN_BUDGET_ROWS),
                taken: AtomicUsize::new(0),
                period_start_ns: AtomicU64::new(0),
                epoch: Instant::now(),
                target: debloat.target,
                freed: Notify::new(),
            })
        })
    }

    /// Waits until `rows` more may be queued, then counts them. A channel with nothing
    /// queued always admits one message, however large, so no chunk waits forever.
    pub async fn admit(&self, rows: usize) {
        self.room_for(rows).await;
        self.queued.fetch_add(rows, Ordering::AcqRel);
    }

    /// Whether `rows` more may be queued now.
    fn fits(&self, rows: usize) -> bool {
        let queued = self.queued.load(Ordering::Acquire);
        queued == 0 || queued + rows <= self.budget.load(Ordering::Acquire)
    }

    /// Waits until `rows` more may be queued, without counting them.
    async fn room_for(&self, rows: usize) {
        loop {
            let freed = self.freed.notified();
            if self.fits(rows) {
                return;
            }
            freed.await;
        }
    }

    /// The consumer took `rows` off the channel: they no longer count, and they count
    /// towards its measured throughput. Every `PERIOD` the budget becomes what the
    /// consumer took per `target` at that pace.
    pub fn taken(&self, rows: usize) {
        self.queued.fetch_sub(rows, Ordering::AcqRel);
        let taken = self.taken.fetch_add(rows, Ordering::AcqRel) + rows;
        let now = self.epoch.elapsed().as_nanos() as u64;
        let start = self.period_start_ns.load(Ordering::Acquire);
        let elapsed = Duration::from_nanos(now.saturating_sub(start));
        if elapsed >= PERIOD
            && self
                .period_start_ns
                .compare_exchange(start, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.taken.fetch_sub(taken, Ordering::AcqRel);
            let per_target = taken as f64 * self.target.as_secs_f64() / elapsed.as_secs_f64();
            self.budget.store(
                (per_target as usize).max(MIN_BUDGET_ROWS),
                Ordering::Release,
            );
        }
        self.freed.notify_waiters();
    }

    /// Rows queued now and the current budget (for tests and metrics).
    pub fn queued_and_budget(&self) -> (usize, usize) {
        (
            self.queued.load(Ordering::Acquire),
            self.budget.load(Ordering::Acquire),
        )
    }
}

/// A bounded channel between two actors: `CHANNEL_CAPACITY` messages, and with
/// debloating on also the rows its consumer takes in the target time.
pub fn data_channel(debloat: Debloat) -> (DataSender, DataReceiver) {
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let in_flight = InFlight::new(debloat);
    (
        DataSender {
            tx,
            in_flight: in_flight.clone(),
        },
        DataReceiver { rx, in_flight },
    )
}

/// The sending end of a [`data_channel`].
#[derive(Clone)]
pub struct DataSender {
    tx: mpsc::Sender<Message>,
    in_flight: Option<Arc<InFlight>>,
}

impl DataSender {
    /// Sends `msg`, waiting while the channel is full (backpressure). Errors once the
    /// receiving actor is gone.
    pub async fn send(&self, msg: Message) -> Result<()> {
        if let (Some(f), Message::Chunk(c)) = (&self.in_flight, &msg) {
            f.admit(c.len()).await;
        }
        self.tx
            .send(msg)
            .await
            .map_err(|_| ExecError::ChannelClosed)
    }
}

/// A write of `messages` messages leaves this many slots free on a table's channel:
/// the barrier injected next (under the write lock) then never waits for room.
const BARRIER_SLOTS: usize = 1;

impl DataSender {
    /// The slots a write of `messages` messages needs: its own and the barrier's,
    /// capped at the channel's size (a larger write waits for room as it goes).
    fn slots(&self, messages: usize) -> usize {
        (messages.max(1) + BARRIER_SLOTS).min(self.tx.max_capacity())
    }

    /// Whether a write of `messages` messages holding `rows` rows can be sent now
    /// without waiting, leaving room for a barrier (see [`DataSender::room`]).
    pub fn has_room(&self, messages: usize, rows: usize) -> bool {
        self.tx.capacity() >= self.slots(messages)
            && self.in_flight.as_ref().is_none_or(|f| f.fits(rows))
    }

    /// Waits until [`DataSender::has_room`] (without taking the room: whoever sends
    /// next takes it). A table's writers wait here without the write lock, so a
    /// back-pressured table does not hold up writes to other tables, barriers or DDL.
    pub async fn room(&self, messages: usize, rows: usize) -> Result<()> {
        let permits = self
            .tx
            .reserve_many(self.slots(messages))
            .await
            .map_err(|_| ExecError::ChannelClosed)?;
        drop(permits);
        if let Some(f) = &self.in_flight {
            f.room_for(rows).await;
        }
        Ok(())
    }
}

impl From<mpsc::Sender<Message>> for DataSender {
    /// A plain channel's sender, bounded in messages only.
    fn from(tx: mpsc::Sender<Message>) -> Self {
        Self {
            tx,
            in_flight: None,
        }
    }
}

/// The receiving end of a [`data_channel`].
pub struct DataReceiver {
    rx: mpsc::Receiver<Message>,
    in_flight: Option<Arc<InFlight>>,
}

impl DataReceiver {
    pub async fn recv(&mut self) -> Option<Message> {
        let m = self.rx.recv().await;
        self.took(m.as_ref());
        m
    }

    pub fn try_recv(&mut self) -> std::result::Result<Message, TryRecvError> {
        let m = self.rx.try_recv();
        self.took(m.as_ref().ok());
        m
    }

    fn took(&self, m: Option<&Message>) {
        if let (Some(f), Some(Message::Chunk(c))) = (&self.in_flight, m) {
            f.taken(c.len());
        }
    }
}

impl From<mpsc::Receiver<Message>> for DataReceiver {
    /// A plain channel's receiver, bounded in messages only.
    fn from(rx: mpsc::Receiver<Message>) -> Self {
        Self {
            rx,
            in_flight: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_the_setting() {
        let t0 = Instant::now();
        assert_eq!(BufferTimeout::Immediate.deadline(t0), Some(t0));
        let hundred = BufferTimeout::After(Duration::from_millis(100));
        assert_eq!(hundred.deadline(t0), Some(t0 + Duration::from_millis(100)));
        assert_eq!(BufferTimeout::FullOnly.deadline(t0), None);
    }

    #[tokio::test]
    async fn an_empty_channel_admits_any_chunk_and_a_full_one_waits_for_the_consumer() {
        let f = InFlight::new(Debloat {
            enabled: true,
            target: Duration::from_secs(1),
        })
        .unwrap();
        // Larger than the budget, but nothing is queued.
        f.admit(50_000).await;
        assert_eq!(f.queued_and_budget().0, 50_000);
        let waiting = {
            let f = f.clone();
            tokio::spawn(async move { f.admit(10).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "a full channel admitted more rows");
        f.taken(50_000);
        waiting.await.unwrap();
        assert_eq!(f.queued_and_budget().0, 10);
    }

    #[tokio::test]
    async fn a_writer_waits_for_room_for_its_pieces_and_one_barrier() {
        let (tx, mut rx) = data_channel(Debloat {
            enabled: false,
            target: Duration::from_secs(1),
        });
        let barrier = || Message::Barrier(crate::barrier::Barrier::plain(1));
        for _ in 0..CHANNEL_CAPACITY - 2 {
            tx.send(barrier()).await.unwrap();
        }
        // Two slots free: one message and the barrier's slot fit, two messages do not.
        assert!(tx.has_room(1, 10));
        assert!(!tx.has_room(2, 10));
        tx.send(barrier()).await.unwrap();
        assert!(!tx.has_room(1, 10), "the last slot is the barrier's");
        let waiting = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.room(1, 10).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "room without a free slot");
        rx.recv().await.unwrap();
        waiting.await.unwrap().unwrap();
        // Waiting took nothing: the room is still there.
        assert!(tx.has_room(1, 10));
        drop(rx);
        assert!(
            tx.room(CHANNEL_CAPACITY * 2, 10).await.is_err(),
            "a closed channel"
        );
    }

    #[tokio::test]
    async fn the_budget_is_what_the_consumer_takes_in_the_target_time() {
        let f = InFlight::new(Debloat {
            enabled: true,
            target: Duration::from_millis(500),
        })
        .unwrap();
        // About 100,000 rows a second for a bit more than one period.
        for _ in 0..25 {
            f.admit(1_000).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            f.taken(1_000);
        }
        let (_, budget) = f.queued_and_budget();
        // 100,000 rows/s × 0.5 s, give or take the timer's slack on a busy machine.
        assert!(
            (10_000..=60_000).contains(&budget),
            "budget {budget} is not about 50,000 rows"
        );
    }
}
