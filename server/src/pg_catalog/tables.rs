//! The `pg_catalog` tables: their columns (as in Postgres 15, the ones tools read)
//! and their rows, generated from an [`Objects`] snapshot.
//!
//! Catalogs of things Weir does not have (`pg_description` — Weir has no COMMENT —,
//! `pg_attrdef` — no column defaults —, `pg_enum`, `pg_range`, `pg_inherits`,
//! `pg_depend`, ...) are present and empty: that is their honest content.

use super::objects::*;
use super::procs::{self, PROCS};
use super::rows::{Col, Spec, V};
use super::types::TYPES;
use crate::database::Database;

use Col::*;

pub const PG_NAMESPACE: Spec = Spec {
    name: "pg_namespace",
    columns: &[
        ("oid", Oid),
        ("nspname", Text),
        ("nspowner", Oid),
        ("nspacl", TextList),
    ],
};

pub const PG_CLASS: Spec = Spec {
    name: "pg_class",
    columns: &[
        ("oid", Oid),
        ("relname", Text),
        ("relnamespace", Oid),
        ("reltype", Oid),
        ("reloftype", Oid),
        ("relowner", Oid),
        ("relam", Oid),
        ("relfilenode", Oid),
        ("reltablespace", Oid),
        ("relpages", Int4),
        ("reltuples", Float4),
        ("relallvisible", Int4),
        ("reltoastrelid", Oid),
        ("relhasindex", Bool),
        ("relisshared", Bool),
        ("relpersistence", Text),
        ("relkind", Text),
        ("relnatts", Int2),
        ("relchecks", Int2),
        ("relhasrules", Bool),
        ("relhastriggers", Bool),
        ("relhassubclass", Bool),
        ("relrowsecurity", Bool),
        ("relforcerowsecurity", Bool),
        ("relispopulated", Bool),
        ("relreplident", Text),
        ("relispartition", Bool),
        ("relrewrite", Oid),
        ("relacl", TextList),
        ("reloptions", TextList),
        ("relpartbound", Text),
    ],
};

pub const PG_ATTRIBUTE: Spec = Spec {
    name: "pg_attribute",
    columns: &[
        ("attrelid", Oid),
        ("attname", Text),
        ("atttypid", Oid),
        ("attstattarget", Int4),
        ("attlen", Int2),
        ("attnum", Int2),
        ("attndims", Int4),
        ("attcacheoff", Int4),
        ("atttypmod", Int4),
        ("attbyval", Bool),
        ("attalign", Text),
        ("attstorage", Text),
        ("attcompression", Text),
        ("attnotnull", Bool),
        ("atthasdef", Bool),
        ("atthasmissing", Bool),
        ("attidentity", Text),
        ("attgenerated", Text),
        ("attisdropped", Bool),
        ("attislocal", Bool),
        ("attinhcount", Int4),
        ("attcollation", Oid),
        ("attacl", TextList),
        ("attoptions", TextList),
        ("attfdwoptions", TextList),
    ],
};

pub const PG_TYPE: Spec = Spec {
    name: "pg_type",
    columns: &[
        ("oid", Oid),
        ("typname", Text),
        ("typnamespace", Oid),
        ("typowner", Oid),
        ("typlen", Int2),
        ("typbyval", Bool),
        ("typtype", Text),
        ("typcategory", Text),
        ("typispreferred", Bool),
        ("typisdefined", Bool),
        ("typdelim", Text),
        ("typrelid", Oid),
        ("typsubscript", Text),
        ("typelem", Oid),
        ("typarray", Oid),
        ("typinput", Text),
        ("typoutput", Text),
        ("typreceive", Text),
        ("typsend", Text),
        ("typmodin", Text),
        ("typmodout", Text),
        ("typanalyze", Text),
        ("typalign", Text),
        ("typstorage", Text),
        ("typnotnull", Bool),
        ("typbasetype", Oid),
        ("typtypmod", Int4),
        ("typndims", Int4),
        ("typcollation", Oid),
        ("typdefaultbin", Text),
        ("typdefault", Text),
        ("typacl", TextList),
    ],
};

