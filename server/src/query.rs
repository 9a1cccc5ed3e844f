//! SELECT serving: DataFusion over a consistent snapshot of every table and view.
//!
//! Each statement gets a fresh DataFusion context in which every relation is a
//! `MemTable` holding its committed contents at one epoch (see
//! `Runtime::snapshot`). DataFusion then runs any SQL it supports over them.

use crate::database::Database;
use crate::pg_catalog;
use crate::session::Session;
use crate::weir_catalog;
use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::catalog::MemTable;
use datafusion::datasource::empty::EmptyTable;
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement;
use std::collections::HashMap;
use std::sync::Arc;
use weir_planner::naming::pg_column_name;
use weir_planner::{SqlError, SqlResult};

pub fn session_config() -> SessionConfig {
    let mut cfg = SessionConfig::new()
        // information_schema is Weir's own (pg_catalog::info_schema), over the whole
        // catalog rather than the tables registered for one statement.
        .with_information_schema(false)
        .with_target_partitions(1)
        .with_default_catalog_and_schema("weir", "public");
    let opts = cfg.options_mut();
    // Plain Utf8 strings (not views) keep every operator and encoder on one type.
    opts.sql_parser.map_string_types_to_utf8view = false;
    opts.sql_parser.dialect = datafusion::common::config::Dialect::PostgreSQL;
    // `0.908` is numeric, as in Postgres (not double precision).
    opts.sql_parser.parse_float_as_decimal = true;
    // timestamptz columns are stored in UTC.
    opts.execution.time_zone = Some("+00:00".to_string());
    cfg
}

pub fn new_context() -> SessionContext {
    let state = datafusion::execution::SessionStateBuilder::new()
        .with_config(session_config())
        .with_default_features()
        .with_query_planner(Arc::new(crate::subplan::WeirQueryPlanner))
        .build();
    let ctx = SessionContext::new_with_state(state);
    pg_catalog::register_functions(&ctx);
    crate::functions::register(&ctx);
    ctx
}

/// The user relations a statement reads (`pg_catalog` and `information_schema` are
/// generated from the catalog, not read: see [`reads_catalog`]). Always `Some`; the
/// `Option` is kept for callers that treat `None` as "everything".
pub(crate) fn relations_read(stmt: &Statement) -> SqlResult<Option<Vec<String>>> {
    let (refs, _) = datafusion::sql::resolve::resolve_table_references(
        &DFStatement::Statement(Box::new(stmt.clone())),
        true,
    )?;
    Ok(Some(
        refs.iter()
            .filter(|r| !is_catalog_reference(r))
            .map(|r| r.table().to_string())
            .collect(),
    ))
}

/// `pg_catalog.x`, `information_schema.x`, or an unqualified catalog name (Postgres
/// searches `pg_catalog` first).
fn is_catalog_reference(r: &datafusion::common::TableReference) -> bool {
    match r.schema() {
        Some(s) => s == "pg_catalog" || s == "information_schema" || s == weir_catalog::SCHEMA,
        None => pg_catalog::is_catalog_table(r.table()),
    }
}

/// Whether `stmt` reads `pg_catalog` or `information_schema` (or calls a function
/// over them): only then are they built (a SELECT on a user table does not pay).
fn reads_catalog(stmt: &Statement) -> SqlResult<bool> {
    Ok(pg_catalog::needs_catalog(stmt))
}

fn is_read(reads: &Option<Vec<String>>, name: &str) -> bool {
    reads.as_ref().is_none_or(|r| r.iter().any(|n| n == name))
}

/// A context where the relations `stmt` reads are empty tables with the right schema:
/// enough to plan (bind names and types) without reading any data.
pub fn planning_context(db: &Database, stmt: &Statement) -> SqlResult<SessionContext> {
    let reads = relations_read(stmt)?;
    let ctx = new_context();
    for (name, schema) in db.relation_schemas() {
        if is_read(&reads, &name) {
            ctx.register_table(name.as_str(), Arc::new(EmptyTable::new(schema)))?;
        }
    }
    if reads_catalog(stmt)? {
        pg_catalog::register_tables(&ctx, db)?;
    }
    if weir_catalog::needed(stmt) {
        weir_catalog::register_empty(&ctx)?;
    }
    Ok(ctx)
}

