//! Enough of `pg_catalog` for psql's backslash commands (`\dt`, `\dm`, `\dv`, `\d`,
//! `\l`, `\dn`) and for drivers' metadata calls.
//!
//! The tables are generated from Weir's catalog for every statement and registered as
//! `pg_catalog.<name>` (they must be schema-qualified; unqualified names resolve in
//! `public` only). psql-specific syntax that DataFusion does not parse is rewritten
//! first.

use crate::catalog::RelationKind;
use crate::database::Database;
use arrow::array::{
    ArrayRef, BooleanArray, Int16Array, Int32Array, RecordBatch, StringArray, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{MemTable, MemorySchemaProvider};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::prelude::SessionContext;
use std::sync::Arc;
use weir_planner::SqlResult;

pub const NAMESPACE_PUBLIC: u32 = 2200;
pub const NAMESPACE_PG_CATALOG: u32 = 11;
pub const NAMESPACE_INFORMATION_SCHEMA: u32 = 13000;
/// Relation oids are the catalog id plus this offset, clear of Postgres's system oids.
pub const RELATION_OID_BASE: u32 = 16384;

/// Rewrites psql's Postgres-only syntax into what DataFusion accepts.
pub fn rewrite_psql_syntax(sql: &str) -> String {
    if !sql.contains("pg_catalog") {
        return sql.to_string();
    }
    // Follow-up queries of `\d name` about objects Weir does not have (policies,
    // extended statistics, publications, inheritance, triggers, rules) use syntax
    // DataFusion cannot run (`array(subquery)`, `= any(...)`); their honest answer is
    // "none", so they get an empty result.
    const ABSENT: &[&str] = &[
        "pg_catalog.pg_policy",
        "pg_catalog.pg_statistic_ext",
        "pg_catalog.pg_publication",
        "pg_catalog.pg_inherits",
        "pg_catalog.pg_trigger",
        "pg_catalog.pg_rewrite",
    ];
    if ABSENT.iter().any(|t| sql.contains(t)) {
        return "SELECT CAST(NULL AS TEXT) AS none WHERE false".to_string();
    }
    // `\d name` asks for column defaults and collations through correlated scalar
    // subqueries DataFusion cannot run; Weir has neither, so both are NULL.
    let defaults =
        regex::Regex::new(r"(?s)\(SELECT pg_catalog\.pg_get_expr\(d\.adbin.*?a\.atthasdef\)")
            .expect("valid regex");
    let collations = regex::Regex::new(
        r"(?s)\(SELECT c\.collname FROM pg_catalog\.pg_collation c.*?t\.typcollation\)",
    )
    .expect("valid regex");
    let sql = defaults.replace_all(sql, "CAST(NULL AS TEXT)");
    let sql = collations.replace_all(&sql, "CAST(NULL AS TEXT)");
    let mut s = sql
        .replace("OPERATOR(pg_catalog.~)", "~")
        .replace(" COLLATE pg_catalog.default", "")
        .replace("::pg_catalog.regtype::pg_catalog.text", "")
        .replace("::pg_catalog.regclass::pg_catalog.text", "")
        .replace("::pg_catalog.regclass", "")
        .replace("::pg_catalog.text", "");
    let re = regex::Regex::new(r"pg_catalog\.([a-z_]+)\s*\(").expect("valid regex");
    s = re.replace_all(&s, "$1(").into_owned();
    s
}

fn const_udf(
    ctx: &SessionContext,
    name: &str,
    args: Vec<DataType>,
    ret: DataType,
    value: ScalarValue,
) {
    let v = value.clone();
    ctx.register_udf(create_udf(
        name,
        args,
        ret,
        Volatility::Stable,
        Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(v.clone()))),
    ));
}

/// `format_type(type_oid, typmod)`: the type's SQL name.
fn register_format_type(ctx: &SessionContext) {
    ctx.register_udf(create_udf(
        "format_type",
        vec![DataType::UInt32, DataType::Int32],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let oids = arrow::compute::cast(&arrays[0], &DataType::UInt32)?;
            let oids = oids
                .as_any()
                .downcast_ref::<UInt32Array>()
                .expect("cast to UInt32");
            let mods = arrow::compute::cast(&arrays[1], &DataType::Int32)?;
            let mods = mods
                .as_any()
                .downcast_ref::<Int32Array>()
                .expect("cast to Int32");
            let names: StringArray = oids
                .iter()
                .zip(mods.iter())
                .map(|(o, m)| {
                    o.map(|o| match (o, m) {
                        // numeric's typmod is ((precision << 16) | scale) + 4.
                        (1700, Some(m)) if m >= 4 => {
                            format!("numeric({},{})", (m - 4) >> 16, (m - 4) & 0xffff)
                        }
                        _ => type_name_of_oid(o),
                    })
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(names)))
        }),
    ));
}