pub const PG_INDEX: Spec = Spec {
    name: "pg_index",
    columns: &[
        ("indexrelid", Oid),
        ("indrelid", Oid),
        ("indnatts", Int2),
        ("indnkeyatts", Int2),
        ("indisunique", Bool),
        ("indnullsnotdistinct", Bool),
        ("indisprimary", Bool),
        ("indisexclusion", Bool),
        ("indimmediate", Bool),
        ("indisclustered", Bool),
        ("indisvalid", Bool),
        ("indcheckxmin", Bool),
        ("indisready", Bool),
        ("indislive", Bool),
        ("indisreplident", Bool),
        ("indkey", Int2List),
        ("indcollation", OidList),
        ("indclass", OidList),
        ("indoption", Int2List),
        ("indexprs", Text),
        ("indpred", Text),
    ],
};

pub const PG_CONSTRAINT: Spec = Spec {
    name: "pg_constraint",
    columns: &[
        ("oid", Oid),
        ("conname", Text),
        ("connamespace", Oid),
        ("contype", Text),
        ("condeferrable", Bool),
        ("condeferred", Bool),
        ("convalidated", Bool),
        ("conrelid", Oid),
        ("contypid", Oid),
        ("conindid", Oid),
        ("conparentid", Oid),
        ("confrelid", Oid),
        ("confupdtype", Text),
        ("confdeltype", Text),
        ("confmatchtype", Text),
        ("conislocal", Bool),
        ("coninhcount", Int4),
        ("connoinherit", Bool),
        ("conkey", Int2List),
        ("confkey", Int2List),
        ("conpfeqop", OidList),
        ("conppeqop", OidList),
        ("conffeqop", OidList),
        ("conexclop", OidList),
        ("conbin", Text),
    ],
};

pub const PG_DESCRIPTION: Spec = Spec {
    name: "pg_description",
    columns: &[
        ("objoid", Oid),
        ("classoid", Oid),
        ("objsubid", Int4),
        ("description", Text),
    ],
};

pub const PG_PROC: Spec = Spec {
    name: "pg_proc",
    columns: &[
        ("oid", Oid),
        ("proname", Text),
        ("pronamespace", Oid),
        ("proowner", Oid),
        ("prolang", Oid),
        ("procost", Float4),
        ("prorows", Float4),
        ("provariadic", Oid),
        ("prosupport", Text),
        ("prokind", Text),
        ("prosecdef", Bool),
        ("proleakproof", Bool),
        ("proisstrict", Bool),
        ("proretset", Bool),
        ("provolatile", Text),
        ("proparallel", Text),
        ("pronargs", Int2),
        ("pronargdefaults", Int2),
        ("prorettype", Oid),
        ("proargtypes", OidList),
        ("proallargtypes", OidList),
        ("proargmodes", TextList),
        ("proargnames", TextList),
        ("proargdefaults", Text),
        ("protrftypes", OidList),
        ("prosrc", Text),
        ("probin", Text),
        ("prosqlbody", Text),
        ("proconfig", TextList),
        ("proacl", TextList),
    ],
};

pub const PG_AGGREGATE: Spec = Spec {
    name: "pg_aggregate",
    columns: &[
        ("aggfnoid", Oid),
        ("aggkind", Text),
        ("aggnumdirectargs", Int2),
        ("aggtransfn", Text),
        ("aggfinalfn", Text),
        ("aggsortop", Oid),
        ("aggtranstype", Oid),
        ("agginitval", Text),
    ],
};

pub const PG_OPERATOR: Spec = Spec {
    name: "pg_operator",
    columns: &[
        ("oid", Oid),
        ("oprname", Text),
        ("oprnamespace", Oid),
        ("oprowner", Oid),
        ("oprkind", Text),
        ("oprcanmerge", Bool),
        ("oprcanhash", Bool),
        ("oprleft", Oid),
        ("oprright", Oid),
        ("oprresult", Oid),
        ("oprcom", Oid),
        ("oprnegate", Oid),
        ("oprcode", Text),
    ],
};

