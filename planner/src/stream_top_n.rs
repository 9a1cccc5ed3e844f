//! Planning Top-N: `ORDER BY ... LIMIT n [OFFSET m]` (a Sort with a fetch, maybe under
//! a Limit) and `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...)` filtered by
//! `<= n`, `< n` or `= 1` (the filter DataFusion pushes down onto the window). Both
//! become a `TopN` fragment fed through a hash exchange on the partition keys (one
//! actor without PARTITION BY).

use crate::error::{SqlError, SqlResult};
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
use weir_executor::exchange::ExchangeKind;
use weir_executor::operators::top_n::TopNSpec;
use weir_executor::{FragmentInput, OperatorSpec};

/// What one Top-N computes.
pub(crate) struct TopNQuery<'a> {
    pub partition: &'a [Expr],
    pub order: &'a [SortExpr],
    pub offset: usize,
    pub limit: usize,
    pub row_number: bool,
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

/// The row count a `rn <op> n` predicate keeps.
fn rank_limit(pred: &Expr, rn: &str) -> Option<usize> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = pred else {
        return None;
    };
    let is_rn = |e: &Expr| matches!(e, Expr::Column(c) if c.name == rn);
    let (op, n) = if is_rn(left) {
        (*op, literal_usize(right)?)
    } else if is_rn(right) {
        (op.swap()?, literal_usize(left)?)
    } else {
        return None;
    };
    let limit = match op {
        Operator::LtEq => n,
        Operator::Lt => n - 1,
        Operator::Eq if n == 1 => 1,
        _ => return None,
    };
    usize::try_from(limit).ok()
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
                row_number: false,
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
        let [Expr::WindowFunction(wf)] = w.window_expr.as_slice() else {
            return Ok(None);
        };
        let WindowFunction { fun, params } = wf.as_ref();
        if !fun.name().eq_ignore_ascii_case("row_number") {
            return Ok(None);
        }
        let rn = w.schema.field(w.schema.fields().len() - 1).name().clone();
        let Some(limit) = rank_limit(&f.predicate, &rn) else {
            return Ok(None);
        };
        let p = self.visit(&w.input)?;
        let mut top = self.top_n(
            p,
            TopNQuery {
                partition: &params.partition_by,
                order: &params.order_by,
                offset: 0,
                limit,
                row_number: true,
                out_schema: w.schema.clone(),
            },
        )?;
        if let Some(proj) = proj {
            let exprs = proj
                .expr
                .iter()
                .map(|e| self.physical(e, &w.schema))
                .collect::<SqlResult<Vec<_>>>()?;
            top.chain.push(OperatorSpec::Project {
                exprs,
                schema: nullable_schema(&proj.schema),
            });
            top.schema = proj.schema.clone();
        }
        Ok(Some(top))
    }

    pub(crate) fn top_n(&mut self, mut p: Partial, q: TopNQuery) -> SqlResult<Partial> {
        let in_schema = p.schema.clone();
        let width = in_schema.fields().len();
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
        for (k, e) in q.partition.iter().enumerate() {
            let t = e.get_type(&in_schema)?;
            exprs.push(self.physical(e, &in_schema)?);
            fields.push(Field::new(format!("_part{k}"), t.clone(), true));
            partition_types.push(t);
        }
        let mut sort_fields = Vec::new();
        for (k, s) in q.order.iter().enumerate() {
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
        let schema = Arc::new(Schema::new(fields));
        p.chain.push(OperatorSpec::Project {
            exprs,
            schema: schema.clone(),
        });
        let upstream = self.finish(p, schema);
        let global = q.partition.is_empty();
        let canonical = format!(
            "topn partition[{}] order[{}] offset {} limit {} rn {}",
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
            q.row_number
        );
        let spec = TopNSpec {
            uid: format!(
                "{}.topn.{:016x}",
                self.view,
                weir_storage::key_group::key_hash(canonical.as_bytes())
            ),
            row_types,
            partition_types,
            sort_fields,
            offset: q.offset,
            limit: q.limit,
            row_number: q.row_number,
            output_schema: nullable_schema(&q.out_schema),
        };
        Ok(Partial {
            inputs: vec![FragmentInput::Fragment {
                id: upstream,
                exchange: if global {
                    ExchangeKind::Single
                } else {
                    ExchangeKind::Hash {
                        keys: (width..width + q.partition.len()).collect(),
                    }
                },
            }],
            chain: vec![OperatorSpec::TopN(spec)],
            single: global,
            one_row: global && q.limit <= 1,
            schema: q.out_schema,
        })
    }
}
