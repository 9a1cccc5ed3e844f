//! `x NOT IN (SELECT y ...)` in materialized views, without a null-aware join.
//!
//! DataFusion plans NOT IN as a null-aware anti join: a row passes when no `y` equals
//! its `x`, but NULLs change the answer (SQL's three-valued logic): with any NULL `y`
//! no row passes, and a NULL `x` passes only when the subquery is empty. A streaming
//! join has no such global view of its right side, so the rewrite spells it out:
//!
//! ```text
//! Projection(left columns)
//!   Filter((x IS NOT NULL AND total = non_null) OR total = 0)
//!     Join(keyless, one-row right side)
//!       LeftAnti(left, right, x = y)                       -- plain anti join
//!       Aggregate(right, [], [count(*) total, count(y) non_null])
//! ```
//!
//! The counts are a global aggregate (one row), so the join with it is the one-row
//! join scalar subqueries use, and a change in the subquery's NULLs or emptiness
//! updates every row's answer incrementally. Only a single-column, uncorrelated NOT IN
//! (no join filter) is rewritten; others keep DataFusion's plan (and are refused).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, JoinType, NullEquality, Result};
use datafusion::functions_aggregate::count::count;
use datafusion::logical_expr::{
    col, lit, Aggregate, Expr, Filter, Join, JoinConstraint, LogicalPlan, Projection,
};
use std::sync::Arc;

const TOTAL: &str = "__weir_not_in_total";
const NON_NULL: &str = "__weir_not_in_non_null";

pub fn rewrite_not_in(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|p| match p {
        LogicalPlan::Join(j)
            if j.null_aware
                && j.join_type == JoinType::LeftAnti
                && j.on.len() == 1
                && j.filter.is_none() =>
        {
            Ok(Transformed::yes(spelled_out(j)?))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

fn spelled_out(j: Join) -> Result<LogicalPlan> {
    let (x, y) = j.on[0].clone();
    let left_columns: Vec<Expr> = j
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let anti = Join::try_new(
        j.left.clone(),
        j.right.clone(),
        j.on.clone(),
        None,
        JoinType::LeftAnti,
        JoinConstraint::On,
        NullEquality::NullEqualsNothing,
        false,
    )?;
    let counts = Aggregate::try_new(
        j.right.clone(),
        vec![],
        vec![count(lit(1)).alias(TOTAL), count(y).alias(NON_NULL)],
    )?;
    let with_counts = Join::try_new(
        Arc::new(LogicalPlan::Join(anti)),
        Arc::new(LogicalPlan::Aggregate(counts)),
        vec![],
        None,
        JoinType::Inner,
        JoinConstraint::On,
        NullEquality::NullEqualsNothing,
        false,
    )?;
    let total = || Expr::Column(Column::from_name(TOTAL));
    let passes = x
        .is_not_null()
        .and(total().eq(col(Column::from_name(NON_NULL))))
        .or(total().eq(lit(0i64)));
    let filtered = Filter::try_new(passes, Arc::new(LogicalPlan::Join(with_counts)))?;
    Ok(LogicalPlan::Projection(Projection::try_new(
        left_columns,
        Arc::new(LogicalPlan::Filter(filtered)),
    )?))
}
