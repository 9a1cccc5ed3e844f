//! One snapshot of what the runtime knows, from which every `weir_catalog` table of a
//! statement is built.

use crate::catalog::RelationKind;
use crate::database::Database;
use std::collections::{BTreeMap, HashMap};
use weir_executor::checkpoint::stats::CheckpointRecord;
use weir_executor::jobs::{JobInfo, SourcePartition};
use weir_executor::metrics::ActorSample;
use weir_executor::progress::ProgressRow;
use weir_executor::source::BadRecord;
use weir_storage::savepoint_meta::SavepointMetadata;

/// A savepoint as listed: its metadata and where it is, or why it cannot be read.
pub type ListedSavepoint = Result<(SavepointMetadata, String), String>;

pub struct Facts {
    pub now_ms: i64,
    /// Every running job with what kind of relation it is (`materialized view`,
    /// `sink`, `table`), in catalog order.
    pub jobs: Vec<(JobInfo, &'static str)>,
    pub actors: HashMap<(String, u64), ActorSample>,
    /// Each job's output watermark (ms), where one reached its rows.
    pub watermarks: HashMap<String, f64>,
    pub checkpoints: Vec<CheckpointRecord>,
    /// Dropped views' kept checkpoints (RETAIN_ON_CANCELLATION).
    pub retained: Vec<weir_executor::checkpoint::retained::RetainedCheckpoint>,
    /// Bytes per state uid in each job's last completed checkpoint.
    pub state_sizes: HashMap<String, BTreeMap<String, u64>>,
    pub savepoints: Vec<ListedSavepoint>,
    pub sources: Vec<SourcePartition>,
    pub bad_records: Vec<BadRecord>,
    pub settings: Vec<super::settings::SettingRow>,
    pub progress: Vec<ProgressRow>,
}

impl Facts {
    /// Everything; the savepoints (listed from their storage) only when asked for.
    pub async fn gather(db: &Database, with_savepoints: bool) -> Facts {
        let savepoints = if with_savepoints {
            savepoints(db).await
        } else {
            Vec::new()
        };
        Self::with_savepoints(db, savepoints)
    }

    /// [`Facts::gather`] from synchronous code (statements planned under the write
    /// lock): the savepoint listing is the one step that waits for storage.
    pub fn gather_blocking(db: &Database, with_savepoints: bool) -> Facts {
        let savepoints = match tokio::runtime::Handle::try_current() {
            _ if !with_savepoints => Vec::new(),
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| h.block_on(savepoints(db)))
            }
            _ => vec![Err(
                "savepoints cannot be listed from this thread".to_string()
            )],
        };
        Self::with_savepoints(db, savepoints)
    }

    fn with_savepoints(db: &Database, savepoints: Vec<ListedSavepoint>) -> Facts {
        let rt = db.runtime();
        let running = rt.jobs();
        let jobs = {
            let cat = db.catalog.read();
            cat.relations
                .iter()
                .filter_map(|r| {
                    let kind = match r.kind {
                        RelationKind::MaterializedView => "materialized view",
                        RelationKind::Sink => "sink",
                        RelationKind::Table if rt.registry.has_connector(&r.name) => "table",
                        _ => return None,
                    };
                    let job = running.iter().find(|j| j.name == r.name)?;
                    Some((job.clone(), kind))
                })
                .collect()
        };
        let state_sizes = running
            .iter()
            .map(|j| (j.name.clone(), rt.checkpoints.state_sizes(&j.name)))
            .collect();
        Facts {
            now_ms: weir_executor::jobs::now_ms(),
            jobs,
            actors: weir_executor::metrics::actor_samples(),
            watermarks: weir_executor::metrics::job_values("currentOutputWatermark"),
            checkpoints: rt.checkpoints.history(),
            retained: rt.retained_checkpoints(),
            state_sizes,
            savepoints,
            sources: rt.registry.source_partitions(),
            bad_records: rt.registry.bad_records(),
            settings: super::settings::effective_settings(&db.config),
            progress: rt.progress.rows(),
        }
    }
}

async fn savepoints(db: &Database) -> Vec<ListedSavepoint> {
    let rt = db.runtime();
    match rt.list_savepoints().await {
        Ok(list) => list
            .into_iter()
            .map(|m| {
                m.map(|m| {
                    let at = rt.savepoint_storage().location(&m.name);
                    (m, at)
                })
            })
            .collect(),
        Err(e) => vec![Err(format!("savepoints cannot be listed: {e}"))],
    }
}
