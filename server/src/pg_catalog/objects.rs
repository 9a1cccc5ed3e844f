//! Weir's catalog as Postgres objects with oids: the namespaces, the relations (user
//! tables and materialized views, the catalog's own tables, and indexes) with their
//! columns, and the constraints. Every catalog table and lookup function is generated
//! from one [`Objects`] snapshot taken per statement.
//!
//! Oids: namespaces and the main system catalogs keep Postgres's own oids (tools
//! compare `classoid = 'pg_class'::regclass`); a user relation is its catalog id plus
//! [`RELATION_OID_BASE`]; a primary key's index and constraint are derived from the
//! table's oid; an index recorded by CREATE INDEX gets a hash of its (unique) name.
//! Sinks are jobs that read a relation, not relations: they are not listed.

use super::rows::Spec;
use super::types;
use crate::catalog::RelationKind;
use crate::database::Database;

pub const NAMESPACE_PG_CATALOG: u32 = 11;
pub const NAMESPACE_PUBLIC: u32 = 2200;
pub const NAMESPACE_INFORMATION_SCHEMA: u32 = 13000;
/// `weir_catalog` (`crate::weir_catalog`): listed in `pg_class` so tools find it.
pub const NAMESPACE_WEIR_CATALOG: u32 = 13100;
/// Relation oids are the catalog id plus this offset, clear of Postgres's system oids.
pub const RELATION_OID_BASE: u32 = 16384;
/// The owner of everything (Postgres's bootstrap superuser oid).
pub const OWNER_OID: u32 = 10;
pub const OWNER: &str = "weir";
pub const DATABASE_OID: u32 = 16384;
/// `pg_am` rows: tables use `heap`, indexes `btree`.
pub const AM_HEAP: u32 = 2;
pub const AM_BTREE: u32 = 403;

const PKEY_INDEX_OFFSET: u32 = 0x1000_0000;
const PKEY_CONSTRAINT_OFFSET: u32 = 0x2000_0000;
const DECLARED_INDEX_BIT: u32 = 0x4000_0000;

pub struct Namespace {
    pub oid: u32,
    pub name: &'static str,
}

pub const NAMESPACES: &[Namespace] = &[
    Namespace {
        oid: NAMESPACE_PG_CATALOG,
        name: "pg_catalog",
    },
    Namespace {
        oid: NAMESPACE_PUBLIC,
        name: "public",
    },
    Namespace {
        oid: NAMESPACE_INFORMATION_SCHEMA,
        name: "information_schema",
    },
    Namespace {
        oid: NAMESPACE_WEIR_CATALOG,
        name: "weir_catalog",
    },
];

pub fn namespace_name(oid: u32) -> Option<&'static str> {
    NAMESPACES.iter().find(|n| n.oid == oid).map(|n| n.name)
}

pub struct Column {
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
    pub not_null: bool,
}

/// `relkind`: `r` table, `m` materialized view, `v` view, `i` index.
pub struct Relation {
    pub oid: u32,
    pub name: String,
    pub namespace: u32,
    pub kind: &'static str,
    pub columns: Vec<Column>,
    /// The defining query of a view or materialized view.
    pub definition: Option<String>,
    /// `reloptions`: a materialized view's `WITH (key = value)` settings.
    pub options: Vec<String>,
}

impl Relation {
    pub fn namespace_name(&self) -> &'static str {
        namespace_name(self.namespace).unwrap_or("public")
    }
}

pub struct Index {
    pub oid: u32,
    pub name: String,
    pub table_oid: u32,
    pub table_name: String,
    /// Column numbers (1-based) of the key.
    pub keys: Vec<i16>,
    pub primary: bool,
}

/// A primary-key constraint (the only kind Weir has besides NOT NULL, which
/// Postgres keeps in `pg_attribute.attnotnull`).
pub struct Constraint {
    pub oid: u32,
    pub name: String,
    pub table_oid: u32,
    pub table_name: String,
    pub index_oid: u32,
    pub keys: Vec<i16>,
}

pub struct Objects {
    pub relations: Vec<Relation>,
    pub indexes: Vec<Index>,
    pub constraints: Vec<Constraint>,
}

/// The catalog's own tables with their Postgres oids where tools rely on them
/// (`'pg_class'::regclass`), else numbered after them.
fn system_relation_oid(name: &str, position: usize) -> u32 {
    match name {
        "pg_type" => 1247,
        "pg_attribute" => 1249,
        "pg_proc" => 1255,
        "pg_class" => 1259,
        "pg_database" => 1262,
        "pg_aggregate" => 2600,
        "pg_am" => 2601,
        "pg_attrdef" => 2604,
        "pg_constraint" => 2606,
        "pg_description" => 2609,
        "pg_index" => 2610,
        "pg_namespace" => 2615,
        "pg_operator" => 2617,
        "pg_enum" => 3501,
        "pg_range" => 3541,
        _ => 12000 + position as u32,
    }
}

