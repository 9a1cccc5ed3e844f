//! Statement execution: the router that picks the code for each kind of statement.
//!
//! The kinds that grew past a few lines live in their own files here; older kinds
//! still live in the server's top-level modules (`ddl`, `dml`, `show`, `sink`, ...),
//! which the router calls the same way.
//!
//! Module map:
//! - [`view`]: plain `CREATE [OR REPLACE] VIEW`, expanded where used.
//! - [`drop`]: `DROP TABLE | MATERIALIZED VIEW | VIEW`, dependents first with CASCADE.
//! - [`function`]: `CREATE [OR REPLACE] FUNCTION ... LANGUAGE SQL` / `DROP FUNCTION`,
//!   scalar SQL functions inlined where called.
//! - [`session_reset`]: `DEALLOCATE [ALL]`, `DISCARD ALL`, `RESET name | ALL`.
//! - [`transaction`]: `BEGIN`, `COMMIT`, `ROLLBACK` and savepoints inside a block.
//! - [`copy`]: `COPY t FROM STDIN` and `COPY t | (query) TO STDOUT`, text and CSV.
//!
//! Before a statement is planned, [`expand`] replaces references to plain views and
//! calls of SQL functions by their definitions (Postgres inlines both the same way).

pub mod copy;
pub mod drop;
pub mod function;
pub mod session_reset;
pub mod transaction;
pub mod view;

use crate::catalog::RelationKind;
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use crate::{ddl, dml, query, show};
use datafusion::sql::sqlparser::ast::{ObjectType, Statement};
use weir_planner::{parse_statement, sqlstate, SqlError, SqlResult, WeirStatement};

/// Replaces plain views and SQL functions by their definitions; returns the views
/// the statement reads (a materialized view depends on them).
pub fn expand(db: &Database, stmt: &mut Statement) -> SqlResult<Vec<String>> {
    function::inline_calls(db, stmt)?;
    view::expand_views(db, stmt)
}

/// Parses and runs one statement.
pub async fn execute(db: &Database, session: &mut Session, sql: &str) -> SqlResult<Output> {
    if let Some(served) = crate::serving::try_serve(db, session, sql).await {
        return served;
    }
    match parse_statement(sql)? {
        WeirStatement::Sql(mut stmt) => {
            let views = expand(db, &mut stmt)?;
            execute_sql(db, session, &stmt, sql, views).await
        }
        WeirStatement::ExplainCreateMaterializedView(mut stmt) => {
            expand(db, &mut stmt)?;
            ddl::explain_create_view(db, session, &stmt).await
        }
        other => execute_weir(db, session, other, sql).await,
    }
}

/// Weir's own statements (see `WeirStatement`).
async fn execute_weir(
    db: &Database,
    session: &mut Session,
    stmt: WeirStatement,
    sql: &str,
) -> SqlResult<Output> {
    let rt = db.runtime();
    match stmt {
        WeirStatement::Empty => Ok(Output::Empty),
        WeirStatement::Flush => {
            rt.flush().await.map_err(SqlError::from)?;
            Ok(Output::command("FLUSH"))
        }
        WeirStatement::ShowTables => show::show_relations(db, RelationKind::Table),
        WeirStatement::ShowMaterializedViews => {
            show::show_relations(db, RelationKind::MaterializedView)
        }
        WeirStatement::ShowCreateMaterializedView(name) => show::show_create(db, &name),
        WeirStatement::ShowJobs => show::show_jobs(db).await,
        WeirStatement::ShowCluster => crate::member::show_cluster(db.member.as_deref()).await,
        WeirStatement::ShowCheckpoints => show::show_checkpoints(db).await,
        WeirStatement::SetKey(key, value) => show::set_key(session, key, value),
        s @ (WeirStatement::Savepoint { .. }
        | WeirStatement::DropSavepoint(_)
        | WeirStatement::RestoreSavepoint { .. })
            if session.transaction.is_some() =>
        {
            transaction::savepoint_in_block(session, s, sql)
        }
        WeirStatement::Savepoint { name, views } => {
            rt.take_savepoint(&name, views.as_deref())
                .await
                .map_err(SqlError::from)?;
            Ok(Output::command("SAVEPOINT"))
        }
        WeirStatement::DropSavepoint(name) => {
            rt.drop_savepoint(&name).await.map_err(SqlError::from)?;
            Ok(Output::command("RELEASE"))
        }
        WeirStatement::ShowSavepoints => show::show_savepoints(db).await,
        WeirStatement::DropCheckpoint(path) => {
            rt.drop_retained_checkpoint(&path)
                .await
                .map_err(SqlError::from)?;
            Ok(Output::command("DROP CHECKPOINT"))
        }
        WeirStatement::ShowSourceErrors => show::show_source_errors(db).await,
        WeirStatement::ShowSinks => crate::sink::show_sinks(db),
        WeirStatement::CreateSink {
            name,
            input,
            options,
            sql,
        } => crate::sink::create_sink(db, session, &name, &input, &options, &sql).await,
        WeirStatement::DropSink { name, if_exists } => {
            crate::sink::drop_sink(db, &name, if_exists).await
        }
        WeirStatement::RestoreSavepoint {
            name,
            views,
            ignore_unclaimed,
        } => {
            let reports =
                weir_executor::savepoint::restore(rt, &name, views.as_deref(), ignore_unclaimed)
                    .await
                    .map_err(SqlError::from)?;
            for r in &reports {
                session
                    .notices
                    .push(show::restore_notice(&format!("savepoint \"{name}\""), r));
            }
            show::restore_report(reports)
        }
        WeirStatement::ExplainRestore { name, views } => {
            let matches = weir_executor::savepoint::explain_restore(rt, &name, views.as_deref())
                .await
                .map_err(SqlError::from)?;
            show::explain_restore(matches)
        }
        WeirStatement::Checkpoint => {
            rt.checkpoint_now().await.map_err(SqlError::from)?;
            Ok(Output::command("CHECKPOINT"))
        }
        WeirStatement::ResumeMaterializedView(name) => resume_view(db, &name).await,
        WeirStatement::ShowVariable(name) => show::show_variable(db, session, &name),
        WeirStatement::ExplainCreateMaterializedView(stmt) => {
            ddl::explain_create_view(db, session, &stmt).await
        }
        WeirStatement::Sql(stmt) => execute_sql(db, session, &stmt, sql, vec![]).await,
    }
}

