//! Filter: keeps the rows whose predicate evaluates to true (NULL counts as false).

use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::spec::{BuildContext, StreamSpec, WatermarkFlow};
use arrow::array::{Array, BooleanArray};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// `WHERE` / `HAVING` in a plan.
#[derive(Debug, Clone)]
pub struct FilterSpec {
    pub predicate: Arc<dyn PhysicalExpr>,
}

impl StreamSpec for FilterSpec {
    fn kind(&self) -> &'static str {
        "Filter"
    }
    fn describe(&self) -> String {
        format!("Filter: {}", self.predicate)
    }
    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        input_append_only
    }
    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Passes
    }
    fn build(&self, _: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(FilterOperator::new(self.predicate.clone())))
    }
}

pub struct FilterOperator {
    predicate: Arc<dyn PhysicalExpr>,
}

impl FilterOperator {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self { predicate }
    }
}

impl Operator for FilterOperator {
    fn name(&self) -> &str {
        "Filter"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
        let mask = self
            .predicate
            .evaluate(&chunk.batch)?
            .into_array(chunk.len())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| ExecError::Internal("filter predicate is not boolean".into()))?;
        let keep: Vec<u32> = (0..mask.len())
            .filter(|&i| mask.is_valid(i) && mask.value(i))
            .map(|i| i as u32)
            .collect();
        if keep.len() == chunk.len() {
            out.push(chunk);
        } else if !keep.is_empty() {
            out.push(chunk.take(&keep)?);
        }
        Ok(())
    }
}
