//! Project: evaluates one physical expression per output column.

use crate::barrier::Watermark;
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;
use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

pub struct ProjectOperator {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl ProjectOperator {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        Self { exprs, schema }
    }
}

impl Operator for ProjectOperator {
    fn name(&self) -> &str {
        "Project"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
        let n = chunk.len();
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(&chunk.batch)?.into_array(n))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        out.push(StreamChunk {
            ops: chunk.ops,
            batch,
        });
        Ok(())
    }

    /// The watermark follows its column to the first output that is a window bound of
    /// it (`date_bin(size, ts) ± interval`, what TUMBLE and HOP compute: the aggregation
    /// grouping by `window_start` needs it to close windows), else to the first output
    /// that passes it through unchanged; a projection that drops the column drops the
    /// watermark.
    fn process_watermark(&mut self, w: Watermark) -> Result<Option<Watermark>> {
        for (column, e) in self.exprs.iter().enumerate() {
            if let Some(value) = crate::watermark::window_bound(e, &w) {
                return Ok(Some(Watermark { column, value }));
            }
        }
        Ok(self
            .exprs
            .iter()
            .position(|e| {
                e.downcast_ref::<datafusion::physical_expr::expressions::Column>()
                    .is_some_and(|c| c.index() == w.column)
            })
            .map(|column| Watermark { column, ..w }))
    }
}
