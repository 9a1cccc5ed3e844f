//! Retained checkpoints: with `execution.checkpointing.externalized-checkpoint-retention
//! = RETAIN_ON_CANCELLATION`, DROP keeps a view's checkpoints in storage instead of
//! deleting them with it, as Flink keeps a cancelled job's (Weir's DROP is Flink's
//! cancel). The default, `NO_EXTERNALIZED_CHECKPOINTS` (Flink's; `DELETE_ON_CANCELLATION`
//! is the same here), deletes them: Weir's checkpoints are always in storage, so a
//! failed job recovers from them either way.
//!
//! A marker `checkpoints/<job>/_retained` names the view, its newest checkpoint (the
//! one a restore reads) and the layouts of its uids, so a restore checks them as it
//! checks a savepoint's. The runtime keeps the markers in memory (read at startup),
//! lists them beside the running jobs' checkpoints (SHOW CHECKPOINTS, status
//! `RETAINED`, path `checkpoints/<job>/chk-<epoch>`), pins the table-log positions they
//! need, restores one into a new view like a savepoint (`restore_from_checkpoint =
//! '<path>'`, the dropped view's uids mapped to the new view's name), and deletes
//! one with `DROP CHECKPOINT '<path>'`.

use super::restore::{checkpoint_dir, list_checkpoints, read_metadata};
use crate::error::{ExecError, Result};
use crate::runtime::Runtime;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weir_storage::savepoint_meta::{SavepointMetadata, SavepointView, SAVEPOINT_FORMAT_VERSION};

/// A dropped view's kept checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetainedCheckpoint {
    pub job: u64,
    pub view: String,
    /// Its newest checkpoint when it was dropped.
    pub epoch: u64,
    pub trigger_time_ms: i64,
    pub dropped_ms: i64,
    pub full_size: u64,
    /// Table-log positions the checkpoint replays from (pinned).
    pub positions: BTreeMap<String, u64>,
    /// Uid -> the layout of its state, from the dropped view's plan.
    pub schemas: BTreeMap<String, String>,
}

impl RetainedCheckpoint {
    /// What SHOW CHECKPOINTS shows and statements name it by.
    pub fn path(&self) -> String {
        checkpoint_dir(self.job, self.epoch)
    }

    fn marker_key(job: u64) -> String {
        format!("checkpoints/{job}/_retained")
    }

    /// The pin's name among the savepoints' (see `Runtime::truncate_logs`).
    fn pin_name(&self) -> String {
        format!("retained checkpoint {}", self.path())
    }
}

impl Runtime {
    /// Called as view job `job` is dropped (its uploader handed over): when the job
    /// keeps checkpoints on cancellation, marks its newest one retained once its last
    /// upload (and that upload's garbage collection) is done, and returns true: its
    /// files are then not deleted with the job. [`Runtime::settle_retained`] waits.
    pub(crate) fn retain_on_drop(
        self: &std::sync::Arc<Self>,
        job: u64,
        view: &str,
        spec: &crate::runtime::ViewSpec,
        uploader: Option<tokio::task::JoinHandle<()>>,
    ) -> bool {
        if !spec.config.checkpoint.retain_on_cancellation {
            return false;
        }
        let rt = self.clone();
        let (view, schemas) = (
            view.to_string(),
            spec.graph.state_schemas(&spec.schema).into_iter().collect(),
        );
        let task = tokio::spawn(async move {
            if let Some(u) = uploader {
                let _ = u.await;
            }
            if let Err(e) = rt.retain_newest(job, &view, schemas).await {
                tracing::error!(view, error = %e, "could not retain the checkpoint");
            }
        });
        self.retaining.lock().push(task);
        true
    }

