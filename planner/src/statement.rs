//! Weir's SQL dialect: Postgres (through sqlparser) plus Weir's own statements.
//!
//! Weir statements that sqlparser's Postgres dialect does not know (`FLUSH`,
//! `SHOW MATERIALIZED VIEWS`, `SHOW CREATE MATERIALIZED VIEW v`, `SHOW JOBS`,
//! `SHOW CHECKPOINTS`, `CHECKPOINT`, `ALTER MATERIALIZED VIEW v RESUME`,
//! `EXPLAIN CREATE MATERIALIZED VIEW ...`) are recognised by their leading words;
//! everything else goes to sqlparser.

use crate::error::{SqlError, SqlResult};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

#[derive(Debug, Clone)]
pub enum WeirStatement {
    Flush,
    ShowTables,
    ShowMaterializedViews,
    ShowCreateMaterializedView(String),
    ShowJobs,
    /// `SHOW CHECKPOINTS`: history of checkpoints per job.
    ShowCheckpoints,
    /// `CHECKPOINT`: checkpoint every job now and wait (as Postgres' CHECKPOINT forces one).
    Checkpoint,
    /// `ALTER MATERIALIZED VIEW v RESUME`: restart a (failed) view job now.
    ResumeMaterializedView(String),
    /// `SET key = value` for a dotted configuration key (Flink's keys contain `-`, which
    /// sqlparser does not take in an identifier).
    SetKey(String, String),
    /// `SAVEPOINT name [FOR MATERIALIZED VIEW a, b]` (outside a transaction block:
    /// Weir has no multi-statement transactions, so always).
    Savepoint {
        name: String,
        views: Option<Vec<String>>,
    },
    /// `DROP SAVEPOINT name` / `RELEASE [SAVEPOINT] name`.
    DropSavepoint(String),
    /// `SHOW SAVEPOINTS`.
    ShowSavepoints,
    /// `SHOW SOURCE ERRORS`: the latest records connectors skipped as bad.
    ShowSourceErrors,
    /// `CREATE SINK name FROM relation | AS query WITH (connector = ..., ...)`.
    CreateSink {
        name: String,
        input: crate::connector_ddl::SinkInput,
        options: Vec<(String, String)>,
        sql: String,
    },
    /// `DROP SINK [IF EXISTS] name`.
    DropSink {
        name: String,
        if_exists: bool,
    },
    /// `SHOW SINKS`.
    ShowSinks,
    /// `RESTORE MATERIALIZED VIEW v FROM SAVEPOINT s`, `RESTORE ALL FROM SAVEPOINT s`,
    /// `ROLLBACK TO [SAVEPOINT] s`; `WITH (ignore_unclaimed_state = true)` may follow.
    RestoreSavepoint {
        name: String,
        views: Option<Vec<String>>,
        ignore_unclaimed: bool,
    },
    /// `EXPLAIN RESTORE ...`: how a restore would match uids, changing nothing.
    ExplainRestore {
        name: String,
        views: Option<Vec<String>>,
    },
    /// `SHOW <name>`: a configuration key such as `pipeline.max-parallelism`.
    ShowVariable(String),
    /// `EXPLAIN CREATE MATERIALIZED VIEW ...`: the streaming plan, not executed.
    ExplainCreateMaterializedView(Box<Statement>),
    /// Anything sqlparser parses; the server dispatches on its kind.
    Sql(Box<Statement>),
    Empty,
}

/// Splits a simple-query string into statements at top-level semicolons (outside
/// quotes, dollar quotes and comments).
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' => {
                cur.push(c);
                i += 1;
                while i < chars.len() {
                    cur.push(chars[i]);
                    if chars[i] == c {
                        if i + 1 < chars.len() && chars[i + 1] == c {
                            cur.push(chars[i + 1]);
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            '-' if i + 1 < chars.len() && chars[i + 1] == '-' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                cur.push('\n');
            }
            '/' if i + 1 < chars.len() && chars[i + 1] == '*' => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 1;
                cur.push(' ');
            }
            ';' => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(c),
        }
        i += 1;
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn words(sql: &str) -> Vec<String> {
    sql.split_whitespace()
        .map(|w| w.trim_end_matches(';').to_ascii_lowercase())
        .collect()
}

