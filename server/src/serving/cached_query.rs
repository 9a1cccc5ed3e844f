//! SELECTs no index serves, planned once per shape.
//!
//! The shape (literals as placeholders) is planned by DataFusion's SQL planner once;
//! the unanalysed logical plan is kept. Each execution substitutes its literals (as
//! the typed values the SQL planner gives literals: `Int64`, `Utf8`), points the
//! plan's scans at its relations' contents at one committed epoch, and runs it;
//! DataFusion's analyser (type coercion) and optimiser then see the literals as if
//! written in the text. So a prepared statement keeps its plan, and simple-protocol
//! statements of one shape share one.
//!
//! Not cached (the ordinary path runs them): statements over the system catalogs
//! (built per statement), statements with time or random functions (DataFusion folds
//! `now()` at planning, which must happen per statement), and literals other than
//! integers and strings (a decimal literal's type depends on its digits).

use super::shape::Literal;
use super::values::scalar;
use crate::database::Database;
use crate::output::Output;
use crate::query;
use crate::session::Session;
use arrow::array::RecordBatch;
use datafusion::common::tree_node::Transformed;
use datafusion::common::ScalarValue;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::Statement;
use std::collections::HashMap;
use weir_planner::{SqlError, SqlResult};

pub struct CachedQuery {
    /// Unanalysed, with `$n` placeholders and scans over empty tables.
    plan: LogicalPlan,
    /// The relations its scans read.
    relations: Vec<String>,
    /// Explicit aliases of the select list (kept as written in the output).
    aliases: Vec<String>,
}

/// Words of functions whose value changes between executions of one plan.
const VOLATILE: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "uuid",
    "gen_random_uuid",
    "to_timestamp",
];

/// Whether a literal may follow `ORDER BY` / `GROUP BY`: there an integer is a column
/// position (`ORDER BY 1`), which a placeholder would turn into a constant. Such
/// shapes are not cached (conservatively: any literal after the first such clause).
fn positional_literal(shape: &str) -> bool {
    ["order by ", "group by "]
        .iter()
        .filter_map(|clause| shape.find(clause))
        .min()
        .is_some_and(|at| shape[at..].contains('$'))
}

/// Plans `stmt` (parsed from `shape`) for reuse, if it may be.
pub async fn plan(db: &Database, shape: &str, stmt: &Statement) -> Option<CachedQuery> {
    if !matches!(stmt, Statement::Query(_))
        || crate::pg_catalog::needs_catalog(stmt)
        || crate::weir_catalog::needed(stmt)
    {
        return None;
    }
    let volatile = shape
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| VOLATILE.contains(&w));
    if volatile || positional_literal(shape) {
        return None;
    }
    let mut stmt = stmt.clone();
    crate::statements::expand(db, &mut stmt).ok()?;
    let relations = query::relations_read(&stmt).ok()??;
    // Plan against empty tables of the same (all-nullable) schemas the executions read.
    let empty: HashMap<String, RecordBatch> = relations
        .iter()
        .map(|r| Some((r.clone(), RecordBatch::new_empty(db.relation_schema(r)?))))
        .collect::<Option<_>>()?;
    let ctx = query::snapshot_context_nowait(db, &stmt, empty).ok()?;
    let plan = query::plan_statement(&ctx.state(), &stmt).await.ok()?;
    Some(CachedQuery {
        plan,
        relations,
        aliases: query::select_aliases(&stmt),
    })
}

/// `None` sends the statement down the ordinary path (a literal it does not bind).
pub async fn execute(
    db: &Database,
    session: &mut Session,
    q: &CachedQuery,
    literals: &[Literal],
) -> Option<SqlResult<Output>> {
    let values: Vec<ScalarValue> = literals
        .iter()
        .map(|l| scalar(l).filter(|v| matches!(v, ScalarValue::Int64(_) | ScalarValue::Utf8(_))))
        .collect::<Option<_>>()?;
    let plan = if values.is_empty() {
        q.plan.clone()
    } else {
        q.plan.clone().with_param_values(values).ok()?
    };
    Some(run(db, session, q, plan).await)
}

async fn run(
    db: &Database,
    session: &mut Session,
    q: &CachedQuery,
    plan: LogicalPlan,
) -> SqlResult<Output> {
    super::visibility::wait_visible(db, session).await?;
    let (_, batches) = db
        .runtime()
        .snapshot(&q.relations)
        .map_err(SqlError::from)?;
    let mut tables = HashMap::new();
    for (name, batch) in batches {
        tables.insert(name, query::readable_table(batch)?);
    }
    let plan = plan
        .transform_up_with_subqueries(|p| match p {
            LogicalPlan::TableScan(mut scan) => match tables.get(scan.table_name.table()) {
                Some(t) => {
                    scan.source = provider_as_source(t.clone());
                    Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                }
                None => Ok(Transformed::no(LogicalPlan::TableScan(scan))),
            },
            other => Ok(Transformed::no(other)),
        })?
        .data;
    let state = super::expression_state();
    let physical = state.create_physical_plan(&plan).await?;
    // The analysed plan's types (coercion ran on the bound literals).
    let schema = query::pg_schema_with_aliases(&physical.schema(), &q.aliases);
    let batches = datafusion::physical_plan::collect(physical, state.task_ctx()).await?;
    let batches = query::with_schema(&schema, batches)?;
    Ok(Output::Rows { schema, batches })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literals_after_order_or_group_by_are_not_placeholders() {
        assert!(super::positional_literal("select a from t order by $1"));
        assert!(super::positional_literal(
            "select a, count(*) from t where a > $1 group by $2"
        ));
        assert!(!super::positional_literal(
            "select a from t where a > $1 order by a"
        ));
        assert!(!super::positional_literal("select a from t where a > $1"));
    }
}
