//! Postgres's catalog and session functions: `version()`, `current_setting`,
//! `format_type`, `pg_get_viewdef`, `pg_get_indexdef`, `pg_get_constraintdef`,
//! `pg_get_expr`, `obj_description`/`col_description`, the `has_*_privilege` family,
//! `quote_ident`, `format`, `to_regtype`/`to_regclass`, and the `regclass` /
//! `regtype` / `regnamespace` conversions the rewriter turns casts into.
//!
//! Functions that need no catalog snapshot are registered on every context
//! ([`register_session_functions`]); those that read relations are registered with
//! the catalog tables, over the same snapshot ([`register_catalog_functions`]).

use super::objects::{self, Objects, NAMESPACES};
use super::tables::{Setting, SERVER_VERSION};
use super::types;
use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use weir_planner::{sqlstate, SqlError};

type Body = Arc<dyn Fn(&[ScalarValue]) -> Result<ScalarValue> + Send + Sync>;

/// A function evaluated row by row on scalar values (catalog functions see few
/// rows; clarity beats vectorization here).
struct RowFunction {
    name: &'static str,
    signature: Signature,
    result: DataType,
    body: Body,
}

impl std::fmt::Debug for RowFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for RowFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.body, &other.body)
    }
}

impl Eq for RowFunction {}

impl Hash for RowFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for RowFunction {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.result.clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(args.number_rows))
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            let values = arrays
                .iter()
                .map(|a| ScalarValue::try_from_array(a, row))
                .collect::<Result<Vec<_>>>()?;
            out.push((self.body)(&values)?);
        }
        if out.is_empty() {
            return Ok(ColumnarValue::Array(arrow::array::new_empty_array(
                &self.result,
            )));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}

/// Accepts any argument types, with any of the given numbers of arguments.
fn arities(counts: &[usize]) -> Signature {
    Signature::one_of(
        counts
            .iter()
            .map(|n| {
                if *n == 0 {
                    TypeSignature::Nullary
                } else {
                    TypeSignature::Any(*n)
                }
            })
            .collect(),
        Volatility::Stable,
    )
}

fn register(
    ctx: &SessionContext,
    name: &'static str,
    counts: &[usize],
    result: DataType,
    body: impl Fn(&[ScalarValue]) -> Result<ScalarValue> + Send + Sync + 'static,
) {
    ctx.register_udf(ScalarUDF::new_from_impl(RowFunction {
        name,
        signature: arities(counts),
        result,
        body: Arc::new(body),
    }));
}

fn pg_error(code: &'static str, message: String) -> DataFusionError {
    DataFusionError::External(Box::new(SqlError::new(code, message)))
}

/// An argument as an oid (NULL, or a value that is not a number, is `None`).
fn as_oid(v: &ScalarValue) -> Option<u32> {
    if v.is_null() {
        return None;
    }
    match v.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(n)) => u32::try_from(n).ok(),
        _ => None,
    }
}

fn as_i64(v: &ScalarValue) -> Option<i64> {
    match v.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(n) => n,
        _ => None,
    }
}

fn as_text(v: &ScalarValue) -> Option<String> {
    if v.is_null() {
        return None;
    }
    match v.cast_to(&DataType::Utf8).ok()? {
        ScalarValue::Utf8(s) => s,
        _ => None,
    }
}

fn text(s: Option<String>) -> ScalarValue {
    ScalarValue::Utf8(s)
}

fn oid(o: Option<u32>) -> ScalarValue {
    ScalarValue::UInt32(o)
}

fn boolean(b: Option<bool>) -> ScalarValue {
    ScalarValue::Boolean(b)
}

