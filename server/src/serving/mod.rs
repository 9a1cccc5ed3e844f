//! Serving: statements answered without planning, and the plan cache behind them.
//!
//! A statement's text is reduced to its shape (literals become placeholders, see
//! [`shape`]); plans are cached per shape, shared by every session, and checked
//! against the catalog's generation, so `SELECT ... WHERE id = 1` and `... = 2`, in
//! the simple or the extended protocol, are planned once. A plan is a point read through an index
//! of a store ([`read`]), a point UPDATE / DELETE by primary key ([`write`]), a
//! SELECT's DataFusion plan kept for reuse ([`cached_query`]), or "other": the
//! ordinary path parses, plans and runs it.
//!
//! Module map:
//! - [`shape`]: the lexer that finds literals.
//! - [`plan`]: which statements are served, and how.
//! - [`values`]: literals as key values and DataFusion scalars.
//! - [`indexes`]: the indexes each relation's store keeps.
//! - [`read`], [`write`]: running a served plan.
//! - [`cached_query`]: other SELECTs, planned once per shape and re-run.
//! - [`visibility`]: what a read waits for (read-your-writes, read-after-write).

pub mod cached_query;
pub mod indexes;
pub mod plan;
pub mod read;
pub mod shape;
pub mod values;
pub mod visibility;
pub mod write;

use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use parking_lot::RwLock;
use plan::Plan;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use weir_planner::SqlResult;

/// Shapes kept before the cache starts over (a workload of ad-hoc statements must not
/// grow it without bound).
const CACHED_SHAPES: usize = 10_000;

#[derive(Default)]
pub struct PlanCache {
    plans: RwLock<HashMap<String, (u64, Arc<Plan>)>>,
}

impl PlanCache {
    /// The plan of `shape`, made now if the cache has none for this catalog generation.
    async fn plan_for(&self, db: &Database, shape: &str) -> Arc<Plan> {
        let generation = db.catalog.read().generation();
        if let Some((g, plan)) = self.plans.read().get(shape) {
            if *g == generation {
                return plan.clone();
            }
        }
        let plan = Arc::new(match weir_planner::parse_statement(shape) {
            Ok(weir_planner::WeirStatement::Sql(stmt)) => match plan::plan(db, &stmt) {
                Plan::Other => match cached_query::plan(db, shape, &stmt).await {
                    Some(q) => Plan::Query(q),
                    None => Plan::Other,
                },
                served => served,
            },
            _ => Plan::Other,
        });
        let mut plans = self.plans.write();
        if plans.len() >= CACHED_SHAPES {
            plans.clear();
        }
        plans.insert(shape.to_string(), (generation, plan.clone()));
        plan
    }
}

/// DataFusion's expression planner, shared: SET expressions of point UPDATEs are
/// parsed and coerced with it, as the ordinary path would. (A state is made once:
/// `SessionContext::state` copies every function registry.)
pub(crate) fn expression_context() -> &'static datafusion::prelude::SessionContext {
    static CONTEXT: LazyLock<datafusion::prelude::SessionContext> =
        LazyLock::new(crate::query::new_context);
    &CONTEXT
}

pub(crate) fn expression_state() -> &'static datafusion::execution::SessionState {
    static STATE: LazyLock<datafusion::execution::SessionState> =
        LazyLock::new(|| expression_context().state());
    &STATE
}

/// `EXPLAIN` of a served statement, in the columns DataFusion's EXPLAIN has.
fn explain(text: &str) -> SqlResult<Output> {
    use arrow::array::StringArray;
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("plan_type", DataType::Utf8, true),
        Field::new("plan", DataType::Utf8, true),
    ]));
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["serving_plan"])),
            Arc::new(StringArray::from(vec![text])),
        ],
    )?;
    Ok(Output::Rows {
        schema,
        batches: vec![batch],
    })
}

/// Runs `sql` if it is a served statement; `None` sends it down the ordinary path.
pub async fn try_serve(
    db: &Database,
    session: &mut Session,
    sql: &str,
) -> Option<SqlResult<Output>> {
    if session.transaction.is_some() {
        // Inside BEGIN ... COMMIT the ordinary path keeps the block's bookkeeping.
        return None;
    }
    let shape = shape::shape_of(sql)?;
    let plan = db.serving.plan_for(db, &shape.text).await;
    match plan.as_ref() {
        Plan::Read(p) => read::execute(db, session, p, &shape.literals).await,
        Plan::Write(p) => write::execute(db, session, p, &shape.literals).await,
        Plan::Query(q) => cached_query::execute(db, session, q, &shape.literals).await,
        Plan::Explain(text) => Some(explain(text)),
        Plan::Other => None,
    }
}
