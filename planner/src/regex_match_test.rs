//! `regexp_match(s, 'p')[k] IS NOT NULL` as `s IS NOT NULL AND regexp_like(s, 'p')`,
//! when that is the same test: Nexmark q21's filter asks this of every bid.
//!
//! `regexp_match` finds the leftmost match and lists its capture groups, leaving out
//! the groups that took no part in it (Arrow's kernel), or the whole match when the
//! pattern has no groups. When every group of `p` takes part in every match
//! (`regex_syntax`'s static capture count), the list of a match always has
//! `max(groups, 1)` elements, so its `k`-th exists exactly when there is a match, for
//! `1 <= k <= max(groups, 1)`. `regexp_like` answers that from the matching engine alone,
//! without resolving the groups (a third of the work: no capture pass). The `s IS NOT
//! NULL` keeps the answer for a NULL `s` false, not NULL. Anything else (flags, a
//! pattern that is not a literal, a group that may not take part, another `k`) is left
//! as written.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr;

/// `expr` with every such test rewritten.
pub(crate) fn rewrite_match_tests(expr: &Expr) -> Expr {
    expr.clone()
        .transform_up(|e| {
            Ok(match as_match_test(&e) {
                Some(test) => Transformed::yes(test),
                None => Transformed::no(e),
            })
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| expr.clone())
}

fn as_match_test(e: &Expr) -> Option<Expr> {
    let Expr::IsNotNull(inner) = e else {
        return None;
    };
    let Expr::ScalarFunction(get) = inner.as_ref() else {
        return None;
    };
    let [list, Expr::Literal(k, _)] = get.args.as_slice() else {
        return None;
    };
    if get.func.name() != "array_element" {
        return None;
    }
    let k = match k {
        ScalarValue::Int64(Some(k)) => *k,
        ScalarValue::Int32(Some(k)) => *k as i64,
        _ => return None,
    };
    let Expr::ScalarFunction(m) = list else {
        return None;
    };
    let [s, pattern @ Expr::Literal(p, _)] = m.args.as_slice() else {
        return None;
    };
    if m.func.name() != "regexp_match" {
        return None;
    }
    let p = match p {
        ScalarValue::Utf8(Some(p))
        | ScalarValue::LargeUtf8(Some(p))
        | ScalarValue::Utf8View(Some(p)) => p,
        _ => return None,
    };
    let listed = groups_in_every_match(p)?.max(1);
    if k < 1 || k as usize > listed {
        return None;
    }
    let like = datafusion::functions::regex::regexp_like().call(vec![s.clone(), pattern.clone()]);
    Some(s.clone().is_not_null().and(like))
}

/// The number of capture groups of `pattern` when every one of them takes part in
/// every match; `None` when some may not (or the pattern does not parse).
fn groups_in_every_match(pattern: &str) -> Option<usize> {
    let hir = regex_syntax::parse(pattern).ok()?;
    let props = hir.properties();
    let groups = props.explicit_captures_len();
    (props.static_explicit_captures_len() == Some(groups)).then_some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    fn test_of(pattern: &str, k: i64) -> Expr {
        let m = datafusion::functions::regex::regexp_match().call(vec![col("url"), lit(pattern)]);
        datafusion::functions_nested::expr_fn::array_element(m, lit(k)).is_not_null()
    }

    #[test]
    fn a_group_in_every_match_becomes_a_match_test() {
        let e = test_of("(&|^)channel_id=([^&]*)", 2);
        let want = col("url").is_not_null().and(
            datafusion::functions::regex::regexp_like()
                .call(vec![col("url"), lit("(&|^)channel_id=([^&]*)")]),
        );
        assert_eq!(rewrite_match_tests(&e), want);
        // No groups: the list holds the whole match.
        assert_ne!(rewrite_match_tests(&test_of("abc", 1)), test_of("abc", 1));
    }

    #[test]
    fn anything_else_is_left_as_written() {
        for (pattern, k) in [
            // Group 2 may take no part in a match: the list is shorter then.
            ("(a)|(b)", 2),
            ("(a)(b)?", 2),
            // Past the groups, or before the first.
            ("(a)(b)", 3),
            ("(a)", 0),
            // Does not parse.
            ("(", 1),
        ] {
            let e = test_of(pattern, k);
            assert_eq!(rewrite_match_tests(&e), e, "{pattern} [{k}]");
        }
    }
}
