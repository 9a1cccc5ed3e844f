//! Weir's SQL dialect: Postgres (through sqlparser) plus Weir's own statements.
//!
//! Weir statements that sqlparser's Postgres dialect does not know (`FLUSH`,
//! `SHOW MATERIALIZED VIEWS`, `SHOW CREATE MATERIALIZED VIEW v`, `SHOW JOBS`,
//! `SHOW CHECKPOINTS`, `CHECKPOINT`, `ALTER MATERIALIZED VIEW v RESUME`, savepoints,
//! `SET` of a dotted key, `EXPLAIN CREATE MATERIALIZED VIEW ...`) are recognised by
//! their tokens (sqlparser's tokenizer: quoting and comments as Postgres has them);
//! everything else goes to sqlparser, after `connector_ddl`, `lookup_join` and
//! `window_tvf` took off what its grammar lacks.

use crate::error::{SqlError, SqlResult};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

#[derive(Debug, Clone)]
pub enum WeirStatement {
    Flush,
    ShowTables,
    ShowMaterializedViews,
    ShowCreateMaterializedView(String),
    ShowJobs,
    /// `SHOW CLUSTER`: the high-availability members, roles and lease.
    ShowCluster,
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
    /// `DROP CHECKPOINT 'checkpoints/<job>/chk-<epoch>'`: deletes a retained checkpoint.
    DropCheckpoint(String),
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

/// A statement's tokens (comments dropped) and, for its significant tokens, the
/// words Weir's own statements are matched by: unquoted words lower-cased, a quoted
/// identifier as `"name` (so it never matches a keyword), any other token as written.
struct Words {
    /// Every token, whitespace included (dotted keys are tokens without space between).
    all: Vec<Token>,
    /// Indexes into `all` of the significant tokens (no whitespace, no final `;`).
    at: Vec<usize>,
    words: Vec<String>,
}

impl Words {
    fn of(sql: &str) -> Option<Words> {
        let all = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
        let mut at: Vec<usize> = (0..all.len())
            .filter(|&i| !matches!(all[i], Token::Whitespace(_)))
            .collect();
        if at.last().is_some_and(|&i| all[i] == Token::SemiColon) {
            at.pop();
        }
        let words = at
            .iter()
            .map(|&i| match &all[i] {
                Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_lowercase(),
                Token::Word(w) => format!("\"{}", w.value),
                other => other.to_string(),
            })
            .collect();
        Some(Words { all, at, words })
    }

    fn token(&self, k: usize) -> Option<&Token> {
        self.at.get(k).map(|&i| &self.all[i])
    }

    /// The `k`-th significant token as an identifier (quoted: as written; else
    /// lower-cased).
    fn ident(&self, k: usize) -> SqlResult<String> {
        match self.token(k) {
            Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value.clone()),
            Some(Token::Word(w)) => Ok(w.value.to_ascii_lowercase()),
            _ => Err(SqlError::syntax("expected a name")),
        }
    }

    /// A configuration key starting at significant token `k`: words, `.` and `-`
    /// with no space between (`pipeline.max-parallelism`), or one quoted name. The
    /// key and the significant index after it.
    fn key(&self, k: usize) -> Option<(String, usize)> {
        let start = *self.at.get(k)?;
        if let Token::Word(w) = &self.all[start] {
            if w.quote_style.is_some() {
                return Some((w.value.clone(), k + 1));
            }
        }
        if let Token::SingleQuotedString(s) = &self.all[start] {
            return Some((s.clone(), k + 1));
        }
        let mut key = String::new();
        let mut i = start;
        while let Some(t) = self.all.get(i) {
            match t {
                Token::Word(w) if w.quote_style.is_none() => key.push_str(&w.value),
                Token::Period | Token::Minus | Token::Number(..) => key.push_str(&t.to_string()),
                _ => break,
            }
            i += 1;
        }
        let next = self
            .at
            .iter()
            .position(|&j| j >= i)
            .unwrap_or(self.at.len());
        (!key.is_empty()).then_some((key, next))
    }

