//! Scalar SQL functions: `CREATE [OR REPLACE] FUNCTION f(a int, b text) RETURNS int
//! LANGUAGE SQL AS $$ SELECT ... $$` (or `RETURN expr`), and `DROP FUNCTION`.
//!
//! As Postgres inlines simple SQL functions, Weir replaces every call by the body
//! before planning: `f(x, y)` becomes `CAST(<body> AS int)` with each parameter
//! (by name or as `$n`) replaced by `CAST(arg AS its type)`. So a function works in
//! SELECTs and in materialized views alike, where it becomes part of the dataflow. A
//! body with a FROM clause is inlined as a scalar subquery.
//!
//! Functions are matched by name and number of arguments (overloads by type are not
//! supported). A name of a built-in function is refused (Postgres would resolve the
//! built-in first). Replacing or dropping a function a materialized view calls is
//! refused (2BP01): the view is planned again from its SQL at restart, and its state
//! must keep meaning what it meant. Other languages and set-returning functions are
//! refused with 0A000.

use crate::catalog::{FunctionEntry, RelationKind};
use crate::database::Database;
use crate::output::Output;
use crate::query;
use datafusion::sql::sqlparser::ast::{
    CastKind, CreateFunctionBody, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    FunctionReturnType, Ident, ObjectName, SetExpr, Statement, Value, Visit, VisitMut, Visitor,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;
use weir_planner::{sqlstate, SqlError, SqlResult, WeirStatement};

/// Calls nested deeper than this are a recursive function.
const MAX_DEPTH: usize = 32;

/// The function's name as Postgres resolves it (`public.f` is `f`).
fn function_name(name: &ObjectName) -> Option<String> {
    let parts = &name.0;
    if parts.len() == 2 {
        let schema = parts[0].as_ident()?.value.to_ascii_lowercase();
        if schema != "public" {
            return None;
        }
    } else if parts.len() != 1 {
        return None;
    }
    let ident = parts.last()?.as_ident()?;
    Some(match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    })
}

/// The positional arguments of a call (None when there are named or special ones).
fn call_args(f: &datafusion::sql::sqlparser::ast::Function) -> Option<Vec<Expr>> {
    match &f.args {
        FunctionArguments::None => Some(vec![]),
        FunctionArguments::List(list)
            if list.duplicate_treatment.is_none() && list.clauses.is_empty() =>
        {
            list.args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                    _ => None,
                })
                .collect()
        }
        _ => None,
    }
}

fn parse_type(text: &str) -> SqlResult<datafusion::sql::sqlparser::ast::DataType> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_data_type())
        .map_err(|e| SqlError::syntax(format!("invalid type {text}: {e}")))
}

fn cast(expr: Expr, type_text: &str) -> SqlResult<Expr> {
    Ok(Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Nested(Box::new(expr))),
        data_type: parse_type(type_text)?,
        array: false,
        format: None,
    })
}

/// The body as an expression: `SELECT expr` without FROM is the expression itself,
/// any other query a scalar subquery.
fn body_expr(body: &str) -> SqlResult<Expr> {
    let bad = |why: String| SqlError::new(sqlstate::INVALID_FUNCTION_DEFINITION, why);
    let trimmed = body.trim().trim_end_matches(';');
    if let Some(ret) = trimmed
        .get(..7)
        .filter(|p| p.eq_ignore_ascii_case("return "))
    {
        return Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&trimmed[ret.len()..])
            .and_then(|mut p| p.parse_expr())
            .map_err(|e| bad(format!("invalid function body: {e}")));
    }
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, trimmed)
        .map_err(|e| bad(format!("invalid function body: {e}")))?;
    if stmts.len() != 1 {
        return Err(SqlError::unsupported(
            "a SQL function body must be one SELECT (multi-statement bodies are not supported)",
        ));
    }
    let Statement::Query(q) = stmts.remove(0) else {
        return Err(SqlError::unsupported(
            "a SQL function body must be a SELECT returning one value",
        ));
    };
    if let SetExpr::Select(s) = q.body.as_ref() {
        let plain = q.with.is_none() && q.order_by.is_none() && q.limit_clause.is_none();
        if plain && s.from.is_empty() && s.selection.is_none() && s.projection.len() == 1 {
            if let datafusion::sql::sqlparser::ast::SelectItem::UnnamedExpr(e)
            | datafusion::sql::sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } =
                &s.projection[0]
            {
                return Ok(e.clone());
            }
        }
    }
    Ok(Expr::Subquery(q))
}