    /// Waits until the checkpoints of views dropped so far are marked retained (a DROP
    /// returns once SHOW CHECKPOINTS lists them).
    pub async fn settle_retained(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *self.retaining.lock());
        for t in tasks {
            let _ = t.await;
        }
    }

    async fn retain_newest(
        &self,
        job: u64,
        view: &str,
        schemas: BTreeMap<String, String>,
    ) -> Result<()> {
        let storage = &self.checkpoints.storage;
        let Some(&epoch) = list_checkpoints(storage, job).await?.last() else {
            tracing::warn!(view, "no completed checkpoint to retain");
            return Ok(());
        };
        let meta = read_metadata(storage, job, epoch).await?;
        let retained = RetainedCheckpoint {
            job,
            view: view.to_string(),
            epoch,
            trigger_time_ms: meta.trigger_time_ms,
            dropped_ms: crate::jobs::now_ms(),
            full_size: meta.full_size,
            positions: meta.positions.clone(),
            schemas,
        };
        let bytes = serde_json::to_vec_pretty(&retained)
            .map_err(|e| ExecError::Internal(format!("retained checkpoint marker: {e}")))?;
        storage
            .put(&RetainedCheckpoint::marker_key(job), Bytes::from(bytes))
            .await?;
        tracing::info!(view, path = %retained.path(), "checkpoint retained");
        self.keep_retained(retained);
        Ok(())
    }

    fn keep_retained(&self, r: RetainedCheckpoint) {
        self.savepoint_pins
            .lock()
            .insert(r.pin_name(), r.positions.clone());
        self.retained.lock().insert(r.job, r);
    }

    /// Every retained checkpoint, oldest job first.
    pub fn retained_checkpoints(&self) -> Vec<RetainedCheckpoint> {
        self.retained.lock().values().cloned().collect()
    }

    /// Reads the markers (at startup, before any log truncation: they pin positions).
    pub async fn load_retained_checkpoints(&self) -> Result<()> {
        let storage = &self.checkpoints.storage;
        for (key, _) in storage.list("checkpoints").await? {
            if !key.ends_with("/_retained") {
                continue;
            }
            let Some(bytes) = storage.get(&key).await? else {
                continue;
            };
            match serde_json::from_slice::<RetainedCheckpoint>(&bytes) {
                Ok(r) => self.keep_retained(r),
                Err(e) => tracing::error!(%key, error = %e, "unreadable retained checkpoint"),
            }
        }
        Ok(())
    }

    /// The retained checkpoint at `path` (as SHOW CHECKPOINTS shows it).
    fn retained_at(&self, path: &str) -> Result<RetainedCheckpoint> {
        let path = path.trim_end_matches('/').trim_end_matches("/_metadata");
        self.retained
            .lock()
            .values()
            .find(|r| r.path() == path)
            .cloned()
            .ok_or_else(|| {
                ExecError::UndefinedObject(format!(
                    "retained checkpoint \"{path}\" does not exist (SHOW CHECKPOINTS lists them with status RETAINED)"
                ))
            })
    }

    /// `DROP CHECKPOINT '<path>'`: deletes a retained checkpoint (marker first, so a
    /// half-deleted one is never listed) and unpins its logs.
    pub async fn drop_retained_checkpoint(&self, path: &str) -> Result<()> {
        let r = self.retained_at(path)?;
        let storage = &self.checkpoints.storage;
        storage
            .delete(&RetainedCheckpoint::marker_key(r.job))
            .await?;
        self.retained.lock().remove(&r.job);
        self.savepoint_pins.lock().remove(&r.pin_name());
        storage
            .delete_prefix(&format!("checkpoints/{}/", r.job))
            .await?;
        Ok(())
    }

    /// The retained checkpoint at `path` in a savepoint's shape (one view, its state
    /// as chains of checkpoint files), for a restore into a new view.
    pub(crate) async fn retained_as_savepoint(&self, path: &str) -> Result<SavepointMetadata> {
        let r = self.retained_at(path)?;
        let meta = read_metadata(&self.checkpoints.storage, r.job, r.epoch).await?;
        Ok(SavepointMetadata {
            format_version: SAVEPOINT_FORMAT_VERSION,
            name: r.path(),
            created_ms: meta.completed_time_ms,
            epoch: meta.epoch,
            views: vec![SavepointView {
                name: r.view.clone(),
                positions: meta.positions,
                parallelism: meta.parallelism,
                max_parallelism: meta.max_parallelism,
                state: meta.state,
                schemas: r.schemas,
                table: false,
            }],
        })
    }
}
