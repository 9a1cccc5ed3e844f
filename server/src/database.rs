//! `Database`: the catalog, the runtime and statement dispatch.
//!
//! Startup (`Database::open`) recovers the catalog from `meta/catalog.json`, re-creates
//! every table and view in creation order, then replays every table log through the
//! dataflow so that all views are rebuilt (until checkpoints restore them directly).

use crate::catalog::{Catalog, RelationKind};
use crate::config::Config;
use crate::output::Output;
use crate::session::Session;
use crate::{ddl, dml, query, show};
use arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::{ObjectName, Statement};
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;
use weir_executor::{Runtime, RuntimeConfig};
use weir_planner::{parse_statement, split_statements, SqlError, SqlResult, WeirStatement};
use weir_storage::meta_store::MetaStore;

pub struct Database {
    pub config: Config,
    runtime: Arc<Runtime>,
    pub(crate) catalog: RwLock<Catalog>,
    /// Serializes DDL so that planning and deployment see one catalog.
    pub(crate) ddl_lock: tokio::sync::Mutex<()>,
    pub(crate) meta: MetaStore,
    /// Relation name → schema of what it holds (tables and views).
    pub(crate) schemas: RwLock<Vec<(String, SchemaRef)>>,
}

impl Database {
    pub async fn open(config: Config) -> Result<Arc<Database>, String> {
        std::fs::create_dir_all(config.data_dir.join("tables"))
            .map_err(|e| format!("cannot create data dir {}: {e}", config.data_dir.display()))?;
        let meta = MetaStore::open(&config.data_dir).map_err(|e| e.to_string())?;
        let stored = Catalog::load(&meta)?;
        let runtime = Runtime::start(
            RuntimeConfig {
                parallelism: config.parallelism,
                max_parallelism: config.max_parallelism,
                barrier_interval: config.barrier_interval,
            },
            0,
        );
        let db = Arc::new(Database {
            config,
            runtime,
            catalog: RwLock::new(Catalog {
                next_id: stored.next_id,
                relations: vec![],
            }),
            ddl_lock: tokio::sync::Mutex::new(()),
            meta,
            schemas: RwLock::new(Vec::new()),
        });
        db.recover(stored).await?;
        Ok(db)
    }

