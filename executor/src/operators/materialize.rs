//! Materialize: the last operator of a table or view pipeline. It passes changes on to
//! subscribers unchanged and, at each barrier, stages the epoch's changes into the
//! relation's store, where the coordinator commits them when the epoch completes.

use crate::barrier::Barrier;
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;
use crate::store::RelationStore;
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

pub struct MaterializeOperator {
    store: Arc<RelationStore>,
    schema: SchemaRef,
    epoch_changes: Vec<StreamChunk>,
}

impl MaterializeOperator {
    pub fn new(store: Arc<RelationStore>) -> Self {
        Self {
            schema: store.schema(),
            store,
            epoch_changes: Vec::new(),
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
        self.epoch_changes.push(chunk.clone());
        out.push(chunk);
        Ok(())
    }

    fn on_barrier(&mut self, barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        self.store
            .stage(barrier.epoch, std::mem::take(&mut self.epoch_changes));
        Ok(())
    }
}
