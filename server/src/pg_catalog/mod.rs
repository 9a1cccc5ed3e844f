//! The system catalogs tools and drivers read: `pg_catalog` (`pg_class`,
//! `pg_attribute`, `pg_type`, `pg_index`, `pg_constraint`, `pg_proc`, `pg_settings`,
//! ...) and `information_schema`, plus Postgres's catalog functions (`version()`,
//! `current_setting`, `format_type`, `pg_get_viewdef`, ...).
//!
//! The catalogs are generated from Weir's catalog for each statement that refers to
//! one (a statement over user tables only does not build them) and registered as
//! `pg_catalog.<name>` / `information_schema.<name>` memory tables. The parts:
//! - [`objects`]: Weir's relations, indexes and keys as Postgres objects with oids;
//! - [`tables`] and [`info_schema`]: the tables' columns and rows;
//! - [`types`] and [`procs`]: the types, functions and operators listed;
//! - [`functions`]: the catalog functions;
//! - [`rewrite`]: Postgres catalog syntax turned into what DataFusion plans.

mod functions;
mod info_schema;
mod objects;
mod procs;
mod rewrite;
pub(crate) mod rows;
mod tables;
mod types;

use crate::database::Database;
use datafusion::catalog::{MemTable, MemorySchemaProvider};
use datafusion::prelude::SessionContext;
use rows::Spec;
use std::sync::Arc;
use weir_planner::SqlResult;

pub use functions::version_string;
pub use objects::{
    NAMESPACE_INFORMATION_SCHEMA, NAMESPACE_PG_CATALOG, NAMESPACE_PUBLIC, NAMESPACE_WEIR_CATALOG,
    RELATION_OID_BASE,
};
pub use rewrite::{is_catalog_table, needs_catalog, rewrite_statement};
pub use tables::{SERVER_VERSION, SERVER_VERSION_NUM};
pub use types::type_oid;

/// Functions every statement may call (they read no catalog snapshot).
pub fn register_functions(ctx: &SessionContext) {
    functions::register_session_functions(ctx);
}

/// Every catalog table with its schema's oid and name.
fn system_tables() -> Vec<(u32, &'static str, &'static Spec)> {
    tables::PG_CATALOG
        .iter()
        .map(|s| (NAMESPACE_PG_CATALOG, "pg_catalog", *s))
        .chain(
            info_schema::INFORMATION_SCHEMA
                .iter()
                .map(|s| (NAMESPACE_INFORMATION_SCHEMA, "information_schema", *s)),
        )
        .chain(
            crate::weir_catalog::TABLES
                .iter()
                .map(|t| (NAMESPACE_WEIR_CATALOG, crate::weir_catalog::SCHEMA, &t.spec)),
        )
        .collect()
}

/// Registers `pg_catalog` and `information_schema` over a snapshot of `db`'s catalog,
/// with the functions that read that snapshot.
pub fn register_tables(ctx: &SessionContext, db: &Database) -> SqlResult<()> {
    let system = system_tables();
    let specs: Vec<(u32, &Spec)> = system.iter().map(|(ns, _, s)| (*ns, *s)).collect();
    let objects = Arc::new(objects::Objects::collect(db, &specs));
    let catalog = ctx
        .catalog("weir")
        .ok_or_else(|| weir_planner::SqlError::internal("no default catalog"))?;
    for schema in ["pg_catalog", "information_schema"] {
        catalog.register_schema(schema, Arc::new(MemorySchemaProvider::new()))?;
    }
    for (ns, schema, spec) in &system {
        // Built only for statements that name it (`crate::weir_catalog`).
        if *ns == NAMESPACE_WEIR_CATALOG {
            continue;
        }
        let rows = if *ns == NAMESPACE_PG_CATALOG {
            tables::rows(spec, &objects, db)
        } else {
            info_schema::rows(spec, &objects)
        };
        let batch = spec.batch(&rows)?;
        let table = MemTable::try_new(spec.schema(), vec![vec![batch]])?;
        ctx.register_table(format!("{schema}.{}", spec.name).as_str(), Arc::new(table))?;
    }
    functions::register_catalog_functions(ctx, objects, Arc::new(tables::settings(db)));
    Ok(())
}