pub const PG_SETTINGS: Spec = Spec {
    name: "pg_settings",
    columns: &[
        ("name", Text),
        ("setting", Text),
        ("unit", Text),
        ("category", Text),
        ("short_desc", Text),
        ("extra_desc", Text),
        ("context", Text),
        ("vartype", Text),
        ("source", Text),
        ("min_val", Text),
        ("max_val", Text),
        ("enumvals", TextList),
        ("boot_val", Text),
        ("reset_val", Text),
        ("sourcefile", Text),
        ("sourceline", Int4),
        ("pending_restart", Bool),
    ],
};

pub const PG_DATABASE: Spec = Spec {
    name: "pg_database",
    columns: &[
        ("oid", Oid),
        ("datname", Text),
        ("datdba", Oid),
        ("encoding", Int4),
        ("datlocprovider", Text),
        ("datistemplate", Bool),
        ("datallowconn", Bool),
        ("datconnlimit", Int4),
        ("dattablespace", Oid),
        ("datcollate", Text),
        ("datctype", Text),
        ("daticulocale", Text),
        ("datcollversion", Text),
        ("datacl", TextList),
    ],
};

pub const PG_ROLES: Spec = Spec {
    name: "pg_roles",
    columns: &[
        ("rolname", Text),
        ("rolsuper", Bool),
        ("rolinherit", Bool),
        ("rolcreaterole", Bool),
        ("rolcreatedb", Bool),
        ("rolcanlogin", Bool),
        ("rolreplication", Bool),
        ("rolconnlimit", Int4),
        ("rolpassword", Text),
        ("rolvaliduntil", Text),
        ("rolbypassrls", Bool),
        ("rolconfig", TextList),
        ("oid", Oid),
    ],
};

pub const PG_USER: Spec = Spec {
    name: "pg_user",
    columns: &[
        ("usename", Text),
        ("usesysid", Oid),
        ("usecreatedb", Bool),
        ("usesuper", Bool),
        ("userepl", Bool),
        ("usebypassrls", Bool),
        ("passwd", Text),
        ("valuntil", Text),
        ("useconfig", TextList),
    ],
};

pub const PG_VIEWS: Spec = Spec {
    name: "pg_views",
    columns: &[
        ("schemaname", Text),
        ("viewname", Text),
        ("viewowner", Text),
        ("definition", Text),
    ],
};

pub const PG_MATVIEWS: Spec = Spec {
    name: "pg_matviews",
    columns: &[
        ("schemaname", Text),
        ("matviewname", Text),
        ("matviewowner", Text),
        ("tablespace", Text),
        ("hasindexes", Bool),
        ("ispopulated", Bool),
        ("definition", Text),
    ],
};

pub const PG_TABLES: Spec = Spec {
    name: "pg_tables",
    columns: &[
        ("schemaname", Text),
        ("tablename", Text),
        ("tableowner", Text),
        ("tablespace", Text),
        ("hasindexes", Bool),
        ("hasrules", Bool),
        ("hastriggers", Bool),
        ("rowsecurity", Bool),
    ],
};

pub const PG_INDEXES: Spec = Spec {
    name: "pg_indexes",
    columns: &[
        ("schemaname", Text),
        ("tablename", Text),
        ("indexname", Text),
        ("tablespace", Text),
        ("indexdef", Text),
    ],
};

pub const PG_AM: Spec = Spec {
    name: "pg_am",
    columns: &[
        ("oid", Oid),
        ("amname", Text),
        ("amhandler", Text),
        ("amtype", Text),
    ],
};

pub const PG_ATTRDEF: Spec = Spec {
    name: "pg_attrdef",
    columns: &[
        ("oid", Oid),
        ("adrelid", Oid),
        ("adnum", Int2),
        ("adbin", Text),
    ],
};