/// `version()`: Postgres's format, so tools that parse the major version work.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (Weir {}) on {}-linux, compiled by rustc, 64-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// Functions that do not read the catalog snapshot: registered on every context.
pub fn register_session_functions(ctx: &SessionContext) {
    register(ctx, "version", &[0], DataType::Utf8, |_| {
        Ok(text(Some(version_string())))
    });
    for (name, value) in [
        ("current_database", "weir"),
        ("current_schema", "public"),
        ("current_user", objects::OWNER),
        ("session_user", objects::OWNER),
        ("current_role", objects::OWNER),
        ("user", objects::OWNER),
        ("pg_get_userbyid", objects::OWNER),
    ] {
        register(ctx, name, &[0, 1], DataType::Utf8, move |_| {
            Ok(text(Some(value.to_string())))
        });
    }
    register(ctx, "pg_encoding_to_char", &[1], DataType::Utf8, |_| {
        Ok(text(Some("UTF8".into())))
    });
    // Every object is visible on the fixed search path, and the single user may do
    // everything.
    for name in [
        "pg_table_is_visible",
        "pg_type_is_visible",
        "pg_function_is_visible",
    ] {
        register(ctx, name, &[1], DataType::Boolean, |_| {
            Ok(boolean(Some(true)))
        });
    }
    for name in [
        "has_table_privilege",
        "has_schema_privilege",
        "has_database_privilege",
        "has_column_privilege",
        "has_type_privilege",
        "has_function_privilege",
        "has_sequence_privilege",
        "has_any_column_privilege",
    ] {
        register(ctx, name, &[2, 3, 4], DataType::Boolean, |_| {
            Ok(boolean(Some(true)))
        });
    }
    register(ctx, "pg_is_in_recovery", &[0], DataType::Boolean, |_| {
        Ok(boolean(Some(false)))
    });
    register(ctx, "pg_backend_pid", &[0], DataType::Int32, |_| {
        Ok(ScalarValue::Int32(Some(std::process::id() as i32)))
    });
    // Weir stores no comments, column defaults or index predicates: all NULL.
    for (name, counts) in [
        ("obj_description", &[1usize, 2][..]),
        ("col_description", &[2]),
        ("shobj_description", &[2]),
        ("pg_get_expr", &[2, 3]),
        ("pg_get_partkeydef", &[1]),
    ] {
        register(ctx, name, counts, DataType::Utf8, |_| Ok(text(None)));
    }
    register(ctx, "format_type", &[2], DataType::Utf8, |a| {
        Ok(text(as_oid(&a[0]).map(|o| {
            types::format_type(o, as_i64(&a[1]).map(|m| m as i32))
        })))
    });
    register(ctx, "quote_ident", &[1], DataType::Utf8, |a| {
        Ok(text(as_text(&a[0]).map(|s| objects::quote_ident(&s))))
    });
    register(ctx, "format", &[1, 2, 3, 4, 5, 6], DataType::Utf8, |a| {
        format(a).map(text)
    });
    // The search path is fixed: pg_catalog (implicitly) then public.
    register(
        ctx,
        "current_schemas",
        &[1],
        DataType::List(Arc::new(arrow::datatypes::Field::new(
            "item",
            DataType::Utf8,
            true,
        ))),
        |a| {
            let implicit = matches!(a[0], ScalarValue::Boolean(Some(true)));
            let names: Vec<ScalarValue> = implicit
                .then_some("pg_catalog")
                .into_iter()
                .chain(["public"])
                .map(|s| ScalarValue::Utf8(Some(s.into())))
                .collect();
            Ok(ScalarValue::List(ScalarValue::new_list_nullable(
                &names,
                &DataType::Utf8,
            )))
        },
    );
    register(ctx, "array_upper", &[2], DataType::Int32, |a| {
        let len = match &a[0] {
            ScalarValue::List(l) if !arrow::array::Array::is_null(l.as_ref(), 0) => {
                Some(l.value(0).len() as i32)
            }
            _ => None,
        };
        Ok(ScalarValue::Int32(
            len.filter(|n| *n > 0 && as_i64(&a[1]) == Some(1)),
        ))
    });
    // pgjdbc's `_pg_expandarray(a)`: the elements `x` with their positions `n`
    // (the rewriter puts it under `unnest`).
    let pair = arrow::datatypes::Fields::from(vec![
        arrow::datatypes::Field::new("x", DataType::Int32, true),
        arrow::datatypes::Field::new("n", DataType::Int32, true),
    ]);
    let pairs = DataType::List(Arc::new(arrow::datatypes::Field::new(
        "item",
        DataType::Struct(pair.clone()),
        true,
    )));
    register(ctx, "_pg_expandarray", &[1], pairs, move |a| {
        expand_array(&a[0], &pair)
    });
    register(ctx, "to_regtype", &[1], DataType::UInt32, |a| {
        Ok(oid(as_text(&a[0])
            .and_then(|n| types::by_name(&n))
            .map(|t| t.oid)))
    });
    register(ctx, "regtype", &[1], DataType::UInt32, |a| {
        regtype(&a[0]).map(|t| oid(t.map(|t| t.oid)))
    });
    register(ctx, "regtype_name", &[1], DataType::Utf8, |a| {
        Ok(text(match as_oid(&a[0]) {
            Some(o) => Some(types::by_oid(o).map_or(o.to_string(), |t| t.sql_name.into())),
            None => regtype(&a[0])?.map(|t| t.sql_name.to_string()),
        }))
    });
    register(ctx, "regnamespace", &[1], DataType::UInt32, |a| {
        if let Some(o) = as_oid(&a[0]) {
            return Ok(oid(Some(o)));
        }
        let Some(name) = as_text(&a[0]) else {
            return Ok(oid(None));
        };
        let ns = NAMESPACES.iter().find(|n| n.name == name).ok_or_else(|| {
            pg_error(
                sqlstate::UNDEFINED_OBJECT,
                format!("schema \"{name}\" does not exist"),
            )
        })?;
        Ok(oid(Some(ns.oid)))
    });
    register(ctx, "regnamespace_name", &[1], DataType::Utf8, |a| {
        Ok(text(as_oid(&a[0]).map(|o| {
            objects::namespace_name(o).map_or(o.to_string(), str::to_string)
        })))
    });
}

