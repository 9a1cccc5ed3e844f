//! Materialize: the last operator of a table or view pipeline. It passes changes on to
//! subscribers unchanged and, at each barrier, stages the epoch's changes into the
//! relation's store, where the coordinator commits them when the epoch completes.

use crate::barrier::{Barrier, Epoch, Watermark};
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;
use crate::store::RelationStore;
use arrow::datatypes::SchemaRef;
use std::sync::Arc;
use weir_storage::state_snapshot::{DeltaData, StateDelta};

pub struct MaterializeOperator {
    store: Arc<RelationStore>,
    schema: SchemaRef,
    epoch_changes: Vec<StreamChunk>,
    /// How many of `epoch_changes` an (unaligned) checkpoint already took.
    epoch_checkpointed: usize,
    /// Changes since the last checkpoint: this actor's share of the next delta.
    since_checkpoint: Vec<StreamChunk>,
    uid: String,
    /// Off when the job never checkpoints: then no delta is kept.
    track_changes: bool,
    /// The column whose watermark the `currentOutputWatermark` metric shows.
    metric_column: Option<usize>,
}

/// The uid of a table's stored rows (a view's is its graph's `output_uid`).
pub fn materialize_uid(relation: &str) -> String {
    format!("{relation}.materialize")
}

impl MaterializeOperator {
    pub fn new(store: Arc<RelationStore>, uid: String, track_changes: bool) -> Self {
        Self {
            schema: store.schema(),
            uid,
            store,
            epoch_changes: Vec::new(),
            epoch_checkpointed: 0,
            since_checkpoint: Vec::new(),
            track_changes,
            metric_column: None,
        }
    }
}

impl Operator for MaterializeOperator {
    fn name(&self) -> &str {
        "Materialize"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
        // Give the rows the relation's column names.
        let chunk = chunk.with_schema(self.schema.clone())?;
        // An unstored source passes its rows on and keeps none of them.
        if self.store.keeps_rows() {
            self.epoch_changes.push(chunk.clone());
        }
        out.push(chunk);
        Ok(())
    }

    /// Watermarks that reach a relation's rows are its output watermark (a metric).
    /// With watermarks on several columns, the metric follows the first of them.
    fn process_watermark(
        &mut self,
        w: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        if self.metric_column.is_some_and(|c| c < w.column) {
            return Ok(vec![w]);
        }
        self.metric_column = Some(w.column);
        if let Some(ms) = crate::watermark::millis(&w) {
            crate::metrics::metrics()
                .output_watermark
                .with_label_values(&[self.store.name()])
                .set(ms);
        }
        Ok(vec![w])
    }

    fn on_barrier(&mut self, barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let changes = std::mem::take(&mut self.epoch_changes);
        // Chunks share their Arrow buffers: keeping them for the checkpoint is cheap.
        if self.track_changes {
            let taken = std::mem::take(&mut self.epoch_checkpointed);
            self.since_checkpoint
                .extend(changes[taken.min(changes.len())..].iter().cloned());
        }
        self.store.stage(barrier.epoch, changes);
        Ok(())
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        if !self.store.keeps_rows() {
            return Ok(vec![]);
        }
        let mut taken = std::mem::take(&mut self.since_checkpoint);
        if self.track_changes {
            // An unaligned cut falls inside an epoch: its changes so far belong to it.
            taken.extend(
                self.epoch_changes[self.epoch_checkpointed..]
                    .iter()
                    .cloned(),
            );
            self.epoch_checkpointed = self.epoch_changes.len();
        }
        let rows = taken.into_iter().map(|c| (c.op_codes(), c.batch)).collect();
        Ok(vec![StateDelta {
            uid: self.uid.clone(),
            data: DeltaData::Rows(rows),
        }])
    }
}