pub const PG_ENUM: Spec = Spec {
    name: "pg_enum",
    columns: &[
        ("oid", Oid),
        ("enumtypid", Oid),
        ("enumsortorder", Float4),
        ("enumlabel", Text),
    ],
};

pub const PG_RANGE: Spec = Spec {
    name: "pg_range",
    columns: &[
        ("rngtypid", Oid),
        ("rngsubtype", Oid),
        ("rngmultitypid", Oid),
        ("rngcollation", Oid),
        ("rngsubopc", Oid),
        ("rngcanonical", Text),
        ("rngsubdiff", Text),
    ],
};

pub const PG_COLLATION: Spec = Spec {
    name: "pg_collation",
    columns: &[
        ("oid", Oid),
        ("collname", Text),
        ("collnamespace", Oid),
        ("collowner", Oid),
        ("collprovider", Text),
        ("collisdeterministic", Bool),
        ("collencoding", Int4),
        ("collcollate", Text),
        ("collctype", Text),
    ],
};

pub const PG_TABLESPACE: Spec = Spec {
    name: "pg_tablespace",
    columns: &[
        ("oid", Oid),
        ("spcname", Text),
        ("spcowner", Oid),
        ("spcacl", TextList),
        ("spcoptions", TextList),
    ],
};

pub const PG_INHERITS: Spec = Spec {
    name: "pg_inherits",
    columns: &[
        ("inhrelid", Oid),
        ("inhparent", Oid),
        ("inhseqno", Int4),
        ("inhdetachpending", Bool),
    ],
};

pub const PG_DEPEND: Spec = Spec {
    name: "pg_depend",
    columns: &[
        ("classid", Oid),
        ("objid", Oid),
        ("objsubid", Int4),
        ("refclassid", Oid),
        ("refobjid", Oid),
        ("refobjsubid", Int4),
        ("deptype", Text),
    ],
};

pub const PG_POLICY: Spec = Spec {
    name: "pg_policy",
    columns: &[
        ("oid", Oid),
        ("polname", Text),
        ("polrelid", Oid),
        ("polcmd", Text),
        ("polpermissive", Bool),
        ("polroles", OidList),
        ("polqual", Text),
        ("polwithcheck", Text),
    ],
};

pub const PG_EXTENSION: Spec = Spec {
    name: "pg_extension",
    columns: &[
        ("oid", Oid),
        ("extname", Text),
        ("extowner", Oid),
        ("extnamespace", Oid),
        ("extrelocatable", Bool),
        ("extversion", Text),
    ],
};

/// Every `pg_catalog` table, in the order they get oids.
pub const PG_CATALOG: &[&Spec] = &[
    &PG_NAMESPACE,
    &PG_CLASS,
    &PG_ATTRIBUTE,
    &PG_TYPE,
    &PG_INDEX,
    &PG_CONSTRAINT,
    &PG_DESCRIPTION,
    &PG_PROC,
    &PG_AGGREGATE,
    &PG_OPERATOR,
    &PG_SETTINGS,
    &PG_DATABASE,
    &PG_ROLES,
    &PG_USER,
    &PG_VIEWS,
    &PG_MATVIEWS,
    &PG_TABLES,
    &PG_INDEXES,
    &PG_AM,
    &PG_ATTRDEF,
    &PG_ENUM,
    &PG_RANGE,
    &PG_COLLATION,
    &PG_TABLESPACE,
    &PG_INHERITS,
    &PG_DEPEND,
    &PG_POLICY,
    &PG_EXTENSION,
];

fn oid(o: u32) -> V {
    V::Oid(o)
}

fn text(s: &str) -> V {
    V::Text(s.to_string())
}