/// Postgres's system views (the rest of `pg_catalog` are tables).
const SYSTEM_VIEWS: &[&str] = &[
    "pg_settings",
    "pg_roles",
    "pg_user",
    "pg_views",
    "pg_matviews",
    "pg_tables",
    "pg_indexes",
];

fn name_hash(name: &str) -> u32 {
    // FNV-1a: stable across runs and releases (unlike std's hasher).
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// The query of `CREATE [MATERIALIZED] VIEW name AS query`, as Postgres's
/// `pg_get_viewdef` prints it (without the CREATE, ending in `;`).
fn view_query(sql: &str) -> String {
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    match Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .ok()
        .as_deref()
    {
        Some([Statement::CreateView(v)]) => format!("{};", v.query),
        _ => sql.to_string(),
    }
}

impl Objects {
    /// Snapshot of `db`'s catalog plus the system tables in `system`
    /// (namespace oid and spec of each).
    pub fn collect(db: &Database, system: &[(u32, &Spec)]) -> Objects {
        let mut relations = Vec::new();
        let mut indexes = Vec::new();
        let mut constraints = Vec::new();
        for (position, (namespace, spec)) in system.iter().enumerate() {
            let view =
                *namespace == NAMESPACE_INFORMATION_SCHEMA || SYSTEM_VIEWS.contains(&spec.name);
            relations.push(Relation {
                oid: system_relation_oid(spec.name, position),
                name: spec.name.to_string(),
                namespace: *namespace,
                kind: if view { "v" } else { "r" },
                columns: spec
                    .columns
                    .iter()
                    .map(|(name, col)| Column {
                        name: name.to_string(),
                        type_oid: col.type_oid(),
                        typmod: -1,
                        not_null: false,
                    })
                    .collect(),
                definition: None,
                options: vec![],
            });
        }
        let cat = db.catalog.read();
        for r in cat.relations.iter() {
            let kind = match r.kind {
                RelationKind::Table => "r",
                RelationKind::MaterializedView => "m",
                RelationKind::View => "v",
                RelationKind::Sink => continue,
            };
            let oid = RELATION_OID_BASE + r.id as u32;
            let schema = db.relation_schema(&r.name);
            let columns = r
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let t = schema.as_ref().and_then(|s| s.fields().get(i).cloned());
                    // A plain view holds no rows and has no schema of its own: its
                    // columns' types are the names recorded when it was created.
                    let named = || types::by_name(&c.pg_type).map_or(25, |t| t.oid);
                    Column {
                        name: c.name.clone(),
                        type_oid: t
                            .as_ref()
                            .map_or_else(named, |f| types::type_oid(f.data_type())),
                        typmod: t.as_ref().map_or(-1, |f| types::typmod(f.data_type())),
                        not_null: !c.nullable,
                    }
                })
                .collect();
            relations.push(Relation {
                oid,
                name: r.name.clone(),
                namespace: NAMESPACE_PUBLIC,
                kind,
                columns,
                definition: (kind != "r").then(|| view_query(&r.sql)),
                options: r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            });
            // A materialized view's key is derived, not a declared constraint.
            if kind == "r" && !r.primary_key.is_empty() {
                let keys: Vec<i16> = r.primary_key.iter().map(|k| *k as i16 + 1).collect();
                let name = format!("{}_pkey", r.name);
                indexes.push(Index {
                    oid: oid + PKEY_INDEX_OFFSET,
                    name: name.clone(),
                    table_oid: oid,
                    table_name: r.name.clone(),
                    keys: keys.clone(),
                    primary: true,
                });
                constraints.push(Constraint {
                    oid: oid + PKEY_CONSTRAINT_OFFSET,
                    name,
                    table_oid: oid,
                    table_name: r.name.clone(),
                    index_oid: oid + PKEY_INDEX_OFFSET,
                    keys,
                });
            }
        }
        for ix in &cat.indexes {
            let Some(table) = relations
                .iter()
                .find(|r| r.namespace == NAMESPACE_PUBLIC && r.name == ix.table)
            else {
                continue;
            };
            let keys = ix
                .columns
                .iter()
                .filter_map(|c| table.columns.iter().position(|k| k.name == *c))
                .map(|p| p as i16 + 1)
                .collect();
            indexes.push(Index {
                oid: DECLARED_INDEX_BIT | (name_hash(&ix.name) & 0x0fff_ffff),
                name: ix.name.clone(),
                table_oid: table.oid,
                table_name: table.name.clone(),
                keys,
                primary: false,
            });
        }
        // Indexes are relations too (relkind 'i'), with their key columns.
        for ix in &indexes {
            let table = relations.iter().find(|r| r.oid == ix.table_oid);
            let columns = ix
                .keys
                .iter()
                .filter_map(|k| table.and_then(|t| t.columns.get(*k as usize - 1)))
                .map(|c| Column {
                    name: c.name.clone(),
                    type_oid: c.type_oid,
                    typmod: c.typmod,
                    not_null: false,
                })
                .collect();
            relations.push(Relation {
                oid: ix.oid,
                name: ix.name.clone(),
                namespace: NAMESPACE_PUBLIC,
                kind: "i",
                columns,
                definition: None,
                options: vec![],
            });
        }
        Objects {
            relations,
            indexes,
            constraints,
        }
    }

    pub fn relation(&self, oid: u32) -> Option<&Relation> {
        self.relations.iter().find(|r| r.oid == oid)
    }

    /// A relation by (possibly `schema.`-qualified, possibly quoted) name, searched
    /// in `pg_catalog` then `public` as Postgres's default search path does.
    pub fn relation_by_name(&self, name: &str) -> Option<&Relation> {
        let unquote = |s: &str| {
            if s.starts_with('"') && s.ends_with('"') && s.len() >= 2 {
                s[1..s.len() - 1].replace("\"\"", "\"")
            } else {
                s.to_ascii_lowercase()
            }
        };
        let (schema, rel) = match name.split_once('.') {
            Some((s, r)) if !name.starts_with('"') || s.ends_with('"') => {
                (Some(unquote(s.trim())), unquote(r.trim()))
            }
            _ => (None, unquote(name.trim())),
        };
        let in_schema = |ns: u32| {
            self.relations
                .iter()
                .find(|r| r.namespace == ns && r.name == rel)
        };
        match schema.as_deref() {
            Some(s) => NAMESPACES
                .iter()
                .find(|n| n.name == s)
                .and_then(|n| in_schema(n.oid)),
            None => in_schema(NAMESPACE_PG_CATALOG).or_else(|| in_schema(NAMESPACE_PUBLIC)),
        }
    }

    pub fn index(&self, oid: u32) -> Option<&Index> {
        self.indexes.iter().find(|i| i.oid == oid)
    }

    pub fn constraint(&self, oid: u32) -> Option<&Constraint> {
        self.constraints.iter().find(|c| c.oid == oid)
    }

    /// The user's relations (not the catalog's own).
    pub fn user_relations(&self) -> impl Iterator<Item = &Relation> {
        self.relations
            .iter()
            .filter(|r| r.namespace == NAMESPACE_PUBLIC)
    }
}

