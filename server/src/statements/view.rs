//! Plain views: `CREATE [OR REPLACE] VIEW v [(columns)] AS query` and their expansion.
//!
//! A plain view stores no rows and runs no job. Like Postgres, Weir keeps its query
//! and replaces every reference to it by that query (as a derived table named after
//! the view) before a statement is planned, so a view works the same in a SELECT, in
//! INSERT ... SELECT and in a materialized view: there it is planned into the view's
//! dataflow, which then depends on it (DROP VIEW refuses while it is read, 2BP01).
//!
//! `OR REPLACE` follows Postgres: the new query must keep the old columns (same
//! names and types, in order; new ones may follow), and it is refused while a
//! materialized view reads the view, because a materialized view's plan must not
//! change under it when it is planned again at restart. `DROP VIEW` is in `drop`.

use crate::catalog::{ColumnInfo, RelationEntry, RelationKind};
use crate::database::{relation_name, Database};
use crate::output::Output;
use crate::query;
use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, Query, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut,
    VisitorMut,
};
use std::collections::HashSet;
use std::ops::ControlFlow;
use weir_planner::{sqlstate, SqlError, SqlResult, WeirStatement};

/// Nesting deeper than this is a definition loop (views referring to each other).
const MAX_DEPTH: usize = 64;

/// Each plain view's name, stored SQL and column names; the SQL is parsed only when a
/// statement refers to the view.
fn plain_views(db: &Database) -> Vec<(String, String, Vec<String>)> {
    let cat = db.catalog.read();
    cat.relations
        .iter()
        .filter(|r| r.kind == RelationKind::View)
        .map(|r| {
            let columns = r.columns.iter().map(|c| c.name.clone()).collect();
            (r.name.clone(), r.sql.clone(), columns)
        })
        .collect()
}

/// The query of a stored `CREATE VIEW` statement.
fn stored_query(sql: &str) -> SqlResult<Query> {
    match weir_planner::parse_statement(sql)? {
        WeirStatement::Sql(s) => match *s {
            Statement::CreateView(cv) => Ok(*cv.query),
            _ => Err(SqlError::internal("stored view DDL is not CREATE VIEW")),
        },
        _ => Err(SqlError::internal("stored view DDL is not CREATE VIEW")),
    }
}

/// Replaces every reference to a plain view in `stmt` by the view's query; returns the
/// views replaced (directly or through other views).
pub fn expand_views(db: &Database, stmt: &mut Statement) -> SqlResult<Vec<String>> {
    let views = plain_views(db);
    if views.is_empty() {
        return Ok(vec![]);
    }
    refuse_view_targets(db, stmt)?;
    let mut expander = Expander {
        views: &views,
        ctes: HashSet::new(),
        used: Vec::new(),
        error: None,
    };
    collect_cte_names(stmt, &mut expander.ctes);
    for _ in 0..MAX_DEPTH {
        let before = expander.used.len();
        let _ = stmt.visit(&mut expander);
        if let Some(e) = expander.error.take() {
            return Err(e);
        }
        if expander.used.len() == before {
            return Ok(expander.used);
        }
    }
    Err(SqlError::new(
        sqlstate::STATEMENT_TOO_COMPLEX,
        format!("views nested more than {MAX_DEPTH} deep (a definition loop?)"),
    ))
}

/// UPDATE and DELETE name their target as a table factor: a view there must not be
/// expanded into a derived table, but refused (views are not updatable in Weir).
fn refuse_view_targets(db: &Database, stmt: &Statement) -> SqlResult<()> {
    let (target, verb) = match stmt {
        Statement::Update(u) => (&u.table.relation, "update"),
        Statement::Delete(d) => match &d.from {
            datafusion::sql::sqlparser::ast::FromTable::WithFromKeyword(t)
            | datafusion::sql::sqlparser::ast::FromTable::WithoutKeyword(t) => match t.first() {
                Some(t) => (&t.relation, "delete from"),
                None => return Ok(()),
            },
        },
        _ => return Ok(()),
    };
    if let TableFactor::Table { name, .. } = target {
        let name = relation_name(name)?;
        crate::dml::check_target(db, &name, verb)?;
    }
    Ok(())
}

/// Names of common table expressions: a CTE named like a view hides the view.
fn collect_cte_names(stmt: &mut Statement, out: &mut HashSet<String>) {
    struct Ctes<'a>(&'a mut HashSet<String>);
    impl VisitorMut for Ctes<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            if let Some(with) = &q.with {
                for cte in &with.cte_tables {
                    self.0.insert(normalized(&cte.alias.name));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Ctes(out));
}

fn normalized(i: &Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_ascii_lowercase(),
    }
}

struct Expander<'a> {
    views: &'a [(String, String, Vec<String>)],
    ctes: HashSet<String>,
    used: Vec<String>,
    error: Option<SqlError>,
}

impl Expander<'_> {
    fn view_of(&self, name: &ObjectName) -> Option<&(String, String, Vec<String>)> {
        let n = relation_name(name).ok()?;
        if name.0.len() == 1 && self.ctes.contains(&n) {
            return None;
        }
        self.views.iter().find(|(v, _, _)| *v == n)
    }
}

