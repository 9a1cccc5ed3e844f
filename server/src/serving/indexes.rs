//! Which indexes each relation's store keeps, and keeping the runtime told.
//!
//! - a table with a primary key: `<table>_pkey` on it;
//! - a materialized view whose query groups by plain columns it outputs:
//!   `<view>_key` on those columns (each group is one row);
//! - every `CREATE INDEX` on a table or materialized view, under its own name.
//!
//! The point-read planner picks among the same specs (see `plan`), so what it plans
//! for is what the stores hold.

use crate::catalog::{RelationEntry, RelationKind};
use crate::database::Database;
use datafusion::sql::sqlparser::ast::{Expr, GroupByExpr, SelectItem, SetExpr, Statement};
use weir_executor::store_index::IndexSpec;
use weir_planner::{SqlError, SqlResult};

/// Every index `relation` keeps, primary / group key first.
pub fn specs(db: &Database, relation: &str) -> Vec<IndexSpec> {
    let cat = db.catalog.read();
    let Some(entry) = cat.get(relation) else {
        return vec![];
    };
    let mut out: Vec<IndexSpec> = key_columns(entry)
        .map(|columns| IndexSpec {
            name: key_index_name(entry),
            columns,
        })
        .into_iter()
        .collect();
    for index in cat.indexes.iter().filter(|i| i.table == relation) {
        let columns: Option<Vec<usize>> = index
            .columns
            .iter()
            .map(|c| entry.columns.iter().position(|k| &k.name == c))
            .collect();
        if let Some(columns) = columns {
            out.push(IndexSpec {
                name: index.name.clone(),
                columns,
            });
        }
    }
    out
}

/// Tells the runtime every index `relation` keeps (built from its current contents).
pub fn register(db: &Database, relation: &str) -> SqlResult<()> {
    for spec in specs(db, relation) {
        db.runtime()
            .add_index(relation, spec)
            .map_err(SqlError::from)?;
    }
    Ok(())
}

fn key_index_name(entry: &RelationEntry) -> String {
    match entry.kind {
        RelationKind::Table => format!("{}_pkey", entry.name),
        _ => format!("{}_key", entry.name),
    }
}

/// A table's primary key, or a view's group key when it outputs every group column.
fn key_columns(entry: &RelationEntry) -> Option<Vec<usize>> {
    match entry.kind {
        RelationKind::Table if !entry.primary_key.is_empty() => Some(entry.primary_key.clone()),
        RelationKind::MaterializedView => view_group_key(entry),
        _ => None,
    }
}

fn view_group_key(entry: &RelationEntry) -> Option<Vec<usize>> {
    let weir_planner::WeirStatement::Sql(stmt) = weir_planner::parse_statement(&entry.sql).ok()?
    else {
        return None;
    };
    let Statement::CreateView(cv) = stmt.as_ref() else {
        return None;
    };
    let SetExpr::Select(select) = cv.query.body.as_ref() else {
        return None;
    };
    let GroupByExpr::Expressions(groups, modifiers) = &select.group_by else {
        return None;
    };
    let wildcard = select.projection.iter().any(|item| {
        matches!(
            item,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    });
    if groups.is_empty() || !modifiers.is_empty() || wildcard {
        return None;
    }
    groups
        .iter()
        .map(|g| {
            let name = column_name(g)?;
            let position = select.projection.iter().position(|item| match item {
                SelectItem::UnnamedExpr(e) => column_name(e).as_deref() == Some(name.as_str()),
                SelectItem::ExprWithAlias { expr, .. } => {
                    column_name(expr).as_deref() == Some(name.as_str())
                }
                _ => false,
            })?;
            (position < entry.columns.len()).then_some(position)
        })
        .collect()
}

/// The column a plain (possibly qualified) column reference names, lower-cased.
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(ident_name(i)),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident_name),
        Expr::Nested(inner) => column_name(inner),
        _ => None,
    }
}

fn ident_name(i: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}