/// The body of `f` with its parameters replaced by `args`.
fn instantiate(f: &FunctionEntry, args: &[Expr]) -> SqlResult<Expr> {
    let mut body = body_expr(&f.body)?;
    let casted: Vec<Expr> = args
        .iter()
        .zip(&f.arg_types)
        .map(|(a, t)| cast(a.clone(), t))
        .collect::<SqlResult<_>>()?;
    struct Params<'a> {
        f: &'a FunctionEntry,
        args: &'a [Expr],
    }
    impl Params<'_> {
        fn by_name(&self, name: &Ident) -> Option<Expr> {
            let n = name.value.to_ascii_lowercase();
            let i = self
                .f
                .arg_names
                .iter()
                .position(|a| a.as_deref() == Some(&n))?;
            Some(self.args[i].clone())
        }
    }
    impl VisitorMut for Params<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            let replacement = match e {
                Expr::Identifier(i) => self.by_name(i),
                // `f.a`: a parameter qualified by the function's name.
                Expr::CompoundIdentifier(parts)
                    if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(&self.f.name) =>
                {
                    self.by_name(&parts[1])
                }
                Expr::Value(v) => match &v.value {
                    Value::Placeholder(p) => p
                        .strip_prefix('$')
                        .and_then(|n| n.parse::<usize>().ok())
                        .filter(|n| *n >= 1 && *n <= self.args.len())
                        .map(|n| self.args[n - 1].clone()),
                    _ => None,
                },
                _ => None,
            };
            if let Some(r) = replacement {
                *e = r;
            }
            ControlFlow::Continue(())
        }
    }
    let _ = VisitMut::visit(&mut body, &mut Params { f, args: &casted });
    cast(body, &f.return_type)
}

/// Replaces every call of a SQL function in `stmt` by its body.
pub fn inline_calls(db: &Database, stmt: &mut Statement) -> SqlResult<()> {
    let functions = db.catalog.read().functions.clone();
    if functions.is_empty() {
        return Ok(());
    }
    struct Inline<'a> {
        functions: &'a [FunctionEntry],
        changed: bool,
        error: Option<SqlError>,
    }
    impl VisitorMut for Inline<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            let Expr::Function(call) = e else {
                return ControlFlow::Continue(());
            };
            if call.over.is_some() || call.filter.is_some() {
                return ControlFlow::Continue(());
            }
            let (Some(name), Some(args)) = (function_name(&call.name), call_args(call)) else {
                return ControlFlow::Continue(());
            };
            let Some(f) = self
                .functions
                .iter()
                .find(|f| f.name == name && f.arg_types.len() == args.len())
            else {
                return ControlFlow::Continue(());
            };
            match instantiate(f, &args) {
                Ok(body) => {
                    *e = body;
                    self.changed = true;
                    ControlFlow::Continue(())
                }
                Err(err) => {
                    self.error = Some(err);
                    ControlFlow::Break(())
                }
            }
        }
    }
    name_call_items(stmt, &functions);
    for _ in 0..MAX_DEPTH {
        let mut pass = Inline {
            functions: &functions,
            changed: false,
            error: None,
        };
        let _ = VisitMut::visit(stmt, &mut pass);
        if let Some(e) = pass.error {
            return Err(e);
        }
        if !pass.changed {
            return Ok(());
        }
    }
    Err(SqlError::new(
        sqlstate::STATEMENT_TOO_COMPLEX,
        format!("SQL functions nested more than {MAX_DEPTH} deep (a recursive function?)"),
    ))
}

