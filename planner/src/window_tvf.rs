//! Windowing table-valued functions, rewritten into plain SQL before parsing:
//!
//! - Flink: `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`,
//!   `TABLE(HOP(TABLE t, DESCRIPTOR(ts), slide, size))` and
//!   `TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), step, size))`;
//! - RisingWave style: `TUMBLE(t, ts, size)`, `HOP(t, ts, slide, size)` and
//!   `CUMULATE(t, ts, step, size)` in FROM.
//!
//! Both add the columns `window_start` and `window_end` to every row of `t`:
//!
//! - TUMBLE is a projection: `window_start = window_bound(ts, size, 0)` (= `date_bin(size,
//!   ts)`: windows aligned to the Unix epoch, as in Flink and RisingWave),
//!   `window_end = window_bound(ts, size, size)` (the start plus the size).
//! - HOP puts each row into `size / slide` windows (Flink requires `size` to be a
//!   multiple of `slide`, and so does Weir): a UNION ALL of that many projections,
//!   copy `j` with `window_start = window_bound(ts, slide, -j * slide)`.
//! - CUMULATE (Flink's): windows of one start, aligned to `size`, whose ends grow by
//!   `step` up to `size` (`size` a multiple of `step`); a row is in every such window
//!   that ends after it: a UNION ALL of `size / step` filtered projections, copy `k`
//!   with `window_end = window_bound(ts, size, k * step)`.
//!
//! `window_bound` is a Weir function (the server's `functions` module).
//!
//! So windows need no operator of their own: an aggregation grouped by `window_start`
//! is an ordinary keyed aggregation, and the same SQL runs as a batch SELECT.
//! `... EMIT ON WINDOW CLOSE` at the end of CREATE MATERIALIZED VIEW becomes the view
//! option `emit_on_window_close`: the top aggregation then emits each window once,
//! when the watermark closes it.
//!
//! SESSION windows depend on the gaps between rows, which a projection cannot see: they
//! expand to window functions (`lag`, running `max`) instead, which views keep up to
//! date with the OverWindow operator.

use crate::error::{SqlError, SqlResult};
use datafusion::sql::sqlparser::ast::{
    ExcludeSelectItem, Ident, ObjectName, Query, SelectItem, SetExpr, Statement, TableFactor,
    VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::ops::ControlFlow;

fn is_word(t: &Token, w: &str) -> bool {
    matches!(t, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w))
}