fn normalize_ident(raw: &str) -> String {
    let raw = raw.trim().trim_end_matches(';');
    if raw.starts_with('"') && raw.ends_with('"') && raw.len() >= 2 {
        raw[1..raw.len() - 1].replace("\"\"", "\"")
    } else {
        raw.to_ascii_lowercase()
    }
}

/// Most arithmetic/logical operators one statement may chain. Planning cost grows
/// faster than linearly with expression depth (5,000 chained `+` take seconds to plan),
/// so a pathological statement is refused up front instead of occupying a worker.
pub const MAX_OPERATORS: usize = 4000;

fn check_complexity(sql: &str) -> SqlResult<()> {
    let mut n = 0;
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if matches!(c, '+' | '*' | '/' | '%' | '|' | '&' | '^') => n += 1,
            None => {}
        }
    }
    if n > MAX_OPERATORS {
        return Err(SqlError::new(
            crate::error::sqlstate::STATEMENT_TOO_COMPLEX,
            format!("statement too complex: {n} operators (the limit is {MAX_OPERATORS})"),
        ));
    }
    Ok(())
}

/// The savepoint statements (see [`WeirStatement::Savepoint`] and the ones after it).
fn parse_savepoint_statement(sql: &str, ws: &[&str]) -> SqlResult<WeirStatement> {
    let raw: Vec<&str> = sql.split_whitespace().collect();
    let ident = |i: usize| -> SqlResult<String> {
        raw.get(i)
            .map(|r| normalize_ident(r))
            .filter(|s| !s.is_empty())
            .ok_or_else(|| SqlError::syntax("a savepoint statement needs a name"))
    };
    // `WITH (ignore_unclaimed_state = true)` at the end of a RESTORE.
    let lower = sql.to_ascii_lowercase();
    let (lower_head, ignore_unclaimed) = match lower.find(" with ") {
        Some(i) => {
            let opts: String = lower[i..].chars().filter(|c| !c.is_whitespace()).collect();
            if !opts.starts_with("with(") {
                return Err(SqlError::syntax(
                    "expected WITH (ignore_unclaimed_state = true)",
                ));
            }
            let ignore = match opts.as_str().trim_end_matches(';') {
                "with(ignore_unclaimed_state=true)" | "with(ignore_unclaimed_state='true')" => true,
                "with(ignore_unclaimed_state=false)" | "with(ignore_unclaimed_state='false')" => {
                    false
                }
                _ => {
                    return Err(SqlError::syntax(
                        "the only RESTORE option is ignore_unclaimed_state = true | false",
                    ))
                }
            };
            (lower[..i].to_string(), ignore)
        }
        None => (lower.clone(), false),
    };
    let n_head = lower_head.split_whitespace().count();
    let head = &ws[..n_head.min(ws.len())];
    let view_list = |from: usize| -> SqlResult<Vec<String>> {
        let rest = raw[from..].join(" ");
        let views: Vec<String> = rest
            .split(',')
            .map(normalize_ident)
            .filter(|s| !s.is_empty())
            .collect();
        if views.is_empty() {
            return Err(SqlError::syntax("expected materialized view names"));
        }
        Ok(views)
    };
    Ok(match head {
        ["savepoint", _] => WeirStatement::Savepoint {
            name: ident(1)?,
            views: None,
        },
        ["savepoint", _, "for", "materialized", "view", _, ..] => WeirStatement::Savepoint {
            name: ident(1)?,
            views: Some(view_list(5)?),
        },
        ["release", "savepoint", _] | ["drop", "savepoint", _] => {
            WeirStatement::DropSavepoint(ident(2)?)
        }
        ["release", _] => WeirStatement::DropSavepoint(ident(1)?),
        ["restore", "materialized", "view", _, "from", "savepoint", _] => {
            WeirStatement::RestoreSavepoint {
                name: ident(6)?,
                views: Some(vec![ident(3)?]),
                ignore_unclaimed,
            }
        }
        ["restore", "all", "from", "savepoint", _] => WeirStatement::RestoreSavepoint {
            name: ident(4)?,
            views: None,
            ignore_unclaimed,
        },
        ["rollback", "to", "savepoint", _] => WeirStatement::RestoreSavepoint {
            name: ident(3)?,
            views: None,
            ignore_unclaimed,
        },
        ["rollback", "to", _] => WeirStatement::RestoreSavepoint {
            name: ident(2)?,
            views: None,
            ignore_unclaimed,
        },
        _ => {
            return Err(SqlError::syntax(
                "expected SAVEPOINT name [FOR MATERIALIZED VIEW v, ...], RELEASE [SAVEPOINT] name, DROP SAVEPOINT name, RESTORE MATERIALIZED VIEW v FROM SAVEPOINT name, RESTORE ALL FROM SAVEPOINT name or ROLLBACK TO SAVEPOINT name",
            ))
        }
    })
}

