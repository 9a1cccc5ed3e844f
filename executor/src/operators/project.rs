//! Project: evaluates one physical expression per output column.

use crate::barrier::Watermark;
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;
use crate::operators::spec::{watermarks_through, BuildContext, StreamSpec, WatermarkFlow};
use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A SELECT list in a plan: one expression per output column of `schema`.
#[derive(Debug, Clone)]
pub struct ProjectSpec {
    pub exprs: Vec<Arc<dyn PhysicalExpr>>,
    pub schema: SchemaRef,
}

impl StreamSpec for ProjectSpec {
    fn kind(&self) -> &'static str {
        "Project"
    }
    fn describe(&self) -> String {
        let exprs: Vec<String> = self.exprs.iter().map(|e| e.to_string()).collect();
        format!("Project: {}", exprs.join(", "))
    }
    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        input_append_only
    }
    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Passes
    }
    /// The input's, where they pass, and every `PROCTIME()` column.
    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        let mut out = watermarks_through(
            &mut ProjectOperator::new(self.exprs.clone(), self.schema.clone()),
            input,
        );
        out.extend(proctime_columns(&self.exprs));
        out
    }
    fn build(&self, _: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ProjectOperator::new(
            self.exprs.clone(),
            self.schema.clone(),
        )))
    }
}

pub struct ProjectOperator {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    proctime: Vec<usize>,
}

impl ProjectOperator {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        let proctime = proctime_columns(&exprs);
        Self {
            exprs,
            schema,
            proctime,
        }
    }
}

/// The output columns that are `PROCTIME()`: their watermark is the clock's time.
fn proctime_columns(exprs: &[Arc<dyn PhysicalExpr>]) -> Vec<usize> {
    (0..exprs.len())
        .filter(|&i| {
            exprs[i]
                .downcast_ref::<datafusion::physical_expr::ScalarFunctionExpr>()
                .is_some_and(|f| f.name() == crate::proctime::NAME)
        })
        .collect()
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

    /// The watermark follows its column to every output that passes it through
    /// unchanged or is a window bound of it (`date_bin(size, ts) ± interval`, what
    /// TUMBLE and HOP compute: an aggregation grouping by `window_start` needs it to
    /// close windows, and a join bounded by `window_end` to clean its state); a
    /// projection that drops the column drops the watermark.
    /// A `PROCTIME()` column's watermark: the clock's time, which no later row's
    /// value is below (`crate::proctime`).
    fn clock_watermarks(&mut self) -> Vec<Watermark> {
        let now = crate::proctime::value(crate::proctime::now_ms());
        self.proctime
            .iter()
            .map(|&column| Watermark {
                column,
                value: now.clone(),
            })
            .collect()
    }

    fn process_watermark(
        &mut self,
        w: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        let mut out = Vec::new();
        for (column, e) in self.exprs.iter().enumerate() {
            if let Some(value) = crate::watermark::window_bound(e, &w) {
                out.push(Watermark { column, value });
            } else if e
                .downcast_ref::<datafusion::physical_expr::expressions::Column>()
                .is_some_and(|c| c.index() == w.column)
            {
                out.push(Watermark {
                    column,
                    value: w.value.clone(),
                });
            }
        }
        Ok(out)
    }
}
