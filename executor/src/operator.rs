//! The operator trait: operators do data, the runtime does barriers.
//!
//! An operator turns input chunks into output chunks and, at a barrier, emits what it
//! deferred and flushes its state table. It never sees channels, alignment or
//! acknowledgements: the actor loop in [`crate::actor`] owns those.

use crate::barrier::{Barrier, Epoch, Watermark};
use crate::chunk::StreamChunk;
use crate::error::Result;
use weir_storage::state_snapshot::StateDelta;

pub trait Operator: Send {
    /// A short name for metrics, EXPLAIN and errors.
    fn name(&self) -> &str;

    /// Processes one chunk, pushing any output to `out`.
    fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()>;

    /// Processes a chunk from the fragment's input number `input` (the first operator
    /// of a chain gets these; a join tells its two sides apart by them). By default
    /// the input does not matter.
    fn process_chunk_from(
        &mut self,
        _input: usize,
        chunk: StreamChunk,
        out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        self.process_chunk(chunk, out)
    }

    /// How many inputs with columns of their own it tells apart (a join: 2). The
    /// inputs of one side are alike (a union's branches), so their watermarks combine
    /// into one: their minimum.
    fn sides(&self) -> usize {
        1
    }

    /// A side whose inputs are not read until every input of the other sides has
    /// delivered the end of its backfill (`Message::BackfillEnd`), its first barrier
    /// or a cut's marker: by then all a new view's backfill of those sides is in. A lookup join holds its left side so that
    /// no row meets a table that is still loading.
    fn held_side(&self) -> Option<usize> {
        None
    }

    /// Watermarks that time's passing makes, asked for at each barrier before it is
    /// processed: a `PROCTIME()` column's (the projection computing it is where its
    /// watermarks begin). They go through the rest of the chain and downstream.
    fn clock_watermarks(&mut self) -> Vec<Watermark> {
        Vec::new()
    }

    /// Event-time progress; by default passed on unchanged. An operator may pass on
    /// several (one watermark per output column that carries it: a projection keeping
    /// both `window_start` and `window_end`) or none. Rows it pushes to `out` go
    /// downstream before the watermarks it returns: an `EMIT ON WINDOW CLOSE`
    /// aggregation emits the windows a watermark closes ahead of that watermark, so
    /// that a window aggregation after it does not take them for late rows.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        Ok(vec![watermark])
    }

    /// A watermark from input `side` of a two-input operator (a join), combined over
    /// that side's upstream actors; single-input operators ignore the side.
    fn process_watermark_from(
        &mut self,
        _side: usize,
        watermark: Watermark,
        out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        self.process_watermark(watermark, out)
    }

    /// Called once all inputs delivered `barrier` (aligned), before it is forwarded:
    /// emit deferred output and flush state so the state matches the barrier's cut.
    fn on_barrier(&mut self, _barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        Ok(())
    }

    /// Unaligned checkpoints: the snapshot is about to be taken between barriers. Emit
    /// whatever output the state already accounts for but is still deferred, so that
    /// the snapshot needs no record of pending emissions. Emitting early is allowed:
    /// every change still lands in the same epoch downstream.
    fn on_checkpoint_cut(&mut self, _out: &mut Vec<StreamChunk>) -> Result<()> {
        Ok(())
    }

    /// At a checkpoint (after `on_barrier`, or after `on_checkpoint_cut` when unaligned): the state changed since the
    /// previous checkpoint, under the operator's uid. Stateless operators have none.
    /// Must be cheap: the upload happens elsewhere, asynchronously. `epoch` is the
    /// checkpoint's id (what a sink commits once that checkpoint completes).
    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        Ok(vec![])
    }
}
