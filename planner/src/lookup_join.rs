//! Lookup joins: `JOIN t FOR SYSTEM_TIME AS OF PROCTIME() [AS] a ON ...` (Flink's and
//! RisingWave's processing-time temporal join, Nexmark q13's enrichment of bids from a
//! side table).
//!
//! sqlparser's Postgres dialect has no `FOR SYSTEM_TIME AS OF`, so [`normalize`] works
//! on tokens before parsing: the clause goes, and `t` becomes the derived table
//! `(SELECT * FROM t WHERE __weir_lookup_table()) AS a` (alias `t` when none is given).
//! `__weir_lookup_table()` is a Weir function that is always true and volatile, so no
//! optimizer folds it away or pushes it into the scan: it marks the table in the
//! logical plan. A batch SELECT reads the table as it is now, which is what
//! processing time means at one instant. In a materialized view the stream planner
//! finds the mark on a join's right side ([`reads_lookup_table`]) and plans a lookup
//! join (`HashJoinSpec::lookup`): only the table is kept, each left row meets the table
//! as it is when the row arrives, and later table changes retract nothing.
//!
//! Only `PROCTIME()` is taken after `AS OF`: an event-time temporal join (a versioned
//! table read at each row's event time) is a different operator, refused with 0A000.

use crate::error::{SqlError, SqlResult};
use crate::window_tvf::{is_word, significant};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// The marking function's name (registered by the server's `functions` module).
pub const MARKER: &str = "__weir_lookup_table";

fn is_space(t: &Token) -> bool {
    matches!(t, Token::Whitespace(_))
}

/// `FOR SYSTEM_TIME AS OF` starting at `i`: the index after `OF`.
fn clause_at(tokens: &[Token], i: usize) -> Option<usize> {
    let mut at = i;
    for w in ["for", "system_time", "as", "of"] {
        let k = significant(tokens, at)?;
        if !is_word(&tokens[k], w) {
            return None;
        }
        at = k + 1;
    }
    Some(at)
}

/// `PROCTIME ( )` starting at `i`: the index after `)`.
fn proctime_at(tokens: &[Token], i: usize) -> Option<usize> {
    let f = significant(tokens, i)?;
    let open = significant(tokens, f + 1)?;
    let close = significant(tokens, open + 1)?;
    (is_word(&tokens[f], "proctime")
        && tokens[open] == Token::LParen
        && tokens[close] == Token::RParen)
        .then_some(close + 1)
}

/// Takes the table name (`a`, `s.a`, quoted parts) off the end of `out`.
fn take_table_name(out: &mut Vec<Token>) -> SqlResult<Vec<Token>> {
    while out.last().is_some_and(is_space) {
        out.pop();
    }
    let mut name = Vec::new();
    while let Some(Token::Word(_)) = out.last() {
        name.push(out.pop().expect("last"));
        if out.last() == Some(&Token::Period) {
            name.push(out.pop().expect("last"));
        } else {
            break;
        }
    }
    name.reverse();
    let before = out.iter().rev().find(|t| !is_space(t));
    let in_from =
        before.is_some_and(|t| *t == Token::Comma || is_word(t, "from") || is_word(t, "join"));
    if name.is_empty() || !in_from {
        return Err(SqlError::syntax(
            "FOR SYSTEM_TIME AS OF must follow a table name in FROM or JOIN",
        ));
    }
    Ok(name)
}

/// Whether an alias follows at `i` (`AS a`, or a plain or quoted name).
fn alias_follows(tokens: &[Token], i: usize) -> bool {
    use datafusion::sql::sqlparser::keywords::Keyword;
    significant(tokens, i).is_some_and(|k| match &tokens[k] {
        Token::Word(w) => {
            w.quote_style.is_some() || w.keyword == Keyword::AS || w.keyword == Keyword::NoKeyword
        }
        _ => false,
    })
}

