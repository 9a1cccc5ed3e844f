//! SESSION window aggregations over append-only inputs → one `SessionAgg` fragment.
//!
//! `window_tvf` rewrites SESSION into three OVER windows (`__weir_session_1` to `_3`),
//! which any input, and a batch SELECT, can run. An aggregation grouped by exactly the
//! session's keys, `window_start` and `window_end`, over a relation that only ever
//! inserts (an unstored generator source), runs instead as the executor's
//! `session_agg`: per key, only open sessions with their accumulators, as Flink runs
//! session window aggregations. This finds that shape in DataFusion's optimized plan:
//! the aggregation reads the expansion's outer alias; beneath it, the first window of
//! the expansion (`lag(ts) OVER (PARTITION BY keys ORDER BY ts)`) names the keys and
//! the time, its input is the windowed relation, and the projection of `window_end`
//! (the session's latest time plus the gap) gives the gap. Anything else (a key that
//! is an expression, a call over a window bound, an input that may retract) keeps the
//! general plan.

use crate::error::SqlResult;
use crate::stream_plan::{keyed_exchange, nullable_schema, AggregateInput, Builder, Partial};
use crate::window_tvf::SESSION_ALIAS;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ExprSchema, ScalarValue};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{Aggregate, BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use weir_executor::operators::project::ProjectSpec;
use weir_executor::operators::session_agg::SessionAggSpec;
use weir_executor::{FragmentInput, OperatorSpec};

/// A SESSION window aggregation found in a plan.
struct SessionShape<'a> {
    /// The windowed relation.
    input: &'a LogicalPlan,
    /// PARTITION BY keys and the time column, columns of `input`.
    keys: Vec<Column>,
    time: Column,
    gap_ns: i64,
    /// Per group expression of the aggregation: a key's index, or `k` for
    /// `window_start` and `k + 1` for `window_end`.
    group_at: Vec<usize>,
    /// The calls, over `input`'s columns.
    calls: Vec<Expr>,
}

impl Builder<'_> {
    /// `agg` as a SessionAgg fragment, when it has that shape.
    pub(crate) fn session_aggregate(&mut self, agg: &Aggregate) -> SqlResult<Option<Partial>> {
        let Some(shape) = session_shape(agg) else {
            return Ok(None);
        };
        if !only_inserts(shape.input, self.append_only) {
            return Ok(None);
        }
        let k = shape.keys.len();
        let p = self.visit(shape.input)?;
        let group: Vec<Expr> = shape
            .keys
            .iter()
            .chain([&shape.time])
            .cloned()
            .map(Expr::Column)
            .collect();
        let first_call = agg.group_expr.len();
        let AggregateInput {
            exprs,
            schema,
            group_types,
            calls,
            canonical,
        } = self.aggregate_input(&p.schema, &group, &shape.calls, &agg.schema, first_call)?;
        let mut p = p;
        p.chain.push(OperatorSpec::Project(ProjectSpec {
            exprs,
            schema: schema.clone(),
        }));
        let upstream = self.finish(p, schema);
        let time_type = group_types[k].clone();
        let out = nullable_schema(&agg.schema);
        // The operator's own layout: keys, window_start, window_end, calls.
        let mut fields: Vec<Field> = shape
            .keys
            .iter()
            .zip(&group_types)
            .map(|(c, t)| Field::new(&c.name, t.clone(), true))
            .collect();
        fields.push(Field::new("window_start", time_type.clone(), true));
        fields.push(Field::new("window_end", time_type.clone(), true));
        fields.extend(
            out.fields()[first_call..]
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        let op_schema = Arc::new(Schema::new(fields));
        let uid = self.uid("session", &format!("gap[{}] {canonical}", shape.gap_ns));
        // Back to the aggregation's column order.
        let reorder: Vec<Arc<dyn PhysicalExpr>> = shape
            .group_at
            .iter()
            .copied()
            .chain((0..shape.calls.len()).map(|j| k + 2 + j))
            .map(|i| {
                Arc::new(PhysicalColumn::new(op_schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>
            })
            .collect();
        let single = k == 0;
        Ok(Some(Partial {
            inputs: vec![FragmentInput::Fragment {
                id: upstream,
                exchange: keyed_exchange(0..k),
            }],
            chain: vec![
                OperatorSpec::SessionAgg(SessionAggSpec {
                    uid,
                    key_types: group_types[..k].to_vec(),
                    time_type,
                    gap_ns: shape.gap_ns,
                    calls,
                    output_schema: op_schema,
                    emit_on_window_close: false,
                    input_append_only: false,
                }),
                OperatorSpec::Project(ProjectSpec {
                    exprs: reorder,
                    schema: out,
                }),
            ],
            single,
            one_row: false,
            schema: agg.schema.clone(),
        }))
    }
}

/// Whether `plan` only ever inserts: scans of append-only relations through filters,
/// projections and aliases.
fn only_inserts(plan: &LogicalPlan, append_only: &dyn Fn(&str) -> bool) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => append_only(scan.table_name.table()),
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.inputs().iter().all(|i| only_inserts(i, append_only))
        }
        _ => false,
    }
}

