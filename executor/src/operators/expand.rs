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
    pub shape: ExpandShape,
}

/// What an Expand's projections are, for plans and EXPLAIN.
#[derive(Debug, Clone, PartialEq)]
pub enum ExpandShape {
    /// Branches of a UNION ALL.
    Projections,
    /// A HOP window's copies of each row ([`HopWindows::of`]).
    Hop(HopWindows),
    /// A sliced HOP window's slide rows, copied into the windows that hold them.
    SlidesIntoWindows,
}

/// An Expand that is a HOP window (`planner::window_tvf`): the projections differ
/// only in window bounds, `window_bound(ts, slide, offset)`, whose offsets step back
/// one slide per copy. Known so that an aggregation over it can aggregate each slide
/// once and merge slides into windows (`planner::hop_slicing`).
#[derive(Debug, Clone, PartialEq)]
pub struct HopWindows {
    pub slide_ms: i64,
    /// Output columns that are window bounds.
    pub bounds: Vec<usize>,
    /// The projection of the row's own slide: the windows that start latest.
    pub own: usize,
}

impl HopWindows {
    /// The HOP shape of `projections`, if they have it.
    pub fn of(projections: &[Vec<Arc<dyn PhysicalExpr>>]) -> Option<Self> {
        let first = projections.first()?;
        if projections.len() < 2 || projections.iter().any(|p| p.len() != first.len()) {
            return None;
        }
        let mut bounds = Vec::new();
        // (ts column, slide) and, per bound column, each projection's offset.
        let mut window: Option<(usize, i64)> = None;
        let mut offsets: Vec<Vec<i64>> = Vec::new();
        for i in 0..first.len() {
            if projections
                .iter()
                .all(|p| p[i].as_ref() == first[i].as_ref())
            {
                continue;
            }
            let mut column_offsets = Vec::new();
            for p in projections {
                let (ts, slide, offset) = bound_call(&p[i])?;
                if *window.get_or_insert((ts, slide)) != (ts, slide) {
                    return None;
                }
                column_offsets.push(offset);
            }
            bounds.push(i);
            offsets.push(column_offsets);
        }
        let (_, slide_ms) = window?;
        let own = (0..projections.len()).max_by_key(|&p| offsets[0][p])?;
        // Every bound column steps back the same whole slides per copy, and the copies
        // are 0, 1, ... slides back: one window each.
        let back = |column: &[i64], p: usize| column[own] - column[p];
        let mut steps: Vec<i64> = (0..projections.len())
            .map(|p| back(&offsets[0], p))
            .collect();
        if offsets
            .iter()
            .any(|c| (0..projections.len()).any(|p| back(c, p) != steps[p]))
        {
            return None;
        }
        steps.sort_unstable();
        let expected = (0..projections.len() as i64).map(|k| k * slide_ms);
        if !steps.into_iter().eq(expected) {
            return None;
        }
        Some(Self {
            slide_ms,
            bounds,
            own,
        })
    }
}

/// `window_bound(ts, slide, offset_ms)` over a column: (ts column, slide ms, offset).
fn bound_call(e: &Arc<dyn PhysicalExpr>) -> Option<(usize, i64, i64)> {
    use datafusion::physical_expr::expressions::{Column, Literal};
    let f = e.downcast_ref::<datafusion::physical_expr::ScalarFunctionExpr>()?;
    let [ts, slide, offset] = f.args() else {
        return None;
    };
    if f.name() != "window_bound" {
        return None;
    }
    let ts = ts.downcast_ref::<Column>()?.index();
    let slide = crate::watermark::fixed_interval_ms(slide.downcast_ref::<Literal>()?.value())
        .filter(|s| *s > 0)?;
    match offset.downcast_ref::<Literal>()?.value() {
        ScalarValue::Int64(Some(o)) => Some((ts, slide, *o)),
        _ => None,
    }
}

impl StreamSpec for ExpandSpec {
    fn kind(&self) -> &'static str {
        "Expand"
    }
    fn describe(&self) -> String {
        let n = self.projections.len();
        match self.shape {
            ExpandShape::Projections => format!("Expand: {n} projections of each row"),
            ExpandShape::Hop(_) => format!("Expand: each row into its {n} HOP windows"),
            ExpandShape::SlidesIntoWindows => {
                format!("Expand: each slide's row into its {n} windows")
            }
        }
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
