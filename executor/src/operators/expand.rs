//! Expand: several projections of every input row, in one pass (HOP windows: each row
//! in `size / slide` windows). The planner uses it for a UNION ALL whose branches all
//! project the same scan, instead of reading that relation once per branch.

use crate::barrier::Watermark;
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;
use crate::operators::project::ProjectOperator;
use crate::operators::spec::{watermarks_through, BuildContext, StreamSpec, WatermarkFlow};
use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Each input row once per projection (a UNION ALL of projections of one scan).
#[derive(Debug, Clone)]
pub struct ExpandSpec {
    pub projections: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    pub schema: SchemaRef,
}

impl StreamSpec for ExpandSpec {
    fn kind(&self) -> &'static str {
        "Expand"
    }
    fn describe(&self) -> String {
        format!("Expand: {} projections of each row", self.projections.len())
    }
    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        input_append_only
    }
    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Passes
    }
    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        watermarks_through(
            &mut ExpandOperator::new(self.projections.clone(), self.schema.clone()),
            input,
        )
    }
    fn build(&self, _: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(ExpandOperator::new(
            self.projections.clone(),
            self.schema.clone(),
        )))
    }
}

pub struct ExpandOperator {
    projections: Vec<ProjectOperator>,
}

impl ExpandOperator {
    pub fn new(projections: Vec<Vec<Arc<dyn PhysicalExpr>>>, schema: SchemaRef) -> Self {
        Self {
            projections: projections
                .into_iter()
                .map(|exprs| ProjectOperator::new(exprs, schema.clone()))
                .collect(),
        }
    }
}

impl Operator for ExpandOperator {
    fn name(&self) -> &str {
        "Expand"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, out: &mut Vec<StreamChunk>) -> Result<()> {
        for p in &mut self.projections {
            p.process_chunk(chunk.clone(), out)?;
        }
        Ok(())
    }

    /// As a union of the projections would: a column carries a watermark when every
    /// projection gives it one, the smallest of them.
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        let mut combined: Option<Vec<Watermark>> = None;
        for p in &mut self.projections {
            let mine = p.process_watermark(w.clone(), out)?;
            combined = Some(match combined {
                None => mine,
                Some(c) => c
                    .into_iter()
                    .filter_map(|c| {
                        let m = mine.iter().find(|m| m.column == c.column)?;
                        Some(Watermark {
                            column: c.column,
                            value: min_value(c.value, m.value.clone()),
                        })
                    })
                    .collect(),
            });
        }
        Ok(combined.unwrap_or_default())
    }
}

fn min_value(a: ScalarValue, b: ScalarValue) -> ScalarValue {
    if b < a {
        b
    } else {
        a
    }
}