fn session_shape(agg: &Aggregate) -> Option<SessionShape<'_>> {
    // Down to the expansion's outer alias (the windowed table's name may wrap it).
    let mut p = agg.input.as_ref();
    loop {
        match p {
            LogicalPlan::SubqueryAlias(a) if a.alias.table() == SESSION_ALIAS => break,
            LogicalPlan::SubqueryAlias(a) => p = &a.input,
            _ => return None,
        }
    }
    // Then through the expansion: its last projection computes window_end; its third
    // window (counting down) is the first one it applies.
    let mut gap_ns = None;
    let mut windows = 0;
    let first = loop {
        p = p.inputs().first().copied()?;
        match p {
            LogicalPlan::Projection(proj) if gap_ns.is_none() => {
                gap_ns = proj.expr.iter().find_map(window_end_gap);
            }
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {}
            LogicalPlan::Window(w) => {
                windows += 1;
                if windows == 3 {
                    break w;
                }
            }
            _ => return None,
        }
    };
    let gap_ns = gap_ns?;
    let [lag] = first.window_expr.as_slice() else {
        return None;
    };
    let Expr::WindowFunction(wf) = lag.clone().unalias_nested().data else {
        return None;
    };
    let WindowFunction { fun, params } = *wf;
    if fun.name() != "lag" {
        return None;
    }
    let [Expr::Column(time)] = params.args.as_slice() else {
        return None;
    };
    let keys = params
        .partition_by
        .iter()
        .map(|e| match e {
            Expr::Column(c) => Some(c.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let input = first.input.as_ref();
    // Sessions are kept in a timestamp's own unit (a date column keeps the general plan).
    let time_type = input.schema().field_from_column(time).ok()?.data_type();
    if !matches!(time_type, DataType::Timestamp(..)) {
        return None;
    }
    let k = keys.len();
    // Group by exactly the keys and both bounds, each once.
    let mut group_at = Vec::new();
    for g in &agg.group_expr {
        let Expr::Column(c) = g else { return None };
        group_at.push(match c.name.as_str() {
            "window_start" => k,
            "window_end" => k + 1,
            name => keys.iter().position(|key| key.name == name)?,
        });
    }
    let mut seen = group_at.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != group_at.len() || seen != (0..k + 2).collect::<Vec<_>>() {
        return None;
    }
    let calls = agg
        .aggr_expr
        .iter()
        .map(|e| over_input(e, input))
        .collect::<Option<Vec<_>>>()?;
    Some(SessionShape {
        input,
        keys,
        time: time.clone(),
        gap_ns,
        group_at,
        calls,
    })
}

/// The gap of the expansion's `max(ts) + gap AS window_end`.
fn window_end_gap(e: &Expr) -> Option<i64> {
    let Expr::Alias(a) = e else { return None };
    if a.name != "window_end" {
        return None;
    }
    let Expr::BinaryExpr(BinaryExpr {
        op: Operator::Plus,
        right,
        ..
    }) = a.expr.as_ref()
    else {
        return None;
    };
    match right.as_ref() {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000_000_000 + v.nanoseconds)
        }
        _ => None,
    }
}

/// `e` (over the expansion's columns, which keep the relation's names) over the
/// relation's own columns; `None` when it reads a window bound or an unknown column.
fn over_input(e: &Expr, input: &LogicalPlan) -> Option<Expr> {
    let columns = input.schema().columns();
    let mut missing = false;
    let rebased = e
        .clone()
        .transform(|x| {
            let Expr::Column(c) = &x else {
                return Ok(Transformed::no(x));
            };
            let mut same = columns.iter().filter(|col| col.name == c.name);
            match (same.next(), same.next()) {
                (Some(col), None) => Ok(Transformed::yes(Expr::Column(col.clone()))),
                _ => {
                    missing = true;
                    Ok(Transformed::no(x))
                }
            }
        })
        .ok()?
        .data;
    (!missing).then_some(rebased)
}
