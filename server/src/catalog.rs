//! The catalog: every table and view, in creation order, persisted as
//! `meta/catalog.json` (atomically replaced on each DDL). Recovery re-runs the stored
//! DDL in order, then replays the table logs.

use serde::{Deserialize, Serialize};
use weir_storage::meta_store::MetaStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelationKind {
    Table,
    MaterializedView,
    /// A sink (`CREATE SINK`): a job reading a relation, not itself readable.
    Sink,
    /// A plain view (`CREATE VIEW`): a stored query, expanded where it is used.
    View,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColumnInfo {
    pub name: String,
    /// The type as Postgres would print it (`integer`, `character varying`, ...).
    pub pg_type: String,
    pub nullable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelationEntry {
    pub id: u64,
    pub name: String,
    pub kind: RelationKind,
    /// The statement that created it, as the user wrote it.
    pub sql: String,
    pub columns: Vec<ColumnInfo>,
    /// Relations this one reads (views only).
    pub depends_on: Vec<String>,
    #[serde(default)]
    pub primary_key: Vec<usize>,
    #[serde(default)]
    pub parallelism: u32,
    /// Checkpoint and restart keys this view was created with (its `WITH (...)` and
    /// the session's `SET`s), so it keeps them across restarts.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, String>,
}

/// A declared index (recorded, not used by queries yet: see `index`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub table: String,
    pub columns: Vec<String>,
}

/// A scalar SQL function (`CREATE FUNCTION ... LANGUAGE SQL`), inlined where called
/// (see `statements::function`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionEntry {
    pub name: String,
    /// Parameter names (lower case), `None` for unnamed ones (`$n` only).
    pub arg_names: Vec<Option<String>>,
    /// Parameter types as SQL text (`INT`, `NUMERIC(10,2)`).
    pub arg_types: Vec<String>,
    pub return_type: String,
    /// The body: a query text, or `RETURN <expr>`.
    pub body: String,
    /// The statement that created it, as the user wrote it.
    pub sql: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Catalog {
    pub next_id: u64,
    pub relations: Vec<RelationEntry>,
    #[serde(default)]
    pub indexes: Vec<IndexEntry>,
    #[serde(default)]
    pub functions: Vec<FunctionEntry>,
    /// Bumped by every save: cached serving plans of an older generation are stale.
    #[serde(skip)]
    pub(crate) generation: std::sync::atomic::AtomicU64,
}

const CATALOG_FILE: &str = "catalog.json";

impl Catalog {
    pub fn load(meta: &MetaStore) -> Result<Catalog, String> {
        match meta.read(CATALOG_FILE).map_err(|e| e.to_string())? {
            None => Ok(Catalog {
                next_id: 1,
                ..Default::default()
            }),
            Some(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| format!("corrupt catalog: {e}"))
            }
        }
    }

    /// Writes the catalog (with high availability, committed to the cluster log
    /// before it returns: a deposed leader's DDL fails with 25006).
    pub fn save(&self, meta: &MetaStore) -> Result<(), weir_planner::SqlError> {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| weir_planner::SqlError::internal(e.to_string()))?;
        meta.write(CATALOG_FILE, &bytes)
            .map_err(|e| weir_executor::ExecError::Storage(e).into())
    }

    /// See the field: changes with every change to the catalog.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn get(&self, name: &str) -> Option<&RelationEntry> {
        self.relations.iter().find(|r| r.name == name)
    }

    pub fn allocate_id(&mut self) -> u64 {
        let id = self.next_id.max(1);
        self.next_id = id + 1;
        id
    }

    /// Relations that read `name` directly.
    pub fn dependents(&self, name: &str) -> Vec<String> {
        self.relations
            .iter()
            .filter(|r| r.depends_on.iter().any(|d| d == name))
            .map(|r| r.name.clone())
            .collect()
    }

    /// `name` and everything that (transitively) depends on it, dependents first.
    pub fn drop_order(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_dependents(name, &mut out);
        out
    }

    fn collect_dependents(&self, name: &str, out: &mut Vec<String>) {
        for d in self.dependents(name) {
            self.collect_dependents(&d, out);
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }

    /// Removes a relation and the indexes on it (as Postgres drops a table's indexes).
    pub fn remove(&mut self, name: &str) {
        self.relations.retain(|r| r.name != name);
        self.indexes.retain(|i| i.table != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, name: &str, deps: &[&str]) -> RelationEntry {
        RelationEntry {
            id,
            name: name.into(),
            kind: RelationKind::MaterializedView,
            sql: String::new(),
            columns: vec![],
            depends_on: deps.iter().map(|s| s.to_string()).collect(),
            primary_key: vec![],
            parallelism: 1,
            settings: Default::default(),
        }
    }

    #[test]
    fn drop_order_puts_dependents_first() {
        let c = Catalog {
            next_id: 4,
            relations: vec![
                entry(1, "t", &[]),
                entry(2, "v1", &["t"]),
                entry(3, "v2", &["v1"]),
            ],
            ..Default::default()
        };
        assert_eq!(c.drop_order("t"), vec!["v2", "v1", "t"]);
        assert_eq!(c.dependents("t"), vec!["v1"]);
    }
}
