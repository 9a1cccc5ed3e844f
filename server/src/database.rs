//! `Database`: the catalog, the runtime and statement dispatch.
//!
//! Startup (`Database::open`) recovers the catalog from `meta/catalog.json`, re-creates
//! every table and view in creation order, then replays every table log through the
//! dataflow so that all views are rebuilt (until checkpoints restore them directly).

use crate::catalog::{Catalog, RelationKind};
use crate::config::Config;
use crate::ddl;
use crate::output::Output;
use crate::session::Session;
use arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::ObjectName;
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;
use weir_executor::{Runtime, RuntimeConfig};
use weir_planner::{split_statements, SqlError, SqlResult};
use weir_storage::meta_store::MetaStore;
use weir_storage::object_storage::ObjectStorage;

/// The highest checkpoint epoch under `checkpoints/`, or 0.
async fn newest_checkpoint_epoch(storage: &ObjectStorage) -> weir_storage::Result<u64> {
    Ok(storage
        .list("checkpoints")
        .await?
        .iter()
        .filter_map(|(k, _)| {
            let dir = k.split('/').nth(2)?;
            dir.strip_prefix("chk-")?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0))
}

pub struct Database {
    pub config: Config,
    runtime: Arc<Runtime>,
    pub(crate) catalog: RwLock<Catalog>,
    /// Serializes DDL so that planning and deployment see one catalog.
    pub(crate) ddl_lock: tokio::sync::Mutex<()>,
    pub(crate) meta: MetaStore,
    /// Relation name → schema of what it holds (tables and views).
    pub(crate) schemas: RwLock<Vec<(String, SchemaRef)>>,
    /// Plans of served statements, by shape (see `serving`).
    pub(crate) serving: crate::serving::PlanCache,
    /// With high availability: this process as a cluster member (it leads).
    pub(crate) member: Option<Arc<crate::member::Member>>,
}

/// What a leader of a high-availability cluster opens the database with.
struct Leadership {
    member: Arc<crate::member::Member>,
    log: weir_storage::cluster_log::ClusterLog,
    lease_epoch: u64,
}

/// Barrier (and checkpoint) epochs of lease term `t` start at `t × EPOCHS_PER_TERM`: a
/// deposed leader that completes a checkpoint late can never write the directory of
/// one its successor writes.
const EPOCHS_PER_TERM: u64 = 1_000_000_000_000;

impl Database {
    pub async fn open(config: Config) -> Result<Arc<Database>, String> {
        Self::open_with(config, None).await
    }

    /// Opens the database as the leader of a high-availability cluster: table logs and
    /// the catalog are committed to `log` before they are acknowledged.
    pub async fn open_member(
        config: Config,
        member: Arc<crate::member::Member>,
        log: weir_storage::cluster_log::ClusterLog,
        lease_epoch: u64,
    ) -> Result<Arc<Database>, String> {
        let leadership = Leadership {
            member,
            log,
            lease_epoch,
        };
        Self::open_with(config, Some(leadership)).await
    }

    async fn open_with(
        config: Config,
        leadership: Option<Leadership>,
    ) -> Result<Arc<Database>, String> {
        std::fs::create_dir_all(config.data_dir.join("tables"))
            .map_err(|e| format!("cannot create data dir {}: {e}", config.data_dir.display()))?;
        let meta = MetaStore::open(&config.data_dir).map_err(|e| e.to_string())?;
        if let Some(l) = &leadership {
            meta.replicate(l.log.clone());
        }
        let stored = Catalog::load(&meta)?;
        let storage = ObjectStorage::open(&config.checkpoint_dir(), &config.s3())
            .map_err(|e| format!("cannot open checkpoint storage: {e}"))?;
        let savepoint_storage = ObjectStorage::open(&config.savepoint_dir(), &config.s3())
            .map_err(|e| format!("cannot open savepoint storage: {e}"))?;
        // This process is now the folders' one writer (a fenced former leader's
        // write in progress fails, as it must): what a crash left staged goes.
        for store in [&storage, &savepoint_storage] {
            match store.remove_staged_writes() {
                Ok((0, _)) => {}
                Ok((files, bytes)) => tracing::info!(
                    store = store.url(),
                    files,
                    bytes,
                    "removed the staged files of interrupted writes"
                ),
                Err(e) => {
                    tracing::warn!(store = store.url(), error = %e, "cannot sweep staged writes")
                }
            }
        }
        let state_backend = config.state_backend()?;
        // Epochs continue after the newest checkpoint any job wrote, so checkpoint ids
        // only grow across restarts.
        let last_epoch = newest_checkpoint_epoch(&storage)
            .await
            .map_err(|e| format!("cannot list checkpoints in {}: {e}", storage.url()))?
            .max(
                leadership
                    .as_ref()
                    .map_or(0, |l| l.lease_epoch * EPOCHS_PER_TERM),
            );
        let table_settings = |k: &str| config.settings.get(k).cloned();
        let job = crate::settings::job_config(&table_settings)?;
        let failover = crate::settings::failover(
            config
                .file_value("jobmanager.execution.failover-strategy")
                .unwrap_or("region"),
        )?;
        let runtime = Runtime::start(
            RuntimeConfig {
                parallelism: config.parallelism,
                max_parallelism: config.max_parallelism,
                barrier_interval: config.barrier_interval,
                job,
                failover,
                checkpoint_storage: storage,
                savepoint_storage,
                state_backend,
                log_replica: leadership.as_ref().map(|l| l.log.clone()),
            },
            last_epoch,
        );
        let db = Arc::new(Database {
            config,
            runtime,
            catalog: RwLock::new(Catalog {
                next_id: stored.next_id,
                relations: vec![],
                // Indexes are metadata only: kept as stored while relations come back.
                indexes: stored.indexes.clone(),
                // Functions come first: views restored below may call them.
                functions: stored.functions.clone(),
                ..Default::default()
            }),
            ddl_lock: tokio::sync::Mutex::new(()),
            meta,
            schemas: RwLock::new(Vec::new()),
            serving: Default::default(),
            member: leadership.map(|l| l.member),
        });
        db.recover(stored).await?;
        Ok(db)
    }

    /// Tables first: each restores its latest checkpoint and replays its log from the
    /// offset recorded there. Then views in creation order: each restores its own
    /// latest checkpoint and replays its tables' logs from its own offsets (or, with
    /// no usable checkpoint, is rebuilt from its upstream contents).
    async fn recover(&self, stored: Catalog) -> Result<(), String> {
        let started = std::time::Instant::now();
        let mut rows = 0usize;
        for entry in stored
            .relations
            .iter()
            .filter(|e| e.kind == RelationKind::Table)
        {
            rows += ddl::restore_table(self, entry)
                .await
                .map_err(|e| format!("cannot restore table {}: {}", entry.name, e.message))?;
        }
        {
            let mut w = self.runtime.lock_writes().await;
            self.runtime
                .flush_locked(&mut w)
                .await
                .map_err(|e| e.to_string())?;
        }
        for entry in stored
            .relations
            .iter()
            .filter(|e| e.kind != RelationKind::Table)
        {
            // Catalog order: every view and sink comes after what it reads.
            if entry.kind == RelationKind::View {
                // A plain view is only its stored query: later views expand it.
                self.catalog.write().relations.push(entry.clone());
                continue;
            }
            if entry.kind == RelationKind::Sink {
                crate::sink::restore_sink(self, entry)
                    .await
                    .map_err(|e| format!("cannot restore sink {}: {}", entry.name, e.message))?;
                continue;
            }
            ddl::restore_view(self, entry)
                .await
                .map_err(|e| format!("cannot restore view {}: {}", entry.name, e.message))?;
        }
        // Savepoints pin table-log positions: known before any truncation.
        self.runtime
            .load_savepoint_pins()
            .await
            .map_err(|e| format!("cannot read savepoints: {e}"))?;
        self.runtime
            .load_retained_checkpoints()
            .await
            .map_err(|e| format!("cannot read retained checkpoints: {e}"))?;
        self.runtime.recovery_done();
        for entry in &stored.relations {
            crate::serving::indexes::register(self, &entry.name)
                .map_err(|e| format!("cannot index {}: {}", entry.name, e.message))?;
        }
        // Keep the catalog in creation order (restore_* appended tables first).
        {
            let mut cat = self.catalog.write();
            let order: Vec<String> = stored.relations.iter().map(|r| r.name.clone()).collect();
            cat.relations
                .sort_by_key(|r| order.iter().position(|n| *n == r.name));
        }
        tracing::info!(
            relations = stored.relations.len(),
            replayed_table_rows = rows,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered from checkpoints and table logs"
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
        let statements = split_statements(sql);
        let last = statements.len().saturating_sub(1);
        for (i, stmt_sql) in statements.iter().enumerate() {
            let mut r = self.execute_one(session, stmt_sql).await;
            if matches!(r, Ok(Output::CopyIn { .. })) && i < last {
                // The copy data would follow the whole query string: Weir does not
                // hold the statements after it back, so it refuses the combination.
                session.copy_in = None;
                r = Err(SqlError::unsupported(
                    "COPY FROM STDIN must be the last statement of a query string",
                ));
            }
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    pub async fn execute_one(&self, session: &mut Session, sql: &str) -> SqlResult<Output> {
        crate::statements::execute(self, session, sql).await
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