fn expand_array(v: &ScalarValue, pair: &arrow::datatypes::Fields) -> Result<ScalarValue> {
    use arrow::array::{Array, Int32Array, StructArray};
    let elements: Vec<Option<i32>> = match v {
        ScalarValue::List(l) if !l.is_null(0) => {
            let values = arrow::compute::cast(&l.value(0), &DataType::Int32)?;
            let values = values
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or_else(|| DataFusionError::Internal("cast to Int32".into()))?;
            values.iter().collect()
        }
        _ => vec![],
    };
    let positions: Vec<i32> = (1..=elements.len() as i32).collect();
    let structs = StructArray::try_new(
        pair.clone(),
        vec![
            Arc::new(Int32Array::from(elements)),
            Arc::new(Int32Array::from(positions)),
        ],
        None,
    )?;
    let field = Arc::new(arrow::datatypes::Field::new(
        "item",
        DataType::Struct(pair.clone()),
        true,
    ));
    let list = arrow::array::ListArray::try_new(
        field,
        arrow::buffer::OffsetBuffer::from_lengths([structs.len()]),
        Arc::new(structs),
        None,
    )?;
    Ok(ScalarValue::List(Arc::new(list)))
}

/// `'name'::regtype`: the type or 42704; an oid passes through.
fn regtype(v: &ScalarValue) -> Result<Option<&'static types::PgType>> {
    if v.is_null() {
        return Ok(None);
    }
    if let Some(o) = as_oid(v).filter(|_| !matches!(v, ScalarValue::Utf8(_))) {
        return Ok(types::by_oid(o));
    }
    let name = as_text(v).unwrap_or_default();
    types::by_name(&name).map(Some).ok_or_else(|| {
        pg_error(
            sqlstate::UNDEFINED_OBJECT,
            format!("type \"{name}\" does not exist"),
        )
    })
}

/// Postgres's `format(fmt, args...)` for `%s`, `%I`, `%L` and `%%`.
fn format(a: &[ScalarValue]) -> Result<Option<String>> {
    let Some(fmt) = as_text(&a[0]) else {
        return Ok(None);
    };
    let mut args = a[1..].iter();
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let spec = chars.next();
        if spec == Some('%') {
            out.push('%');
            continue;
        }
        let arg = args.next().ok_or_else(|| {
            pg_error(
                sqlstate::INVALID_PARAMETER_VALUE,
                "too few arguments for format()".into(),
            )
        })?;
        let value = as_text(arg);
        match spec {
            Some('s') => out.push_str(value.as_deref().unwrap_or("")),
            Some('I') => {
                let v = value.ok_or_else(|| {
                    pg_error(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        "null values cannot be formatted as an SQL identifier".into(),
                    )
                })?;
                out.push_str(&objects::quote_ident(&v));
            }
            Some('L') => match value {
                Some(v) => out.push_str(&format!("'{}'", v.replace('\'', "''"))),
                None => out.push_str("NULL"),
            },
            other => {
                return Err(pg_error(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "unrecognized format() type specifier \"{}\"",
                        other.map(String::from).unwrap_or_default()
                    ),
                ))
            }
        }
    }
    Ok(Some(out))
}

