//! Unique names for select-list items that hold subqueries.
//!
//! DataFusion names every scalar subquery `(<subquery>)`, so `SELECT (SELECT count(*)
//! ...), (SELECT max(b) ...)` has two columns of one name, which its planner refuses;
//! Postgres accepts it (both columns are `?column?`-style names). When a select list has
//! more than one unaliased item with a subquery in it, each gets an alias of its own
//! (`?column?#n`), which the output names as Postgres does (`?column?`, see `naming`).

use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Query, SelectItem, SetExpr, Statement, Visit, VisitMut, Visitor, VisitorMut,
};
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

pub fn alias_subquery_items(stmt: &mut Statement) {
    struct Alias;
    impl VisitorMut for Alias {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            let SetExpr::Select(select) = q.body.as_mut() else {
                return ControlFlow::Continue(());
            };
            let unnamed = select
                .projection
                .iter()
                .filter(|i| matches!(i, SelectItem::UnnamedExpr(e) if has_subquery(e)))
                .count();
            if unnamed < 2 {
                return ControlFlow::Continue(());
            }
            for (n, item) in select.projection.iter_mut().enumerate() {
                if let SelectItem::UnnamedExpr(e) = item {
                    if has_subquery(e) {
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::with_quote('"', format!("?column?#{}", n + 1)),
                        };
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Alias);
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
        alias_subquery_items(&mut s);
        s.to_string()
    }

    #[test]
    fn two_subqueries_get_names_one_keeps_its_own() {
        let two = rewritten("SELECT (SELECT 1), a, (SELECT 2) + 1 FROM t");
        assert!(
            two.contains("AS \"?column?#1\"") && two.contains("AS \"?column?#3\""),
            "{two}"
        );
        let one = "SELECT (SELECT 1), a FROM t";
        assert_eq!(rewritten(one), one);
    }
}
