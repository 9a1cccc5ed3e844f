//! CREATE INDEX / DROP INDEX.
//!
//! An index is recorded in the catalog (so DROP INDEX finds it again after a restart)
//! and built in the relation's readable store, which keeps it current at every
//! committed epoch (see `weir_executor::store_index`). Point and range reads on its
//! columns are then answered through it (see `serving`); any other query scans its
//! consistent snapshot, so results are the same with or without one. UNIQUE and
//! expression indexes are refused (0A000): they would change what the table accepts
//! or need evaluation Weir does not do.

use crate::catalog::{IndexEntry, RelationKind};
use crate::database::{relation_name, Database};
use crate::output::Output;
use datafusion::sql::sqlparser::ast::{CreateIndex, Expr, ObjectName};
use weir_planner::{sqlstate, SqlError, SqlResult};

pub async fn create_index(db: &Database, ci: &CreateIndex) -> SqlResult<Output> {
    if ci.unique {
        return Err(SqlError::unsupported(
            "UNIQUE indexes are not supported; declare a PRIMARY KEY on the table",
        ));
    }
    let Some(name) = &ci.name else {
        return Err(SqlError::unsupported("CREATE INDEX needs an index name"));
    };
    let name = relation_name(name)?;
    let table = relation_name(&ci.table_name)?;
    let _ddl = db.ddl_lock.lock().await;
    let mut cat = db.catalog.write();
    let Some(entry) = cat.get(&table) else {
        return Err(SqlError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{table}\" does not exist"),
        ));
    };
    if entry.kind == RelationKind::Sink {
        return Err(SqlError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{table}\" is not a table or materialized view"),
        ));
    }
    let mut columns = Vec::new();
    for c in &ci.columns {
        let Expr::Identifier(ident) = &c.column.expr else {
            return Err(SqlError::unsupported(format!(
                "index on the expression {} is not supported; index columns",
                c.column.expr
            )));
        };
        let col = ident.value.to_ascii_lowercase();
        if !entry.columns.iter().any(|k| k.name == col) {
            return Err(SqlError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{col}\" does not exist"),
            ));
        }
        columns.push(col);
    }
    if cat.get(&name).is_some() || cat.indexes.iter().any(|i| i.name == name) {
        if ci.if_not_exists {
            return Ok(Output::command("CREATE INDEX"));
        }
        return Err(SqlError::new(
            sqlstate::DUPLICATE_TABLE,
            format!("relation \"{name}\" already exists"),
        ));
    }
    let positions = columns
        .iter()
        .filter_map(|c| entry.columns.iter().position(|k| &k.name == c))
        .collect();
    cat.indexes.push(IndexEntry {
        name: name.clone(),
        table: table.clone(),
        columns,
    });
    cat.save(&db.meta)?;
    drop(cat);
    let spec = weir_executor::store_index::IndexSpec {
        name,
        columns: positions,
    };
    db.runtime()
        .add_index(&table, spec)
        .map_err(SqlError::from)?;
    Ok(Output::command("CREATE INDEX"))
}

pub async fn drop_index(db: &Database, names: &[ObjectName], if_exists: bool) -> SqlResult<Output> {
    let _ddl = db.ddl_lock.lock().await;
    let mut cat = db.catalog.write();
    for n in names {
        let name = relation_name(n)?;
        if !cat.indexes.iter().any(|i| i.name == name) {
            if if_exists {
                continue;
            }
            return Err(SqlError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("index \"{name}\" does not exist"),
            ));
        }
        if let Some(i) = cat.indexes.iter().find(|i| i.name == name) {
            db.runtime().drop_index(&i.table, &name);
        }
        cat.indexes.retain(|i| i.name != name);
    }
    cat.save(&db.meta)?;
    Ok(Output::command("DROP INDEX"))
}