/// A context over the committed contents of the relations `stmt` reads (all at one
/// epoch), after this session's own writes are visible. `overrides` replaces some
/// relations (UPDATE and DELETE read their table's latest contents).
pub async fn snapshot_context(
    db: &Database,
    session: &mut Session,
    stmt: &Statement,
    overrides: HashMap<String, RecordBatch>,
) -> SqlResult<SessionContext> {
    crate::serving::visibility::wait_visible(db, session).await?;
    snapshot_context_nowait(db, stmt, overrides)
}

/// Like [`snapshot_context`] without waiting for any epoch (used under the write lock,
/// where waiting for a barrier would deadlock).
pub fn snapshot_context_nowait(
    db: &Database,
    stmt: &Statement,
    overrides: HashMap<String, RecordBatch>,
) -> SqlResult<SessionContext> {
    // Only what the statement reads is copied out of the stores (and pg_catalog is
    // built only for catalog queries): a point INSERT must not snapshot every view.
    let reads = relations_read(stmt)?;
    let names: Vec<String> = db
        .relation_schemas()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !overrides.contains_key(n) && is_read(&reads, n))
        .collect();
    let (_, batches) = db.runtime().snapshot(&names).map_err(SqlError::from)?;
    let ctx = new_context();
    for (name, batch) in batches.into_iter().chain(overrides) {
        ctx.register_table(name.as_str(), readable_table(batch)?)?;
    }
    if reads_catalog(stmt)? {
        pg_catalog::register_tables(&ctx, db)?;
    }
    if weir_catalog::needed(stmt) {
        weir_catalog::register_snapshot(&ctx, db, stmt)?;
    }
    Ok(ctx)
}

/// A relation's contents as the table a query reads. Registered all-nullable: NOT
/// NULL is enforced by the table writer, with Postgres's error, not by DataFusion's
/// INSERT planning.
pub fn readable_table(batch: RecordBatch) -> SqlResult<Arc<MemTable>> {
    let schema =
        weir_planner::nullable_schema(&datafusion::common::DFSchema::try_from(batch.schema())?);
    let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

/// Plans `stmt` after rewriting the Postgres catalog syntax in it
/// (`pg_catalog::rewrite_statement`).
pub async fn plan_statement(state: &SessionState, stmt: &Statement) -> SqlResult<LogicalPlan> {
    let mut stmt = stmt.clone();
    pg_catalog::rewrite_statement(&mut stmt);
    Ok(state
        .statement_to_plan(DFStatement::Statement(Box::new(stmt)))
        .await?)
}

/// Renames result columns the way Postgres names them. Explicit aliases (`AS "x y"`)
/// are kept as written.
pub fn pg_schema_with_aliases(schema: &Schema, aliases: &[String]) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                // The `name#dupN` aliases Weir gives repeated items are not the user's.
                let internal = weir_planner::naming::strip_duplicate_mark(f.name()) != f.name();
                let name = if aliases.iter().any(|a| a == f.name()) && !internal {
                    f.name().clone()
                } else {
                    pg_column_name(f.name())
                };
                Field::new(name, f.data_type().clone(), true)
            })
            .collect::<Vec<_>>(),
    ))
}

/// Aliases given explicitly in the top-level SELECT list.
pub fn select_aliases(stmt: &Statement) -> Vec<String> {
    use datafusion::sql::sqlparser::ast::{SelectItem, SetExpr};
    let Statement::Query(q) = stmt else {
        return vec![];
    };
    let SetExpr::Select(select) = q.body.as_ref() else {
        return vec![];
    };
    select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(if alias.quote_style.is_some() {
                alias.value.clone()
            } else {
                alias.value.to_ascii_lowercase()
            }),
            _ => None,
        })
        .collect()
}

pub async fn run_query(
    ctx: &SessionContext,
    stmt: &Statement,
) -> SqlResult<(SchemaRef, Vec<RecordBatch>)> {
    let plan = plan_statement(&ctx.state(), stmt).await?;
    let df = ctx.execute_logical_plan(plan).await?;
    let schema = pg_schema_with_aliases(df.schema().as_arrow(), &select_aliases(stmt));
    let batches = with_schema(&schema, df.collect().await?)?;
    Ok((schema, batches))
}

/// Result batches under the Postgres-named `schema` (same columns, new names).
pub fn with_schema(schema: &SchemaRef, batches: Vec<RecordBatch>) -> SqlResult<Vec<RecordBatch>> {
    Ok(batches
        .into_iter()
        .map(|b| {
            RecordBatch::try_new_with_options(
                schema.clone(),
                b.columns().to_vec(),
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
            )
        })
        .collect::<Result<Vec<_>, _>>()?)
}
