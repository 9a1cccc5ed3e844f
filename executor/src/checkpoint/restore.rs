//! Restoring a job from its latest completed checkpoint.
//!
//! Checkpoints are tried newest first. One whose metadata or any state file fails its
//! checksum (or is missing) is skipped with a log line and a
//! `checkpointRestoreFallbacks` metric, and the one before it is tried.

use crate::barrier::Epoch;
use crate::metrics::metrics;
use crate::progress::{ProgressBoard, Task, Unit};
use std::collections::HashMap;
use weir_storage::checkpoint_meta::{self, CheckpointMetadata, UidState};
use weir_storage::object_storage::{ObjectStorage, StoredObject};
use weir_storage::state_snapshot::{self, DeltaData, KeyedEntries, RowChange, StateKind};

/// What a job starts from: its restored chain and retained checkpoints (empty for a
/// new job).
#[derive(Default, Clone)]
pub struct JobStart {
    pub chain: Vec<UidState>,
    pub retained: Vec<CheckpointMetadata>,
    /// State the first checkpoint must upload in full (a job restored from a
    /// savepoint starts a new chain: savepoint files are never referenced).
    pub carry: Vec<weir_storage::state_snapshot::StateDelta>,
    /// The uids of the job's plan, recorded in each checkpoint it writes.
    pub plan_uids: Vec<String>,
}

/// Where checkpoint `epoch` of `job` lives, under the checkpoint storage.
pub fn checkpoint_dir(job: u64, epoch: Epoch) -> String {
    format!("checkpoints/{job}/chk-{epoch}")
}

pub fn metadata_key(job: u64, epoch: Epoch) -> String {
    format!("{}/_metadata", checkpoint_dir(job, epoch))
}

/// A job's state as of one checkpoint.
pub struct RestoredJob {
    pub meta: CheckpointMetadata,
    /// uid → live keyed entries, sorted by key group and key (no deletions).
    pub keyed: HashMap<String, KeyedEntries>,
    /// uid → row changes, in order (applying them yields the rows).
    pub rows: HashMap<String, Vec<RowChange>>,
    /// What the job's uploader continues from.
    pub start: JobStart,
}

/// Epochs of every checkpoint directory of a job that has a `_metadata` file.
pub async fn list_checkpoints(storage: &ObjectStorage, job: u64) -> crate::Result<Vec<Epoch>> {
    let mut epochs: Vec<Epoch> = storage
        .list(&format!("checkpoints/{job}"))
        .await?
        .into_iter()
        .filter_map(|(k, _)| {
            let rest = k.strip_prefix(&format!("checkpoints/{job}/chk-"))?;
            rest.strip_suffix("/_metadata")?.parse().ok()
        })
        .collect();
    epochs.sort_unstable();
    Ok(epochs)
}

pub(crate) async fn read_metadata(
    storage: &ObjectStorage,
    job: u64,
    epoch: Epoch,
) -> crate::Result<CheckpointMetadata> {
    let bytes = storage
        .get(&metadata_key(job, epoch))
        .await?
        .ok_or_else(|| crate::ExecError::Internal("metadata vanished".into()))?;
    Ok(CheckpointMetadata::from_bytes(&bytes)?)
}

/// Reads a uid's chain of state files, checking each against its handle.
pub(crate) async fn read_chain(
    storage: &ObjectStorage,
    u: &UidState,
) -> crate::Result<Vec<DeltaData>> {
    let mut datas = Vec::with_capacity(u.files.len());
    for f in &u.files {
        let object = storage.get_object(&f.path).await?.ok_or_else(|| {
            crate::ExecError::Internal(format!("state file {} is missing", f.path))
        })?;
        // A mapped local file is checked and decoded without staying resident.
        let data = match object {
            StoredObject::Mapped(mapped) => {
                checkpoint_meta::verify_mapped(f, &mapped)?;
                state_snapshot::decode_mapped(u.kind, mapped)?
            }
            StoredObject::Fetched(bytes) => {
                checkpoint_meta::verify(f, &bytes)?;
                state_snapshot::decode(u.kind, bytes)?
            }
        };
        datas.push(data);
    }
    Ok(datas)
}

async fn load(
    storage: &ObjectStorage,
    meta: CheckpointMetadata,
    mut task: Task,
) -> crate::Result<RestoredJob> {
    let file_bytes = |u: &UidState| u.files.iter().map(|f| f.size).sum::<u64>();
    task.set_total(meta.state.iter().map(file_bytes).sum());
    let mut keyed = HashMap::new();
    let mut rows = HashMap::new();
    for u in &meta.state {
        let datas = read_chain(storage, u).await?;
        task.advance(file_bytes(u));
        match u.kind {
            // Rows are applied change by change by the store that loads them: merging
            // the chain first would hash every row twice.
            StateKind::Rows => {
                let changes = datas.into_iter().flat_map(DeltaData::into_rows).collect();
                rows.insert(u.uid.clone(), changes);
            }
            StateKind::Keyed => {
                let files: Vec<_> = datas.into_iter().map(DeltaData::into_keyed).collect();
                let live = tokio::task::block_in_place(|| state_snapshot::merge_keyed(&files));
                keyed.insert(u.uid.clone(), live);
            }
        }
    }
    task.finish();
    Ok(RestoredJob {
        start: JobStart {
            chain: meta.state.clone(),
            retained: vec![meta.clone()],
            carry: vec![],
            plan_uids: vec![],
        },
        meta,
        keyed,
        rows,
    })
}

/// The newest checkpoint of `job` that reads back intact, or `None`.
/// Reading it is reported on `board` as `recovery` of `name`.
pub async fn load_latest(
    storage: &ObjectStorage,
    job: u64,
    name: &str,
    board: &ProgressBoard,
) -> Option<RestoredJob> {
    // A job that is being restarted may still have its previous run's upload in
    // flight: that checkpoint completes while we read and garbage-collects the files
    // of the one we picked. Then a newer checkpoint exists: look again.
    let mut newest_tried = None;
    for _ in 0..3 {
        let epochs = match list_checkpoints(storage, job).await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(job = name, error = %e, "cannot list checkpoints");
                return None;
            }
        };
        if epochs.last().is_none() || epochs.last() == newest_tried.as_ref() {
            return None;
        }
        newest_tried = epochs.last().copied();
        if let Some(r) = load_newest_intact(storage, job, name, &epochs, board).await {
            return Some(r);
        }
    }
    None
}

/// The newest checkpoint among `epochs` that loads, falling back past damaged ones.
async fn load_newest_intact(
    storage: &ObjectStorage,
    job: u64,
    name: &str,
    epochs: &[Epoch],
    board: &ProgressBoard,
) -> Option<RestoredJob> {
    for &epoch in epochs.iter().rev() {
        let attempt = async {
            let meta = read_metadata(storage, job, epoch).await?;
            load(
                storage,
                meta,
                board.start("recovery", name, Unit::Bytes, None),
            )
            .await
        }
        .await;
        match attempt {
            Ok(mut r) => {
                // Older intact checkpoints stay retained (and are collected later).
                for &older in epochs.iter().filter(|e| **e < epoch) {
                    if let Ok(m) = read_metadata(storage, job, older).await {
                        r.start.retained.insert(r.start.retained.len() - 1, m);
                    }
                }
                return Some(r);
            }
            Err(e) => {
                tracing::error!(
                    job = name,
                    epoch,
                    error = %e,
                    "checkpoint is damaged; falling back to the one before"
                );
                metrics().restore_fallbacks.with_label_values(&[name]).inc();
            }
        }
    }
    None
}
