//! Windowing table-valued functions:
//!
//! - Flink: `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))`,
//!   `TABLE(HOP(TABLE t, DESCRIPTOR(ts), slide, size))`,
//!   `TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), step, size))` and
//!   `TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), gap))`;
//! - RisingWave style: `TUMBLE(t, ts, size)`, `HOP(t, ts, slide, size)`,
//!   `CUMULATE(t, ts, step, size)` and `SESSION(t PARTITION BY k, ts, gap)` in FROM.
//!
//! Two steps. [`normalize`] works on tokens, before parsing: it spells Flink's form and
//! `PARTITION BY` (which no SQL parser takes inside a call) as a plain table-function
//! call, `F(t, ts, ..., __weir_partition_by(k))`, by dropping and moving tokens; it
//! builds no SQL. [`expand`] then works on the parsed statement: every such call in
//! FROM becomes a derived table, built as a tree from fixed templates whose holes
//! (`__ts`, `__size`, `__t`, ...) are filled with the call's own expressions.
//!
//! All add the columns `window_start` and `window_end` to every row of `t`:
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
//! - SESSION depends on the gaps between rows, which a projection cannot see: it
//!   expands to window functions (`lag`, running `max`), which views keep up to date
//!   with the OverWindow operator. An aggregation of sessions over an input that only
//!   inserts runs as one SessionAgg instead (`stream_session`).
//!
//! `window_bound` is a Weir function (the server's `functions` module). So windows need
//! no operator of their own: an aggregation grouped by `window_start` is an ordinary
//! keyed aggregation, and the same SQL runs as a batch SELECT. The derived table keeps
//! the windowed table's name as its alias unless the call has one, so `bid.auction`
//! after `TUMBLE(bid, ...)` resolves as in Flink and RisingWave.
//!
//! `... EMIT ON WINDOW CLOSE` at the end of CREATE MATERIALIZED VIEW becomes the view
//! option `emit_on_window_close` (see `connector_ddl`): the top aggregation then emits
//! each window once, when the watermark closes it.

use crate::error::{SqlError, SqlResult};
use datafusion::sql::sqlparser::ast::{
    visit_relations_mut, ExcludeSelectItem, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    Ident, ObjectName, ObjectNamePart, Query, SelectItem, SetExpr, SetOperator, SetQuantifier,
    Statement, TableAlias, TableFactor, Value, VisitMut, VisitorMut, WindowType,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::ops::ControlFlow;

const WINDOW_FUNCS: [&str; 4] = ["tumble", "hop", "session", "cumulate"];

/// The trailing argument [`normalize`] moves a SESSION's `PARTITION BY` keys into.
const PARTITION_MARK: &str = "__weir_partition_by";

/// The SESSION expansion's outer alias: a session window aggregation finds the
/// expansion by it (`stream_session`).
pub(crate) const SESSION_ALIAS: &str = "__weir_session_3";

/// The SESSION expansion's helper column, left out of its result.
const SESSION_MARK: &str = "__weir_session_mark";

// ---- Step 1: tokens --------------------------------------------------------------

pub(crate) fn is_word(t: &Token, w: &str) -> bool {
    matches!(t, Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w))
}