/// Parses one statement (as produced by [`split_statements`]).
pub fn parse_statement(sql: &str) -> SqlResult<WeirStatement> {
    check_complexity(sql)?;
    let rewritten = crate::window_tvf::normalize(&crate::connector_ddl::rewrite(sql))?;
    let rewritten = crate::window_tvf::rewrite_emit_on_window_close(&rewritten);
    let sql = rewritten.as_str();
    let w = words(sql);
    let ws: Vec<&str> = w.iter().map(|s| s.as_str()).collect();
    match ws.as_slice() {
        [] => return Ok(WeirStatement::Empty),
        ["flush"] => return Ok(WeirStatement::Flush),
        ["show", "tables"] => return Ok(WeirStatement::ShowTables),
        ["show", "materialized", "views"] => return Ok(WeirStatement::ShowMaterializedViews),
        ["show", "jobs"] => return Ok(WeirStatement::ShowJobs),
        ["show", "checkpoints"] => return Ok(WeirStatement::ShowCheckpoints),
        ["show", "savepoints"] => return Ok(WeirStatement::ShowSavepoints),
        ["show", "source", "errors"] => return Ok(WeirStatement::ShowSourceErrors),
        ["show", "sinks"] => return Ok(WeirStatement::ShowSinks),
        ["create", "sink", ..] => {
            let (name, input, options) =
                crate::connector_ddl::parse_sink(sql).ok_or_else(|| {
                    SqlError::syntax(
                    "expected CREATE SINK name FROM relation | AS query WITH (connector = '...')",
                )
                })?;
            return Ok(WeirStatement::CreateSink {
                name,
                input,
                options,
                sql: sql.to_string(),
            });
        }
        ["drop", "sink", "if", "exists", _] | ["drop", "sink", _] => {
            let raw = sql.split_whitespace().last().unwrap_or_default();
            return Ok(WeirStatement::DropSink {
                name: normalize_ident(raw),
                if_exists: ws.len() == 5,
            });
        }
        ["savepoint", ..]
        | ["release", ..]
        | ["restore", ..]
        | ["rollback", "to", ..]
        | ["drop", "savepoint", ..] => return parse_savepoint_statement(sql, &ws),
        ["explain", "restore", ..] | ["explain", "rollback", "to", ..] => {
            let rest = sql.trim_start()["explain".len()..].trim_start();
            let w = words(rest);
            let ws: Vec<&str> = w.iter().map(|s| s.as_str()).collect();
            return match parse_savepoint_statement(rest, &ws)? {
                WeirStatement::RestoreSavepoint { name, views, .. } => {
                    Ok(WeirStatement::ExplainRestore { name, views })
                }
                _ => Err(SqlError::syntax(
                    "expected EXPLAIN RESTORE ... FROM SAVEPOINT name",
                )),
            };
        }
        ["checkpoint"] => return Ok(WeirStatement::Checkpoint),
        ["alter", "materialized", "view", _name, "resume"] => {
            let raw = sql.split_whitespace().nth(3).unwrap_or_default();
            return Ok(WeirStatement::ResumeMaterializedView(normalize_ident(raw)));
        }
        ["show", "create", "materialized", "view", _name] => {
            let raw = sql.split_whitespace().nth(4).unwrap_or_default();
            return Ok(WeirStatement::ShowCreateMaterializedView(normalize_ident(
                raw,
            )));
        }
        ["show", name] if *name != "create" => {
            return Ok(WeirStatement::ShowVariable(
                name.trim_matches('"').to_string(),
            ))
        }
        ["set", key, ..] | ["set", "session", key, ..] if key.contains('.') => {
            if let Some(set) = parse_set_key(sql) {
                return Ok(set);
            }
        }
        ["explain", "create", "materialized", ..] => {
            let inner = sql.trim_start()[7..].trim_start();
            let stmt = parse_sqlparser(inner)?;
            return Ok(WeirStatement::ExplainCreateMaterializedView(Box::new(stmt)));
        }
        _ => {}
    }
    if let ["create", "table", ..] = ws.as_slice() {
        if let Some(stripped) = strip_append_only(sql) {
            return Ok(WeirStatement::Sql(Box::new(parse_sqlparser(&stripped)?)));
        }
    }
    Ok(WeirStatement::Sql(Box::new(parse_sqlparser(sql)?)))
}

