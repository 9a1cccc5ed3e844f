//! Planning a join: both inputs end their fragments with a projection that appends
//! the join keys (cast to one common type per key, so equal keys encode equally) and
//! are hash-exchanged on them; the join fragment starts with a `HashJoin`.
//!
//! A join without equi keys (a cross join, or only a non-equi condition) would keep
//! both inputs and emit their product; it is planned only when one input is known to
//! hold at most one row (a global aggregate, as in a scalar subquery), on one actor.

use crate::error::{SqlError, SqlResult};
use crate::stream_plan::keyed_exchange;
use crate::stream_plan::{nullable_schema, Builder, Partial};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, NullEquality};
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{Expr, ExprSchemable, Join};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use weir_executor::operators::hash_join::{HashJoinSpec, JoinKind};
use weir_executor::operators::project::ProjectSpec;
use weir_executor::{FragmentInput, OperatorSpec};

fn join_kind(t: JoinType) -> SqlResult<JoinKind> {
    Ok(match t {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::LeftOuter,
        JoinType::Right => JoinKind::RightOuter,
        JoinType::Full => JoinKind::FullOuter,
        JoinType::LeftSemi => JoinKind::LeftSemi,
        JoinType::LeftAnti => JoinKind::LeftAnti,
        JoinType::RightSemi => JoinKind::RightSemi,
        JoinType::RightAnti => JoinKind::RightAnti,
        JoinType::LeftMark => JoinKind::LeftMark,
        other => {
            return Err(SqlError::unsupported(format!(
                "{other} joins in materialized views are not supported yet"
            )))
        }
    })
}

impl Builder<'_> {
    pub(crate) fn join(&mut self, join: &Join) -> SqlResult<Partial> {
        let kind = join_kind(join.join_type)?;
        if join.null_aware {
            return Err(SqlError::unsupported(
                "NOT IN (subquery) in a materialized view is not supported yet; \
                 write NOT EXISTS, which has no NULL special case",
            ));
        }
        let lookup = crate::lookup_join::reads_lookup_table(&join.right);
        if lookup && !matches!(kind, JoinKind::Inner | JoinKind::LeftOuter) {
            return Err(SqlError::unsupported(format!(
                "a {} join with a table FOR SYSTEM_TIME AS OF PROCTIME() is not supported: \
                 a lookup join is a JOIN or LEFT JOIN with the table on the right",
                kind.name()
            )));
        }
        let left = self.visit(&join.left)?;
        let right = self.visit(&join.right)?;
        let keyless = join.on.is_empty();
        if keyless && !(left.one_row || right.one_row) {
            return Err(SqlError::unsupported(
                "a join without an equality condition between the two sides (a cross \
                 join) is refused in a materialized view: it would keep both inputs and \
                 emit their product. Join on equal columns, or make one side a single \
                 row (a global aggregate)",
            ));
        }
        // One common type per key, so that equal keys encode (and route) equally.
        let mut key_types = Vec::new();
        let mut key_exprs: [Vec<Expr>; 2] = [Vec::new(), Vec::new()];
        for (l, r) in &join.on {
            let lt = l.get_type(&left.schema)?;
            let rt = r.get_type(&right.schema)?;
            let t = if lt == rt {
                lt
            } else {
                comparison_coercion(&lt, &rt).ok_or_else(|| {
                    SqlError::unsupported(format!(
                        "join keys {l} ({lt}) and {r} ({rt}) have no common type"
                    ))
                })?
            };
            key_exprs[0].push(l.clone().cast_to(&t, &left.schema)?);
            key_exprs[1].push(r.clone().cast_to(&t, &right.schema)?);
            key_types.push(t);
        }
        let combined = left.schema.join(&right.schema)?;
        let filter = match &join.filter {
            Some(f) => Some(self.physical(f, &combined)?),
            None => None,
        };
        let interval_bounds = join
            .filter
            .as_ref()
            .map(|f| crate::join_bounds::interval_bounds(f, &left.schema, &right.schema))
            .unwrap_or_default();
        let side_types = [&left, &right].map(|p| {
            p.schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<DataType>>()
        });
        let mut inputs = Vec::new();
        let mut key_sources: [Vec<Option<usize>>; 2] = [Vec::new(), Vec::new()];
        for (s, mut p) in [left, right].into_iter().enumerate() {
            let width = p.schema.fields().len();
            let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
            let mut fields: Vec<Field> = nullable_schema(&p.schema)
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            for (i, c) in p.schema.columns().into_iter().enumerate() {
                exprs.push(self.physical(&Expr::Column(c), &p.schema)?);
                fields[i] = Field::new(format!("_c{i}"), fields[i].data_type().clone(), true);
            }
            for (k, e) in key_exprs[s].iter().enumerate() {
                let key = self.physical(e, &p.schema)?;
                key_sources[s].push(
                    key.downcast_ref::<datafusion::physical_expr::expressions::Column>()
                        .map(|c| c.index()),
                );
                exprs.push(key);
                fields.push(Field::new(format!("_key{k}"), key_types[k].clone(), true));
            }
            let schema = Arc::new(Schema::new(fields));
            p.chain.push(OperatorSpec::Project(ProjectSpec {
                exprs,
                schema: schema.clone(),
            }));
            let id = self.finish(p, schema);
            inputs.push(FragmentInput::Fragment {
                id,
                exchange: keyed_exchange(width..width + key_types.len()),
            });
        }
        let canonical = format!(
            "{}{} on[{}] filter[{}]",
            if lookup { "lookup " } else { "" },
            kind.name(),
            join.on
                .iter()
                .map(|(l, r)| format!("{l}={r}"))
                .collect::<Vec<_>>()
                .join(","),
            join.filter
                .as_ref()
                .map(|f| f.to_string())
                .unwrap_or_default()
        );
        let uid = self.uid("hashjoin", &canonical);
        let spec = HashJoinSpec {
            uid,
            kind,
            side_types,
            key_types,
            null_equals_null: join.null_equality == NullEquality::NullEqualsNull,
            filter,
            output_schema: nullable_schema(&join.schema),
            key_sources,
            interval_bounds,
            // Set at deployment (`weir_executor::append_only`).
            append_only_inputs: false,
            lookup,
        };
        Ok(Partial {
            inputs,
            chain: vec![OperatorSpec::HashJoin(spec)],
            single: keyless,
            one_row: false,
            schema: join.schema.clone(),
        })
    }
}
