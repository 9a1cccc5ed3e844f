//! Connector DDL the Postgres grammar does not have, taken off the statement as
//! tokens and put back into the parsed statement as options and columns:
//!
//! - `CREATE SOURCE s (...)` is `CREATE TABLE s (...)` with the option
//!   `"weir.source" = 'true'`: a source is a table fed by its connector. Over a
//!   generator (`nexmark`, `datagen`) it keeps no rows (RisingWave's sources): its log
//!   holds index ranges and views regenerate the rows they replay. Over Kafka its
//!   records are kept, as Materialize keeps source data, so views over it recover like
//!   views over any table.
//! - `DROP SOURCE s` is `DROP TABLE s`.
//! - `WITH (...)` keys may be dotted (`properties.bootstrap.server = '...'`).
//! - `FORMAT f ENCODE e [(k = v, ...)]` becomes the options `format = 'f'`,
//!   `encode = 'e'` (plus the encode options).
//! - `INCLUDE partition | offset | timestamp | key [AS name]` (Kafka message metadata)
//!   becomes a column (`int`, `bigint`, `timestamptz`, `bytea`; default name
//!   `_kafka_<what>`) and the option `include.<name> = '<what>'`.
//! - `WATERMARK FOR col AS expr` in the column list becomes the options
//!   `watermark.column` and `watermark.expr` (the expression itself).
//! - RisingWave's `APPEND ONLY` is accepted and dropped (Weir's operators take the
//!   append-only path chunk by chunk).
//! - `CREATE MATERIALIZED VIEW ... EMIT ON WINDOW CLOSE` becomes the view option
//!   `emit_on_window_close = true`.
//!
//! [`extract`] removes these clauses from the token stream (it prints no SQL of its
//! own: the tokens left are the user's); [`Clauses::apply`] adds them to the parsed
//! statement. [`parse_sink`] reads `CREATE SINK` the same way.

use crate::error::{SqlError, SqlResult};
use datafusion::sql::sqlparser::ast::{
    ColumnDef, CreateTableOptions, DataType, Expr, Ident, SqlOption, Statement, TimezoneInfo, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// The view option `EMIT ON WINDOW CLOSE` turns into.
pub const EMIT_ON_WINDOW_CLOSE: &str = "emit_on_window_close";

/// The option `CREATE SOURCE` adds.
pub const SOURCE_OPTION: &str = "weir.source";

/// Options as (key, value) in order.
type Options = Vec<(String, Expr)>;

/// What [`extract`] took off a statement, to be added to its parsed form.
#[derive(Debug, Default)]
pub struct Clauses {
    /// Options, in order: the `WITH` list, then what the other clauses mean.
    options: Options,
    /// Metadata columns (`INCLUDE`).
    columns: Vec<(String, DataType)>,
}

fn is_word(t: &Token, w: &str) -> bool {
    matches!(t, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w))
}

fn text(s: &str) -> Expr {
    Expr::Value(Value::SingleQuotedString(s.to_string()).into())
}

/// The statement's tokens without whitespace and comments.
fn tokens(sql: &str) -> Option<Vec<Token>> {
    let all = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    Some(
        all.into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect(),
    )
}