/// The rows of `spec` (an empty list for the catalogs of absent features).
pub fn rows(spec: &Spec, objects: &Objects, db: &Database) -> Vec<Vec<V>> {
    match spec.name {
        "pg_namespace" => NAMESPACES
            .iter()
            .map(|n| vec![oid(n.oid), text(n.name), oid(OWNER_OID), V::Null])
            .collect(),
        "pg_class" => objects
            .relations
            .iter()
            .map(|r| class_row(r, objects))
            .collect(),
        "pg_attribute" => attribute_rows(objects),
        "pg_type" => type_rows(),
        "pg_index" => objects.indexes.iter().map(index_row).collect(),
        "pg_constraint" => objects.constraints.iter().map(constraint_row).collect(),
        "pg_proc" => proc_rows(),
        "pg_aggregate" => aggregate_rows(),
        "pg_operator" => operator_rows(),
        "pg_settings" => settings(db)
            .into_iter()
            .map(|s| {
                vec![
                    text(s.name),
                    V::Text(s.value.clone()),
                    V::Null,
                    text(s.category),
                    text(s.description),
                    V::Null,
                    text("user"),
                    text(s.vartype),
                    text("default"),
                    V::Null,
                    V::Null,
                    V::Null,
                    V::Text(s.value.clone()),
                    V::Text(s.value),
                    V::Null,
                    V::Null,
                    V::Bool(false),
                ]
            })
            .collect(),
        "pg_database" => vec![vec![
            oid(DATABASE_OID),
            text("weir"),
            oid(OWNER_OID),
            V::I32(6),
            text("c"),
            V::Bool(false),
            V::Bool(true),
            V::I32(-1),
            oid(1663),
            text("C.UTF-8"),
            text("C.UTF-8"),
            V::Null,
            V::Null,
            V::Null,
        ]],
        "pg_roles" => vec![vec![
            text(OWNER),
            V::Bool(true),
            V::Bool(true),
            V::Bool(true),
            V::Bool(true),
            V::Bool(true),
            V::Bool(false),
            V::I32(-1),
            text("********"),
            V::Null,
            V::Bool(true),
            V::Null,
            oid(OWNER_OID),
        ]],
        "pg_user" => vec![vec![
            text(OWNER),
            oid(OWNER_OID),
            V::Bool(true),
            V::Bool(true),
            V::Bool(false),
            V::Bool(true),
            text("********"),
            V::Null,
            V::Null,
        ]],
        "pg_views" => objects
            .user_relations()
            .filter(|r| r.kind == "v")
            .map(|r| {
                vec![
                    text(r.namespace_name()),
                    V::Text(r.name.clone()),
                    text(OWNER),
                    r.definition.clone().into(),
                ]
            })
            .collect(),
        "pg_matviews" => objects
            .user_relations()
            .filter(|r| r.kind == "m")
            .map(|r| {
                vec![
                    text("public"),
                    V::Text(r.name.clone()),
                    text(OWNER),
                    V::Null,
                    V::Bool(objects.indexes.iter().any(|i| i.table_oid == r.oid)),
                    V::Bool(true),
                    r.definition.clone().into(),
                ]
            })
            .collect(),
        "pg_tables" => objects
            .relations
            .iter()
            .filter(|r| r.kind == "r")
            .map(|r| {
                vec![
                    text(r.namespace_name()),
                    V::Text(r.name.clone()),
                    text(OWNER),
                    V::Null,
                    V::Bool(objects.indexes.iter().any(|i| i.table_oid == r.oid)),
                    V::Bool(false),
                    V::Bool(false),
                    V::Bool(false),
                ]
            })
            .collect(),
        "pg_indexes" => objects
            .indexes
            .iter()
            .map(|i| {
                vec![
                    text("public"),
                    V::Text(i.table_name.clone()),
                    V::Text(i.name.clone()),
                    V::Null,
                    V::Text(index_definition(i, objects)),
                ]
            })
            .collect(),
        "pg_am" => vec![
            vec![
                oid(AM_HEAP),
                text("heap"),
                text("heap_tableam_handler"),
                text("t"),
            ],
            vec![oid(AM_BTREE), text("btree"), text("bthandler"), text("i")],
        ],
        "pg_collation" => vec![vec![
            oid(100),
            text("default"),
            oid(NAMESPACE_PG_CATALOG),
            oid(OWNER_OID),
            text("d"),
            V::Bool(true),
            V::I32(-1),
            V::Null,
            V::Null,
        ]],
        "pg_tablespace" => vec![vec![
            oid(1663),
            text("pg_default"),
            oid(OWNER_OID),
            V::Null,
            V::Null,
        ]],
        _ => vec![],
    }
}

