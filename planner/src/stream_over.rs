//! Planning window functions that are not a Top-N (`lag(x) OVER (...)`, `sum(x) OVER
//! (...)`, SESSION windows' rewrite): a `Window` node becomes an `OverWindow` fragment
//! fed through a hash exchange on the PARTITION BY keys (one actor without them).
//!
//! DataFusion groups a query's window functions into one `Window` node per (PARTITION
//! BY, ORDER BY), nesting the nodes; each node is one fragment here.

use crate::error::{SqlError, SqlResult};
use crate::stream_plan::{nullable_schema, Builder, Partial};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, SortExpr, Window};
use datafusion::physical_planner::create_window_expr;
use weir_executor::operators::over_window::OverWindowSpec;
use weir_executor::OperatorSpec;

fn partition_and_order(e: &Expr) -> SqlResult<(Vec<Expr>, Vec<SortExpr>)> {
    match e.clone().unalias_nested().data {
        Expr::WindowFunction(wf) => {
            let WindowFunction { params, .. } = *wf;
            Ok((params.partition_by, params.order_by))
        }
        other => Err(SqlError::unsupported(format!(
            "window expression {other} in a materialized view is not supported"
        ))),
    }
}

impl Builder<'_> {
    pub(crate) fn over_window(&mut self, w: &Window) -> SqlResult<Partial> {
        let Some(first) = w.window_expr.first() else {
            return self.visit(&w.input);
        };
        let (partition, order) = partition_and_order(first)?;
        for e in &w.window_expr[1..] {
            if partition_and_order(e)? != (partition.clone(), order.clone()) {
                return Err(SqlError::unsupported(
                    "window functions with different PARTITION BY / ORDER BY in one \
                     materialized view node are not supported",
                ));
            }
        }
        let input_schema = w.input.schema().clone();
        let props = self.state.execution_props();
        let window_exprs = w
            .window_expr
            .iter()
            .map(|e| {
                create_window_expr(e, &input_schema, props, &PhysicalPlanningContext::default())
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        // Rows of a partition are kept in ORDER BY order; without one, any fixed order
        // (a constant key, then the row) does.
        let order = if order.is_empty() {
            vec![SortExpr::new(
                Expr::Literal(ScalarValue::Boolean(Some(true)), None),
                true,
                false,
            )]
        } else {
            order
        };
        let p = self.visit(&w.input)?;
        let (upstream, mut layout) = self.partitioned_input(p, &partition, &order, &w.schema)?;
        let canonical = format!(
            "over partition[{}] order[{}] functions[{}]",
            partition
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(","),
            order
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(","),
            w.window_expr
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        layout.uid = self.uid("over", &canonical);
        let input = Self::partitioned_exchange(upstream, &layout);
        let single = partition.is_empty();
        Ok(Partial {
            inputs: vec![input],
            chain: vec![OperatorSpec::OverWindow(OverWindowSpec {
                layout,
                window_exprs,
                input_schema: nullable_schema(&input_schema),
            })],
            single,
            one_row: false,
            schema: w.schema.clone(),
        })
    }
}
