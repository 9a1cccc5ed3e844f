//! `DEALLOCATE [PREPARE] name | ALL`, `DISCARD ALL | PLANS | SEQUENCES | TEMP` and
//! `RESET name | ALL`: what connection pools and drivers send to hand a connection
//! back clean (psycopg 3 sends `DEALLOCATE ALL` on reset, pgbouncer `DISCARD ALL`).
//!
//! Prepared statements live in the wire layer, so DEALLOCATE records what it released
//! in the session ([`Session::released`]) and the wire layer removes them. Weir has no
//! temporary objects or sequences, so `DISCARD TEMP` and `SEQUENCES` have nothing to do.
//! DEALLOCATE of a name that was never prepared is an error (26000), as in Postgres.

use crate::output::Output;
use crate::session::{Released, Session};
use datafusion::sql::sqlparser::ast::{DiscardObject, Reset, Statement};
use weir_planner::{SqlError, SqlResult};

const INVALID_SQL_STATEMENT_NAME: &str = "26000";

pub fn execute(session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    match stmt {
        Statement::Deallocate { name, .. } => {
            let all = name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all");
            if all {
                session.released.push(Released::All);
            } else if session.prepared.remove(&name.value) {
                session.released.push(Released::Named(name.value.clone()));
            } else {
                return Err(SqlError::new(
                    INVALID_SQL_STATEMENT_NAME,
                    format!("prepared statement \"{}\" does not exist", name.value),
                ));
            }
            Ok(Output::command(if all {
                "DEALLOCATE ALL"
            } else {
                "DEALLOCATE"
            }))
        }
        Statement::Discard { object_type } => {
            if matches!(object_type, DiscardObject::ALL) {
                if session.transaction.is_some() {
                    return Err(SqlError::new(
                        "25001",
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                session.released.push(Released::All);
                session.settings.clear();
            }
            Ok(Output::command(&format!("DISCARD {object_type}")))
        }
        Statement::Reset(r) => {
            match &r.reset {
                Reset::ALL => session.settings.clear(),
                Reset::ConfigurationParameter(name) => {
                    let key = name.to_string().to_ascii_lowercase().replace('"', "");
                    session.settings.remove(&key);
                }
            }
            Ok(Output::command("RESET"))
        }
        _ => Err(SqlError::internal("not a reset statement")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(session: &mut Session, sql: &str) -> SqlResult<Output> {
        match weir_planner::parse_statement(sql)? {
            weir_planner::WeirStatement::Sql(s) => execute(session, &s),
            other => panic!("{sql} parsed as {other:?}"),
        }
    }

    #[test]
    fn deallocate_and_discard_release_prepared_statements() {
        let mut s = Session::default();
        s.prepared.insert("s1".into());
        run(&mut s, "DEALLOCATE ALL").unwrap();
        run(&mut s, "DEALLOCATE PREPARE s1").unwrap();
        assert_eq!(run(&mut s, "DEALLOCATE s1").unwrap_err().code, "26000");
        run(&mut s, "DISCARD ALL").unwrap();
        assert_eq!(
            s.released,
            vec![Released::All, Released::Named("s1".into()), Released::All]
        );
    }

    #[test]
    fn reset_forgets_session_settings() {
        let mut s = Session::default();
        s.settings.insert("application_name".into(), "x".into());
        s.settings.insert("timezone".into(), "UTC".into());
        run(&mut s, "RESET application_name").unwrap();
        assert_eq!(s.settings.len(), 1);
        run(&mut s, "RESET ALL").unwrap();
        assert!(s.settings.is_empty());
    }
}