/// Rewrites every `t FOR SYSTEM_TIME AS OF PROCTIME()` into the marked derived table.
pub fn normalize(sql: &str) -> SqlResult<String> {
    if !sql.to_ascii_lowercase().contains("system_time") {
        return Ok(sql.to_string());
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(sql.to_string());
    };
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len() + 16);
    let mut i = 0;
    let mut changed = false;
    while i < tokens.len() {
        let Some(after_of) = clause_at(&tokens, i).filter(|_| is_word(&tokens[i], "for")) else {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        };
        let after = proctime_at(&tokens, after_of).ok_or_else(|| {
            SqlError::unsupported(
                "FOR SYSTEM_TIME AS OF is supported with PROCTIME() only (a lookup join at \
                 processing time); event-time temporal joins are not supported yet",
            )
        })?;
        let name = take_table_name(&mut out)?;
        let template = format!("(SELECT * FROM __t WHERE {MARKER}())");
        let wrapped = Tokenizer::new(&PostgreSqlDialect {}, &template)
            .tokenize()
            .map_err(|e| SqlError::syntax(e.to_string()))?;
        for t in wrapped {
            if is_word(&t, "__t") {
                out.extend(name.iter().cloned());
            } else {
                out.push(t);
            }
        }
        if !alias_follows(&tokens, after) {
            out.push(Token::Whitespace(
                datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
            ));
            out.push(Token::make_keyword("AS"));
            out.push(Token::Whitespace(
                datafusion::sql::sqlparser::tokenizer::Whitespace::Space,
            ));
            out.push(name.last().expect("a name").clone());
        }
        i = after;
        changed = true;
    }
    if !changed {
        return Ok(sql.to_string());
    }
    Ok(out.iter().map(Token::to_string).collect())
}

fn is_marker(e: &Expr) -> bool {
    matches!(e, Expr::ScalarFunction(f) if f.name() == MARKER)
}

/// A filter predicate without the mark, and whether it had one.
pub(crate) fn strip_marker(predicate: &Expr) -> (Option<Expr>, bool) {
    let parts = split_conjunction(predicate);
    let marked = parts.iter().any(|e| is_marker(e));
    let rest: Vec<Expr> = parts
        .into_iter()
        .filter(|e| !is_marker(e))
        .cloned()
        .collect();
    (conjunction(rest), marked)
}

/// Whether `plan` is a marked table, maybe filtered, projected or aliased: a join's
/// lookup side.
pub(crate) fn reads_lookup_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Filter(f) => strip_marker(&f.predicate).1 || reads_lookup_table(&f.input),
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.inputs().iter().any(|i| reads_lookup_table(i))
        }
        LogicalPlan::TableScan(scan) => scan.filters.iter().any(|f| strip_marker(f).1),
        _ => false,
    }
}

/// How many marks `plan` holds anywhere (each must be a lookup join's right side).
pub(crate) fn marks(plan: &LogicalPlan) -> usize {
    let here = match plan {
        LogicalPlan::Filter(f) => usize::from(strip_marker(&f.predicate).1),
        LogicalPlan::TableScan(scan) => scan.filters.iter().filter(|f| strip_marker(f).1).count(),
        _ => 0,
    };
    here + plan.inputs().iter().map(|i| marks(i)).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clause_becomes_a_marked_derived_table() {
        let got = normalize(
            "SELECT B.auction, S.value FROM bid B JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() AS S ON mod(B.auction, 10000) = S.key",
        )
        .unwrap();
        assert_eq!(
            got,
            "SELECT B.auction, S.value FROM bid B JOIN (SELECT * FROM side_input WHERE __weir_lookup_table()) AS S ON mod(B.auction, 10000) = S.key"
        );
        // No alias: the table's own (last) name; a bare alias is kept.
        let got = normalize(
            "SELECT * FROM bid JOIN public.t for system_time as of proctime() ON bid.a = t.k",
        )
        .unwrap();
        assert!(
            got.contains("JOIN (SELECT * FROM public.t WHERE __weir_lookup_table()) AS t ON"),
            "{got}"
        );
        let got =
            normalize("SELECT * FROM bid, t FOR SYSTEM_TIME AS OF PROCTIME() s WHERE bid.a = s.k")
                .unwrap();
        assert!(
            got.contains(", (SELECT * FROM t WHERE __weir_lookup_table()) s WHERE"),
            "{got}"
        );
        // Text without the clause, or with it inside a string, is left alone.
        let plain = "SELECT 'FOR SYSTEM_TIME AS OF PROCTIME()' FROM t";
        assert_eq!(normalize(plain).unwrap(), plain);
    }

    #[test]
    fn event_time_and_misplaced_clauses_are_refused() {
        let e = normalize("SELECT * FROM b JOIN t FOR SYSTEM_TIME AS OF b.ts ON b.k = t.k")
            .unwrap_err();
        assert_eq!(e.code, crate::sqlstate::FEATURE_NOT_SUPPORTED, "{e:?}");
        let e = normalize("SELECT 1 FOR SYSTEM_TIME AS OF PROCTIME()").unwrap_err();
        assert_eq!(e.code, crate::sqlstate::SYNTAX_ERROR, "{e:?}");
    }
}
