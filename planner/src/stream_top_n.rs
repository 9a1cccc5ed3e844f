//! Planning Top-N: `ORDER BY ... LIMIT n [OFFSET m]` (a Sort with a fetch, maybe under
//! a Limit) and `ROW_NUMBER()` / `RANK() OVER (PARTITION BY ... ORDER BY ...)` filtered
//! by bounds on the rank (`<= n`, `< n`, `= n`, `> m`, `>= m`, combined with AND; the
//! filter DataFusion pushes down onto the window). Both
//! become a `TopN` fragment fed through a hash exchange on the partition keys (one
//! actor without PARTITION BY).

use crate::error::{SqlError, SqlResult};
use crate::stream_plan::keyed_exchange;
use crate::stream_plan::{nullable_schema, Builder, Partial};
use arrow::compute::SortOptions;
use arrow::datatypes::{Field, Schema};
use datafusion::common::{DFSchemaRef, ScalarValue};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, FetchType, Filter, Limit, LogicalPlan, Operator, SkipType,
    SortExpr,
};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use weir_executor::operators::partition_rows::{PartitionLayout, RowSource};
use weir_executor::operators::project::ProjectSpec;
use weir_executor::operators::top_n::{Ranking, TopNSpec};
use weir_executor::{FragmentInput, OperatorSpec};

/// What one Top-N computes.
pub(crate) struct TopNQuery<'a> {
    pub partition: &'a [Expr],
    pub order: &'a [SortExpr],
    pub offset: usize,
    pub limit: usize,
    /// The rank column the output ends with (ROW_NUMBER() / RANK()), if any.
    pub ranking: Option<Ranking>,
    pub out_schema: DFSchemaRef,
}

fn literal_usize(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::Int8(Some(n)) => Some(*n as i128),
            ScalarValue::Int16(Some(n)) => Some(*n as i128),
            ScalarValue::Int32(Some(n)) => Some(*n as i128),
            ScalarValue::Int64(Some(n)) => Some(*n as i128),
            ScalarValue::UInt8(Some(n)) => Some(*n as i128),
            ScalarValue::UInt16(Some(n)) => Some(*n as i128),
            ScalarValue::UInt32(Some(n)) => Some(*n as i128),
            ScalarValue::UInt64(Some(n)) => Some(*n as i128),
            _ => None,
        },
        Expr::Cast(c) => literal_usize(&c.expr),
        _ => None,
    }
}

/// The ranks `[lo, hi]` a conjunction of `rn <op> n` predicates keeps (`rn` is the
/// window function's output column), or `None` for any other predicate.
fn rank_bounds(pred: &Expr, is_rn: &dyn Fn(&Expr) -> bool) -> Option<(i128, i128)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = pred else {
        return None;
    };
    if *op == Operator::And {
        let (a, b) = (rank_bounds(left, is_rn)?, rank_bounds(right, is_rn)?);
        return Some((a.0.max(b.0), a.1.min(b.1)));
    }
    let (op, n) = if is_rn(left) {
        (*op, literal_usize(right)?)
    } else if is_rn(right) {
        (op.swap()?, literal_usize(left)?)
    } else {
        return None;
    };
    Some(match op {
        Operator::LtEq => (1, n),
        Operator::Lt => (1, n - 1),
        Operator::Eq => (n, n),
        Operator::Gt => (n + 1, i128::MAX),
        Operator::GtEq => (n, i128::MAX),
        _ => return None,
    })
}