/// `ALTER MATERIALIZED VIEW v RESUME`.
async fn resume_view(db: &Database, name: &str) -> SqlResult<Output> {
    let kind = db.catalog.read().get(name).map(|r| r.kind);
    match kind {
        Some(RelationKind::MaterializedView) => {}
        Some(_) => {
            return Err(SqlError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a materialized view"),
            ))
        }
        None => {
            return Err(SqlError::new(
                sqlstate::UNDEFINED_TABLE,
                format!("materialized view \"{name}\" does not exist"),
            ))
        }
    }
    weir_executor::supervisor::resume(db.runtime(), name)
        .await
        .map_err(SqlError::from)?;
    Ok(Output::command("ALTER MATERIALIZED VIEW"))
}

/// Statements sqlparser parses, by kind. `views` are the plain views `stmt` read
/// before they were expanded.
async fn execute_sql(
    db: &Database,
    session: &mut Session,
    stmt: &Statement,
    sql: &str,
    views: Vec<String>,
) -> SqlResult<Output> {
    match stmt {
        Statement::Query(_) => run_select(db, session, stmt).await,
        Statement::Explain { statement, .. } if matches!(statement.as_ref(), Statement::CreateView(v) if v.materialized) => {
            ddl::explain_create_view(db, session, statement).await
        }
        Statement::Explain { .. } => run_select(db, session, stmt).await,
        Statement::Insert(_) => dml::insert(db, session, stmt).await,
        Statement::Update(_) => dml::update(db, session, stmt).await,
        Statement::Delete(_) => dml::delete(db, session, stmt).await,
        Statement::CreateTable(_) => ddl::create_table(db, stmt, sql).await,
        Statement::CreateView(v) if v.materialized => {
            ddl::create_view(db, session, stmt, sql, views).await
        }
        Statement::CreateView(_) => view::create(db, stmt, sql, views).await,
        Statement::CreateFunction(_) => function::create(db, stmt, sql).await,
        Statement::DropFunction(_) => function::drop(db, stmt).await,
        Statement::CreateIndex(ci) => crate::index::create_index(db, ci).await,
        Statement::Drop {
            object_type: ObjectType::Index,
            names,
            if_exists,
            ..
        } => crate::index::drop_index(db, names, *if_exists).await,
        Statement::Drop { .. } => drop::execute(db, stmt).await,
        Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. } => transaction::execute(session, stmt),
        Statement::Set(_) => show::set(session, stmt),
        Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|i| i.value.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            show::show_variable(db, session, &name)
        }
        Statement::Deallocate { .. } | Statement::Discard { .. } | Statement::Reset(_) => {
            session_reset::execute(session, stmt)
        }
        Statement::Copy { .. } => copy::execute(db, session, stmt).await,
        other => Err(SqlError::unsupported(format!(
            "statement not supported: {}",
            other
                .to_string()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ))),
    }
}

async fn run_select(db: &Database, session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let ctx = query::snapshot_context(db, session, stmt, Default::default()).await?;
    let (schema, batches) = query::run_query(&ctx, stmt).await?;
    Ok(Output::Rows { schema, batches })
}