/// Quotes `name` as an identifier when Postgres would (`quote_ident`).
pub fn quote_ident(name: &str) -> String {
    // Reserved words tools' names might collide with (Postgres quotes all its
    // reserved keywords; these are the ones that are also type or column names).
    const RESERVED: &[&str] = &[
        "all",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "both",
        "case",
        "cast",
        "check",
        "collate",
        "column",
        "constraint",
        "create",
        "current_date",
        "current_role",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "false",
        "fetch",
        "for",
        "foreign",
        "from",
        "grant",
        "group",
        "having",
        "in",
        "into",
        "leading",
        "limit",
        "not",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "primary",
        "references",
        "select",
        "session_user",
        "some",
        "table",
        "then",
        "to",
        "trailing",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "when",
        "where",
        "window",
        "with",
    ];
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$')
        && !RESERVED.contains(&name);
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `pg_get_indexdef(oid)`: the CREATE INDEX statement Postgres would print.
pub fn index_definition(ix: &Index, objects: &Objects) -> String {
    let table = objects.relation(ix.table_oid);
    let columns: Vec<String> = ix
        .keys
        .iter()
        .filter_map(|k| table.and_then(|t| t.columns.get(*k as usize - 1)))
        .map(|c| quote_ident(&c.name))
        .collect();
    format!(
        "CREATE {}INDEX {} ON public.{} USING btree ({})",
        if ix.primary { "UNIQUE " } else { "" },
        quote_ident(&ix.name),
        quote_ident(&ix.table_name),
        columns.join(", ")
    )
}

/// `pg_get_constraintdef(oid)`: `PRIMARY KEY (a, b)`.
pub fn constraint_definition(c: &Constraint, objects: &Objects) -> String {
    let table = objects.relation(c.table_oid);
    let columns: Vec<String> = c
        .keys
        .iter()
        .filter_map(|k| table.and_then(|t| t.columns.get(*k as usize - 1)))
        .map(|c| quote_ident(&c.name))
        .collect();
    format!("PRIMARY KEY ({})", columns.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_ident_quotes_like_postgres() {
        assert_eq!(quote_ident("items"), "items");
        assert_eq!(quote_ident("Items"), "\"Items\"");
        assert_eq!(quote_ident("any"), "\"any\"");
        assert_eq!(quote_ident("a b"), "\"a b\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident("1a"), "\"1a\"");
    }

    #[test]
    fn view_query_is_the_select_part() {
        assert_eq!(
            view_query("CREATE MATERIALIZED VIEW v AS SELECT a FROM t"),
            "SELECT a FROM t;"
        );
    }
}
