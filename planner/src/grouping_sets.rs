//! `GROUPING SETS`, `ROLLUP` and `CUBE` in materialized views, as a union of plain
//! aggregations.
//!
//! An aggregation over grouping sets is the union of one aggregation per set, each
//! with NULL for the grouping columns outside its set and the set's `__grouping_id`
//! (the bit mask `grouping()` reads, computed as DataFusion's batch aggregation does:
//! one bit per distinct grouping expression, first expression highest, 1 when the
//! expression is not in the set; repeated sets get an ordinal above those bits). The
//! union keeps the original aggregation's schema, so the plan above it is unchanged,
//! and every branch is an ordinary keyed aggregation the streaming planner already
//! keeps up to date incrementally.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result, ScalarValue};
use datafusion::logical_expr::{
    cast, lit, Aggregate, Expr, GroupingSet, LogicalPlan, Projection, Union,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Rewrites every aggregation over grouping sets in `plan`.
pub fn expand_grouping_sets(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|p| match p {
        LogicalPlan::Aggregate(agg)
            if agg.group_expr.len() == 1 && matches!(agg.group_expr[0], Expr::GroupingSet(_)) =>
        {
            Ok(Transformed::yes(as_union(agg)?))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// The sets of a grouping-set expression, in DataFusion's order.
fn sets_of(gs: &GroupingSet) -> Vec<Vec<Expr>> {
    match gs {
        GroupingSet::GroupingSets(sets) => sets.clone(),
        GroupingSet::Rollup(exprs) => (0..=exprs.len()).map(|i| exprs[..i].to_vec()).collect(),
        GroupingSet::Cube(exprs) => {
            let n = exprs.len();
            (0..(1u64 << n))
                .map(|mask| {
                    (0..n)
                        .filter(|i| mask & (1 << i) != 0)
                        .map(|i| exprs[i].clone())
                        .collect()
                })
                .collect()
        }
    }
}

fn as_union(agg: Aggregate) -> Result<LogicalPlan> {
    let Expr::GroupingSet(gs) = &agg.group_expr[0] else {
        unreachable!("checked by the caller");
    };
    let distinct: Vec<Expr> = gs.distinct_expr().into_iter().cloned().collect();
    let n = distinct.len();
    let schema = agg.schema.clone();
    let id_type = schema.field(n).data_type().clone();
    let mut seen: HashMap<Vec<bool>, u64> = HashMap::new();
    let mut branches = Vec::new();
    for set in sets_of(gs) {
        let is_null: Vec<bool> = distinct.iter().map(|e| !set.contains(e)).collect();
        let ordinal = seen.entry(is_null.clone()).or_insert(0);
        let id = is_null
            .iter()
            .fold(0u64, |acc, &null| (acc << 1) | null as u64)
            | (*ordinal << n);
        *ordinal += 1;
        let branch = Aggregate::try_new(agg.input.clone(), set.clone(), agg.aggr_expr.clone())?;
        let branch_schema = branch.schema.clone();
        let branch = Arc::new(LogicalPlan::Aggregate(branch));
        let mut exprs = Vec::with_capacity(schema.fields().len());
        for (i, e) in distinct.iter().enumerate() {
            let (q, f) = schema.qualified_field(i);
            let value = match set.iter().position(|s| s == e) {
                Some(k) => Expr::Column(Column::from(branch_schema.qualified_field(k))),
                None => cast(lit(ScalarValue::Null), f.data_type().clone()),
            };
            exprs.push(value.alias_qualified(q.cloned(), f.name()));
        }
        let (q, f) = schema.qualified_field(n);
        exprs.push(cast(lit(id), id_type.clone()).alias_qualified(q.cloned(), f.name()));
        for j in 0..agg.aggr_expr.len() {
            let (q, f) = schema.qualified_field(n + 1 + j);
            let (bq, bf) = branch_schema.qualified_field(set.len() + j);
            exprs.push(
                Expr::Column(Column::new(bq.cloned(), bf.name()))
                    .alias_qualified(q.cloned(), f.name()),
            );
        }
        branches.push(Arc::new(LogicalPlan::Projection(Projection::try_new(
            exprs, branch,
        )?)));
    }
    Ok(LogicalPlan::Union(Union {
        inputs: branches,
        schema,
    }))
}