/// A select item that is just a call keeps the function's name as its column name, as
/// in Postgres (the inlined body alone would be `?column?`). The alias is internal
/// (`f#dupN`, unique per position; the output shows `f`).
fn name_call_items(stmt: &mut Statement, functions: &[FunctionEntry]) {
    use datafusion::sql::sqlparser::ast::{Query, SelectItem};
    use weir_planner::naming::DUPLICATE_MARK;
    struct Name<'a>(&'a [FunctionEntry]);
    impl VisitorMut for Name<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            let SetExpr::Select(select) = q.body.as_mut() else {
                return ControlFlow::Continue(());
            };
            for (i, item) in select.projection.iter_mut().enumerate() {
                let SelectItem::UnnamedExpr(Expr::Function(call)) = item else {
                    continue;
                };
                let Some(name) = function_name(&call.name) else {
                    continue;
                };
                if self.0.iter().any(|f| f.name == name) {
                    *item = SelectItem::ExprWithAlias {
                        expr: Expr::Function(call.clone()),
                        alias: Ident::with_quote('"', format!("{name}{DUPLICATE_MARK}{}", i + 1)),
                    };
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = VisitMut::visit(stmt, &mut Name(functions));
}

/// Whether `stmt` calls a function of this name.
fn calls(stmt: &Statement, name: &str) -> bool {
    struct Find<'a>(&'a str, bool);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = e {
                if function_name(&f.name).as_deref() == Some(self.0) {
                    self.1 = true;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Find(name, false);
    let _ = stmt.visit(&mut f);
    f.1
}

/// Materialized views and sinks whose SQL calls `name`.
fn jobs_calling(db: &Database, name: &str) -> Vec<String> {
    let cat = db.catalog.read();
    cat.relations
        .iter()
        .filter(|r| matches!(r.kind, RelationKind::MaterializedView | RelationKind::Sink))
        .filter(|r| match weir_planner::parse_statement(&r.sql) {
            Ok(WeirStatement::Sql(s)) => calls(&s, name),
            _ => false,
        })
        .map(|r| r.name.clone())
        .collect()
}

fn body_text(body: &Option<CreateFunctionBody>) -> SqlResult<String> {
    let text = |e: &Expr| match e {
        Expr::Value(v) => match &v.value {
            Value::DollarQuotedString(d) => Some(d.value.clone()),
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    };
    match body {
        Some(CreateFunctionBody::AsBeforeOptions { body, .. })
        | Some(CreateFunctionBody::AsAfterOptions(body)) => text(body).ok_or_else(|| {
            SqlError::new(
                sqlstate::INVALID_FUNCTION_DEFINITION,
                "the function body must be a string ($$ ... $$)",
            )
        }),
        Some(CreateFunctionBody::Return(e)) | Some(CreateFunctionBody::AsReturnExpr(e)) => {
            Ok(format!("RETURN {e}"))
        }
        _ => Err(SqlError::new(
            sqlstate::INVALID_FUNCTION_DEFINITION,
            "no function body specified",
        )),
    }
}

/// `CREATE [OR REPLACE] FUNCTION`.
pub async fn create(db: &Database, stmt: &Statement, sql: &str) -> SqlResult<Output> {
    let Statement::CreateFunction(cf) = stmt else {
        return Err(SqlError::internal("not CREATE FUNCTION"));
    };
    let name = function_name(&cf.name).ok_or_else(|| {
        SqlError::new(
            sqlstate::INVALID_SCHEMA_NAME,
            format!(
                "functions can be created only in schema public: {}",
                cf.name
            ),
        )
    })?;
    if let Some(lang) = &cf.language {
        if !lang.value.eq_ignore_ascii_case("sql") {
            return Err(SqlError::unsupported(format!(
                "functions in language {} are not supported (LANGUAGE SQL is)",
                lang.value
            )));
        }
    }
    let return_type = match &cf.return_type {
        Some(FunctionReturnType::DataType(t)) => t.to_string(),
        Some(FunctionReturnType::SetOf(_)) => {
            return Err(SqlError::unsupported(
                "set-returning functions (RETURNS SETOF / TABLE) are not supported",
            ))
        }
        None => {
            return Err(SqlError::new(
                sqlstate::INVALID_FUNCTION_DEFINITION,
                "function result type must be specified",
            ))
        }
    };
    let args = cf.args.clone().unwrap_or_default();
    if args
        .iter()
        .any(|a| a.mode.is_some() || a.default_expr.is_some())
    {
        return Err(SqlError::unsupported(
            "argument modes (OUT, INOUT) and defaults are not supported",
        ));
    }
    let entry = FunctionEntry {
        name: name.clone(),
        arg_names: args
            .iter()
            .map(|a| a.name.as_ref().map(|n| n.value.to_ascii_lowercase()))
            .collect(),
        arg_types: args.iter().map(|a| a.data_type.to_string()).collect(),
        return_type,
        body: body_text(&cf.function_body)?,
        sql: sql.to_string(),
    };
    if is_builtin(&name) {
        return Err(SqlError::new(
            sqlstate::DUPLICATE_FUNCTION,
            format!("function {name} is built in and cannot be redefined"),
        ));
    }
    check_body(db, &entry).await?;
    let _ddl = db.ddl_lock.lock().await;
    let mut cat = db.catalog.write();
    let existing = cat
        .functions
        .iter()
        .position(|f| f.name == name && f.arg_types.len() == entry.arg_types.len());
    if let Some(i) = existing {
        if !cf.or_replace {
            return Err(SqlError::new(
                sqlstate::DUPLICATE_FUNCTION,
                format!(
                    "function {name} with {} arguments already exists",
                    entry.arg_types.len()
                ),
            ));
        }
        std::mem::drop(cat);
        refuse_while_called(db, &name, "replace")?;
        cat = db.catalog.write();
        cat.functions[i] = entry;
    } else {
        cat.functions.push(entry);
    }
    cat.save(&db.meta)?;
    Ok(Output::command("CREATE FUNCTION"))
}

fn is_builtin(name: &str) -> bool {
    let state = query::new_context().state();
    state.scalar_functions().contains_key(name)
        || state.aggregate_functions().contains_key(name)
        || state.window_functions().contains_key(name)
}

fn refuse_while_called(db: &Database, name: &str, verb: &str) -> SqlResult<()> {
    let jobs = jobs_calling(db, name);
    if jobs.is_empty() {
        return Ok(());
    }
    Err(SqlError::new(
        sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
        format!(
            "cannot {verb} function {name} because materialized view {} calls it",
            jobs.join(", ")
        ),
    ))
}

/// Plans a call with NULL arguments of the declared types: unknown columns, types
/// that do not fit and bad casts are reported when the function is created.
async fn check_body(db: &Database, f: &FunctionEntry) -> SqlResult<()> {
    let nulls: Vec<Expr> = f
        .arg_types
        .iter()
        .map(|_| Expr::Value(Value::Null.into()))
        .collect();
    let body = instantiate(f, &nulls)?;
    let probe = format!("SELECT {body}");
    let stmt = match weir_planner::parse_statement(&probe)? {
        WeirStatement::Sql(s) => s,
        _ => return Err(SqlError::internal("function probe is not a query")),
    };
    let ctx = query::planning_context(db, &stmt)?;
    query::plan_statement(&ctx.state(), &stmt)
        .await
        .map(|_| ())
        .map_err(|e| {
            SqlError::new(
                sqlstate::INVALID_FUNCTION_DEFINITION,
                format!("invalid body of function {}: {}", f.name, e.message),
            )
        })
}

/// `DROP FUNCTION [IF EXISTS] f [(types)], ...`.
pub async fn drop(db: &Database, stmt: &Statement) -> SqlResult<Output> {
    let Statement::DropFunction(df) = stmt else {
        return Err(SqlError::internal("not DROP FUNCTION"));
    };
    let _ddl = db.ddl_lock.lock().await;
    for desc in &df.func_desc {
        let name = function_name(&desc.name).unwrap_or_default();
        let arity = desc.args.as_ref().map(|a| a.len());
        let found = db
            .catalog
            .read()
            .functions
            .iter()
            .any(|f| f.name == name && arity.is_none_or(|n| n == f.arg_types.len()));
        if !found {
            if df.if_exists {
                continue;
            }
            return Err(SqlError::new(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {} does not exist", desc.name),
            ));
        }
        refuse_while_called(db, &name, "drop")?;
        let mut cat = db.catalog.write();
        cat.functions
            .retain(|f| !(f.name == name && arity.is_none_or(|n| n == f.arg_types.len())));
        cat.save(&db.meta)?;
    }
    Ok(Output::command("DROP FUNCTION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(args: &[(&str, &str)], ret: &str, body: &str) -> FunctionEntry {
        FunctionEntry {
            name: "f".into(),
            arg_names: args.iter().map(|(n, _)| Some(n.to_string())).collect(),
            arg_types: args.iter().map(|(_, t)| t.to_string()).collect(),
            return_type: ret.into(),
            body: body.into(),
            sql: String::new(),
        }
    }

    fn expr(sql: &str) -> Expr {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap()
    }

    #[test]
    fn parameters_are_replaced_by_name_and_position() {
        let f = entry(
            &[("a", "INT"), ("b", "TEXT")],
            "INT",
            "SELECT a + length(b) + $1",
        );
        let body = instantiate(&f, &[expr("x.k"), expr("'hi'")]).unwrap();
        assert_eq!(
            body.to_string(),
            "CAST((CAST((x.k) AS INT) + length(CAST(('hi') AS TEXT)) + CAST((x.k) AS INT)) AS INT)"
        );
    }

    #[test]
    fn a_body_with_from_is_a_scalar_subquery() {
        let f = entry(
            &[("k", "INT")],
            "BIGINT",
            "SELECT count(*) FROM t WHERE t.id = k;",
        );
        let body = instantiate(&f, &[expr("1")]).unwrap().to_string();
        assert!(
            body.starts_with(
                "CAST(((SELECT count(*) FROM t WHERE t.id = CAST((1) AS INT))) AS BIGINT)"
            ),
            "{body}"
        );
        let ret = entry(&[("k", "INT")], "INT", "RETURN k * 2");
        assert_eq!(
            instantiate(&ret, &[expr("3")]).unwrap().to_string(),
            "CAST((CAST((3) AS INT) * 2) AS INT)"
        );
    }
}
