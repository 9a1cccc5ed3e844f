//! Barriers and the messages that flow on every channel.
//!
//! A barrier with epoch `n` separates the changes of epoch `n` (before it) from those of
//! later epochs. When every actor has processed barrier `n`, the coordinator commits
//! epoch `n`: it becomes the epoch every `SELECT` reads.

use crate::chunk::StreamChunk;

/// Epochs are the only notion of time for visibility. Monotonic per server run and
/// persisted across restarts through the catalog.
pub type Epoch = u64;

#[derive(Debug, Clone)]
pub enum BarrierKind {
    /// Advances the readable snapshot.
    Plain,
    /// Also persists the state of the jobs in the scope (see [`crate::checkpoint`]).
    /// (A savepoint is a forced checkpoint copied afterwards, and actors stop when
    /// their input closes, so no other kind is needed.)
    Checkpoint(std::sync::Arc<crate::checkpoint::CheckpointScope>),
}

#[derive(Debug, Clone)]
pub struct Barrier {
    pub epoch: Epoch,
    pub kind: BarrierKind,
}

impl Barrier {
    pub fn plain(epoch: Epoch) -> Self {
        Self {
            epoch,
            kind: BarrierKind::Plain,
        }
    }
    /// True when `job` must hand over its state at this barrier.
    pub fn checkpoints(&self, job: u64) -> bool {
        match &self.kind {
            BarrierKind::Checkpoint(scope) => scope.jobs.contains(&job),
            _ => false,
        }
    }
}

/// Event-time progress. Carried through the graph; windows and joins will use it.
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    pub column: usize,
    pub value: datafusion::common::ScalarValue,
}

#[derive(Debug, Clone)]
pub enum Message {
    Chunk(StreamChunk),
    Barrier(Barrier),
    /// Unaligned checkpoints: where the sender cut checkpoint `barrier` in this channel.
    /// The receiver took its snapshot when the barrier overtook the queue on the
    /// priority lane; the chunks it receives on this channel up to the marker are the
    /// data the barrier overtook, stored with the checkpoint (see [`crate::actor`]).
    Marker(Barrier),
    Watermark(Watermark),
    /// The end of a new view's backfill on this channel: what came before it is the
    /// contents the view starts from. Deploy sends it on every channel of a relation
    /// input, and an actor passes it on within the job once all its inputs delivered
    /// it. A held side (a lookup join's stream) is read from then on: waiting for a
    /// barrier instead would deadlock once that side's backfill outgrows the
    /// channels, since barriers come only after the whole backfill is sent.
    BackfillEnd,
}