fn class_row(r: &Relation, objects: &Objects) -> Vec<V> {
    let has_index = objects.indexes.iter().any(|i| i.table_oid == r.oid);
    vec![
        oid(r.oid),
        V::Text(r.name.clone()),
        oid(r.namespace),
        oid(0),
        oid(0),
        oid(OWNER_OID),
        oid(if r.kind == "i" {
            AM_BTREE
        } else if r.kind == "v" {
            0
        } else {
            AM_HEAP
        }),
        oid(r.oid),
        oid(0),
        V::I32(0),
        // Unknown row count, as Postgres reports a never-analyzed relation.
        V::F32(-1.0),
        V::I32(0),
        oid(0),
        V::Bool(has_index),
        V::Bool(false),
        text("p"),
        text(r.kind),
        V::I16(r.columns.len() as i16),
        V::I16(0),
        V::Bool(false),
        V::Bool(false),
        V::Bool(false),
        V::Bool(false),
        V::Bool(false),
        V::Bool(true),
        text(if r.kind == "i" { "n" } else { "d" }),
        V::Bool(false),
        oid(0),
        V::Null,
        if r.options.is_empty() {
            V::Null
        } else {
            V::Texts(r.options.clone())
        },
        V::Null,
    ]
}

fn attribute_rows(objects: &Objects) -> Vec<Vec<V>> {
    let mut rows = Vec::new();
    for r in &objects.relations {
        for (i, c) in r.columns.iter().enumerate() {
            let t = super::types::by_oid(c.type_oid);
            rows.push(vec![
                oid(r.oid),
                V::Text(c.name.clone()),
                oid(c.type_oid),
                V::I32(-1),
                V::I16(t.map_or(-1, |t| t.len)),
                V::I16(i as i16 + 1),
                V::I32(i32::from(t.is_some_and(|t| t.element != 0))),
                V::I32(-1),
                V::I32(c.typmod),
                V::Bool(t.is_some_and(|t| t.len > 0 && t.len <= 8)),
                text("i"),
                text(if t.is_some_and(|t| t.len > 0) {
                    "p"
                } else {
                    "x"
                }),
                text(""),
                V::Bool(c.not_null),
                V::Bool(false),
                V::Bool(false),
                text(""),
                text(""),
                V::Bool(false),
                V::Bool(true),
                V::I32(0),
                oid(if matches!(c.type_oid, 25 | 1043 | 1042 | 19) {
                    100
                } else {
                    0
                }),
                V::Null,
                V::Null,
                V::Null,
            ]);
        }
    }
    rows
}

fn type_rows() -> Vec<Vec<V>> {
    TYPES
        .iter()
        .map(|t| {
            let is_array = t.element != 0;
            let io = |suffix: &str| {
                if is_array {
                    format!("array_{suffix}")
                } else {
                    format!("{}{suffix}", t.name)
                }
            };
            vec![
                oid(t.oid),
                text(t.name),
                oid(NAMESPACE_PG_CATALOG),
                oid(OWNER_OID),
                V::I16(t.len),
                V::Bool(t.len > 0 && t.len <= 8),
                text(t.kind),
                text(t.category),
                V::Bool(matches!(
                    t.name,
                    "bool" | "float8" | "text" | "timestamptz" | "oid"
                )),
                V::Bool(true),
                text(","),
                oid(0),
                text(if is_array {
                    "array_subscript_handler"
                } else {
                    "-"
                }),
                oid(t.element),
                oid(t.array),
                V::Text(io("in")),
                V::Text(io("out")),
                V::Text(io("recv")),
                V::Text(io("send")),
                text("-"),
                text("-"),
                text("-"),
                text(if t.len == 8 { "d" } else { "i" }),
                text(if t.len > 0 { "p" } else { "x" }),
                V::Bool(false),
                oid(0),
                V::I32(-1),
                V::I32(0),
                oid(
                    if matches!(t.name, "text" | "varchar" | "bpchar" | "name") {
                        100
                    } else {
                        0
                    },
                ),
                V::Null,
                V::Null,
                V::Null,
            ]
        })
        .collect()
}

