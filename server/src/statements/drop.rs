//! `DROP TABLE | MATERIALIZED VIEW | VIEW [IF EXISTS] name, ... [CASCADE]`.
//!
//! Dependents (views and sinks reading the relation) refuse the drop (2BP01) unless
//! CASCADE, which drops them first. Tables, views and sinks share one path: the
//! catalog entry goes with its job (and a table's log last, after the catalog no
//! longer names it).

use crate::catalog::RelationKind;
use crate::database::{relation_name, Database};
use crate::output::Output;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
use weir_planner::{sqlstate, SqlError, SqlResult};

/// How Postgres names a kind of relation in messages.
fn kind_name(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::Table => "table",
        RelationKind::MaterializedView => "materialized view",
        RelationKind::View => "view",
        RelationKind::Sink => "sink",
    }
}

/// `DROP TABLE | MATERIALIZED VIEW | VIEW`, dependents first with CASCADE.
pub async fn execute(db: &Database, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Drop {
        object_type,
        if_exists,
        names,
        cascade,
        ..
    } = stmt
    else {
        return Err(SqlError::internal("not DROP"));
    };
    let (kind, tag, what) = match object_type {
        ObjectType::Table => (RelationKind::Table, "DROP TABLE", "table"),
        ObjectType::View => (RelationKind::View, "DROP VIEW", "view"),
        ObjectType::MaterializedView => (
            RelationKind::MaterializedView,
            "DROP MATERIALIZED VIEW",
            "materialized view",
        ),
        other => {
            return Err(SqlError::unsupported(format!(
                "DROP {other} is not supported"
            )))
        }
    };
    let _ddl = db.ddl_lock.lock().await;
    let mut order = Vec::new();
    for n in names {
        let name = relation_name(n)?;
        let cat = db.catalog.read();
        let Some(entry) = cat.get(&name) else {
            if *if_exists {
                continue;
            }
            return Err(SqlError::new(
                sqlstate::UNDEFINED_TABLE,
                format!("{what} \"{name}\" does not exist"),
            ));
        };
        if entry.kind != kind {
            return Err(SqlError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!(
                    "\"{name}\" is not a {what}; use DROP {}",
                    kind_name(entry.kind).to_ascii_uppercase()
                ),
            ));
        }
        let dependents: Vec<String> = cat
            .dependents(&name)
            .iter()
            .filter_map(|d| cat.get(d))
            .map(|d| format!("{} {}", kind_name(d.kind), d.name))
            .collect();
        if !dependents.is_empty() && !*cascade {
            return Err(SqlError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop {what} {name} because other objects depend on it: {} depends on it (use DROP ... CASCADE to drop the dependent objects too)",
                    dependents.join(", ")
                ),
            ));
        }
        for d in cat.drop_order(&name) {
            if !order.contains(&d) {
                order.push(d);
            }
        }
    }
    if order.is_empty() {
        return Ok(Output::command(tag));
    }
    let rt = db.runtime();
    let mut w = rt.lock_writes().await;
    rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
    let mut removed_logs = Vec::new();
    {
        let mut cat = db.catalog.write();
        for name in &order {
            let Some(entry) = cat.get(name).cloned() else {
                continue;
            };
            match entry.kind {
                RelationKind::Table => {
                    rt.drop_table(&mut w, name);
                    removed_logs.push(db.table_log_path(entry.id));
                }
                RelationKind::MaterializedView | RelationKind::Sink => rt.drop_view(&mut w, name),
                // A plain view has no job and no rows: only its catalog entry goes.
                RelationKind::View => {}
            }
            cat.remove(name);
            db.schemas.write().retain(|(n, _)| n != name);
        }
        cat.save(&db.meta)?;
    }
    // The catalog no longer names these logs; removing them last means a crash in
    // between leaves only an orphan file, never a table without its log.
    for p in removed_logs {
        let _ = std::fs::remove_file(p);
    }
    drop(w);
    // Retained checkpoints are listed by the time the statement returns.
    rt.settle_retained().await;
    Ok(Output::command(tag))
}
