//! Running a point UPDATE / DELETE: the row found by primary key in the table's latest
//! contents, the WHERE conditions checked on it, the new row computed, and one change
//! written, all under the write lock; the statement is acknowledged after the group
//! commit, outside it.

use super::plan::{PointWrite, WriteAction};
use super::read::{checks, filter};
use super::shape::Literal;
use super::values::{key_value, scalar};
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use arrow::array::{ArrayRef, RecordBatch};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use weir_executor::{Op, StreamChunk};
use weir_planner::{SqlError, SqlResult};

type NewValue = (usize, Arc<dyn PhysicalExpr>);

/// `None` when a literal or an expression does not convert: the ordinary path runs
/// the statement (and reports its error, if any).
pub async fn execute(
    db: &Database,
    session: &mut Session,
    p: &PointWrite,
    literals: &[Literal],
) -> Option<SqlResult<Output>> {
    let key: Vec<ArrayRef> = p
        .key
        .iter()
        .map(|(c, o)| {
            key_value(
                literals.get(o.literal)?,
                o.negated,
                p.schema.field(*c).data_type(),
            )
        })
        .collect::<Option<_>>()?;
    let checks = checks(&p.schema, &p.conditions, literals)?;
    let (tag, sets) = match &p.action {
        WriteAction::Delete => ("DELETE", None),
        WriteAction::Update(sets) => ("UPDATE", Some(new_values(p, sets, literals)?)),
    };
    let result = async {
        let rt = db.runtime();
        let mut w = rt.lock_writes().await;
        let writer = w
            .table(&p.table)
            .ok_or_else(|| SqlError::internal(format!("table {} has no writer", p.table)))?;
        let old = match writer.row_by_key(&key).map_err(SqlError::from)? {
            Some(row) => filter(&row, &checks)?,
            None => return Ok(Output::rows(tag, 0)),
        };
        if old.num_rows() == 0 {
            return Ok(Output::rows(tag, 0));
        }
        let chunk = match &sets {
            None => StreamChunk::deletes(old),
            Some(sets) => replaced(p, old, sets)?,
        };
        crate::dml::commit(db, session, w, &p.table, chunk).await?;
        Ok(Output::rows(tag, 1))
    };
    Some(result.await)
}

/// The SET expressions with this statement's literals, ready to evaluate.
fn new_values(
    p: &PointWrite,
    sets: &[(usize, Expr)],
    literals: &[Literal],
) -> Option<Vec<NewValue>> {
    let values: Vec<ScalarValue> = literals.iter().map(scalar).collect::<Option<_>>()?;
    let schema = DFSchema::try_from(p.schema.as_ref().clone()).ok()?;
    let state = super::expression_context().state();
    sets.iter()
        .map(|(column, expr)| {
            let bound = bind(expr.clone(), &values)?;
            Some((*column, state.create_physical_expr(bound, &schema).ok()?))
        })
        .collect()
}

/// `expr` with each placeholder replaced by its literal, and column references
/// unqualified (the old row's batch has bare column names).
fn bind(expr: Expr, values: &[ScalarValue]) -> Option<Expr> {
    expr.transform_up(|e| match e {
        Expr::Placeholder(Placeholder { id, .. }) => {
            let n: usize = id
                .strip_prefix('$')
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            match n.checked_sub(1).and_then(|i| values.get(i)) {
                Some(v) => Ok(Transformed::yes(Expr::Literal(v.clone(), None))),
                None => Err(datafusion::error::DataFusionError::Plan(format!(
                    "no value for {id}"
                ))),
            }
        }
        Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
            datafusion::common::Column::new_unqualified(c.name),
        ))),
        other => Ok(Transformed::no(other)),
    })
    .ok()
    .map(|t| t.data)
}

/// The delete of `old` and the insert of its new version.
fn replaced(p: &PointWrite, old: RecordBatch, sets: &[NewValue]) -> SqlResult<StreamChunk> {
    let mut columns = old.columns().to_vec();
    for (column, expr) in sets {
        let value = expr.evaluate(&old)?.into_array(old.num_rows())?;
        columns[*column] = crate::dml::conform_column(&value, p.schema.field(*column))?;
    }
    let new = RecordBatch::try_new(old.schema(), columns)?;
    let both = arrow::compute::concat_batches(&old.schema(), [&old, &new])?;
    let n = old.num_rows();
    let mut ops = vec![Op::Delete; n];
    ops.extend(vec![Op::Insert; n]);
    Ok(StreamChunk::new(ops, both))
}