fn type_name_of_oid(oid: u32) -> String {
    // Arrays (array_agg's results): the element type's name and [].
    let element = match oid {
        1000 => Some(16),
        1001 => Some(17),
        1005 => Some(21),
        1007 => Some(23),
        1016 => Some(20),
        1021 => Some(700),
        1022 => Some(701),
        1182 => Some(1082),
        1115 => Some(1114),
        1185 => Some(1184),
        1231 => Some(1700),
        1009 => Some(25),
        _ => None,
    };
    if let Some(e) = element {
        return format!("{}[]", type_name_of_oid(e));
    }
    match oid {
        16 => "boolean",
        17 => "bytea",
        20 => "bigint",
        21 => "smallint",
        23 => "integer",
        700 => "real",
        701 => "double precision",
        1082 => "date",
        1114 => "timestamp without time zone",
        1184 => "timestamp with time zone",
        1186 => "interval",
        1700 => "numeric",
        _ => "text",
    }
    .to_string()
}

pub fn register_functions(ctx: &SessionContext) {
    register_format_type(ctx);
    let owner = ScalarValue::Utf8(Some("weir".into()));
    const_udf(
        ctx,
        "pg_get_userbyid",
        vec![DataType::UInt32],
        DataType::Utf8,
        owner,
    );
    const_udf(
        ctx,
        "pg_table_is_visible",
        vec![DataType::UInt32],
        DataType::Boolean,
        ScalarValue::Boolean(Some(true)),
    );
    const_udf(
        ctx,
        "pg_encoding_to_char",
        vec![DataType::Int32],
        DataType::Utf8,
        ScalarValue::Utf8(Some("UTF8".into())),
    );
    const_udf(
        ctx,
        "current_database",
        vec![],
        DataType::Utf8,
        ScalarValue::Utf8(Some("weir".into())),
    );
    const_udf(
        ctx,
        "current_schema",
        vec![],
        DataType::Utf8,
        ScalarValue::Utf8(Some("public".into())),
    );
    const_udf(
        ctx,
        "current_user",
        vec![],
        DataType::Utf8,
        ScalarValue::Utf8(Some("weir".into())),
    );
    const_udf(
        ctx,
        "obj_description",
        vec![DataType::UInt32, DataType::Utf8],
        DataType::Utf8,
        ScalarValue::Utf8(None),
    );
    const_udf(
        ctx,
        "pg_get_expr",
        vec![DataType::Utf8, DataType::UInt32, DataType::Boolean],
        DataType::Utf8,
        ScalarValue::Utf8(None),
    );
    const_udf(
        ctx,
        "has_schema_privilege",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Boolean,
        ScalarValue::Boolean(Some(true)),
    );
}

fn strings(v: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

fn table(ctx: &SessionContext, name: &str, columns: Vec<(&str, ArrayRef)>) -> SqlResult<()> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(
        schema.clone(),
        columns.into_iter().map(|(_, a)| a).collect(),
    )?;
    let t = Arc::new(MemTable::try_new(schema, vec![vec![batch]])?);
    ctx.register_table(format!("pg_catalog.{name}").as_str(), t)?;
    Ok(())
}

/// Postgres type oid of an Arrow type.
pub fn type_oid(t: &DataType) -> u32 {
    crate::pg::encode::pg_type(t).oid()
}