/// `SET [SESSION] key {= | TO} value` with a dotted key; quotes around the key or value
/// are removed.
fn parse_set_key(sql: &str) -> Option<WeirStatement> {
    let rest = sql.trim().trim_end_matches(';').trim();
    let rest = rest.get(3..)?.trim_start();
    let rest = match rest.get(..8) {
        Some(p) if p.eq_ignore_ascii_case("session ") => rest[8..].trim_start(),
        _ => rest,
    };
    let (key, value) = match rest.find('=') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => {
            let lower = rest.to_ascii_lowercase();
            let i = lower.find(" to ")?;
            (&rest[..i], &rest[i + 4..])
        }
    };
    let unquote = |s: &str| {
        let s = s.trim();
        let s = s
            .strip_prefix('\'')
            .and_then(|x| x.strip_suffix('\''))
            .or_else(|| s.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
            .unwrap_or(s);
        s.to_string()
    };
    let key = unquote(key).to_ascii_lowercase();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    Some(WeirStatement::SetKey(key, unquote(value)))
}

/// RisingWave's `CREATE TABLE ... APPEND ONLY`: accepted as a plain table (Weir's
/// operators already take the append-only path chunk by chunk), so migrated DDL runs.
fn strip_append_only(sql: &str) -> Option<String> {
    let trimmed = sql.trim_end().trim_end_matches(';').trim_end();
    let lower = trimmed.to_ascii_lowercase();
    let without = lower
        .strip_suffix("only")?
        .trim_end()
        .strip_suffix("append")?;
    Some(trimmed[..without.len()].to_string())
}

fn parse_sqlparser(sql: &str) -> SqlResult<Statement> {
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .map_err(|e| crate::error::parser_error(&e))?;
    match stmts.len() {
        0 => Err(SqlError::syntax("empty statement")),
        1 => {
            let mut stmt = stmts.remove(0);
            crate::window_tvf::expand(&mut stmt)?;
            crate::output_names::alias_duplicate_items(&mut stmt);
            Ok(stmt)
        }
        _ => Err(SqlError::syntax("expected one statement")),
    }
}

pub(crate) fn strip_parser_prefix(s: &str) -> String {
    s.trim_start_matches("sql parser error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_respecting_quotes_and_comments() {
        let v = split_statements("select ';' ; -- a; comment\n select 2;; select \"a;b\"");
        assert_eq!(v, vec!["select ';'", "select 2", "select \"a;b\""]);
    }

    #[test]
    fn recognises_weir_statements() {
        assert!(matches!(
            parse_statement("FLUSH").unwrap(),
            WeirStatement::Flush
        ));
        assert!(matches!(
            parse_statement("show create materialized view \"V1\"").unwrap(),
            WeirStatement::ShowCreateMaterializedView(n) if n == "V1"
        ));
        assert!(matches!(
            parse_statement("EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT 1").unwrap(),
            WeirStatement::ExplainCreateMaterializedView(_)
        ));
        assert!(matches!(
            parse_statement("create table t (k int) append only").unwrap(),
            WeirStatement::Sql(_)
        ));
        assert!(matches!(
            parse_statement("SET restart-strategy.type TO 'fixed-delay'").unwrap(),
            WeirStatement::SetKey(k, v) if k == "restart-strategy.type" && v == "fixed-delay"
        ));
        assert!(matches!(
            parse_statement("set \"execution.checkpointing.interval\" = 5").unwrap(),
            WeirStatement::SetKey(k, v) if k == "execution.checkpointing.interval" && v == "5"
        ));
        let e = parse_statement("SELEC 1").unwrap_err();
        assert_eq!(e.code, crate::error::sqlstate::SYNTAX_ERROR);
    }
}
