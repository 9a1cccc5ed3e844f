//! Unique names for select-list items, so that DataFusion plans what Postgres accepts.
//!
//! DataFusion names an unaliased item after its text and refuses two items of one
//! name ("Projections require unique expression names"): `SELECT a, a FROM t`,
//! `INSERT INTO t SELECT x, x FROM ...`, or two scalar subqueries (all named
//! `(<subquery>)`). Postgres accepts them and names both columns the same. So the
//! second and later items of one Postgres name get an internal alias `name#dup<n>`
//! ([`DUPLICATE_MARK`]), which the output names as Postgres does (see `naming`).
//! Views keep Postgres's rule: two columns of one name are refused (42701).

use crate::naming::DUPLICATE_MARK;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, Visit, VisitMut, Visitor, VisitorMut,
};
use std::collections::HashSet;
use std::ops::ControlFlow;

fn has_subquery(e: &Expr) -> bool {
    struct Find(bool);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
            self.0 = true;
            ControlFlow::Break(())
        }
    }
    let mut f = Find(false);
    let _ = e.visit(&mut f);
    f.0
}

/// The name Postgres gives an unaliased select item.
fn pg_item_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.to_ascii_lowercase(),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(|i| i.value.to_ascii_lowercase())
            .unwrap_or_default(),
        Expr::Function(f) => f.name.to_string().to_ascii_lowercase(),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => pg_item_name(expr),
        _ => "?column?".to_string(),
    }
}

/// The text DataFusion would name the item by (equal texts collide there).
fn df_item_text(e: &Expr) -> String {
    if has_subquery(e) {
        // Every subquery is `(<subquery>)` to DataFusion.
        return "(<subquery>)".to_string();
    }
    e.to_string().to_ascii_lowercase()
}

pub fn alias_duplicate_items(stmt: &mut Statement) {
    struct Alias;
    impl VisitorMut for Alias {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = q.body.as_mut() {
                alias_items(&mut select.projection);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Alias);
}

/// Gives the second and later items of one DataFusion name an alias of their own.
/// Items whose texts differ but resolve to one column (`a`, `t.a`) collide in
/// DataFusion too, so a repeated Postgres name counts as well.
fn alias_items(items: &mut [SelectItem]) {
    let mut seen_text = HashSet::new();
    let mut seen_name = HashSet::new();
    for (n, item) in items.iter_mut().enumerate() {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let text = df_item_text(e);
                let name = pg_item_name(e);
                let fresh_text = seen_text.insert(text);
                let fresh_name = seen_name.insert(name.clone());
                if !fresh_text || (!fresh_name && name != "?column?") {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias: Ident::with_quote('"', format!("{name}{DUPLICATE_MARK}{}", n + 1)),
                    };
                }
            }
            SelectItem::ExprWithAlias { alias, .. } => {
                seen_name.insert(alias.value.to_ascii_lowercase());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        alias_duplicate_items(&mut s);
        s.to_string()
    }

    #[test]
    fn two_subqueries_get_names_one_keeps_its_own() {
        let two = rewritten("SELECT (SELECT 1), a, (SELECT 2) + 1 FROM t");
        assert!(two.contains("AS \"?column?#dup3\""), "{two}");
        assert!(!two.contains("#dup1"), "{two}");
        let one = "SELECT (SELECT 1), a FROM t";
        assert_eq!(rewritten(one), one);
    }

    #[test]
    fn repeated_columns_get_internal_aliases() {
        assert_eq!(
            rewritten("SELECT a, a, t.a, b FROM t"),
            "SELECT a, a AS \"a#dup2\", t.a AS \"a#dup3\", b FROM t"
        );
        assert_eq!(
            rewritten("INSERT INTO t SELECT x, x FROM s"),
            "INSERT INTO t SELECT x, x AS \"x#dup2\" FROM s"
        );
        // Distinct expressions without a name of their own stay as they are.
        let distinct = "SELECT a + 1, a + 2 FROM t";
        assert_eq!(rewritten(distinct), distinct);
    }
}
