//! `information_schema`: the SQL-standard views (`tables`, `columns`, `views`,
//! `schemata`, `table_constraints`, `key_column_usage`) over the same snapshot as
//! `pg_catalog`, with Postgres's type names (`integer`, `character varying`, `ARRAY`)
//! and schemas (`public`, `pg_catalog`, `information_schema`).
//!
//! These replace DataFusion's own `information_schema`, which lists only the tables
//! registered for one statement, in a schema named after DataFusion's catalog, with
//! Arrow type names.
//!
//! One choice differs from Postgres: materialized views are listed in `tables` (as
//! `VIEW`) and in `views`. Postgres leaves them out of both, but in Weir they are the
//! main objects, and tools such as Grafana list relations only from `tables`.

use super::objects::*;
use super::rows::{Col, Spec, V};
use super::types;

use Col::*;

pub const TABLES: Spec = Spec {
    name: "tables",
    columns: &[
        ("table_catalog", Text),
        ("table_schema", Text),
        ("table_name", Text),
        ("table_type", Text),
        ("self_referencing_column_name", Text),
        ("reference_generation", Text),
        ("user_defined_type_catalog", Text),
        ("user_defined_type_schema", Text),
        ("user_defined_type_name", Text),
        ("is_insertable_into", Text),
        ("is_typed", Text),
        ("commit_action", Text),
    ],
};

pub const COLUMNS: Spec = Spec {
    name: "columns",
    columns: &[
        ("table_catalog", Text),
        ("table_schema", Text),
        ("table_name", Text),
        ("column_name", Text),
        ("ordinal_position", Int4),
        ("column_default", Text),
        ("is_nullable", Text),
        ("data_type", Text),
        ("character_maximum_length", Int4),
        ("character_octet_length", Int4),
        ("numeric_precision", Int4),
        ("numeric_precision_radix", Int4),
        ("numeric_scale", Int4),
        ("datetime_precision", Int4),
        ("interval_type", Text),
        ("udt_catalog", Text),
        ("udt_schema", Text),
        ("udt_name", Text),
        ("is_identity", Text),
        ("is_generated", Text),
        ("is_updatable", Text),
        ("dtd_identifier", Text),
    ],
};

pub const VIEWS: Spec = Spec {
    name: "views",
    columns: &[
        ("table_catalog", Text),
        ("table_schema", Text),
        ("table_name", Text),
        ("view_definition", Text),
        ("check_option", Text),
        ("is_updatable", Text),
        ("is_insertable_into", Text),
        ("is_trigger_updatable", Text),
        ("is_trigger_deletable", Text),
        ("is_trigger_insertable_into", Text),
    ],
};

pub const SCHEMATA: Spec = Spec {
    name: "schemata",
    columns: &[
        ("catalog_name", Text),
        ("schema_name", Text),
        ("schema_owner", Text),
        ("default_character_set_catalog", Text),
        ("default_character_set_schema", Text),
        ("default_character_set_name", Text),
        ("sql_path", Text),
    ],
};

pub const TABLE_CONSTRAINTS: Spec = Spec {
    name: "table_constraints",
    columns: &[
        ("constraint_catalog", Text),
        ("constraint_schema", Text),
        ("constraint_name", Text),
        ("table_catalog", Text),
        ("table_schema", Text),
        ("table_name", Text),
        ("constraint_type", Text),
        ("is_deferrable", Text),
        ("initially_deferred", Text),
        ("enforced", Text),
        ("nulls_distinct", Text),
    ],
};

pub const KEY_COLUMN_USAGE: Spec = Spec {
    name: "key_column_usage",
    columns: &[
        ("constraint_catalog", Text),
        ("constraint_schema", Text),
        ("constraint_name", Text),
        ("table_catalog", Text),
        ("table_schema", Text),
        ("table_name", Text),
        ("column_name", Text),
        ("ordinal_position", Int4),
        ("position_in_unique_constraint", Int4),
    ],
};

pub const INFORMATION_SCHEMA: &[&Spec] = &[
    &TABLES,
    &COLUMNS,
    &VIEWS,
    &SCHEMATA,
    &TABLE_CONSTRAINTS,
    &KEY_COLUMN_USAGE,
];

const DATABASE: &str = "weir";

fn text(s: &str) -> V {
    V::Text(s.to_string())
}

fn yes_no(b: bool) -> V {
    text(if b { "YES" } else { "NO" })
}

/// Relations `information_schema` lists: everything but indexes.
fn listed(objects: &Objects) -> impl Iterator<Item = &Relation> {
    objects.relations.iter().filter(|r| r.kind != "i")
}

