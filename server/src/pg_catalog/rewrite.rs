//! Postgres catalog syntax DataFusion does not have, rewritten into what it has.
//!
//! Most of it works on the parsed statement ([`rewrite_statement`]):
//! - unqualified catalog names (`FROM pg_type`) get `pg_catalog.` — Postgres searches
//!   `pg_catalog` before `public`;
//! - `pg_catalog.f(...)` calls lose the schema (the functions are registered
//!   unqualified), `OPERATOR(pg_catalog.~)` becomes `~`, `COLLATE pg_catalog.default`
//!   is dropped;
//! - casts to `regclass`, `regtype`, `regnamespace` become calls of functions of those
//!   names (a name is looked up, an oid passes through), and a further cast of one to
//!   `text` becomes `regclass_name(...)` etc.; `regproc` values are function names
//!   (text); `::oid` is an unsigned integer and `::name` is text;
//! - `information_schema._pg_expandarray(a)` (pgjdbc's key listing) becomes `unnest`
//!   over a list of `(x, n)` structs;
//! - `array_upper(current_schemas(b), 1)` is folded to its constant (the search path is
//!   fixed), so it can be an argument of the `generate_series` table function.
//!
//! - psql's `\d` follow-up queries about objects Weir does not have become a query of
//!   no rows, and their column-default and collation subqueries (correlated in a way
//!   DataFusion cannot plan) become NULL.

use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, visit_relations, visit_relations_mut, AccessExpr,
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, GroupByExpr, Ident, ObjectName, ObjectNamePart, Query,
    SelectItem, SetExpr, Statement, TableFactor, Value,
};
use std::ops::ControlFlow;
use std::sync::LazyLock;

/// Names of the catalog's tables and views that resolve unqualified.
pub fn is_catalog_table(name: &str) -> bool {
    super::tables::PG_CATALOG.iter().any(|s| s.name == name)
}

fn ident_value(name: &ObjectName, i: usize) -> Option<String> {
    let ident = name.0.get(i)?.as_ident()?;
    Some(match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    })
}