fn index_row(ix: &Index) -> Vec<V> {
    let n = ix.keys.len() as i16;
    vec![
        oid(ix.oid),
        oid(ix.table_oid),
        V::I16(n),
        V::I16(n),
        V::Bool(ix.primary),
        V::Bool(false),
        V::Bool(ix.primary),
        V::Bool(false),
        V::Bool(true),
        V::Bool(false),
        V::Bool(true),
        V::Bool(false),
        V::Bool(true),
        V::Bool(true),
        V::Bool(false),
        V::I16s(ix.keys.clone()),
        V::Oids(vec![0; ix.keys.len()]),
        V::Oids(vec![0; ix.keys.len()]),
        V::I16s(vec![0; ix.keys.len()]),
        V::Null,
        V::Null,
    ]
}

fn constraint_row(c: &Constraint) -> Vec<V> {
    vec![
        oid(c.oid),
        V::Text(c.name.clone()),
        oid(NAMESPACE_PUBLIC),
        text("p"),
        V::Bool(false),
        V::Bool(false),
        V::Bool(true),
        oid(c.table_oid),
        oid(0),
        oid(c.index_oid),
        oid(0),
        oid(0),
        text(" "),
        text(" "),
        text(" "),
        V::Bool(true),
        V::I32(0),
        V::Bool(true),
        V::I16s(c.keys.clone()),
        V::Null,
        V::Null,
        V::Null,
        V::Null,
        V::Null,
        V::Null,
    ]
}

fn proc_rows() -> Vec<Vec<V>> {
    PROCS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            vec![
                oid(procs::PROC_OID_BASE + i as u32),
                text(p.name),
                oid(NAMESPACE_PG_CATALOG),
                oid(OWNER_OID),
                // internal
                oid(12),
                V::F32(1.0),
                V::F32(0.0),
                oid(0),
                text("-"),
                text(p.kind),
                V::Bool(false),
                V::Bool(false),
                V::Bool(p.kind == "f"),
                V::Bool(false),
                text(if p.name == "now" { "s" } else { "i" }),
                text("s"),
                V::I16(p.args.len() as i16),
                V::I16(0),
                oid(p.result),
                V::Oids(p.args.to_vec()),
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                text(p.name),
                V::Null,
                V::Null,
                V::Null,
                V::Null,
            ]
        })
        .collect()
}

fn aggregate_rows() -> Vec<Vec<V>> {
    PROCS
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind == "a")
        .map(|(i, p)| {
            vec![
                oid(procs::PROC_OID_BASE + i as u32),
                text("n"),
                V::I16(0),
                V::Text(format!("{}_transfn", p.name)),
                text("-"),
                oid(0),
                oid(p.result),
                V::Null,
            ]
        })
        .collect()
}

fn operator_rows() -> Vec<Vec<V>> {
    procs::operators()
        .iter()
        .enumerate()
        .map(|(i, o)| {
            vec![
                oid(procs::OPERATOR_OID_BASE + i as u32),
                text(o.name),
                oid(NAMESPACE_PG_CATALOG),
                oid(OWNER_OID),
                text("b"),
                V::Bool(false),
                V::Bool(o.name == "="),
                oid(o.left),
                oid(o.right),
                oid(o.result),
                oid(0),
                oid(0),
                text("-"),
            ]
        })
        .collect()
}

/// One run-time setting as `pg_settings` and `current_setting` report it.
pub struct Setting {
    pub name: &'static str,
    pub value: String,
    pub category: &'static str,
    pub description: &'static str,
    pub vartype: &'static str,
}