pub(crate) fn significant(tokens: &[Token], mut i: usize) -> Option<usize> {
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

/// The top-level comma-separated arguments between `open` and `close`, without the
/// whitespace around them.
fn arguments(tokens: &[Token], open: usize, close: usize) -> Vec<Vec<Token>> {
    let mut args = vec![Vec::new()];
    let mut depth = 0usize;
    for t in &tokens[open + 1..close] {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        args.last_mut().expect("non-empty").push(t.clone());
    }
    args.into_iter().map(trim).collect()
}

fn trim(mut t: Vec<Token>) -> Vec<Token> {
    while t.last().is_some_and(|t| matches!(t, Token::Whitespace(_))) {
        t.pop();
    }
    let lead = t
        .iter()
        .take_while(|t| matches!(t, Token::Whitespace(_)))
        .count();
    t.split_off(lead)
}

/// Flink's argument forms: `TABLE t` is `t`, `DESCRIPTOR(c)` is `c`.
fn unwrap_flink_arg(arg: Vec<Token>) -> Vec<Token> {
    match arg.first() {
        Some(t) if is_word(t, "table") => trim(arg[1..].to_vec()),
        Some(t) if is_word(t, "descriptor") => match significant(&arg, 1) {
            Some(open)
                if arg[open] == Token::LParen && closing(&arg, open) == Some(arg.len() - 1) =>
            {
                trim(arg[open + 1..arg.len() - 1].to_vec())
            }
            _ => arg,
        },
        _ => arg,
    }
}

/// The call `func(args)` as a plain table-function call: Flink's argument forms
/// unwrapped, and `t PARTITION BY k | (k1, k2)` in the first argument moved to a
/// trailing `__weir_partition_by(k1, k2)` argument.
fn plain_call(func: &str, args: Vec<Vec<Token>>) -> Vec<Token> {
    let mut args: Vec<Vec<Token>> = args.into_iter().map(unwrap_flink_arg).collect();
    let partition = args.first().and_then(|first| {
        let at = first.iter().position(|t| is_word(t, "partition"))?;
        let by = significant(first, at + 1).filter(|&b| is_word(&first[b], "by"))?;
        Some((at, by))
    });
    if let Some((at, by)) = partition {
        let first = std::mem::take(&mut args[0]);
        let mut keys = trim(first[by + 1..].to_vec());
        if keys.first() == Some(&Token::LParen) && closing(&keys, 0) == Some(keys.len() - 1) {
            keys = keys[1..keys.len() - 1].to_vec();
        }
        args[0] = trim(first[..at].to_vec());
        let mut mark = vec![Token::make_word(PARTITION_MARK, None), Token::LParen];
        mark.extend(keys);
        mark.push(Token::RParen);
        args.push(mark);
    }
    let mut out = vec![Token::make_word(func, None), Token::LParen];
    for (i, a) in args.into_iter().enumerate() {
        if i > 0 {
            out.extend([
                Token::Comma,
                Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
            ]);
        }
        out.extend(a);
    }
    out.push(Token::RParen);
    out
}

/// Spells every windowing call in `sql` as a plain table-function call (see the
/// module doc); the text is returned unchanged when there is none (or when it does
/// not tokenize: the parser reports that).
pub fn normalize(sql: &str) -> SqlResult<String> {
    let lower = sql.to_ascii_lowercase();
    if !WINDOW_FUNCS.iter().any(|f| lower.contains(f)) {
        return Ok(sql.to_string());
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(sql.to_string());
    };
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    let mut changed = false;
    let unbalanced = || SqlError::syntax("unbalanced parentheses");
    while i < tokens.len() {
        // Flink: TABLE ( F ( ... ) )
        if let Some((func, f)) = flink_call(&tokens, i) {
            let inner_open = significant(&tokens, f + 1)
                .filter(|&o| tokens[o] == Token::LParen)
                .ok_or_else(|| SqlError::syntax(format!("expected ( after {func}")))?;
            let inner_close = closing(&tokens, inner_open).ok_or_else(unbalanced)?;
            let open = significant(&tokens, i + 1).ok_or_else(unbalanced)?;
            let close = closing(&tokens, open).ok_or_else(unbalanced)?;
            out.extend(plain_call(
                func,
                arguments(&tokens, inner_open, inner_close),
            ));
            i = close + 1;
            changed = true;
            continue;
        }
        // RisingWave: F ( t, ts, ... ) directly after FROM, JOIN or a comma.
        if let Some(func) = WINDOW_FUNCS.iter().find(|w| is_word(&tokens[i], w)) {
            let before = out
                .iter()
                .rev()
                .find(|t| !matches!(t, Token::Whitespace(_)));
            let in_from = matches!(before, Some(Token::Comma))
                || before.is_some_and(|t| is_word(t, "from") || is_word(t, "join"));
            if let Some(open) =
                significant(&tokens, i + 1).filter(|&o| in_from && tokens[o] == Token::LParen)
            {
                let close = closing(&tokens, open).ok_or_else(unbalanced)?;
                out.extend(plain_call(func, arguments(&tokens, open, close)));
                i = close + 1;
                changed = true;
                continue;
            }
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    if !changed {
        return Ok(sql.to_string());
    }
    Ok(out.iter().map(Token::to_string).collect())
}

/// `TABLE ( F (` at `i`: the window function and the index of its name.
fn flink_call(tokens: &[Token], i: usize) -> Option<(&'static str, usize)> {
    if !is_word(&tokens[i], "table") {
        return None;
    }
    let open = significant(tokens, i + 1).filter(|&o| tokens[o] == Token::LParen)?;
    let f = significant(tokens, open + 1)?;
    let func = WINDOW_FUNCS.iter().find(|w| is_word(&tokens[f], w))?;
    Some((func, f))
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

// ---- Step 2: the parsed statement ------------------------------------------------

/// Replaces every windowing call in FROM by the derived table that computes it.
pub fn expand(stmt: &mut Statement) -> SqlResult<()> {
    struct Expand;
    impl VisitorMut for Expand {
        type Break = SqlError;
        fn post_visit_table_factor(&mut self, tf: &mut TableFactor) -> ControlFlow<SqlError> {
            match window_table(tf) {
                Ok(Some(derived)) => *tf = derived,
                Ok(None) => {}
                Err(e) => return ControlFlow::Break(e),
            }
            ControlFlow::Continue(())
        }
    }
    match stmt.visit(&mut Expand) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The derived table of a windowing call; `None` for any other table factor.
fn window_table(tf: &TableFactor) -> SqlResult<Option<TableFactor>> {
    let TableFactor::Table {
        name,
        alias,
        args: Some(args),
        ..
    } = tf
    else {
        return Ok(None);
    };
    let func = match name.0.as_slice() {
        [ObjectNamePart::Identifier(id)] if id.quote_style.is_none() => {
            id.value.to_ascii_lowercase()
        }
        _ => return Ok(None),
    };
    if !WINDOW_FUNCS.contains(&func.as_str()) {
        return Ok(None);
    }
    let mut exprs = args
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
            other => Err(SqlError::syntax(format!(
                "unexpected argument {other} of {}",
                func.to_ascii_uppercase()
            ))),
        })
        .collect::<SqlResult<Vec<Expr>>>()?;
    let keys = partition_keys(&mut exprs);
    let Some(table) = exprs.first().and_then(table_name) else {
        return Err(SqlError::syntax(format!(
            "the first argument of {} must be a table name",
            func.to_ascii_uppercase()
        )));
    };
    let query = match (func.as_str(), &exprs[1..]) {
        ("tumble", [ts, size]) => tumble(&table, ts, size)?,
        ("hop", [ts, slide, size]) => hop(&table, ts, slide, size)?,
        ("cumulate", [ts, step, size]) => cumulate(&table, ts, step, size)?,
        ("session", [ts, gap]) => session(&table, keys.unwrap_or_default(), ts, gap)?,
        ("tumble", _) => return Err(SqlError::syntax("TUMBLE takes (table, time column, size)")),
        ("hop", _) => {
            return Err(SqlError::syntax(
                "HOP takes (table, time column, slide, size)",
            ))
        }
        ("cumulate", _) => {
            return Err(SqlError::syntax(
                "CUMULATE takes (table, time column, step, size)",
            ))
        }
        _ => {
            return Err(SqlError::syntax(
                "SESSION takes (table [PARTITION BY keys], time column, gap)",
            ))
        }
    };
    if keys_given(&func, &args.args) {
        return Err(SqlError::syntax(format!(
            "{} takes no PARTITION BY (SESSION does)",
            func.to_ascii_uppercase()
        )));
    }
    let last = table.0.last().and_then(|p| p.as_ident()).cloned();
    let alias = alias.clone().or_else(|| {
        last.map(|name| TableAlias {
            explicit: true,
            name,
            columns: vec![],
            at: None,
        })
    });
    Ok(Some(TableFactor::Derived {
        lateral: false,
        subquery: Box::new(query),
        alias,
        sample: None,
    }))
}

/// Whether a non-SESSION call was given `PARTITION BY` keys.
fn keys_given(func: &str, args: &[FunctionArg]) -> bool {
    func != "session"
        && args.iter().any(|a| {
            matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Function(f)))
                if f.name.to_string().eq_ignore_ascii_case(PARTITION_MARK))
        })
}