/// Rewrites `stmt` in place (see the module doc); returns whether it reads the
/// catalog (`pg_catalog` or `information_schema`).
pub fn rewrite_statement(stmt: &mut Statement) -> bool {
    let mut reads_catalog = false;
    if reads_absent_catalog(stmt) {
        *stmt = no_rows();
        return true;
    }
    let _ = visit_relations_mut(stmt, |name| {
        match name.0.len() {
            1 if ident_value(name, 0).is_some_and(|n| is_catalog_table(&n)) => {
                name.0
                    .insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
                reads_catalog = true;
            }
            2 => {
                let schema = ident_value(name, 0).unwrap_or_default();
                reads_catalog |= schema == "pg_catalog" || schema == "information_schema";
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions_mut(stmt, |e| {
        rewrite_expr(e);
        ControlFlow::<()>::Continue(())
    });
    reads_catalog
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The single plain argument of a call of `name` (unqualified), if `e` is one.
fn only_arg<'a>(e: &'a Expr, name: &str) -> Option<&'a Expr> {
    let Expr::Function(f) = e else { return None };
    if f.name.0.len() != 1 || ident_value(&f.name, 0)? != name {
        return None;
    }
    match &f.args {
        FunctionArguments::List(l) => match l.args.as_slice() {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(a))] => Some(a),
            _ => None,
        },
        _ => None,
    }
}

/// The last part of a custom type's name (`pg_catalog.regclass` → `regclass`).
fn custom_type(t: &DataType) -> Option<String> {
    match t {
        DataType::Regclass => Some("regclass".into()),
        DataType::Custom(name, _) => ident_value(name, name.0.len() - 1),
        _ => None,
    }
}

/// Functions that read the catalog snapshot (registered with the catalog tables).
const CATALOG_FUNCTIONS: &[&str] = &[
    "current_setting",
    "pg_get_viewdef",
    "pg_get_indexdef",
    "pg_get_constraintdef",
    "to_regclass",
];

/// Whether `stmt` needs the catalog: it reads a catalog table, calls a function that
/// reads the catalog, or casts to `regclass`.
pub fn needs_catalog(stmt: &Statement) -> bool {
    let mut needed = false;
    let _ = visit_relations(stmt, |name| {
        needed |= match name.0.len() {
            1 => ident_value(name, 0).is_some_and(|n| is_catalog_table(&n)),
            2 => matches!(
                ident_value(name, 0).as_deref(),
                Some("pg_catalog" | "information_schema")
            ),
            _ => false,
        };
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions(stmt, |e| {
        needed |= match e {
            Expr::Function(f) => ident_value(&f.name, f.name.0.len() - 1)
                .is_some_and(|n| CATALOG_FUNCTIONS.contains(&n.as_str())),
            Expr::Cast { data_type, .. } => custom_type(data_type).is_some_and(|t| t == "regclass"),
            _ => false,
        };
        ControlFlow::<()>::Continue(())
    });
    needed
}

fn is_text_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Text | DataType::Varchar(_) | DataType::CharacterVarying(_) | DataType::String(_)
    ) || custom_type(t).is_some_and(|n| n == "text")
}

fn rewrite_expr(e: &mut Expr) {
    match e {
        Expr::Cast {
            expr, data_type, ..
        } => {
            if let Some(rewritten) = rewrite_cast(expr, data_type) {
                *e = rewritten;
            }
        }
        Expr::Function(f) => {
            let qualified_in = ident_value(&f.name, 0);
            if f.name.0.len() == 2 && qualified_in.as_deref() == Some("pg_catalog") {
                f.name.0.remove(0);
            } else if f.name.0.len() == 2
                && qualified_in.as_deref() == Some("information_schema")
                && ident_value(&f.name, 1).as_deref() == Some("_pg_expandarray")
            {
                f.name = ObjectName::from(vec![Ident::new("_pg_expandarray")]);
                *e = call("unnest", vec![e.clone()]);
                return;
            }
            if let Some(n) = fold_array_upper(e) {
                *e = Expr::Value(Value::Number(n.to_string(), false).into());
            }
        }
        Expr::BinaryOp { op, .. } => {
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op {
                if let Some(plain) = plain_operator(parts) {
                    *op = plain;
                }
            }
        }
        // `(composite).field` (pgjdbc's `(result.KEYS).x`): DataFusion takes a field
        // name after a non-column expression only quoted.
        Expr::CompoundFieldAccess { root, access_chain }
            if !matches!(**root, Expr::Identifier(_)) =>
        {
            for access in access_chain.iter_mut() {
                if let AccessExpr::Dot(Expr::Identifier(field)) = access {
                    let name = field.value.to_ascii_lowercase();
                    *access = AccessExpr::Dot(Expr::Value(Value::SingleQuotedString(name).into()));
                }
            }
        }
        Expr::Subquery(q) if is_default_or_collation_lookup(q) => *e = null_text(),
        Expr::Subquery(q) => aggregate_catalog_lookup(q),
        Expr::Collate { expr, collation } => {
            let name = ident_value(collation, collation.0.len() - 1).unwrap_or_default();
            if matches!(name.as_str(), "default" | "c" | "C" | "posix") {
                *e = (**expr).clone();
            }
        }
        _ => {}
    }
}

/// A scalar subquery looking one catalog object up by its oid (pgjdbc's
/// `(SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid)`):
/// DataFusion runs a correlated scalar subquery only over an aggregate, so the
/// selected value is wrapped in `max` (one row or none, as oids are unique).
fn aggregate_catalog_lookup(q: &mut Query) {
    const AGGREGATES: &[&str] = &[
        "count",
        "sum",
        "min",
        "max",
        "avg",
        "array_agg",
        "string_agg",
        "bool_and",
        "bool_or",
    ];
    let SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    let over_catalog = select.from.iter().all(|t| match &t.relation {
        TableFactor::Table { name, .. } => ident_value(name, 0).as_deref() == Some("pg_catalog"),
        _ => false,
    });
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if !over_catalog || select.from.is_empty() || grouped || select.projection.len() != 1 {
        return;
    }
    let expr = match &mut select.projection[0] {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return,
    };
    let already = matches!(&*expr, Expr::Function(f)
        if ident_value(&f.name, 0).is_some_and(|n| AGGREGATES.contains(&n.as_str())));
    if !already {
        *expr = call("max", vec![expr.clone()]);
    }
}

/// The replacement of `expr::data_type` when it is a Postgres catalog type.
fn rewrite_cast(expr: &Expr, data_type: &DataType) -> Option<Expr> {
    if is_text_type(data_type) {
        // `x::regtype::text`: the inner cast is already `regtype(x)`.
        for name in ["regclass", "regtype", "regnamespace"] {
            if let Some(arg) = only_arg(expr, name) {
                return Some(call(&format!("{name}_name"), vec![arg.clone()]));
            }
        }
        return None;
    }
    let ty = custom_type(data_type)?;
    Some(match ty.as_str() {
        "regclass" | "regtype" | "regnamespace" => call(&ty, vec![expr.clone()]),
        // A function's name: what `typinput` and friends hold.
        "regproc" | "regprocedure" => match expr {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) => Expr::Value(
                    Value::SingleQuotedString(
                        s.strip_prefix("pg_catalog.").unwrap_or(s).to_string(),
                    )
                    .into(),
                ),
                _ => expr.clone(),
            },
            _ => expr.clone(),
        },
        "oid" => Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(expr.clone()),
            data_type: DataType::IntUnsigned(None),
            array: false,
            format: None,
        },
        "name" => Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(expr.clone()),
            data_type: DataType::Text,
            array: false,
            format: None,
        },
        _ => return None,
    })
}