/// Functions over the catalog snapshot and the settings.
pub fn register_catalog_functions(
    ctx: &SessionContext,
    objects: Arc<Objects>,
    settings: Arc<Vec<Setting>>,
) {
    let s = settings.clone();
    register(ctx, "current_setting", &[1, 2], DataType::Utf8, move |a| {
        let Some(name) = as_text(&a[0]) else {
            return Ok(text(None));
        };
        let missing_ok = matches!(a.get(1), Some(ScalarValue::Boolean(Some(true))));
        match s.iter().find(|x| x.name.eq_ignore_ascii_case(&name)) {
            Some(x) => Ok(text(Some(x.value.clone()))),
            None if missing_ok => Ok(text(None)),
            None => Err(pg_error(
                sqlstate::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{name}\""),
            )),
        }
    });
    let o = objects.clone();
    register(ctx, "regclass", &[1], DataType::UInt32, move |a| {
        if a[0].is_null() {
            return Ok(oid(None));
        }
        if !matches!(a[0], ScalarValue::Utf8(_)) {
            return Ok(oid(as_oid(&a[0])));
        }
        let name = as_text(&a[0]).unwrap_or_default();
        match o.relation_by_name(&name) {
            Some(r) => Ok(oid(Some(r.oid))),
            None => Err(pg_error(
                sqlstate::UNDEFINED_TABLE,
                format!("relation \"{name}\" does not exist"),
            )),
        }
    });
    let o = objects.clone();
    register(ctx, "to_regclass", &[1], DataType::UInt32, move |a| {
        Ok(oid(as_text(&a[0])
            .and_then(|n| o.relation_by_name(&n))
            .map(|r| r.oid)))
    });
    let o = objects.clone();
    register(ctx, "regclass_name", &[1], DataType::Utf8, move |a| {
        // `'name'::regclass::text`: the name, once it is known to exist.
        if let ScalarValue::Utf8(Some(name)) = &a[0] {
            return match o.relation_by_name(name) {
                Some(r) => Ok(text(Some(objects::quote_ident(&r.name)))),
                None => Err(pg_error(
                    sqlstate::UNDEFINED_TABLE,
                    format!("relation \"{name}\" does not exist"),
                )),
            };
        }
        Ok(text(as_oid(&a[0]).map(|x| match o.relation(x) {
            Some(r)
                if r.namespace == objects::NAMESPACE_PUBLIC
                    || r.namespace == objects::NAMESPACE_PG_CATALOG =>
            {
                objects::quote_ident(&r.name)
            }
            Some(r) => format!("{}.{}", r.namespace_name(), objects::quote_ident(&r.name)),
            None => x.to_string(),
        })))
    });
    let o = objects.clone();
    register(ctx, "pg_get_viewdef", &[1, 2], DataType::Utf8, move |a| {
        let rel = if matches!(a[0], ScalarValue::Utf8(_)) {
            as_text(&a[0]).and_then(|n| o.relation_by_name(&n))
        } else {
            as_oid(&a[0]).and_then(|x| o.relation(x))
        };
        Ok(text(rel.and_then(|r| r.definition.clone())))
    });
    let o = objects.clone();
    register(ctx, "pg_get_indexdef", &[1, 3], DataType::Utf8, move |a| {
        let Some(ix) = as_oid(&a[0]).and_then(|x| o.index(x)) else {
            return Ok(text(None));
        };
        // With a column number: that key column's name ("" past the last).
        match a.get(1).and_then(as_i64) {
            Some(col) if col > 0 => {
                let name = ix
                    .keys
                    .get(col as usize - 1)
                    .and_then(|k| o.relation(ix.table_oid)?.columns.get(*k as usize - 1))
                    .map(|c| objects::quote_ident(&c.name));
                Ok(text(Some(name.unwrap_or_default())))
            }
            _ => Ok(text(Some(objects::index_definition(ix, &o)))),
        }
    });
    let o = objects;
    register(
        ctx,
        "pg_get_constraintdef",
        &[1, 2],
        DataType::Utf8,
        move |a| {
            Ok(text(
                as_oid(&a[0])
                    .and_then(|x| o.constraint(x))
                    .map(|c| objects::constraint_definition(c, &o)),
            ))
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> ScalarValue {
        ScalarValue::Utf8(Some(s.into()))
    }

    #[test]
    fn format_quotes_identifiers_and_literals() {
        assert_eq!(
            format(&[t("%I.%I = %L%%"), t("public"), t("My T"), t("it's")]).unwrap(),
            Some("public.\"My T\" = 'it''s'%".into())
        );
        assert!(format(&[t("%I")]).is_err());
    }

    #[test]
    fn version_has_a_parsable_major_version() {
        let v = version_string();
        assert!(v.starts_with("PostgreSQL 15.0 (Weir "), "{v}");
    }
}