    async fn recover(&self, stored: Catalog) -> Result<(), String> {
        let mut replays = Vec::new();
        for entry in &stored.relations {
            match entry.kind {
                RelationKind::Table => {
                    let chunks = ddl::restore_table(self, entry).await.map_err(|e| {
                        format!("cannot restore table {}: {}", entry.name, e.message)
                    })?;
                    replays.push((entry.name.clone(), chunks));
                }
                RelationKind::MaterializedView => {
                    ddl::restore_view(self, entry).await.map_err(|e| {
                        format!("cannot restore view {}: {}", entry.name, e.message)
                    })?;
                }
            }
        }
        let mut rows = 0usize;
        {
            let mut w = self.runtime.lock_writes().await;
            for (name, chunks) in replays {
                let writer = w.table(&name).expect("restored table has a writer");
                for c in chunks {
                    rows += c.len();
                    writer
                        .write(c, true)
                        .await
                        .map_err(|e| format!("replay of {name} failed: {e}"))?;
                }
            }
            self.runtime
                .flush_locked(&mut w)
                .await
                .map_err(|e| e.to_string())?;
        }
        tracing::info!(
            relations = stored.relations.len(),
            replayed_rows = rows,
            "recovered catalog and table logs"
        );
        Ok(())
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    pub fn table_log_path(&self, id: u64) -> PathBuf {
        self.config
            .data_dir
            .join("tables")
            .join(format!("{id}.log"))
    }

    pub fn relation_schemas(&self) -> Vec<(String, SchemaRef)> {
        self.schemas.read().clone()
    }

    pub fn relation_schema(&self, name: &str) -> Option<SchemaRef> {
        self.schemas
            .read()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }

    /// Executes a simple-protocol query string: one output per statement, stopping at
    /// the first error (as Postgres does).
    pub async fn execute(&self, session: &mut Session, sql: &str) -> Vec<SqlResult<Output>> {
        let mut out = Vec::new();
        for stmt_sql in split_statements(sql) {
            let r = self.execute_one(session, &stmt_sql).await;
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    pub async fn execute_one(&self, session: &mut Session, sql: &str) -> SqlResult<Output> {
        let stmt = parse_statement(sql)?;
        match stmt {
            WeirStatement::Empty => Ok(Output::Empty),
            WeirStatement::Flush => {
                self.runtime.flush().await.map_err(SqlError::from)?;
                Ok(Output::command("FLUSH"))
            }
            WeirStatement::ShowTables => show::show_relations(self, RelationKind::Table),
            WeirStatement::ShowMaterializedViews => {
                show::show_relations(self, RelationKind::MaterializedView)
            }
            WeirStatement::ShowCreateMaterializedView(name) => show::show_create(self, &name),
            WeirStatement::ShowJobs => show::show_jobs(self),
            WeirStatement::ShowVariable(name) => show::show_variable(self, session, &name),
            WeirStatement::ExplainCreateMaterializedView(stmt) => {
                ddl::explain_create_view(self, session, &stmt).await
            }
            WeirStatement::Sql(stmt) => self.execute_sql(session, &stmt, sql).await,
        }
    }

    async fn execute_sql(
        &self,
        session: &mut Session,
        stmt: &Statement,
        sql: &str,
    ) -> SqlResult<Output> {
        match stmt {
            Statement::Query(_) => {
                let ctx = query::snapshot_context(self, session, stmt, Default::default()).await?;
                let (schema, batches) = query::run_query(&ctx, stmt).await?;
                Ok(Output::Rows { schema, batches })
            }
            Statement::Explain { statement, .. } if matches!(statement.as_ref(), Statement::CreateView(v) if v.materialized) => {
                ddl::explain_create_view(self, session, statement).await
            }
            Statement::Explain { .. } => {
                let ctx = query::snapshot_context(self, session, stmt, Default::default()).await?;
                let (schema, batches) = query::run_query(&ctx, stmt).await?;
                Ok(Output::Rows { schema, batches })
            }
            Statement::Insert(_) => dml::insert(self, session, stmt).await,
            Statement::Update(_) => dml::update(self, session, stmt).await,
            Statement::Delete(_) => dml::delete(self, session, stmt).await,
            Statement::CreateTable(_) => ddl::create_table(self, stmt, sql).await,
            Statement::CreateView(v) if v.materialized => {
                ddl::create_view(self, session, stmt, sql).await
            }
            Statement::CreateView(_) => Err(SqlError::unsupported(
                "plain (non-materialized) views are not supported; use CREATE MATERIALIZED VIEW",
            )),
            Statement::Drop { .. } => ddl::drop(self, stmt).await,
            Statement::StartTransaction { .. } => Ok(Output::TransactionStart("BEGIN".into())),
            Statement::Commit { .. } => Ok(Output::TransactionEnd("COMMIT".into())),
            Statement::Rollback {
                savepoint: None, ..
            } => Ok(Output::TransactionEnd("ROLLBACK".into())),
            Statement::Set(_) => show::set(session, stmt),
            Statement::ShowVariable { variable } => {
                let name = variable
                    .iter()
                    .map(|i| i.value.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                show::show_variable(self, session, &name)
            }
            Statement::Discard { .. } => Ok(Output::command("DISCARD ALL")),
            other => Err(SqlError::unsupported(format!(
                "statement not supported: {}",
                other
                    .to_string()
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            ))),
        }
    }
}

/// A relation name as Postgres resolves it: the last part of a possibly
/// schema-qualified name, lower-cased unless quoted.
pub fn relation_name(name: &ObjectName) -> SqlResult<String> {
    let parts = &name.0;
    if parts.len() > 2 {
        return Err(SqlError::unsupported(format!(
            "cross-database reference: {name}"
        )));
    }
    if parts.len() == 2 {
        let schema = parts[0]
            .as_ident()
            .map(|i| i.value.to_ascii_lowercase())
            .unwrap_or_default();
        if schema != "public" {
            return Err(SqlError::new(
                weir_planner::sqlstate::UNDEFINED_TABLE,
                format!("schema \"{schema}\" does not exist"),
            ));
        }
    }
    let ident = parts
        .last()
        .and_then(|p| p.as_ident())
        .ok_or_else(|| SqlError::syntax(format!("invalid name: {name}")))?;
    Ok(match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    })
}