/// `array_upper(current_schemas(<bool literal>), 1)`: 2 with the implicit
/// `pg_catalog`, else 1 (`public`).
fn fold_array_upper(e: &Expr) -> Option<usize> {
    let Expr::Function(f) = e else { return None };
    if ident_value(&f.name, 0)? != "array_upper" || f.name.0.len() != 1 {
        return None;
    }
    let FunctionArguments::List(l) = &f.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(schemas)), FunctionArg::Unnamed(FunctionArgExpr::Expr(dim))] =
        l.args.as_slice()
    else {
        return None;
    };
    let is_one =
        matches!(dim, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "1"));
    let implicit = match only_arg(schemas, "current_schemas")? {
        Expr::Value(v) => match v.value {
            Value::Boolean(b) => b,
            _ => return None,
        },
        _ => return None,
    };
    is_one.then_some(if implicit { 2 } else { 1 })
}

fn plain_operator(parts: &[String]) -> Option<BinaryOperator> {
    let op = match parts {
        [schema, op] if schema == "pg_catalog" => op.as_str(),
        [op] => op.as_str(),
        _ => return None,
    };
    Some(match op {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        "~~" => BinaryOperator::PGLikeMatch,
        "!~~" => BinaryOperator::PGNotLikeMatch,
        "||" => BinaryOperator::StringConcat,
        _ => return None,
    })
}

/// psql's `\d` follow-up queries about objects Weir does not have (policies,
/// extended statistics, publications, inheritance, triggers, rules) use syntax
/// DataFusion cannot plan (`array(subquery)`, `= any(...)` over subqueries); their
/// honest answer is "none".
const ABSENT: &[&str] = &[
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
];

/// Whether `stmt` reads one of the [`ABSENT`] catalog tables.
fn reads_absent_catalog(stmt: &Statement) -> bool {
    let mut absent = false;
    let _ = visit_relations(stmt, |name| {
        let in_catalog = match name.0.len() {
            1 => true,
            2 => ident_value(name, 0).as_deref() == Some("pg_catalog"),
            _ => false,
        };
        absent |= in_catalog
            && ident_value(name, name.0.len() - 1).is_some_and(|t| ABSENT.contains(&t.as_str()));
        ControlFlow::<()>::Continue(())
    });
    absent
}

/// `SELECT CAST(NULL AS TEXT) AS none WHERE false`: no rows.
fn no_rows() -> Statement {
    use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
    static NONE: LazyLock<Statement> = LazyLock::new(|| {
        Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT CAST(NULL AS TEXT) AS none WHERE false",
        )
        .expect("a valid query")
        .remove(0)
    });
    NONE.clone()
}

fn null_text() -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Value(Value::Null.into())),
        data_type: DataType::Text,
        array: false,
        format: None,
    }
}