/// Postgres's version as Weir reports it (the startup `server_version` parameter,
/// `SHOW server_version`, `version()`): 15, the dialect Weir follows.
pub const SERVER_VERSION: &str = "15.0";
pub const SERVER_VERSION_NUM: &str = "150000";

/// The settings a client may ask about: the server's fixed Postgres behaviour and
/// Weir's own configuration. Per-session `SET`s are not reflected (a catalog table
/// is the same for every session).
pub fn settings(db: &Database) -> Vec<Setting> {
    let s = |name, value: &str, category, description, vartype| Setting {
        name,
        value: value.to_string(),
        category,
        description,
        vartype,
    };
    let client = "Client Connection Defaults";
    let preset = "Preset Options";
    vec![
        s(
            "server_version",
            SERVER_VERSION,
            preset,
            "Shows the server version.",
            "string",
        ),
        s(
            "server_version_num",
            SERVER_VERSION_NUM,
            preset,
            "Shows the server version as an integer.",
            "integer",
        ),
        s(
            "server_encoding",
            "UTF8",
            preset,
            "Shows the server (database) character set encoding.",
            "string",
        ),
        s(
            "client_encoding",
            "UTF8",
            client,
            "Sets the client's character set encoding.",
            "string",
        ),
        s(
            "standard_conforming_strings",
            "on",
            "Version and Platform Compatibility",
            "Causes '...' strings to treat backslashes literally.",
            "bool",
        ),
        s(
            "DateStyle",
            "ISO, MDY",
            client,
            "Sets the display format for date and time values.",
            "string",
        ),
        s(
            "IntervalStyle",
            "postgres",
            client,
            "Sets the display format for interval values.",
            "enum",
        ),
        s(
            "TimeZone",
            "UTC",
            client,
            "Sets the time zone for displaying and interpreting time stamps.",
            "string",
        ),
        s(
            "search_path",
            "\"$user\", public",
            client,
            "Sets the schema search order for names that are not schema-qualified.",
            "string",
        ),
        s(
            "default_transaction_isolation",
            "serializable",
            client,
            "Sets the transaction isolation level of each new transaction.",
            "enum",
        ),
        s(
            "transaction_isolation",
            "serializable",
            client,
            "Sets the current transaction's isolation level.",
            "enum",
        ),
        s(
            "default_transaction_read_only",
            "off",
            client,
            "Sets the default read-only status of new transactions.",
            "bool",
        ),
        s(
            "max_identifier_length",
            "63",
            preset,
            "Shows the maximum identifier length.",
            "integer",
        ),
        s(
            "integer_datetimes",
            "on",
            preset,
            "Shows whether datetimes are integer based.",
            "bool",
        ),
        s(
            "lc_collate",
            "C.UTF-8",
            preset,
            "Shows the collation order locale.",
            "string",
        ),
        s(
            "lc_ctype",
            "C.UTF-8",
            preset,
            "Shows the character classification and case conversion locale.",
            "string",
        ),
        s(
            "max_connections",
            "100",
            "Connections and Authentication",
            "Sets the maximum number of concurrent connections.",
            "integer",
        ),
        s(
            "block_size",
            "8192",
            preset,
            "Shows the size of a disk block.",
            "integer",
        ),
        s(
            "statement_timeout",
            "0",
            client,
            "Sets the maximum allowed duration of any statement.",
            "integer",
        ),
        s(
            "application_name",
            "",
            "Reporting and Logging",
            "Sets the application name to be reported in statistics and logs.",
            "string",
        ),
        s(
            "parallelism.default",
            &db.config.parallelism.to_string(),
            "Weir",
            "Parallelism of new materialized views.",
            "integer",
        ),
        s(
            "pipeline.max-parallelism",
            &db.config.max_parallelism.to_string(),
            "Weir",
            "Number of key groups of keyed state.",
            "integer",
        ),
        s(
            "barrier.interval",
            &format!("{}ms", db.config.barrier_interval.as_millis()),
            "Weir",
            "Interval between checkpoint barriers.",
            "string",
        ),
    ]
}