/// Takes the trailing `__weir_partition_by(keys)` argument off `exprs`.
fn partition_keys(exprs: &mut Vec<Expr>) -> Option<Vec<Expr>> {
    let Some(Expr::Function(f)) = exprs.last() else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case(PARTITION_MARK) {
        return None;
    }
    let keys = match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    };
    exprs.pop();
    Some(keys)
}

fn table_name(e: &Expr) -> Option<ObjectName> {
    match e {
        Expr::Identifier(id) => Some(ObjectName::from(vec![id.clone()])),
        Expr::CompoundIdentifier(ids) => Some(ObjectName::from(ids.clone())),
        _ => None,
    }
}

fn number(n: i64) -> Expr {
    Expr::Value(Value::Number(n.to_string(), false).into())
}

/// The literal interval `e` in milliseconds.
fn millis(e: &Expr) -> Option<i64> {
    interval_millis(&e.to_string())
}

/// A fixed query template with its holes filled: each `__name` identifier by its
/// expression, `PARTITION BY __keys` by `keys`, and the relation `__t` by `table`.
struct Template<'a> {
    holes: Vec<(&'static str, Expr)>,
    keys: &'a [Expr],
    table: &'a ObjectName,
}

impl Template<'_> {
    fn fill(&self, sql: &str) -> Query {
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("a window template parses")
            .remove(0);
        let _ = visit_relations_mut(&mut stmt, |name| {
            if name.to_string() == "__t" {
                *name = self.table.clone();
            }
            ControlFlow::<()>::Continue(())
        });
        let _ = stmt.visit(&mut FillHoles(self));
        match stmt {
            Statement::Query(q) => *q,
            _ => unreachable!("templates are queries"),
        }
    }

    /// `sql` once per branch, each with its own numbers in the holes, joined by UNION
    /// ALL.
    fn union_all(&mut self, sql: &str, branches: Vec<Vec<(&'static str, i64)>>) -> Query {
        let common = self.holes.clone();
        let mut branches = branches.into_iter().map(|numbers| {
            self.holes = common.clone();
            self.holes
                .extend(numbers.into_iter().map(|(h, n)| (h, number(n))));
            self.fill(sql)
        });
        let mut query = branches.next().expect("at least one window per row");
        for b in branches {
            query.body = Box::new(SetExpr::SetOperation {
                left: query.body,
                op: SetOperator::Union,
                set_quantifier: SetQuantifier::All,
                right: b.body,
            });
        }
        query
    }
}