    /// The text of the significant tokens from `k` on, as written.
    fn rest(&self, k: usize) -> String {
        let (Some(&from), Some(&to)) = (self.at.get(k), self.at.last()) else {
            return String::new();
        };
        self.all[from..=to].iter().map(Token::to_string).collect()
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

/// The savepoint statements (see [`WeirStatement::Savepoint`] and the ones after it),
/// from significant token `from` of `w` on.
fn parse_savepoint_statement(w: &Words, from: usize) -> SqlResult<WeirStatement> {
    // `WITH (ignore_unclaimed_state = true)` at the end of a RESTORE.
    let with_at = (from..w.at.len()).find(|&k| w.words[k] == "with");
    let (end, ignore_unclaimed) = match with_at {
        Some(k) => (k, restore_options(w, k)?),
        None => (w.at.len(), false),
    };
    let head: Vec<&str> = w.words[from..end].iter().map(String::as_str).collect();
    let ident = |k: usize| w.ident(from + k);
    let view_list = |k: usize| -> SqlResult<Vec<String>> {
        let mut views = Vec::new();
        let mut i = from + k;
        while i < end {
            views.push(w.ident(i)?);
            i += 1;
            if i < end && w.words[i] != "," {
                return Err(SqlError::syntax("expected materialized view names"));
            }
            i += 1;
        }
        if views.is_empty() {
            return Err(SqlError::syntax("expected materialized view names"));
        }
        Ok(views)
    };
    Ok(match head.as_slice() {
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

/// `WITH (ignore_unclaimed_state = true | false)` at significant token `k`, the end
/// of the statement.
fn restore_options(w: &Words, k: usize) -> SqlResult<bool> {
    let syntax = || SqlError::syntax("expected WITH (ignore_unclaimed_state = true)");
    let open = *w.at.get(k + 1).ok_or_else(syntax)?;
    let close = *w.at.last().ok_or_else(syntax)?;
    if w.all[open] != Token::LParen || crate::connector_ddl::closing(&w.all, open) != Some(close) {
        return Err(syntax());
    }
    let only =
        || SqlError::syntax("the only RESTORE option is ignore_unclaimed_state = true | false");
    match crate::connector_ddl::option_items(&w.all, open, close)?.as_slice() {
        [(key, value)] if key == "ignore_unclaimed_state" => {
            match value
                .to_string()
                .trim_matches('\'')
                .to_ascii_lowercase()
                .as_str()
            {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(only()),
            }
        }
        _ => Err(only()),
    }
}

/// Parses one statement (as produced by [`split_statements`]).
pub fn parse_statement(sql: &str) -> SqlResult<WeirStatement> {
    check_complexity(sql)?;
    let (plain, clauses) = crate::connector_ddl::extract(sql)?;
    let plain = crate::lookup_join::normalize(&plain)?;
    let rewritten = crate::window_tvf::normalize(&plain)?;
    let sql = rewritten.as_str();
    let Some(w) = Words::of(sql) else {
        // The parser reports what does not tokenize.
        return Ok(WeirStatement::Sql(Box::new(parse_sqlparser(sql)?)));
    };
    let ws: Vec<&str> = w.words.iter().map(String::as_str).collect();
    match ws.as_slice() {
        [] => return Ok(WeirStatement::Empty),
        ["flush"] => return Ok(WeirStatement::Flush),
        ["show", "tables"] => return Ok(WeirStatement::ShowTables),
        ["show", "materialized", "views"] => return Ok(WeirStatement::ShowMaterializedViews),
        ["show", "jobs"] => return Ok(WeirStatement::ShowJobs),
        ["show", "cluster"] => return Ok(WeirStatement::ShowCluster),
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
            return Ok(WeirStatement::DropSink {
                name: w.ident(ws.len() - 1)?,
                if_exists: ws.len() == 5,
            });
        }
        ["savepoint", ..]
        | ["release", ..]
        | ["restore", ..]
        | ["rollback", "to", ..]
        | ["drop", "savepoint", ..] => return parse_savepoint_statement(&w, 0),
        ["explain", "restore", ..] | ["explain", "rollback", "to", ..] => {
            return match parse_savepoint_statement(&w, 1)? {
                WeirStatement::RestoreSavepoint { name, views, .. } => {
                    Ok(WeirStatement::ExplainRestore { name, views })
                }
                _ => Err(SqlError::syntax(
                    "expected EXPLAIN RESTORE ... FROM SAVEPOINT name",
                )),
            };
        }
        ["checkpoint"] => return Ok(WeirStatement::Checkpoint),
        ["drop", "checkpoint", ..] => {
            return match (ws.len(), w.token(2)) {
                (3, Some(Token::SingleQuotedString(path))) => {
                    Ok(WeirStatement::DropCheckpoint(path.clone()))
                }
                _ => Err(SqlError::syntax(
                    "expected DROP CHECKPOINT '<path>' (the path SHOW CHECKPOINTS lists for a RETAINED checkpoint)",
                )),
            };
        }
        ["alter", "materialized", "view", _, "resume"] => {
            return Ok(WeirStatement::ResumeMaterializedView(w.ident(3)?));
        }
        ["show", "create", "materialized", "view", _] => {
            return Ok(WeirStatement::ShowCreateMaterializedView(w.ident(4)?));
        }
        ["show", first, ..] if *first != "create" => {
            if let Some((key, _)) = w.key(1).filter(|(_, next)| *next == ws.len()) {
                return Ok(WeirStatement::ShowVariable(key));
            }
        }
        ["set", ..] => {
            if let Some(set) = parse_set_key(&w) {
                return Ok(set);
            }
        }
        ["explain", "create", "materialized", ..]
        | ["explain", "create", "or", "replace", "materialized", ..] => {
            let mut stmt = parse_sqlparser(&w.rest(1))?;
            // `... EMIT ON WINDOW CLOSE`, as the view would be created.
            if let Some(clauses) = clauses {
                clauses.apply(&mut stmt)?;
            }
            return Ok(WeirStatement::ExplainCreateMaterializedView(Box::new(stmt)));
        }
        _ => {}
    }
    let mut stmt = parse_sqlparser(sql)?;
    if let Some(clauses) = clauses {
        clauses.apply(&mut stmt)?;
    }
    Ok(WeirStatement::Sql(Box::new(stmt)))
}

/// `SET [SESSION] key {= | TO} value` with a dotted key (Flink's keys contain `-`,
/// which no identifier takes); quotes around the key or value are removed.
fn parse_set_key(w: &Words) -> Option<WeirStatement> {
    let k = if w.words.get(1).map(String::as_str) == Some("session") {
        2
    } else {
        1
    };
    let (key, next) = w.key(k)?;
    if !key.contains('.') || !matches!(w.words.get(next)?.as_str(), "=" | "to") {
        return None;
    }
    let value = match (w.token(next + 1), next + 2 == w.at.len()) {
        (Some(Token::SingleQuotedString(s)), true) => s.clone(),
        (Some(Token::Word(t)), true) if t.quote_style.is_some() => t.value.clone(),
        _ => w.rest(next + 1),
    };
    Some(WeirStatement::SetKey(key.to_ascii_lowercase(), value))
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
        match parse_statement(
            "explain create or replace materialized view v as select 1 from t emit on window close",
        )
        .unwrap()
        {
            WeirStatement::ExplainCreateMaterializedView(v) => {
                assert!(v.to_string().contains("emit_on_window_close"), "{v}")
            }
            _ => panic!("not an EXPLAIN of a view"),
        }
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

    #[test]
    fn savepoint_statements_read_tokens() {
        match parse_statement("SAVEPOINT \"my sp\" FOR MATERIALIZED VIEW a, \"B c\";").unwrap() {
            WeirStatement::Savepoint { name, views } => {
                assert_eq!(name, "my sp");
                assert_eq!(views, Some(vec!["a".to_string(), "B c".to_string()]));
            }
            other => panic!("{other:?}"),
        }
        match parse_statement(
            "restore materialized view V from savepoint s with (ignore_unclaimed_state = 'true')",
        )
        .unwrap()
        {
            WeirStatement::RestoreSavepoint {
                name,
                views,
                ignore_unclaimed,
            } => {
                assert_eq!((name.as_str(), ignore_unclaimed), ("s", true));
                assert_eq!(views, Some(vec!["v".to_string()]));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_statement("EXPLAIN ROLLBACK TO s").unwrap(),
            WeirStatement::ExplainRestore { name, views: None } if name == "s"
        ));
        for bad in [
            "RESTORE ALL FROM SAVEPOINT s WITH (colour = 1)",
            "SAVEPOINT s FOR MATERIALIZED VIEW a b",
            "RESTORE ALL FROM SAVEPOINT",
        ] {
            let e = parse_statement(bad).unwrap_err();
            assert_eq!(e.code, crate::error::sqlstate::SYNTAX_ERROR, "{bad}");
        }
        assert!(matches!(
            parse_statement("SHOW pipeline.max-parallelism").unwrap(),
            WeirStatement::ShowVariable(k) if k == "pipeline.max-parallelism"
        ));
        assert!(matches!(
            parse_statement("drop sink if exists \"K\"").unwrap(),
            WeirStatement::DropSink { name, if_exists: true } if name == "K"
        ));
    }
}