impl VisitorMut for Expander<'_> {
    type Break = ();
    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some((view, sql, columns)) = self.view_of(name).cloned() else {
            return ControlFlow::Continue(());
        };
        let query = match stored_query(&sql) {
            Ok(q) => q,
            Err(e) => {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
        };
        // The derived table keeps the name it was referred to by, and the view's
        // column names (a view may rename its query's columns).
        let alias = alias.clone().unwrap_or_else(|| TableAlias {
            explicit: true,
            name: Ident::with_quote('"', &view),
            columns: vec![],
            at: None,
        });
        let alias = if alias.columns.is_empty() {
            TableAlias {
                columns: columns
                    .iter()
                    .map(|c| TableAliasColumnDef {
                        name: Ident::with_quote('"', c.clone()),
                        data_type: None,
                    })
                    .collect(),
                ..alias
            }
        } else {
            alias
        };
        self.used.push(view);
        *factor = TableFactor::Derived {
            lateral: false,
            subquery: Box::new(query),
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

/// `CREATE [OR REPLACE] VIEW`.
pub async fn create(
    db: &Database,
    stmt: &Statement,
    sql: &str,
    views: Vec<String>,
) -> SqlResult<Output> {
    let Statement::CreateView(cv) = stmt else {
        return Err(SqlError::internal("not CREATE VIEW"));
    };
    if !cv.options.to_string().trim().is_empty() {
        return Err(SqlError::unsupported(
            "WITH (...) options on a plain view are not supported; they belong to CREATE MATERIALIZED VIEW",
        ));
    }
    let _ddl = db.ddl_lock.lock().await;
    let name = relation_name(&cv.name)?;
    let columns = view_columns(db, cv).await?;
    // What the original query names (tables, materialized views, other views).
    let original = stored_query(sql)?;
    let mut depends_on =
        query::relations_read(&Statement::Query(Box::new(original)))?.unwrap_or_default();
    {
        let cat = db.catalog.read();
        depends_on.retain(|d| cat.get(d).is_some());
    }
    depends_on.sort();
    depends_on.dedup();
    if views.contains(&name) || depends_on.contains(&name) {
        return Err(SqlError::new(
            sqlstate::INVALID_OBJECT_DEFINITION,
            format!("view \"{name}\" would read itself"),
        ));
    }
    let replacing = check_replace(db, &name, cv.or_replace, cv.if_not_exists, &columns)?;
    let Some(replacing) = replacing else {
        return Ok(Output::command("CREATE VIEW"));
    };
    let mut cat = db.catalog.write();
    let id = match replacing {
        Some(old) => {
            let id = old.id;
            cat.relations.retain(|r| r.name != name);
            id
        }
        None => cat.allocate_id(),
    };
    cat.relations.push(RelationEntry {
        id,
        name,
        kind: RelationKind::View,
        sql: sql.to_string(),
        columns,
        depends_on,
        primary_key: vec![],
        parallelism: 0,
        settings: Default::default(),
    });
    cat.save(&db.meta)?;
    Ok(Output::command("CREATE VIEW"))
}

/// The view's columns: its query's, renamed by the column list if there is one.
async fn view_columns(
    db: &Database,
    cv: &datafusion::sql::sqlparser::ast::CreateView,
) -> SqlResult<Vec<ColumnInfo>> {
    let q = Statement::Query(cv.query.clone());
    let ctx = query::planning_context(db, &q)?;
    let plan = query::plan_statement(&ctx.state(), &q).await?;
    let schema =
        query::pg_schema_with_aliases(plan.schema().as_arrow(), &query::select_aliases(&q));
    if cv.columns.len() > schema.fields().len() {
        return Err(SqlError::syntax(
            "CREATE VIEW specifies more column names than columns",
        ));
    }
    let mut columns: Vec<ColumnInfo> = schema
        .fields()
        .iter()
        .map(|f| ColumnInfo {
            name: f.name().clone(),
            pg_type: crate::ddl::pg_type_name(f.data_type()),
            nullable: true,
        })
        .collect();
    for (c, given) in columns.iter_mut().zip(&cv.columns) {
        c.name = normalized(&given.name);
    }
    let mut seen = HashSet::new();
    for c in &columns {
        if !seen.insert(c.name.clone()) {
            return Err(SqlError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{}\" specified more than once", c.name),
            ));
        }
    }
    Ok(columns)
}

/// Whether the statement goes ahead: `None` to do nothing (IF NOT EXISTS),
/// `Some(None)` to create, `Some(Some(old))` to replace `old`.
fn check_replace(
    db: &Database,
    name: &str,
    or_replace: bool,
    if_not_exists: bool,
    columns: &[ColumnInfo],
) -> SqlResult<Option<Option<RelationEntry>>> {
    let cat = db.catalog.read();
    let Some(old) = cat.get(name) else {
        return Ok(Some(None));
    };
    if if_not_exists {
        return Ok(None);
    }
    if !or_replace {
        return Err(crate::ddl::duplicate_relation(name));
    }
    if old.kind != RelationKind::View {
        return Err(SqlError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a view"),
        ));
    }
    let readers: Vec<String> = cat
        .drop_order(name)
        .into_iter()
        .filter(|d| {
            cat.get(d)
                .is_some_and(|r| r.kind != RelationKind::View && r.kind != RelationKind::Table)
        })
        .collect();
    if !readers.is_empty() {
        return Err(SqlError::new(
            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
            format!(
                "cannot replace view {name}: materialized view {} reads it",
                readers.join(", ")
            ),
        ));
    }
    for (i, was) in old.columns.iter().enumerate() {
        match columns.get(i) {
            None => {
                return Err(SqlError::new(
                    sqlstate::INVALID_TABLE_DEFINITION,
                    "cannot drop columns from view",
                ))
            }
            Some(now) if now.name != was.name => {
                return Err(SqlError::new(
                    sqlstate::INVALID_TABLE_DEFINITION,
                    format!(
                        "cannot change name of view column \"{}\" to \"{}\"",
                        was.name, now.name
                    ),
                ))
            }
            Some(now) if now.pg_type != was.pg_type => {
                return Err(SqlError::new(
                    sqlstate::INVALID_TABLE_DEFINITION,
                    format!(
                        "cannot change data type of view column \"{}\" from {} to {}",
                        was.name, was.pg_type, now.pg_type
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(Some(Some(old.clone())))
}