struct FillHoles<'a, 'b>(&'a Template<'b>);

impl VisitorMut for FillHoles<'_, '_> {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        match e {
            Expr::Identifier(id) => {
                if let Some((_, filled)) = self.0.holes.iter().find(|(h, _)| id.value == *h) {
                    *e = filled.clone();
                }
            }
            Expr::Function(f) => {
                if let Some(WindowType::WindowSpec(spec)) = &mut f.over {
                    spec.partition_by = std::mem::take(&mut spec.partition_by)
                        .into_iter()
                        .flat_map(|p| match &p {
                            Expr::Identifier(id) if id.value == "__keys" => self.0.keys.to_vec(),
                            _ => vec![p],
                        })
                        .collect();
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn tumble(table: &ObjectName, ts: &Expr, size: &Expr) -> SqlResult<Query> {
    let size_ms = millis(size).filter(|s| *s > 0).ok_or_else(|| {
        SqlError::syntax(format!(
            "TUMBLE needs a literal interval of seconds, minutes, hours or days (got {size})"
        ))
    })?;
    let t = Template {
        holes: vec![
            ("__ts", ts.clone()),
            ("__size", size.clone()),
            ("__size_ms", number(size_ms)),
        ],
        keys: &[],
        table,
    };
    Ok(t.fill(
        "SELECT *, window_bound(__ts, __size, 0) AS window_start, \
         window_bound(__ts, __size, __size_ms) AS window_end FROM __t",
    ))
}

fn hop(table: &ObjectName, ts: &Expr, slide: &Expr, size: &Expr) -> SqlResult<Query> {
    let (slide_ms, copies) = windows_per_row("HOP", "slide", slide, size)?;
    let size_ms = slide_ms * copies;
    let mut t = Template {
        holes: vec![("__ts", ts.clone()), ("__slide", slide.clone())],
        keys: &[],
        table,
    };
    // Copy j starts j slides before the row's own slide.
    Ok(t.union_all(
        "SELECT *, window_bound(__ts, __slide, __start) AS window_start, \
         window_bound(__ts, __slide, __end) AS window_end FROM __t",
        (0..copies)
            .map(|j| {
                vec![
                    ("__start", -j * slide_ms),
                    ("__end", size_ms - j * slide_ms),
                ]
            })
            .collect(),
    ))
}

fn cumulate(table: &ObjectName, ts: &Expr, step: &Expr, size: &Expr) -> SqlResult<Query> {
    let (step_ms, copies) = windows_per_row("CUMULATE", "step", step, size)?;
    let mut t = Template {
        holes: vec![("__ts", ts.clone()), ("__size", size.clone())],
        keys: &[],
        table,
    };
    Ok(t.union_all(
        "SELECT *, window_bound(__ts, __size, 0) AS window_start, \
         window_bound(__ts, __size, __end) AS window_end \
         FROM __t WHERE __ts < window_bound(__ts, __size, __end)",
        (1..=copies).map(|k| vec![("__end", k * step_ms)]).collect(),
    ))
}

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
fn session(table: &ObjectName, keys: Vec<Expr>, ts: &Expr, gap: &Expr) -> SqlResult<Query> {
    millis(gap).filter(|g| *g > 0).ok_or_else(|| {
        SqlError::syntax(format!(
            "SESSION needs a literal positive interval gap (got {gap})"
        ))
    })?;
    let t = Template {
        holes: vec![("__ts", ts.clone()), ("__gap", gap.clone())],
        keys: &keys,
        table,
    };
    let mut q = t.fill(&format!(
        "SELECT * FROM (SELECT *, max(__ts) OVER (PARTITION BY __keys, window_start) + __gap \
         AS window_end FROM (SELECT *, max(__weir_session_mark) OVER (PARTITION BY __keys \
         ORDER BY __ts) AS window_start FROM (SELECT *, CASE WHEN lag(__ts) OVER (PARTITION \
         BY __keys ORDER BY __ts) + __gap >= __ts THEN NULL ELSE __ts END AS \
         __weir_session_mark FROM __t WHERE __ts IS NOT NULL) AS __weir_session_1) \
         AS __weir_session_2) AS {SESSION_ALIAS}"
    ));
    // Postgres' syntax has no `* EXCLUDE`; the tree does.
    if let SetExpr::Select(select) = q.body.as_mut() {
        if let [SelectItem::Wildcard(options)] = select.projection.as_mut_slice() {
            options.opt_exclude = Some(ExcludeSelectItem::Single(ObjectName::from(vec![
                Ident::new(SESSION_MARK),
            ])));
        }
    }
    Ok(q)
}

/// `(step_ms, copies)` of a window function whose `size` must be a multiple of its
/// `step` (HOP's slide, CUMULATE's step): each row lands in `copies = size / step`
/// windows, at most 1000.
fn windows_per_row(func: &str, step_name: &str, step: &Expr, size: &Expr) -> SqlResult<(i64, i64)> {
    let bad = || {
        SqlError::syntax(format!(
            "{func} needs literal intervals with the size a multiple of the {step_name} (got {step_name} {step}, size {size})"
        ))
    };
    let step_ms = millis(step).filter(|s| *s > 0).ok_or_else(bad)?;
    let size_ms = millis(size).ok_or_else(bad)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Both steps, printed.
    fn rewrite(sql: &str) -> SqlResult<String> {
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, &normalize(sql)?)
            .map_err(|e| SqlError::syntax(e.to_string()))?
            .remove(0);
        expand(&mut stmt)?;
        Ok(stmt.to_string())
    }

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
    fn session_partitions_by_its_keys_and_hides_its_mark() {
        let flink = rewrite(
            "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY (bidder, auction), DESCRIPTOR(ts), INTERVAL '5' SECOND))",
        )
        .unwrap();
        let rw = rewrite(
            "SELECT * FROM SESSION(bid PARTITION BY bidder, auction, ts, INTERVAL '5' SECOND)",
        );
        // RisingWave's form takes one key without parentheses: the second is a column.
        assert!(rw.is_err(), "{rw:?}");
        let rw = rewrite(
            "SELECT * FROM SESSION(bid PARTITION BY (bidder, auction), ts, INTERVAL '5' SECOND)",
        )
        .unwrap();
        assert_eq!(flink, rw);
        assert!(
            rw.contains("SELECT * EXCLUDE __weir_session_mark FROM")
                && rw.contains("max(ts) OVER (PARTITION BY bidder, auction, window_start)")
                && rw.contains("lag(ts) OVER (PARTITION BY bidder, auction ORDER BY ts)")
                && rw.ends_with(") AS bid"),
            "{rw}"
        );
        let unkeyed = rewrite("SELECT * FROM SESSION(bid, ts, INTERVAL '5' SECOND)").unwrap();
        assert!(
            unkeyed.contains("max(ts) OVER (PARTITION BY window_start)"),
            "{unkeyed}"
        );
        assert!(
            rewrite("SELECT * FROM TUMBLE(bid PARTITION BY x, ts, INTERVAL '5' SECOND)").is_err()
        );
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
    fn other_uses_are_left_alone() {
        let sql = "SELECT 'tumble(' AS x, hop FROM t";
        assert_eq!(normalize(sql).unwrap(), sql);
        assert_eq!(rewrite(sql).unwrap(), sql);
        assert_eq!(interval_millis("INTERVAL '5' SECOND"), Some(5000));
        assert_eq!(interval_millis("INTERVAL '2 minutes'"), Some(120_000));
    }
}