pub fn register_tables(ctx: &SessionContext, db: &Database) -> SqlResult<()> {
    let catalog = ctx
        .catalog("weir")
        .ok_or_else(|| weir_planner::SqlError::internal("no default catalog"))?;
    catalog.register_schema("pg_catalog", Arc::new(MemorySchemaProvider::new()))?;
    let cat = db.catalog.read();

    table(
        ctx,
        "pg_namespace",
        vec![
            (
                "oid",
                Arc::new(UInt32Array::from(vec![
                    NAMESPACE_PG_CATALOG,
                    NAMESPACE_PUBLIC,
                    NAMESPACE_INFORMATION_SCHEMA,
                ])),
            ),
            (
                "nspname",
                strings(vec![
                    "pg_catalog".into(),
                    "public".into(),
                    "information_schema".into(),
                ]),
            ),
            ("nspowner", Arc::new(UInt32Array::from(vec![10, 10, 10]))),
            (
                "nspacl",
                strings(vec![String::new(), String::new(), String::new()]),
            ),
        ],
    )?;
    table(
        ctx,
        "pg_database",
        vec![
            ("oid", Arc::new(UInt32Array::from(vec![16384]))),
            ("datname", strings(vec!["weir".into()])),
            ("datdba", Arc::new(UInt32Array::from(vec![10]))),
            ("encoding", Arc::new(Int32Array::from(vec![6]))),
            ("datlocprovider", strings(vec!["c".into()])),
            ("datcollate", strings(vec!["C.UTF-8".into()])),
            ("datctype", strings(vec!["C.UTF-8".into()])),
            ("daticulocale", strings(vec![String::new()])),
            ("daticurules", strings(vec![String::new()])),
            (
                "datacl",
                Arc::new(arrow::array::ListArray::new_null(
                    Arc::new(Field::new("item", DataType::Utf8, true)),
                    1,
                )),
            ),
            ("datistemplate", Arc::new(BooleanArray::from(vec![false]))),
            ("datallowconn", Arc::new(BooleanArray::from(vec![true]))),
        ],
    )?;
    table(
        ctx,
        "pg_am",
        vec![
            ("oid", Arc::new(UInt32Array::from(vec![2]))),
            ("amname", strings(vec!["heap".into()])),
        ],
    )?;
    // Sinks are jobs, not relations: they have no rows to list.
    let rels: Vec<_> = cat
        .relations
        .iter()
        .filter(|r| r.kind != RelationKind::Sink)
        .collect();
    table(
        ctx,
        "pg_class",
        vec![
            (
                "oid",
                Arc::new(UInt32Array::from(
                    rels.iter()
                        .map(|r| RELATION_OID_BASE + r.id as u32)
                        .collect::<Vec<_>>(),
                )),
            ),
            (
                "relname",
                strings(rels.iter().map(|r| r.name.clone()).collect()),
            ),
            (
                "relnamespace",
                Arc::new(UInt32Array::from(vec![NAMESPACE_PUBLIC; rels.len()])),
            ),
            (
                "relkind",
                strings(
                    rels.iter()
                        .map(|r| {
                            if r.kind == RelationKind::Table {
                                "r"
                            } else {
                                "m"
                            }
                            .to_string()
                        })
                        .collect(),
                ),
            ),
            (
                "relowner",
                Arc::new(UInt32Array::from(vec![10u32; rels.len()])),
            ),
            ("relam", Arc::new(UInt32Array::from(vec![2u32; rels.len()]))),
            ("relpersistence", strings(vec!["p".into(); rels.len()])),
            // No separate index objects: a primary key is enforced by the table writer.
            (
                "relhasindex",
                Arc::new(BooleanArray::from(
                    rels.iter().map(|_| false).collect::<Vec<_>>(),
                )),
            ),
            (
                "relispartition",
                Arc::new(BooleanArray::from(vec![false; rels.len()])),
            ),
            (
                "reltablespace",
                Arc::new(UInt32Array::from(vec![0u32; rels.len()])),
            ),
            (
                "relchecks",
                Arc::new(Int16Array::from(vec![0i16; rels.len()])),
            ),
            (
                "relhasrules",
                Arc::new(BooleanArray::from(vec![false; rels.len()])),
            ),
            (
                "relhastriggers",
                Arc::new(BooleanArray::from(vec![false; rels.len()])),
            ),
            (
                "relrowsecurity",
                Arc::new(BooleanArray::from(vec![false; rels.len()])),
            ),
            (
                "relforcerowsecurity",
                Arc::new(BooleanArray::from(vec![false; rels.len()])),
            ),
            ("relreplident", strings(vec!["d".into(); rels.len()])),
            (
                "reloftype",
                Arc::new(UInt32Array::from(vec![0u32; rels.len()])),
            ),
            ("reloptions", strings(vec![String::new(); rels.len()])),
            (
                "reltoastrelid",
                Arc::new(UInt32Array::from(vec![0u32; rels.len()])),
            ),
            ("relpartbound", strings(vec![String::new(); rels.len()])),
        ],
    )?;
    let mut attrelid = Vec::new();
    let mut attname = Vec::new();
    let mut atttypid = Vec::new();
    let mut attnum = Vec::new();
    let mut attnotnull = Vec::new();
    let mut atttypmod = Vec::new();
    let mut typname = Vec::new();
    for r in &rels {
        let schema = db.relation_schema(&r.name);
        for (i, c) in r.columns.iter().enumerate() {
            attrelid.push(RELATION_OID_BASE + r.id as u32);
            attname.push(c.name.clone());
            let t = schema
                .as_ref()
                .and_then(|s| s.fields().get(i).map(|f| type_oid(f.data_type())))
                .unwrap_or(25);
            atttypid.push(t);
            let typmod = match schema
                .as_ref()
                .and_then(|s| s.fields().get(i).map(|f| f.data_type().clone()))
            {
                Some(DataType::Decimal128(p, sc)) => ((p as i32) << 16 | sc as i32) + 4,
                _ => -1,
            };
            atttypmod.push(typmod);
            attnum.push(i as i16 + 1);
            attnotnull.push(!c.nullable);
            typname.push(c.pg_type.clone());
        }
    }
    let n = attrelid.len();
    table(
        ctx,
        "pg_attribute",
        vec![
            ("attrelid", Arc::new(UInt32Array::from(attrelid))),
            ("attname", strings(attname)),
            ("atttypid", Arc::new(UInt32Array::from(atttypid))),
            ("attnum", Arc::new(Int16Array::from(attnum))),
            ("attnotnull", Arc::new(BooleanArray::from(attnotnull))),
            ("attisdropped", Arc::new(BooleanArray::from(vec![false; n]))),
            ("atttypmod", Arc::new(Int32Array::from(atttypmod))),
            ("atthasdef", Arc::new(BooleanArray::from(vec![false; n]))),
            ("attidentity", strings(vec![String::new(); n])),
            ("attgenerated", strings(vec![String::new(); n])),
            ("attcollation", Arc::new(UInt32Array::from(vec![0u32; n]))),
        ],
    )?;
    let _ = typname;
    table(
        ctx,
        "pg_attrdef",
        vec![
            ("adrelid", Arc::new(UInt32Array::from(Vec::<u32>::new()))),
            ("adnum", Arc::new(Int16Array::from(Vec::<i16>::new()))),
            ("adbin", strings(vec![])),
        ],
    )?;
    // Empty catalogs psql's `\d name` consults (row security, inheritance,
    // statistics, publications): Weir has none of these objects.
    table(
        ctx,
        "pg_policy",
        vec![
            ("polname", strings(vec![])),
            (
                "polpermissive",
                Arc::new(BooleanArray::from(Vec::<bool>::new())),
            ),
            ("polroles", strings(vec![])),
            ("polqual", strings(vec![])),
            ("polwithcheck", strings(vec![])),
            ("polcmd", strings(vec![])),
            ("polrelid", Arc::new(UInt32Array::from(Vec::<u32>::new()))),
        ],
    )?;
    table(
        ctx,
        "pg_inherits",
        vec![
            ("inhrelid", Arc::new(UInt32Array::from(Vec::<u32>::new()))),
            ("inhparent", Arc::new(UInt32Array::from(Vec::<u32>::new()))),
            ("inhseqno", Arc::new(Int32Array::from(Vec::<i32>::new()))),
        ],
    )?;
    table(
        ctx,
        "pg_collation",
        vec![
            ("oid", Arc::new(UInt32Array::from(vec![100u32]))),
            ("collname", strings(vec!["default".into()])),
        ],
    )?;
    let views: Vec<_> = rels
        .iter()
        .filter(|r| r.kind == RelationKind::MaterializedView)
        .collect();
    table(
        ctx,
        "pg_matviews",
        vec![
            ("schemaname", strings(vec!["public".into(); views.len()])),
            (
                "matviewname",
                strings(views.iter().map(|r| r.name.clone()).collect()),
            ),
            ("matviewowner", strings(vec!["weir".into(); views.len()])),
            (
                "definition",
                strings(views.iter().map(|r| r.sql.clone()).collect()),
            ),
        ],
    )?;
    let tables: Vec<_> = rels
        .iter()
        .filter(|r| r.kind == RelationKind::Table)
        .collect();
    table(
        ctx,
        "pg_tables",
        vec![
            ("schemaname", strings(vec!["public".into(); tables.len()])),
            (
                "tablename",
                strings(tables.iter().map(|r| r.name.clone()).collect()),
            ),
            ("tableowner", strings(vec!["weir".into(); tables.len()])),
        ],
    )?;
    let types: Vec<(u32, &str)> = vec![
        (16, "bool"),
        (17, "bytea"),
        (20, "int8"),
        (21, "int2"),
        (23, "int4"),
        (25, "text"),
        (700, "float4"),
        (701, "float8"),
        (1043, "varchar"),
        (1082, "date"),
        (1114, "timestamp"),
        (1184, "timestamptz"),
        (1186, "interval"),
        (1700, "numeric"),
    ];
    table(
        ctx,
        "pg_type",
        vec![
            (
                "oid",
                Arc::new(UInt32Array::from(
                    types.iter().map(|t| t.0).collect::<Vec<_>>(),
                )),
            ),
            (
                "typname",
                strings(types.iter().map(|t| t.1.to_string()).collect()),
            ),
            (
                "typnamespace",
                Arc::new(UInt32Array::from(vec![NAMESPACE_PG_CATALOG; types.len()])),
            ),
            (
                "typcollation",
                Arc::new(UInt32Array::from(vec![0u32; types.len()])),
            ),
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_psql_operators_and_function_prefixes() {
        let s = rewrite_psql_syntax(
            "WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default AND pg_catalog.pg_table_is_visible(c.oid)",
        );
        assert_eq!(
            s,
            "WHERE c.relname ~ '^(t)$' AND pg_table_is_visible(c.oid)"
        );
    }
}