impl Builder<'_> {
    /// `ORDER BY ... LIMIT` (with the Limit node, if any, on top of the Sort).
    pub(crate) fn limit(&mut self, limit: &Limit) -> SqlResult<Partial> {
        let LogicalPlan::Sort(sort) = limit.input.as_ref() else {
            return Err(SqlError::unsupported(
                "LIMIT without ORDER BY in a materialized view is not supported: which rows \
                 it keeps would be arbitrary",
            ));
        };
        let (Ok(SkipType::Literal(offset)), Ok(FetchType::Literal(fetch))) =
            (limit.get_skip_type(), limit.get_fetch_type())
        else {
            return Err(SqlError::unsupported(
                "LIMIT and OFFSET in a materialized view must be constants",
            ));
        };
        let p = self.visit(&sort.input)?;
        self.top_n(
            p,
            TopNQuery {
                partition: &[],
                order: &sort.expr,
                offset,
                limit: fetch.unwrap_or(usize::MAX),
                ranking: None,
                out_schema: sort.input.schema().clone(),
            },
        )
    }

    /// `Filter(rn <= n)` directly over `ROW_NUMBER() OVER (...)`; `None` when the filter
    /// is anything else.
    pub(crate) fn row_number_filter(&mut self, f: &Filter) -> SqlResult<Option<Partial>> {
        // The optimizer may leave a column-only projection between the two.
        let (proj, w) = match f.input.as_ref() {
            LogicalPlan::Window(w) => (None, w),
            LogicalPlan::Projection(p) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
                match p.input.as_ref() {
                    LogicalPlan::Window(w) => (Some(p), w),
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let [expr] = w.window_expr.as_slice() else {
            return Ok(None);
        };
        let Expr::WindowFunction(wf) = expr.clone().unalias() else {
            return Ok(None);
        };
        let WindowFunction { fun, params } = wf.as_ref();
        let ranking = match fun.name().to_ascii_lowercase().as_str() {
            "row_number" => Ranking::RowNumber,
            "rank" => Ranking::Rank,
            _ => return Ok(None),
        };
        // The window's output is its last column; the filter may name it through a
        // column-only projection, by the same name.
        let last = w.schema.fields().len() - 1;
        // (Its display name can differ from the filter's after type coercion: a column
        // that is none of the window's input columns is the window's.)
        let input = w.input.schema();
        let is_rn = |e: &Expr| match e {
            Expr::Column(c) => {
                w.schema.maybe_index_of_column(c) == Some(last)
                    || c.name == *w.schema.field(last).name()
                    || input.maybe_index_of_column(c).is_none()
            }
            _ => false,
        };
        let Some((lo, hi)) = rank_bounds(&f.predicate, &is_rn) else {
            return Ok(None);
        };
        if hi == i128::MAX {
            return Err(SqlError::unsupported(
                "a ROW_NUMBER() / RANK() filter in a materialized view needs an upper bound \
                 (rn <= n): without one it keeps every row",
            ));
        }
        let (lo, hi) = (lo.max(1), hi);
        let limit = usize::try_from((hi - lo + 1).max(0)).unwrap_or(0);
        let offset = usize::try_from(lo - 1).unwrap_or(0);
        let p = self.visit(&w.input)?;
        let mut top = self.top_n(
            p,
            TopNQuery {
                partition: &params.partition_by,
                order: &params.order_by,
                offset,
                limit,
                ranking: Some(ranking),
                out_schema: w.schema.clone(),
            },
        )?;
        if let Some(proj) = proj {
            let exprs = proj
                .expr
                .iter()
                .map(|e| self.physical(e, &w.schema))
                .collect::<SqlResult<Vec<_>>>()?;
            top.chain.push(OperatorSpec::Project(ProjectSpec {
                exprs,
                schema: nullable_schema(&proj.schema),
            }));
            top.schema = proj.schema.clone();
        }
        Ok(Some(top))
    }

    /// Projects `p` to `[row..., partition keys..., sort keys...]` and finishes it as a
    /// fragment: the input of a partitioned operator (Top-N, OVER). Returns the
    /// fragment's id and the layout (its uid still to be set).
    pub(crate) fn partitioned_input(
        &mut self,
        mut p: Partial,
        partition: &[Expr],
        order: &[SortExpr],
        out_schema: &DFSchemaRef,
    ) -> SqlResult<(usize, PartitionLayout)> {
        let in_schema = p.schema.clone();
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut row_types = Vec::new();
        for (i, c) in in_schema.columns().into_iter().enumerate() {
            let t = in_schema.field(i).data_type().clone();
            exprs.push(self.physical(&Expr::Column(c), &in_schema)?);
            fields.push(Field::new(format!("_c{i}"), t.clone(), true));
            row_types.push(t);
        }
        let mut partition_types = Vec::new();
        for (k, e) in partition.iter().enumerate() {
            let t = e.get_type(&in_schema)?;
            exprs.push(self.physical(e, &in_schema)?);
            fields.push(Field::new(format!("_part{k}"), t.clone(), true));
            partition_types.push(t);
        }
        let mut sort_fields = Vec::new();
        for (k, s) in order.iter().enumerate() {
            let t = s.expr.get_type(&in_schema)?;
            exprs.push(self.physical(&s.expr, &in_schema)?);
            fields.push(Field::new(format!("_sort{k}"), t.clone(), true));
            sort_fields.push((
                t,
                SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                },
            ));
        }
        let row_sources = row_sources(&in_schema, partition, order);
        let schema = Arc::new(Schema::new(fields));
        p.chain.push(OperatorSpec::Project(ProjectSpec {
            exprs,
            schema: schema.clone(),
        }));
        let upstream = self.finish(p, schema);
        Ok((
            upstream,
            PartitionLayout {
                uid: String::new(),
                row_types,
                partition_types,
                sort_fields,
                output_schema: nullable_schema(out_schema),
                append_only_input: false,
                row_sources,
            },
        ))
    }

    /// The input of a partitioned operator: its rows hash-exchanged on the partition
    /// keys (all on one actor without PARTITION BY).
    pub(crate) fn partitioned_exchange(upstream: usize, layout: &PartitionLayout) -> FragmentInput {
        let width = layout.row_types.len();
        FragmentInput::Fragment {
            id: upstream,
            exchange: keyed_exchange(width..width + layout.partition_types.len()),
        }
    }

    pub(crate) fn top_n(&mut self, p: Partial, q: TopNQuery) -> SqlResult<Partial> {
        let (upstream, mut layout) =
            self.partitioned_input(p, q.partition, q.order, &q.out_schema)?;
        let global = q.partition.is_empty();
        let canonical = format!(
            "topn partition[{}] order[{}] offset {} limit {} rn {:?}",
            q.partition
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(","),
            q.order
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(","),
            q.offset,
            q.limit,
            q.ranking
        );
        layout.uid = self.uid("topn", &canonical);
        let input = Self::partitioned_exchange(upstream, &layout);
        let spec = TopNSpec {
            layout,
            offset: q.offset,
            limit: q.limit,
            ranking: q.ranking,
        };
        Ok(Partial {
            inputs: vec![input],
            chain: vec![OperatorSpec::TopN(spec)],
            single: global,
            one_row: global && q.limit <= 1,
            schema: q.out_schema,
        })
    }
}

/// For each input column, the PARTITION BY or ORDER BY key that is that column
/// itself, if one is: its value is then in the key too (see `RowSource`).
fn row_sources(in_schema: &DFSchemaRef, partition: &[Expr], order: &[SortExpr]) -> Vec<RowSource> {
    in_schema
        .columns()
        .into_iter()
        .map(|c| {
            let is_column = |e: &Expr| matches!(e, Expr::Column(x) if *x == c);
            if let Some(j) = partition.iter().position(is_column) {
                RowSource::Partition(j)
            } else if let Some(k) = order.iter().position(|s| is_column(&s.expr)) {
                RowSource::Sort(k)
            } else {
                RowSource::Row
            }
        })
        .collect()
}
