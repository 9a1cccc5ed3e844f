//! Running a point / range read: an index lookup in the relation's store at the
//! committed epoch, the WHERE conditions checked on the rows found, the columns picked.

use super::plan::{CmpOp, Condition, Lookup, Operand, PointRead};
use super::shape::Literal;
use super::values::key_value;
use super::visibility;
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use arrow::array::{ArrayRef, BooleanArray, RecordBatch, Scalar};
use arrow::compute::kernels::cmp;
use arrow::datatypes::SchemaRef;
use std::ops::Bound;
use weir_executor::store_index::KeyRange;
use weir_planner::{SqlError, SqlResult};

/// `None` when a literal does not convert (or the index is gone): the ordinary path
/// answers instead.
pub async fn execute(
    db: &Database,
    session: &mut Session,
    p: &PointRead,
    literals: &[Literal],
) -> Option<SqlResult<Output>> {
    let value = |column: usize, o: &Operand| operand_value(&p.schema, literals, column, o);
    let range = match &p.lookup {
        Lookup::Point(key) => KeyRange::Point(
            key.iter()
                .map(|(c, o)| value(*c, o))
                .collect::<Option<_>>()?,
        ),
        Lookup::Range {
            column,
            lower,
            upper,
        } => {
            let bound = |b: &Option<(Operand, bool)>| -> Option<Bound<ArrayRef>> {
                Some(match b {
                    None => Bound::Unbounded,
                    Some((o, true)) => Bound::Included(value(*column, o)?),
                    Some((o, false)) => Bound::Excluded(value(*column, o)?),
                })
            };
            KeyRange::Range {
                lower: bound(lower)?,
                upper: bound(upper)?,
            }
        }
    };
    let checks = checks(&p.schema, &p.conditions, literals)?;
    if let Err(e) = visibility::wait_visible(db, session).await {
        return Some(Err(e));
    }
    let found = match db.runtime().lookup(&p.relation, &p.index, &range) {
        Ok(Some((_, batch))) => batch,
        Ok(None) => return None,
        Err(e) => return Some(Err(SqlError::from(e))),
    };
    Some(answer(p, &found, &checks))
}

fn answer(p: &PointRead, found: &RecordBatch, checks: &[Check]) -> SqlResult<Output> {
    let rows = filter(found, checks)?;
    let columns = p
        .projection
        .iter()
        .map(|&i| rows.column(i).clone())
        .collect();
    let batch = RecordBatch::try_new_with_options(
        p.output.clone(),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.num_rows())),
    )?;
    Ok(Output::Rows {
        schema: p.output.clone(),
        batches: vec![batch],
    })
}

/// One condition with its value converted to the column's type.
pub(super) struct Check {
    column: usize,
    op: CmpOp,
    value: ArrayRef,
}

pub(super) fn checks(
    schema: &SchemaRef,
    conditions: &[Condition],
    literals: &[Literal],
) -> Option<Vec<Check>> {
    conditions
        .iter()
        .map(|c| {
            Some(Check {
                column: c.column,
                op: c.op,
                value: operand_value(schema, literals, c.column, &c.value)?,
            })
        })
        .collect()
}

fn operand_value(
    schema: &SchemaRef,
    literals: &[Literal],
    column: usize,
    o: &Operand,
) -> Option<ArrayRef> {
    key_value(
        literals.get(o.literal)?,
        o.negated,
        schema.field(column).data_type(),
    )
}

/// The rows of `batch` meeting every check (SQL semantics: NULL never matches).
pub(super) fn filter(batch: &RecordBatch, checks: &[Check]) -> SqlResult<RecordBatch> {
    let mut keep: Option<BooleanArray> = None;
    for c in checks {
        let column = batch.column(c.column);
        let value = Scalar::new(c.value.clone());
        let mask = match c.op {
            CmpOp::Eq => cmp::eq(column, &value),
            CmpOp::Lt => cmp::lt(column, &value),
            CmpOp::LtEq => cmp::lt_eq(column, &value),
            CmpOp::Gt => cmp::gt(column, &value),
            CmpOp::GtEq => cmp::gt_eq(column, &value),
        }?;
        keep = Some(match keep {
            None => mask,
            Some(k) => arrow::compute::and(&k, &mask)?,
        });
    }
    match keep {
        None => Ok(batch.clone()),
        // `filter_record_batch` drops rows whose mask is false or NULL.
        Some(mask) => Ok(arrow::compute::filter_record_batch(batch, &mask)?),
    }
}