/// `\d name` asks for column defaults (`(SELECT pg_get_expr(d.adbin, d.adrelid) ...)`)
/// and collations (`(SELECT c.collname FROM pg_collation c ...)`) through correlated
/// scalar subqueries DataFusion cannot plan; Weir has neither, so both are NULL.
fn is_default_or_collation_lookup(q: &Query) -> bool {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    let Some(SelectItem::UnnamedExpr(item)) = select.projection.first() else {
        return false;
    };
    let compound = |e: &Expr, want: [&str; 2]| match e {
        Expr::CompoundIdentifier(parts) => {
            parts.len() == 2 && parts.iter().zip(want).all(|(p, w)| p.value == w)
        }
        _ => false,
    };
    let default = match item {
        Expr::Function(f) => {
            ident_value(&f.name, f.name.0.len() - 1).as_deref() == Some("pg_get_expr")
                && matches!(&f.args, FunctionArguments::List(l) if l.args.first().is_some_and(|a| {
                    matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) if compound(e, ["d", "adbin"]))
                }))
        }
        _ => false,
    };
    let collation = compound(item, ["c", "collname"])
        && select.from.iter().any(|t| {
            matches!(&t.relation, TableFactor::Table { name, .. }
                if ident_value(name, name.0.len() - 1).as_deref() == Some("pg_collation"))
        });
    default || collation
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> (String, bool) {
        let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        let catalog = rewrite_statement(&mut stmt);
        (stmt.to_string(), catalog)
    }

    #[test]
    fn unqualified_catalog_names_resolve_in_pg_catalog() {
        assert_eq!(
            rewritten("SELECT typname FROM pg_type t JOIN items i ON true"),
            (
                "SELECT typname FROM pg_catalog.pg_type t JOIN items i ON true".into(),
                true
            )
        );
        assert!(!rewritten("SELECT * FROM items").1);
        assert!(rewritten("SELECT * FROM information_schema.tables").1);
    }

    #[test]
    fn psql_operators_and_function_prefixes() {
        let (s, _) = rewritten(
            "SELECT 1 FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default AND pg_catalog.pg_table_is_visible(c.oid)",
        );
        assert_eq!(
            s,
            "SELECT 1 FROM pg_catalog.pg_class c WHERE c.relname ~ '^(t)$' AND pg_table_is_visible(c.oid)"
        );
    }

    #[test]
    fn reg_casts_become_lookups() {
        let (s, _) = rewritten(
            "SELECT 'pg_class'::regclass, oid::regtype::text, typinput = 'pg_catalog.array_in'::regproc, 1::oid FROM pg_type",
        );
        assert_eq!(
            s,
            "SELECT regclass('pg_class'), regtype_name(oid), typinput = 'array_in', CAST(1 AS INT UNSIGNED) FROM pg_catalog.pg_type"
        );
    }

    #[test]
    fn search_path_length_is_folded() {
        let (s, _) = rewritten(
            "SELECT * FROM generate_series(1, array_upper(current_schemas(false), 1)) AS s(r)",
        );
        assert_eq!(s, "SELECT * FROM generate_series(1, 1) AS s (r)");
    }

    #[test]
    fn absent_objects_have_empty_answers() {
        let (s, catalog) =
            rewritten("SELECT pol.polname FROM pg_policy pol WHERE pol.polrelid = 1");
        assert_eq!(s, "SELECT CAST(NULL AS TEXT) AS none WHERE false");
        assert!(catalog);
        assert_eq!(rewritten("SELECT 1").0, "SELECT 1");
    }

    #[test]
    fn psql_default_and_collation_subqueries_are_null() {
        let (s, _) = rewritten(
            "SELECT a.attname, (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) \
             FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum \
             AND a.atthasdef), (SELECT c.collname FROM pg_catalog.pg_collation c, \
             pg_catalog.pg_type t WHERE c.oid = a.attcollation AND t.oid = a.atttypid \
             AND a.attcollation <> t.typcollation) AS attcollation \
             FROM pg_catalog.pg_attribute a",
        );
        assert_eq!(
            s,
            "SELECT a.attname, CAST(NULL AS TEXT), CAST(NULL AS TEXT) AS attcollation \
             FROM pg_catalog.pg_attribute a"
        );
    }
}
