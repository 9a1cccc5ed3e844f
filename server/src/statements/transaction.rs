//! `BEGIN`, `COMMIT`, `ROLLBACK`, and SAVEPOINT, RELEASE and ROLLBACK TO inside a
//! transaction block (`BEGIN` ... `COMMIT`).
//!
//! Drivers and frameworks issue these on their own (Django's nested `atomic()`, JDBC
//! autosave, psql's ON_ERROR_ROLLBACK), so inside a block they must keep their
//! Postgres meaning and never take a streaming savepoint. Weir commits every statement
//! as it runs, so a transaction savepoint can only be rolled back to while nothing was
//! written since it; otherwise ROLLBACK TO is refused (0A000) rather than pretending
//! writes were undone. Outside a block, the statements are Weir's streaming savepoints
//! (see `weir_executor::savepoint`).

use crate::output::Output;
use crate::session::Session;
use datafusion::sql::sqlparser::ast::Statement;
use weir_planner::{sqlstate, SqlError, SqlResult, WeirStatement};

/// `BEGIN`, `COMMIT` and `ROLLBACK`: a block only scopes transaction savepoints, since
/// every statement commits as it runs.
pub fn execute(session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    match stmt {
        Statement::StartTransaction { .. } => {
            session.transaction.get_or_insert_with(Vec::new);
            Ok(Output::TransactionStart("BEGIN".into()))
        }
        Statement::Commit { .. } => {
            session.transaction = None;
            Ok(Output::TransactionEnd("COMMIT".into()))
        }
        Statement::Rollback {
            savepoint: None, ..
        } => {
            session.transaction = None;
            Ok(Output::TransactionEnd("ROLLBACK".into()))
        }
        Statement::Rollback {
            savepoint: Some(name),
            ..
        } => rollback_to(session, &name.value),
        _ => Err(SqlError::internal("not a transaction statement")),
    }
}

/// The savepoint statements inside a block (`sql` tells `DROP SAVEPOINT` from
/// `RELEASE`, and `ROLLBACK TO` from `RESTORE`, which parse alike).
pub fn savepoint_in_block(
    session: &mut Session,
    stmt: WeirStatement,
    sql: &str,
) -> SqlResult<Output> {
    let first = sql
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    match stmt {
        WeirStatement::Savepoint { name, views } => savepoint(session, &name, views.is_some()),
        WeirStatement::DropSavepoint(_) if first == "drop" => Err(refuse("DROP SAVEPOINT")),
        WeirStatement::DropSavepoint(name) => release(session, &name),
        WeirStatement::RestoreSavepoint {
            name, views: None, ..
        } if first == "rollback" => rollback_to(session, &name),
        WeirStatement::RestoreSavepoint { .. } => Err(refuse("RESTORE ... FROM SAVEPOINT")),
        _ => Err(SqlError::internal("not a savepoint statement")),
    }
}

const ACTIVE_SQL_TRANSACTION: &str = "25001";

/// `SAVEPOINT name` in a block: remembers the session's write position.
pub fn savepoint(session: &mut Session, name: &str, for_views: bool) -> SqlResult<Output> {
    if for_views {
        return Err(SqlError::new(
            ACTIVE_SQL_TRANSACTION,
            "SAVEPOINT ... FOR MATERIALIZED VIEW cannot run inside a transaction block",
        ));
    }
    let at = session.writes;
    if let Some(tx) = session.transaction.as_mut() {
        tx.push((name.to_string(), at));
    }
    Ok(Output::command("SAVEPOINT"))
}

fn position(session: &Session, name: &str) -> SqlResult<usize> {
    session
        .transaction
        .as_ref()
        .and_then(|tx| tx.iter().rposition(|(n, _)| n == name))
        .ok_or_else(|| SqlError::new("3B001", format!("savepoint \"{name}\" does not exist")))
}

/// `RELEASE [SAVEPOINT] name` in a block: forgets it and every later one.
pub fn release(session: &mut Session, name: &str) -> SqlResult<Output> {
    let i = position(session, name)?;
    if let Some(tx) = session.transaction.as_mut() {
        tx.truncate(i);
    }
    Ok(Output::command("RELEASE"))
}

/// `ROLLBACK TO [SAVEPOINT] name` in a block.
pub fn rollback_to(session: &mut Session, name: &str) -> SqlResult<Output> {
    let i = position(session, name)?;
    let at = session.transaction.as_ref().map(|tx| tx[i].1);
    if at != Some(session.writes) {
        return Err(SqlError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!(
                "cannot roll back to savepoint \"{name}\": Weir commits each statement as it runs, and rows were written since the savepoint"
            ),
        ));
    }
    if let Some(tx) = session.transaction.as_mut() {
        tx.truncate(i + 1);
    }
    Ok(Output::command("ROLLBACK"))
}

/// A streaming-savepoint statement that has no meaning inside a block.
pub fn refuse(what: &str) -> SqlError {
    SqlError::new(
        ACTIVE_SQL_TRANSACTION,
        format!("{what} cannot run inside a transaction block"),
    )
}