/// Tokens back to text, one space between them (the parser reads this as it read
/// the original).
fn untokenize(tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(Token::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The index of the `)` closing the `(` at `open`.
pub(crate) fn closing(t: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The top-level comma-separated items of the group `(`..`)` at `open`..`close`.
fn items(t: &[Token], open: usize, close: usize) -> Vec<Vec<Token>> {
    let mut out = vec![vec![]];
    let mut depth = 0usize;
    for tok in &t[open + 1..close] {
        match tok {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Comma if depth == 0 => {
                out.push(vec![]);
                continue;
            }
            Token::Whitespace(_) => continue,
            _ => {}
        }
        out.last_mut().expect("non-empty").push(tok.clone());
    }
    out.retain(|i| !i.is_empty());
    out
}

fn expr_of(tokens: Vec<Token>) -> SqlResult<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .with_tokens(tokens)
        .parse_expr()
        .map_err(|e| crate::error::parser_error(&e))
}

/// `key = value` items of an options group; keys may be dotted or dashed
/// (`properties.bootstrap.server`, `scan.startup.timestamp-millis`) and are
/// lower-cased unless quoted.
pub(crate) fn option_items(
    t: &[Token],
    open: usize,
    close: usize,
) -> SqlResult<Vec<(String, Expr)>> {
    items(t, open, close)
        .into_iter()
        .map(|item| {
            let eq = item
                .iter()
                .position(|t| *t == Token::Eq)
                .ok_or_else(|| SqlError::syntax("expected key = value in WITH (...)"))?;
            let key: String = item[..eq]
                .iter()
                .map(|t| match t {
                    Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_lowercase(),
                    Token::Word(w) => w.value.clone(),
                    Token::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            if key.is_empty() {
                return Err(SqlError::syntax("expected key = value in WITH (...)"));
            }
            Ok((key, expr_of(item[eq + 1..].to_vec())?))
        })
        .collect()
}

/// Takes Weir's connector clauses off `sql` (see the module doc): the statement text
/// the parser reads, and the clauses to [apply](Clauses::apply) to what it parses.
/// Any other statement comes back unchanged with no clauses.
pub fn extract(sql: &str) -> SqlResult<(String, Option<Clauses>)> {
    let Some(t) = tokens(sql) else {
        return Ok((sql.to_string(), None));
    };
    match t.as_slice() {
        [d, s, ..] if is_word(d, "drop") && is_word(s, "source") => {
            let mut t = t;
            t[1] = Token::make_keyword("TABLE");
            Ok((untokenize(&t), None))
        }
        [c, k, ..] if is_word(c, "create") && (is_word(k, "table") || is_word(k, "source")) => {
            create_table(sql, t)
        }
        _ if creates_materialized_view(&t) => Ok(emit_on_window_close(sql, t)),
        _ => Ok((sql.to_string(), None)),
    }
}

/// `[EXPLAIN] CREATE [OR REPLACE] MATERIALIZED VIEW ...`.
fn creates_materialized_view(t: &[Token]) -> bool {
    let words = ["explain", "create", "or", "replace", "materialized", "view"];
    let mut at = 0;
    for (i, w) in words.iter().enumerate() {
        let optional = matches!(i, 0 | 2 | 3);
        match t.get(at) {
            Some(tok) if is_word(tok, w) => at += 1,
            // `OR` and `REPLACE` come together.
            _ if optional && !(i == 3 && at > 0 && is_word(&t[at - 1], "or")) => {}
            _ => return false,
        }
    }
    true
}

/// `CREATE MATERIALIZED VIEW ... EMIT ON WINDOW CLOSE`.
fn emit_on_window_close(sql: &str, mut t: Vec<Token>) -> (String, Option<Clauses>) {
    let n = t.len();
    let end = if t.last() == Some(&Token::SemiColon) {
        n - 1
    } else {
        n
    };
    let emit = end >= 4
        && ["emit", "on", "window", "close"]
            .iter()
            .zip(&t[end - 4..end])
            .all(|(w, tok)| is_word(tok, w));
    if !emit {
        return (sql.to_string(), None);
    }
    t.truncate(end - 4);
    let clauses = Clauses {
        options: vec![(EMIT_ON_WINDOW_CLOSE.to_string(), text("true"))],
        columns: vec![],
    };
    (untokenize(&t), Some(clauses))
}

fn create_table(sql: &str, mut t: Vec<Token>) -> SqlResult<(String, Option<Clauses>)> {
    let mut clauses = Clauses::default();
    if is_word(&t[1], "source") {
        t[1] = Token::make_keyword("TABLE");
        clauses.options.push((SOURCE_OPTION.into(), text("true")));
    }
    // The column list: the first group. `CREATE TABLE t AS SELECT ...` has none of
    // these clauses: left as it is.
    let Some(open) = t.iter().position(|x| *x == Token::LParen) else {
        return Ok((sql.to_string(), None));
    };
    if t[..open].iter().any(|x| is_word(x, "as")) {
        return Ok((sql.to_string(), None));
    }
    let close = closing(&t, open).ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
    let mut columns = items(&t, open, close);
    if let Some(w) = columns
        .iter()
        .position(|c| c.len() >= 2 && is_word(&c[0], "watermark") && is_word(&c[1], "for"))
    {
        watermark(&mut clauses, columns.remove(w))?;
    }
    let mut out: Vec<Token> = t[..=open].to_vec();
    for (i, c) in columns.into_iter().enumerate() {
        if i > 0 {
            out.push(Token::Comma);
        }
        out.extend(c);
    }
    out.push(Token::RParen);
    let (rest, mut options) = table_clauses(&t[close + 1..], &mut clauses)?;
    let changed =
        out.len() + rest.len() != t.len() || !clauses.options.is_empty() || !options.is_empty();
    if !changed {
        return Ok((sql.to_string(), None));
    }
    out.extend(rest);
    options.append(&mut clauses.options);
    clauses.options = options;
    Ok((untokenize(&out), Some(clauses)))
}

/// `WATERMARK FOR col [AS expr]`.
fn watermark(clauses: &mut Clauses, item: Vec<Token>) -> SqlResult<()> {
    let column = match item.get(2) {
        Some(Token::Word(w)) if w.quote_style.is_some() => w.value.clone(),
        Some(Token::Word(w)) => w.value.to_ascii_lowercase(),
        _ => {
            return Err(SqlError::syntax(
                "expected WATERMARK FOR column AS expression",
            ))
        }
    };
    let expr = match item.get(3) {
        Some(a) if is_word(a, "as") => expr_of(item[4..].to_vec())?,
        None => expr_of(item[2..3].to_vec())?,
        Some(_) => {
            return Err(SqlError::syntax(
                "expected WATERMARK FOR column AS expression",
            ))
        }
    };
    clauses
        .options
        .push(("watermark.column".into(), text(&column)));
    clauses.options.push(("watermark.expr".into(), expr));
    Ok(())
}

/// The clauses after the column list: `APPEND ONLY`, `INCLUDE`, `WITH (...)`, `FORMAT
/// ... ENCODE ...`. Returns the tokens left (anything the parser reads itself) and the
/// options, `WITH`'s first.
fn table_clauses(t: &[Token], clauses: &mut Clauses) -> SqlResult<(Vec<Token>, Options)> {
    let mut left = Vec::new();
    let mut with = Vec::new();
    let mut after = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let word = |k: usize, w: &str| t.get(k).is_some_and(|x| is_word(x, w));
        if word(i, "append") && word(i + 1, "only") {
            i += 2;
        } else if word(i, "include") {
            let what = match t.get(i + 1) {
                Some(Token::Word(w)) => w.value.to_ascii_lowercase(),
                _ => {
                    return Err(SqlError::syntax(
                        "expected INCLUDE partition | offset | timestamp | key",
                    ))
                }
            };
            let (name, next) = match (word(i + 2, "as"), t.get(i + 3)) {
                (true, Some(Token::Word(w))) if w.quote_style.is_some() => (w.value.clone(), i + 4),
                (true, Some(Token::Word(w))) => (w.value.to_ascii_lowercase(), i + 4),
                (true, _) => {
                    return Err(SqlError::syntax(
                        "expected a column name after INCLUDE ... AS",
                    ))
                }
                (false, _) => (format!("_kafka_{what}"), i + 2),
            };
            let data_type = match what.as_str() {
                "partition" => DataType::Int(None),
                "offset" => DataType::BigInt(None),
                "timestamp" => DataType::Timestamp(None, TimezoneInfo::WithTimeZone),
                _ => DataType::Bytea,
            };
            after.push((format!("include.{name}"), text(&what)));
            clauses.columns.push((name, data_type));
            i = next;
        } else if word(i, "with") && t.get(i + 1) == Some(&Token::LParen) {
            let close =
                closing(t, i + 1).ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
            with.extend(option_items(t, i + 1, close)?);
            i = close + 1;
        } else if word(i, "format") && word(i + 2, "encode") {
            let name = |k: usize| match t.get(k) {
                Some(Token::Word(w)) => Ok(w.value.to_ascii_lowercase()),
                _ => Err(SqlError::syntax("expected FORMAT name ENCODE name")),
            };
            after.push(("format".into(), text(&name(i + 1)?)));
            after.push(("encode".into(), text(&name(i + 3)?)));
            i += 4;
            if t.get(i) == Some(&Token::LParen) {
                let close =
                    closing(t, i).ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
                after.extend(option_items(t, i, close)?);
                i = close + 1;
            }
        } else {
            left.push(t[i].clone());
            i += 1;
        }
    }
    with.extend(after);
    Ok((left, with))
}

impl Clauses {
    /// Adds the clauses' options and columns to the statement they were taken from.
    pub fn apply(self, stmt: &mut Statement) -> SqlResult<()> {
        let options: Vec<SqlOption> = self
            .options
            .into_iter()
            .map(|(k, value)| SqlOption::KeyValue {
                key: Ident::with_quote('"', k),
                value,
            })
            .collect();
        let existing = match stmt {
            Statement::CreateTable(ct) => {
                ct.columns
                    .extend(self.columns.into_iter().map(|(name, data_type)| ColumnDef {
                        name: Ident::new(name),
                        data_type,
                        options: vec![],
                    }));
                &mut ct.table_options
            }
            Statement::CreateView(cv) => &mut cv.options,
            _ => return Ok(()),
        };
        match existing {
            CreateTableOptions::With(list) | CreateTableOptions::Options(list) => {
                list.extend(options)
            }
            CreateTableOptions::None if options.is_empty() => {}
            CreateTableOptions::None => *existing = CreateTableOptions::With(options),
            _ => return Err(SqlError::unsupported("table options other than WITH (...)")),
        }
        Ok(())
    }
}

/// A sink's `WITH (...)` options as (lower-case key, value) pairs.
pub type SinkOptions = Vec<(String, String)>;

/// What a sink reads: a table or view, or its own query (`CREATE SINK k AS SELECT ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkInput {
    Relation(String),
    Query(String),
}

/// `CREATE SINK name FROM relation | AS query [WITH (k = v, ...)] [FORMAT f ENCODE e
/// [(...)]]`: the sink's name, what it reads, and its options (keys lower-case, values
/// as text; `format` / `encode` from the FORMAT clause). A query ends at the last
/// top-level `WITH (...)` that only a FORMAT clause may follow (a CTE's `WITH` comes
/// first).
pub fn parse_sink(sql: &str) -> Option<(String, SinkInput, SinkOptions)> {
    let mut t = tokens(sql)?;
    if t.last() == Some(&Token::SemiColon) {
        t.pop();
    }
    let name = match t.get(2)? {
        Token::Word(w) if w.quote_style.is_some() => w.value.clone(),
        Token::Word(w) => w.value.to_ascii_lowercase(),
        _ => return None,
    };
    // The trailing clauses: FORMAT ... ENCODE ... [(...)] last, WITH (...) before it.
    let mut end = t.len();
    let mut clauses = Clauses::default();
    let format_at = (3..t.len()).rev().find(|&i| {
        is_word(&t[i], "format")
            && t.get(i + 2).is_some_and(|x| is_word(x, "encode"))
            && (i + 4 == t.len()
                || (t.get(i + 4) == Some(&Token::LParen)
                    && closing(&t, i + 4) == Some(t.len() - 1)))
    });
    let mut trailing = Vec::new();
    if let Some(f) = format_at {
        let (_, opts) = table_clauses(&t[f..], &mut clauses).ok()?;
        trailing = opts;
        end = f;
    }
    let with_at = (3..end).rev().find(|&i| {
        is_word(&t[i], "with")
            && t.get(i + 1) == Some(&Token::LParen)
            && closing(&t, i + 1) == Some(end - 1)
    });
    let mut options = Vec::new();
    if let Some(w) = with_at {
        options = option_items(&t, w + 1, end - 1).ok()?;
        end = w;
    }
    options.extend(trailing);
    let input = match t.get(3)? {
        k if is_word(k, "from") && end == 5 => SinkInput::Relation(match t.get(4)? {
            Token::Word(w) if w.quote_style.is_some() => w.value.clone(),
            Token::Word(w) => w.value.to_ascii_lowercase(),
            _ => return None,
        }),
        k if is_word(k, "as") && end > 4 => SinkInput::Query(untokenize(&t[4..end])),
        _ => return None,
    };
    let options = options
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Expr::Value(v) => match v.value {
                    Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s,
                    other => other.to_string(),
                },
                Expr::Identifier(i) => i.value,
                other => other.to_string(),
            };
            (k, v)
        })
        .collect();
    Some((name, input, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Extracted, parsed, applied, printed.
    fn parsed(sql: &str) -> String {
        let (plain, clauses) = extract(sql).unwrap();
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, &plain)
            .unwrap()
            .remove(0);
        if let Some(c) = clauses {
            c.apply(&mut stmt).unwrap();
        }
        stmt.to_string()
    }

    #[test]
    fn watermark_clause_becomes_options() {
        assert_eq!(
            parsed("CREATE TABLE t (id bigint, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)"),
            "CREATE TABLE t (id BIGINT, ts TIMESTAMP) WITH (\"watermark.column\" = 'ts', \"watermark.expr\" = ts - INTERVAL '5' SECOND)"
        );
        let got = parsed(
            "CREATE SOURCE s (ts timestamp, watermark for ts as ts) WITH (connector = 'kafka')",
        );
        assert_eq!(
            got,
            "CREATE TABLE s (ts TIMESTAMP) WITH (\"connector\" = 'kafka', \"weir.source\" = 'true', \"watermark.column\" = 'ts', \"watermark.expr\" = ts)"
        );
    }

    #[test]
    fn drop_source_drops_its_table() {
        assert_eq!(parsed("DROP SOURCE IF EXISTS s"), "DROP TABLE IF EXISTS s");
        assert_eq!(parsed("drop source s"), "DROP TABLE s");
    }

    #[test]
    fn risingwave_source_ddl() {
        let got = parsed(
            "CREATE SOURCE s (id bigint, v text) WITH (connector = 'kafka', topic = 'a.b', properties.bootstrap.server = 'h:9092', scan.startup.timestamp-millis = 5) FORMAT PLAIN ENCODE JSON",
        );
        assert_eq!(
            got,
            "CREATE TABLE s (id BIGINT, v TEXT) WITH (\"connector\" = 'kafka', \"topic\" = 'a.b', \"properties.bootstrap.server\" = 'h:9092', \"scan.startup.timestamp-millis\" = 5, \"format\" = 'plain', \"encode\" = 'json', \"weir.source\" = 'true')"
        );
    }

    #[test]
    fn include_clauses_become_columns_and_options() {
        let got = parsed(
            "CREATE TABLE t (id bigint) INCLUDE partition INCLUDE key AS k WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO (schema = '{}')",
        );
        assert_eq!(
            got,
            "CREATE TABLE t (id BIGINT, _kafka_partition INT, k BYTEA) WITH (\"connector\" = 'kafka', \"include._kafka_partition\" = 'partition', \"include.k\" = 'key', \"format\" = 'plain', \"encode\" = 'avro', \"schema\" = '{}')"
        );
    }

    #[test]
    fn append_only_and_emit_on_window_close() {
        assert_eq!(
            parsed("create table t (a int) append only"),
            "CREATE TABLE t (a INT)"
        );
        assert_eq!(
            parsed("CREATE MATERIALIZED VIEW v AS SELECT 1 FROM t EMIT ON WINDOW CLOSE;"),
            "CREATE MATERIALIZED VIEW v WITH (\"emit_on_window_close\" = 'true') AS SELECT 1 FROM t"
        );
        assert_eq!(
            parsed("create materialized view v with (parallelism = 2) as select 1 from t emit on window close"),
            "CREATE MATERIALIZED VIEW v WITH (parallelism = 2, \"emit_on_window_close\" = 'true') AS SELECT 1 FROM t"
        );
        assert_eq!(
            parsed("create or replace materialized view v as select 1 from t emit on window close"),
            "CREATE OR REPLACE MATERIALIZED VIEW v WITH (\"emit_on_window_close\" = 'true') AS SELECT 1 FROM t"
        );
        let plain = "CREATE MATERIALIZED VIEW v AS SELECT 'emit on window close' FROM t";
        assert_eq!(extract(plain).unwrap().0, plain);
    }

    #[test]
    fn create_sink() {
        let (name, from, opts) = parse_sink(
            "CREATE SINK k FROM v WITH (connector = 'blackhole', properties.x = '1') FORMAT PLAIN ENCODE JSON",
        )
        .unwrap();
        assert_eq!(name, "k");
        assert_eq!(from, SinkInput::Relation("v".into()));
        assert_eq!(
            opts,
            vec![
                ("connector".to_string(), "blackhole".to_string()),
                ("properties.x".into(), "1".into()),
                ("format".into(), "plain".into()),
                ("encode".into(), "json".into()),
            ]
        );
        assert!(parse_sink("CREATE SINK k v").is_none());
        let (_, input, opts) = parse_sink(
            "CREATE SINK q AS WITH b AS (SELECT * FROM bid) SELECT count(*) FROM b WITH (connector = 'blackhole');",
        )
        .unwrap();
        let SinkInput::Query(q) = input else {
            panic!("a query sink")
        };
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, &q).unwrap();
        assert_eq!(
            parsed[0].to_string(),
            "WITH b AS (SELECT * FROM bid) SELECT count(*) FROM b"
        );
        assert_eq!(
            opts,
            vec![("connector".to_string(), "blackhole".to_string())]
        );
    }

    #[test]
    fn format_without_with_and_plain_tables() {
        assert_eq!(
            parsed("create table t (a int) format plain encode csv"),
            "CREATE TABLE t (a INT) WITH (\"format\" = 'plain', \"encode\" = 'csv')"
        );
        let plain = "CREATE TABLE t (a int PRIMARY KEY, format text)";
        assert_eq!(extract(plain).unwrap().0, plain);
        assert_eq!(extract("SELECT 1").unwrap().0, "SELECT 1");
    }
}
