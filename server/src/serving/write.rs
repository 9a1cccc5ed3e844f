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
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::HashMap;
use std::sync::Arc;
use weir_executor::{Op, StreamChunk};
use weir_planner::{SqlError, SqlResult};

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
        let mut w = rt.lock_writes_for(&p.table, 1).await;
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

/// The SET list of a point UPDATE: DataFusion expressions over the old row whose
/// placeholders are the statement's literals. Each is planned (type coercion
/// included, as the ordinary path plans it) once per combination of literal types,
/// with the literals as extra columns, so later executions only evaluate it.
pub struct SetList {
    sets: Vec<(usize, Expr)>,
    compiled: parking_lot::Mutex<HashMap<Vec<DataType>, Arc<Compiled>>>,
}

/// Expressions over the old row followed by one column per literal.
struct Compiled {
    schema: SchemaRef,
    exprs: Vec<(usize, Arc<dyn PhysicalExpr>)>,
}

/// Literal types seen before the per-shape cache starts over.
const COMPILED_SIGNATURES: usize = 64;

impl SetList {
    pub fn new(sets: Vec<(usize, Expr)>) -> SetList {
        SetList {
            sets,
            compiled: Default::default(),
        }
    }

    fn compiled(&self, table: &SchemaRef, values: &[ScalarValue]) -> Option<Arc<Compiled>> {
        let signature: Vec<DataType> = values.iter().map(|v| v.data_type()).collect();
        if let Some(c) = self.compiled.lock().get(&signature) {
            return Some(c.clone());
        }
        let mut fields: Vec<Field> = table.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(
            signature
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(literal_column(i), t.clone(), true)),
        );
        let schema = Arc::new(Schema::new(fields));
        let df_schema = DFSchema::try_from(schema.as_ref().clone()).ok()?;
        let state = super::expression_state();
        let exprs = self
            .sets
            .iter()
            .map(|(column, expr)| {
                let expr = literals_as_columns(expr.clone())?;
                Some((*column, state.create_physical_expr(expr, &df_schema).ok()?))
            })
            .collect::<Option<_>>()?;
        let compiled = Arc::new(Compiled { schema, exprs });
        let mut cache = self.compiled.lock();
        if cache.len() >= COMPILED_SIGNATURES {
            cache.clear();
        }
        cache.insert(signature, compiled.clone());
        Some(compiled)
    }
}

/// The column standing for literal `i` (a name no SQL identifier can spell).
fn literal_column(i: usize) -> String {
    format!("\0literal{i}")
}

/// `expr` with placeholder `$n` read from literal column `n - 1`, and column
/// references unqualified (the row batch has bare column names).
fn literals_as_columns(expr: Expr) -> Option<Expr> {
    expr.transform_up(|e| match e {
        Expr::Placeholder(Placeholder { id, .. }) => {
            match id
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| n.checked_sub(1))
            {
                Some(i) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
                    literal_column(i),
                )))),
                None => Err(datafusion::error::DataFusionError::Plan(format!(
                    "unexpected placeholder {id}"
                ))),
            }
        }
        Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
            Column::new_unqualified(c.name),
        ))),
        other => Ok(Transformed::no(other)),
    })
    .ok()
    .map(|t| t.data)
}

/// The SET list ready for this statement's literals.
fn new_values(p: &PointWrite, sets: &SetList, literals: &[Literal]) -> Option<Bound> {
    let values: Vec<ScalarValue> = literals.iter().map(scalar).collect::<Option<_>>()?;
    let compiled = sets.compiled(&p.schema, &values)?;
    let columns = values
        .iter()
        .map(|v| v.to_array_of_size(1).ok())
        .collect::<Option<_>>()?;
    Some(Bound { compiled, columns })
}

/// A compiled SET list with the literal columns of one statement.
struct Bound {
    compiled: Arc<Compiled>,
    columns: Vec<ArrayRef>,
}

/// The delete of `old` (one row) and the insert of its new version.
fn replaced(p: &PointWrite, old: RecordBatch, sets: &Bound) -> SqlResult<StreamChunk> {
    let mut input = old.columns().to_vec();
    input.extend(sets.columns.iter().cloned());
    let input = RecordBatch::try_new(sets.compiled.schema.clone(), input)?;
    let mut columns = old.columns().to_vec();
    for (column, expr) in &sets.compiled.exprs {
        let value = expr.evaluate(&input)?.into_array(old.num_rows())?;
        columns[*column] = crate::dml::conform_column(&value, p.schema.field(*column))?;
    }
    let new = RecordBatch::try_new(old.schema(), columns)?;
    let both = arrow::compute::concat_batches(&old.schema(), [&old, &new])?;
    let n = old.num_rows();
    let mut ops = vec![Op::Delete; n];
    ops.extend(vec![Op::Insert; n]);
    Ok(StreamChunk::new(ops, both))
}
