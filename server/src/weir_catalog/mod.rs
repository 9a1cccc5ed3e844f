//! `weir_catalog`: what the dataflow is doing, as tables SQL can query and join —
//! `jobs`, `operators`, `exchanges`, `checkpoints`, `savepoints`, `sources`,
//! `source_errors`, `settings`, `progress`. The web dashboard reads these same rows
//! (`crate::web`), so psql users and the dashboard see the same facts; SHOW JOBS,
//! SHOW CHECKPOINTS and `/metrics` come from the same runtime records.
//!
//! A statement that names `weir_catalog.<table>` gets every table built from one
//! [`Facts`] snapshot taken when it runs (so joins between them agree); statements
//! that do not name the schema pay nothing. One file per table: its columns (a
//! [`Spec`]) and its rows from the facts, registered in [`TABLES`].

mod checkpoints;
mod exchanges;
mod facts;
mod jobs;
mod operators;
mod progress;
mod savepoints;
mod settings;
mod source_errors;
mod sources;

use crate::database::Database;
use crate::output::Output;
use crate::pg_catalog::rows::{Spec, V};
use datafusion::catalog::{MemTable, MemorySchemaProvider};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{visit_relations, Statement};
use std::ops::ControlFlow;
use std::sync::Arc;
use weir_planner::SqlResult;

pub use facts::Facts;
pub use settings::effective_settings;

/// The schema's name.
pub const SCHEMA: &str = "weir_catalog";

/// One system table: its columns and how its rows come from the facts.
pub struct Table {
    pub spec: Spec,
    pub rows: fn(&Facts) -> Vec<Vec<V>>,
}

/// Every table of the schema.
pub const TABLES: &[&Table] = &[
    &jobs::JOBS,
    &operators::OPERATORS,
    &exchanges::EXCHANGES,
    &checkpoints::CHECKPOINTS,
    &savepoints::SAVEPOINTS,
    &sources::SOURCES,
    &source_errors::SOURCE_ERRORS,
    &settings::SETTINGS,
    &progress::PROGRESS,
];

/// The table called `name`.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().copied().find(|t| t.spec.name == name)
}

/// The `weir_catalog` tables `stmt` names (empty: it reads none).
fn named(stmt: &Statement) -> Vec<String> {
    let mut names = Vec::new();
    let _ = visit_relations(stmt, |name| {
        let part = |i: usize| name.0.get(i).and_then(|p| p.as_ident());
        if name.0.len() == 2 && part(0).is_some_and(|i| i.value.eq_ignore_ascii_case(SCHEMA)) {
            names.extend(part(1).map(|i| i.value.to_ascii_lowercase()));
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

/// Whether `stmt` names a `weir_catalog` table.
pub fn needed(stmt: &Statement) -> bool {
    !named(stmt).is_empty()
}

/// Registers every table with no rows: planning needs only their columns.
pub fn register_empty(ctx: &SessionContext) -> SqlResult<()> {
    register(ctx, |_| Vec::new())
}

/// Registers every table over a snapshot of the facts taken now (the savepoints are
/// listed from storage only when `stmt` reads them).
pub fn register_snapshot(ctx: &SessionContext, db: &Database, stmt: &Statement) -> SqlResult<()> {
    let with_savepoints = named(stmt).iter().any(|n| n == "savepoints");
    let facts = Facts::gather_blocking(db, with_savepoints);
    register(ctx, |t| (t.rows)(&facts))
}

fn register(ctx: &SessionContext, rows: impl Fn(&Table) -> Vec<Vec<V>>) -> SqlResult<()> {
    let catalog = ctx
        .catalog("weir")
        .ok_or_else(|| weir_planner::SqlError::internal("no default catalog"))?;
    catalog.register_schema(SCHEMA, Arc::new(MemorySchemaProvider::new()))?;
    for t in TABLES {
        let batch = t.spec.batch(&rows(t))?;
        let table = MemTable::try_new(t.spec.schema(), vec![vec![batch]])?;
        ctx.register_table(
            format!("{SCHEMA}.{}", t.spec.name).as_str(),
            Arc::new(table),
        )?;
    }
    Ok(())
}

/// A SHOW statement's text table: the `(header, column)`s of `table`'s rows, as
/// psql would print the columns (NULL empty, timestamps as [`ts_text`]).
pub fn text_table(table: &str, facts: &Facts, columns: &[(&str, &str)]) -> SqlResult<Output> {
    let missing = |what: &str| weir_planner::SqlError::internal(format!("no {what}"));
    let t = self::table(table).ok_or_else(|| missing(table))?;
    let at = columns
        .iter()
        .map(|(_, c)| {
            t.spec
                .columns
                .iter()
                .position(|(n, _)| n == c)
                .ok_or_else(|| missing(c))
        })
        .collect::<SqlResult<Vec<usize>>>()?;
    let rows = (t.rows)(facts)
        .iter()
        .map(|r| at.iter().map(|&i| text(&r[i])).collect())
        .collect();
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    crate::show::text_table(&headers, rows)
}

/// A cell as text: NULL as empty.
fn text(v: &V) -> String {
    match v {
        V::Null => String::new(),
        V::Oid(n) => n.to_string(),
        V::I16(n) => n.to_string(),
        V::I32(n) => n.to_string(),
        V::I64(n) => n.to_string(),
        V::F32(x) => x.to_string(),
        V::F64(x) => x.to_string(),
        V::Ts(micros) => ts_text(*micros).unwrap_or_default(),
        V::Bool(b) => b.to_string(),
        V::Text(s) => s.clone(),
        V::Oids(xs) => format!("{xs:?}"),
        V::I16s(xs) => format!("{xs:?}"),
        V::Texts(xs) => xs.join(", "),
    }
}

/// A timestamp cell as `YYYY-MM-DD HH:MM:SS.mmm` (UTC), as SHOW and the dashboard
/// print it.
pub fn ts_text(micros: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
}

/// Microseconds of a wall-clock ms value, as `timestamptz` cells hold them.
fn ts(ms: i64) -> V {
    V::Ts(ms.saturating_mul(1000))
}

fn int(n: u64) -> V {
    V::I64(i64::try_from(n).unwrap_or(i64::MAX))
}