fn significant(tokens: &[Token], mut i: usize) -> Option<usize> {
    while i < tokens.len() {
        if !matches!(tokens[i], Token::Whitespace(_)) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The index of the `)` closing the `(` at `open`.
fn closing(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The top-level comma-separated arguments between `open` and `close`, as text.
fn arguments(tokens: &[Token], open: usize, close: usize) -> Vec<String> {
    let mut args = vec![String::new()];
    let mut depth = 0usize;
    for t in &tokens[open + 1..close] {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        args.last_mut().expect("non-empty").push_str(&t.to_string());
    }
    args.into_iter().map(|a| a.trim().to_string()).collect()
}

/// `INTERVAL 'n' unit` or `INTERVAL 'n unit'` in milliseconds.
pub fn interval_millis(text: &str) -> Option<i64> {
    let lower = text.replace(['\'', '"'], " ").to_ascii_lowercase();
    let tokens: Vec<&str> = lower.split_whitespace().collect();
    let (n, unit) = match tokens.as_slice() {
        ["interval", n, unit] => (*n, *unit),
        [n, unit] => (*n, *unit),
        _ => return None,
    };
    let n: f64 = n.parse().ok().filter(|n: &f64| *n >= 0.0)?;
    let ms = match unit.trim_end_matches('s') {
        "millisecond" => 1.0,
        "second" => 1_000.0,
        "minute" => 60_000.0,
        "hour" => 3_600_000.0,
        "day" => 86_400_000.0,
        _ => return None,
    };
    Some((n * ms).round() as i64)
}

fn tumble(table: &str, ts: &str, size: &str) -> SqlResult<String> {
    let size_ms = interval_millis(size).filter(|s| *s > 0).ok_or_else(|| {
        SqlError::syntax(format!(
            "TUMBLE needs a literal interval of seconds, minutes, hours or days (got {size})"
        ))
    })?;
    Ok(format!(
        "(SELECT *, window_bound({ts}, {size}, 0) AS window_start, \
         window_bound({ts}, {size}, {size_ms}) AS window_end FROM {table})"
    ))
}

/// `(step_ms, copies)` of a window function whose `size` must be a multiple of its
/// `step` (HOP's slide, CUMULATE's step): each row lands in `copies = size / step`
/// windows, at most 1000.
fn windows_per_row(func: &str, step_name: &str, step: &str, size: &str) -> SqlResult<(i64, i64)> {
    let bad = || {
        SqlError::syntax(format!(
            "{func} needs literal intervals with the size a multiple of the {step_name} (got {step_name} {step}, size {size})"
        ))
    };
    let step_ms = interval_millis(step).filter(|s| *s > 0).ok_or_else(bad)?;
    let size_ms = interval_millis(size).ok_or_else(bad)?;
    if size_ms < step_ms || size_ms % step_ms != 0 {
        return Err(bad());
    }
    let copies = size_ms / step_ms;
    if copies > 1000 {
        return Err(SqlError::unsupported(format!(
            "{func} with {copies} windows per row is not supported (at most 1000)"
        )));
    }
    Ok((step_ms, copies))
}

fn hop(table: &str, ts: &str, slide: &str, size: &str) -> SqlResult<String> {
    let (slide_ms, copies) = windows_per_row("HOP", "slide", slide, size)?;
    let size_ms = slide_ms * copies;
    let branches: Vec<String> = (0..copies)
        .map(|j| {
            let start = -j * slide_ms;
            format!(
                "SELECT *, window_bound({ts}, {slide}, {start}) AS window_start, \
                 window_bound({ts}, {slide}, {}) AS window_end FROM {table}",
                start + size_ms
            )
        })
        .collect();
    Ok(format!("({})", branches.join(" UNION ALL ")))
}

fn cumulate(table: &str, ts: &str, step: &str, size: &str) -> SqlResult<String> {
    let (step_ms, copies) = windows_per_row("CUMULATE", "step", step, size)?;
    let branches: Vec<String> = (1..=copies)
        .map(|k| {
            let end = format!("window_bound({ts}, {size}, {})", k * step_ms);
            format!(
                "SELECT *, window_bound({ts}, {size}, 0) AS window_start, {end} AS window_end \
                 FROM {table} WHERE {ts} < {end}"
            )
        })
        .collect();
    Ok(format!("({})", branches.join(" UNION ALL ")))
}

/// The alias of the derived table a SESSION window expands to, and the helper column
/// its `SELECT *` leaves out (see [`hide_session_helpers`]).
pub const SESSION_ALIAS: &str = "__weir_session";
pub const SESSION_MARK: &str = "__weir_session_mark";

/// `SESSION(t [PARTITION BY k | (k1, k2)], ts, gap)`: a session per partition is a run
/// of rows whose times are at most `gap` apart (Flink merges `[ts, ts + gap)` windows
/// that touch). `window_start` is the session's first time, `window_end` its last time
/// plus the gap. As window functions (kept up to date by the OverWindow operator):
/// 1. a row starts a session when the previous row's time plus the gap is before its
///    own: it is marked with its time;
/// 2. `window_start` = the latest mark up to the row (peers included);
/// 3. `window_end` = the latest time of the row's session, plus the gap.
///
/// Rows without a time belong to no session.
fn session(table: &str, ts: &str, gap: &str) -> SqlResult<String> {
    interval_millis(gap).filter(|g| *g > 0).ok_or_else(|| {
        SqlError::syntax(format!(
            "SESSION needs a literal positive interval gap (got {gap})"
        ))
    })?;
    let lower = table.to_ascii_lowercase();
    let (table, keys) = match lower.find(" partition by ") {
        Some(at) => {
            let keys = table[at + " partition by ".len()..].trim();
            let keys = keys
                .strip_prefix('(')
                .and_then(|k| k.strip_suffix(')'))
                .unwrap_or(keys);
            (table[..at].trim(), keys.trim())
        }
        None => (table.trim(), ""),
    };
    let partition = |extra: &str| {
        let list: Vec<&str> = [keys, extra]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if list.is_empty() {
            String::new()
        } else {
            format!("PARTITION BY {} ", list.join(", "))
        }
    };
    let by_key = partition("");
    let by_session = partition("window_start");
    Ok(format!(
        "(SELECT * FROM (SELECT *, max({ts}) OVER ({by_session}) + {gap} AS window_end FROM \
         (SELECT *, max({SESSION_MARK}) OVER ({by_key}ORDER BY {ts}) AS window_start FROM \
         (SELECT *, CASE WHEN lag({ts}) OVER ({by_key}ORDER BY {ts}) + {gap} >= {ts} \
         THEN NULL ELSE {ts} END AS {SESSION_MARK} FROM {table} WHERE {ts} IS NOT NULL) \
         AS __weir_session_1) AS __weir_session_2) AS {SESSION_ALIAS})"
    ))
}

/// Leaves the SESSION expansion's helper column out of its `SELECT *` (Postgres' syntax
/// has no `* EXCLUDE`, so the rewrite marks the select with [`SESSION_ALIAS`] and the
/// exclusion is set on the parsed statement).
pub fn hide_session_helpers(stmt: &mut Statement) {
    struct Hide;
    impl VisitorMut for Hide {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            let SetExpr::Select(select) = q.body.as_mut() else {
                return ControlFlow::Continue(());
            };
            let is_session = matches!(
                select.from.as_slice(),
                [twj] if twj.joins.is_empty() && matches!(
                    &twj.relation,
                    TableFactor::Derived { alias: Some(a), .. } if a.name.value == SESSION_ALIAS
                )
            );
            if let (true, [SelectItem::Wildcard(options)]) =
                (is_session, select.projection.as_mut_slice())
            {
                options.opt_exclude = Some(ExcludeSelectItem::Single(ObjectName::from(vec![
                    Ident::new(SESSION_MARK),
                ])));
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Hide);
}

/// The expansion of one window function call with arguments `args` (Flink's `TABLE t`
/// and `DESCRIPTOR(c)` already unwrapped).
fn expand(func: &str, args: &[String]) -> SqlResult<String> {
    match (func, args) {
        ("tumble", [t, ts, size]) => tumble(t, ts, size),
        ("hop", [t, ts, slide, size]) => hop(t, ts, slide, size),
        ("session", [t, ts, gap]) => session(t, ts, gap),
        ("cumulate", [t, ts, step, size]) => cumulate(t, ts, step, size),
        ("cumulate", _) => Err(SqlError::syntax(
            "CUMULATE takes (table, time column, step, size)",
        )),
        ("session", _) => Err(SqlError::syntax(
            "SESSION takes (table [PARTITION BY keys], time column, gap)",
        )),
        ("tumble", _) => Err(SqlError::syntax("TUMBLE takes (table, time column, size)")),
        ("hop", _) => Err(SqlError::syntax(
            "HOP takes (table, time column, slide, size)",
        )),
        (other, _) => Err(SqlError::unsupported(format!(
            "{} windows are not supported yet (TUMBLE, HOP, CUMULATE and SESSION are)",
            other.to_ascii_uppercase()
        ))),
    }
}

/// Flink's argument forms `TABLE t` and `DESCRIPTOR(c)`, unwrapped.
fn unwrap_flink_arg(arg: &str) -> String {
    let trimmed = arg.trim();
    let lower = trimmed.to_ascii_lowercase();
    if lower.starts_with("table ") {
        return trimmed[6..].trim().to_string();
    }
    if lower.starts_with("descriptor") {
        let inner = trimmed[10..].trim();
        if inner.starts_with('(') && inner.ends_with(')') {
            return inner[1..inner.len() - 1].trim().to_string();
        }
    }
    trimmed.to_string()
}

/// ` AS <table>` after an expansion that the user gave no alias, so that columns
/// qualified by the table's name (`bid.auction` after `TUMBLE(bid, ...)`) resolve as
/// they do in Flink and RisingWave. Empty when an alias follows the call at `close`
/// or the windowed input is not a plain table name.
fn default_alias(tokens: &[Token], close: usize, args: &[String]) -> String {
    use datafusion::sql::sqlparser::keywords::{Keyword, RESERVED_FOR_TABLE_ALIAS};
    let aliased = significant(tokens, close + 1).is_some_and(|n| match &tokens[n] {
        Token::Word(w) if w.keyword == Keyword::AS => true,
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("emit") => false,
        Token::Word(w) => !RESERVED_FOR_TABLE_ALIAS.contains(&w.keyword),
        _ => false,
    });
    let table = args
        .first()
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or("");
    let name = table.rsplit('.').next().unwrap_or("");
    let plain = !name.is_empty()
        && !name.starts_with('(')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '"');
    if aliased || !plain {
        return String::new();
    }
    format!(" AS {name}")
}

const WINDOW_FUNCS: [&str; 4] = ["tumble", "hop", "session", "cumulate"];

/// Rewrites every windowing TVF in `sql`; the text is returned unchanged when there is
/// none (or when it does not tokenize: the parser reports that).
pub fn rewrite(sql: &str) -> SqlResult<String> {
    let lower = sql.to_ascii_lowercase();
    if !WINDOW_FUNCS.iter().any(|f| lower.contains(f)) {
        return Ok(sql.to_string());
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(sql.to_string());
    };
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut changed = false;
    while i < tokens.len() {
        // Flink: TABLE ( F ( ... ) )
        if is_word(&tokens[i], "table") {
            if let Some(open) = significant(&tokens, i + 1).filter(|&o| tokens[o] == Token::LParen)
            {
                if let Some(f) = significant(&tokens, open + 1) {
                    if let Some(func) = WINDOW_FUNCS.iter().find(|w| is_word(&tokens[f], w)) {
                        let inner_open = significant(&tokens, f + 1)
                            .filter(|&o| tokens[o] == Token::LParen)
                            .ok_or_else(|| SqlError::syntax(format!("expected ( after {func}")))?;
                        let inner_close = closing(&tokens, inner_open)
                            .ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
                        let close = closing(&tokens, open)
                            .ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
                        let args: Vec<String> = arguments(&tokens, inner_open, inner_close)
                            .iter()
                            .map(|a| unwrap_flink_arg(a))
                            .collect();
                        out.push_str(&expand(func, &args)?);
                        out.push_str(&default_alias(&tokens, close, &args));
                        i = close + 1;
                        changed = true;
                        continue;
                    }
                }
            }
        }
        // RisingWave: F ( t, ts, ... ) directly after FROM, JOIN or a comma.
        if let Some(func) = WINDOW_FUNCS.iter().find(|w| is_word(&tokens[i], w)) {
            let before = tokens[..i]
                .iter()
                .rev()
                .find(|t| !matches!(t, Token::Whitespace(_)));
            let in_from = matches!(before, Some(Token::Comma))
                || before.is_some_and(|t| is_word(t, "from") || is_word(t, "join"));
            if let Some(open) = significant(&tokens, i + 1).filter(|&o| tokens[o] == Token::LParen)
            {
                if in_from {
                    let close = closing(&tokens, open)
                        .ok_or_else(|| SqlError::syntax("unbalanced parentheses"))?;
                    let args = arguments(&tokens, open, close);
                    out.push_str(&expand(func, &args)?);
                    out.push_str(&default_alias(&tokens, close, &args));
                    i = close + 1;
                    changed = true;
                    continue;
                }
            }
        }
        out.push_str(&tokens[i].to_string());
        i += 1;
    }
    Ok(if changed { out } else { sql.to_string() })
}

/// The view option `EMIT ON WINDOW CLOSE` turns into.
pub const EMIT_ON_WINDOW_CLOSE: &str = "emit_on_window_close";

/// RisingWave's `CREATE MATERIALIZED VIEW v AS <query> EMIT ON WINDOW CLOSE` becomes
/// the view option `emit_on_window_close = 'true'` (merged into an existing `WITH`).
pub fn rewrite_emit_on_window_close(sql: &str) -> String {
    let (words, groups) = crate::connector_ddl::scan(sql);
    let lower: Vec<String> = words
        .iter()
        .map(|&(a, b)| sql[a..b].to_ascii_lowercase())
        .collect();
    let w: Vec<&str> = lower.iter().map(|s| s.as_str()).collect();
    let n = w.len();
    if n < 8
        || w[..3] != ["create", "materialized", "view"]
        || w[n - 4..] != ["emit", "on", "window", "close"]
    {
        return sql.to_string();
    }
    let body = sql[..words[n - 4].0].trim_end();
    let option = format!("{EMIT_ON_WINDOW_CLOSE} = 'true'");
    // An existing WITH (...) before AS: add the option to it.
    let Some(as_at) = w.iter().position(|x| *x == "as") else {
        return sql.to_string();
    };
    let as_start = words[as_at].0;
    if let Some(with_at) = w[..as_at].iter().position(|x| *x == "with") {
        if let Some(&(open, _)) = groups
            .iter()
            .find(|(g, _)| *g > words[with_at].1 && *g < as_start)
        {
            return format!("{}{option}, {}", &body[..open + 1], &body[open + 1..]);
        }
    }
    format!("{}WITH ({option}) {}", &body[..as_start], &body[as_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flink_and_risingwave_tumble_expand_alike() {
        let flink = rewrite(
            "SELECT window_start, count(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY window_start",
        )
        .unwrap();
        let rw = rewrite(
            "SELECT window_start, count(*) FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start",
        )
        .unwrap();
        assert_eq!(flink, rw);
        assert!(
            rw.contains("window_bound(date_time, INTERVAL '10' SECOND, 0) AS window_start")
                && rw
                    .contains("window_bound(date_time, INTERVAL '10' SECOND, 10000) AS window_end"),
            "{rw}"
        );
    }

    #[test]
    fn windowed_table_keeps_its_name_unless_aliased() {
        let named = rewrite("SELECT bid.auction FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)")
            .unwrap();
        assert!(named.ends_with(") AS bid"), "{named}");
        let flink = rewrite(
            "SELECT bid.auction FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) WHERE true",
        )
        .unwrap();
        assert!(flink.contains(") AS bid WHERE"), "{flink}");
        let aliased =
            rewrite("SELECT w.auction FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) AS w")
                .unwrap();
        assert!(
            aliased.ends_with(") AS w") && !aliased.contains("AS bid"),
            "{aliased}"
        );
        let bare = rewrite("SELECT 1 FROM HOP(bid, t, INTERVAL '1' SECOND, INTERVAL '2' SECOND) w")
            .unwrap();
        assert!(bare.ends_with(") w"), "{bare}");
    }

    #[test]
    fn cumulate_is_one_filtered_branch_per_window_end() {
        let sql = rewrite(
            "SELECT * FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '6' SECOND))",
        )
        .unwrap();
        assert_eq!(sql.matches("UNION ALL").count(), 2, "{sql}");
        assert_eq!(
            sql.matches("window_bound(date_time, INTERVAL '6' SECOND, 0) AS window_start")
                .count(),
            3,
            "{sql}"
        );
        assert!(
            sql.contains("WHERE date_time < window_bound(date_time, INTERVAL '6' SECOND, 4000)"),
            "{sql}"
        );
        let rw = rewrite(
            "SELECT * FROM CUMULATE(bid, date_time, INTERVAL '2' SECOND, INTERVAL '6' SECOND)",
        )
        .unwrap();
        assert!(rw.ends_with(") AS bid"), "{rw}");
    }

    #[test]
    fn hop_is_one_branch_per_window() {
        let sql = rewrite(
            "SELECT * FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) w",
        )
        .unwrap();
        assert_eq!(sql.matches("UNION ALL").count(), 4, "{sql}");
        assert!(
            sql.contains("window_bound(date_time, INTERVAL '2' SECOND, -8000) AS window_start"),
            "{sql}"
        );
        assert!(sql.trim_end().ends_with(") w"), "{sql}");
    }

    #[test]
    fn bad_windows_are_refused() {
        assert!(
            rewrite("SELECT * FROM HOP(bid, ts, INTERVAL '3' SECOND, INTERVAL '10' SECOND)")
                .is_err()
        );
        assert!(rewrite("SELECT * FROM TUMBLE(bid, ts)").is_err());
        let e = rewrite(
            "SELECT * FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(ts), INTERVAL '7' MINUTE, INTERVAL '1' HOUR))",
        )
        .unwrap_err();
        assert!(e.to_string().contains("multiple of the step"), "{e}");
        assert!(rewrite("SELECT * FROM CUMULATE(bid, ts, INTERVAL '1' MINUTE)").is_err());
        assert!(rewrite(
            "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(ts)))"
        )
        .is_err());
    }

    #[test]
    fn emit_on_window_close_becomes_an_option() {
        assert_eq!(
            rewrite_emit_on_window_close(
                "CREATE MATERIALIZED VIEW v AS SELECT 1 FROM t EMIT ON WINDOW CLOSE"
            ),
            "CREATE MATERIALIZED VIEW v WITH (emit_on_window_close = 'true') AS SELECT 1 FROM t"
        );
        assert_eq!(
            rewrite_emit_on_window_close("create materialized view v with (parallelism = 2) as select 1 from t emit on window close;"),
            "create materialized view v with (emit_on_window_close = 'true', parallelism = 2) as select 1 from t"
        );
        let plain = "CREATE MATERIALIZED VIEW v AS SELECT 'emit on window close' FROM t";
        assert_eq!(rewrite_emit_on_window_close(plain), plain);
    }

    #[test]
    fn other_uses_are_left_alone() {
        let sql = "SELECT 'tumble(' AS x, hop FROM t";
        assert_eq!(rewrite(sql).unwrap(), sql);
        assert_eq!(interval_millis("INTERVAL '5' SECOND"), Some(5000));
        assert_eq!(interval_millis("INTERVAL '2 minutes'"), Some(120_000));
    }
}