pub fn rows(spec: &Spec, objects: &Objects) -> Vec<Vec<V>> {
    match spec.name {
        "tables" => listed(objects)
            .map(|r| {
                let base = r.kind == "r";
                vec![
                    text(DATABASE),
                    text(r.namespace_name()),
                    V::Text(r.name.clone()),
                    text(if base { "BASE TABLE" } else { "VIEW" }),
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                    yes_no(base && r.namespace == NAMESPACE_PUBLIC),
                    text("NO"),
                    V::Null,
                ]
            })
            .collect(),
        "columns" => listed(objects).flat_map(column_rows).collect(),
        "views" => listed(objects)
            .filter(|r| r.kind != "r")
            .map(|r| {
                vec![
                    text(DATABASE),
                    text(r.namespace_name()),
                    V::Text(r.name.clone()),
                    r.definition.clone().into(),
                    text("NONE"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                    text("NO"),
                ]
            })
            .collect(),
        "schemata" => NAMESPACES
            .iter()
            .map(|n| {
                vec![
                    text(DATABASE),
                    text(n.name),
                    text(OWNER),
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Null,
                ]
            })
            .collect(),
        "table_constraints" => objects
            .constraints
            .iter()
            .map(|c| {
                vec![
                    text(DATABASE),
                    text("public"),
                    V::Text(c.name.clone()),
                    text(DATABASE),
                    text("public"),
                    V::Text(c.table_name.clone()),
                    text("PRIMARY KEY"),
                    text("NO"),
                    text("NO"),
                    text("YES"),
                    V::Null,
                ]
            })
            .collect(),
        "key_column_usage" => objects
            .constraints
            .iter()
            .flat_map(|c| {
                let table = objects.relation(c.table_oid);
                c.keys.iter().enumerate().filter_map(move |(i, k)| {
                    let column = table?.columns.get(*k as usize - 1)?;
                    Some(vec![
                        text(DATABASE),
                        text("public"),
                        V::Text(c.name.clone()),
                        text(DATABASE),
                        text("public"),
                        V::Text(c.table_name.clone()),
                        V::Text(column.name.clone()),
                        V::I32(i as i32 + 1),
                        V::Null,
                    ])
                })
            })
            .collect(),
        _ => vec![],
    }
}

fn column_rows(r: &Relation) -> Vec<Vec<V>> {
    r.columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let t = types::by_oid(c.type_oid);
            let is_array = t.is_some_and(|t| t.element != 0);
            let data_type = match t {
                Some(_) if is_array => "ARRAY".to_string(),
                Some(t) => t.sql_name.to_string(),
                None => "USER-DEFINED".to_string(),
            };
            let (precision, radix, scale) = numeric_facts(c.type_oid, c.typmod);
            vec![
                text(DATABASE),
                text(r.namespace_name()),
                V::Text(r.name.clone()),
                V::Text(c.name.clone()),
                V::I32(i as i32 + 1),
                V::Null,
                yes_no(!c.not_null),
                V::Text(data_type),
                if matches!(c.type_oid, 1043 | 1042) && c.typmod >= 4 {
                    V::I32(c.typmod - 4)
                } else {
                    V::Null
                },
                if matches!(c.type_oid, 25 | 1043 | 1042) {
                    V::I32(1_073_741_824)
                } else {
                    V::Null
                },
                precision,
                radix,
                scale,
                if matches!(c.type_oid, 1114 | 1184 | 1083) {
                    V::I32(6)
                } else {
                    V::Null
                },
                V::Null,
                text(DATABASE),
                text("pg_catalog"),
                text(t.map_or("unknown", |t| t.name)),
                text("NO"),
                text("NEVER"),
                yes_no(r.kind == "r" && r.namespace == NAMESPACE_PUBLIC),
                V::Text((i + 1).to_string()),
            ]
        })
        .collect()
}

/// `numeric_precision`, `numeric_precision_radix` and `numeric_scale`: bits for
/// integers and floats, decimal digits for `numeric(p,s)`.
fn numeric_facts(type_oid: u32, typmod: i32) -> (V, V, V) {
    let binary =
        |bits: i32, scale: Option<i32>| (V::I32(bits), V::I32(2), scale.map_or(V::Null, V::I32));
    match type_oid {
        21 => binary(16, Some(0)),
        23 => binary(32, Some(0)),
        20 => binary(64, Some(0)),
        700 => binary(24, None),
        701 => binary(53, None),
        1700 if typmod >= 4 => (
            V::I32((typmod - 4) >> 16),
            V::I32(10),
            V::I32((typmod - 4) & 0xffff),
        ),
        1700 => (V::Null, V::I32(10), V::Null),
        _ => (V::Null, V::Null, V::Null),
    }
}
