//! Filter: keeps the rows whose predicate evaluates to true (NULL counts as false).

use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use arrow::array::{Array, BooleanArray};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

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
