//! Savepoints (DESIGN.md §6): a user's named copy of views' state, taken at a
//! checkpoint, kept until the user drops it, and restorable into the running views.
//!
//! - `take`: forces a checkpoint of every job, then copies each chosen view's state
//!   from its latest checkpoint into one canonical Arrow IPC file per uid
//!   (`savepoints/<name>/<view>/<uid>/kg-0-<max>.arrow`, key group on every row), and
//!   writes `savepoints/<name>/_metadata` last. The savepoint pins the table-log
//!   positions it needs, so a restore can always replay from them.
//! - `restore`: stops the views (and the views that read them), deploys them with the
//!   savepoint's state, replays their tables' logs from the savepoint's positions (no
//!   acknowledged write is lost: tables are never rolled back), and checkpoints them
//!   at once so that a crash right after recovers the restored state.
//!
//! State is matched by uid. A uid in the savepoint that the view no longer has is an
//! error that lists it, unless `ignore_unclaimed_state`; a uid of the view that the
//! savepoint lacks starts empty and is reported.

use crate::checkpoint::coordinator::JobStart;
use crate::checkpoint::restore::{list_checkpoints, read_chain, read_metadata, RestoredJob};
use crate::checkpoint::uploader::{chrono_now_ms, key_safe, materialize_chain, merge_chain};
use crate::deploy::{is_inflight_uid, state_uids};
use crate::error::{ExecError, Result};
use crate::operators::materialize::materialize_uid;
use crate::runtime::Runtime;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_storage::checkpoint_meta::{CheckpointMetadata, StateFile, UidState, FORMAT_VERSION};
use weir_storage::savepoint_meta::{SavepointMetadata, SavepointView, SAVEPOINT_FORMAT_VERSION};
use weir_storage::state_snapshot::{DeltaData, StateDelta, StateKind};

const SQLSTATE_UNDEFINED_SAVEPOINT: &str = "3B001";
const SQLSTATE_DUPLICATE_OBJECT: &str = "42710";
const SQLSTATE_OBJECT_IN_USE: &str = "55006";
const SQLSTATE_INVALID_PARAMETER: &str = "22023";
const SQLSTATE_UNDEFINED_TABLE: &str = "42P01";
const SQLSTATE_NOT_IN_PREREQUISITE_STATE: &str = "55000";

fn metadata_key(name: &str) -> String {
    format!("savepoints/{}/_metadata", key_safe(name))
}

fn busy() -> ExecError {
    ExecError::Rejected(
        SQLSTATE_OBJECT_IN_USE,
        "a savepoint is being taken or restored; try again when it has finished".into(),
    )
}

/// What a restore did to one view (the statement's notice).
#[derive(Debug, Clone)]
pub struct RestoreReport {
    pub view: String,
    pub restored_uids: Vec<String>,
    /// Uids of the view that the savepoint had no state for: they start empty.
    pub new_uids: Vec<String>,
    /// Uids in the savepoint no operator claims (only with `ignore_unclaimed_state`).
    pub ignored_uids: Vec<String>,
    pub replayed_rows: usize,
}

/// The view names (all running views when `only` is `None`) with their job ids.
fn chosen_views(rt: &Runtime, only: Option<&[String]>) -> Result<Vec<(String, u64)>> {
    let relations = rt.relations.lock();
    match only {
        None => {
            let mut all: Vec<_> = relations
                .iter()
                .filter(|(_, r)| r.view.is_some())
                .map(|(n, r)| (n.clone(), r.job))
                .collect();
            all.sort();
            Ok(all)
        }
        Some(names) => names
            .iter()
            .map(|n| match relations.get(n) {
                Some(r) if r.view.is_some() => Ok((n.clone(), r.job)),
                _ => Err(ExecError::Rejected(
                    SQLSTATE_UNDEFINED_TABLE,
                    format!("materialized view \"{n}\" does not exist"),
                )),
            })
            .collect(),
    }
}

impl Runtime {
    /// `SAVEPOINT name [FOR MATERIALIZED VIEW a, b]`; returns when it is complete.
    pub async fn take_savepoint(
        self: &Arc<Self>,
        name: &str,
        only: Option<&[String]>,
    ) -> Result<SavepointMetadata> {
        let _busy = self.savepoint_busy.try_lock().map_err(|_| busy())?;
        let storage = self.checkpoints.storage.clone();
        if storage.get(&metadata_key(name)).await?.is_some() {
            return Err(ExecError::Rejected(
                SQLSTATE_DUPLICATE_OBJECT,
                format!("savepoint \"{name}\" already exists"),
            ));
        }
        let views = chosen_views(self, only)?;
        for (v, _) in &views {
            let spec = self.relations.lock().get(v).and_then(|r| r.view.clone());
            if spec.is_some_and(|s| s.config.checkpoint.interval.is_none()) {
                return Err(ExecError::Rejected(
                    SQLSTATE_NOT_IN_PREREQUISITE_STATE,
                    format!("materialized view \"{v}\" has checkpointing off (execution.checkpointing.interval = off): it has no state to save"),
                ));
            }
        }
        let epoch = self.checkpoint_now().await?;
        let mut saved = Vec::new();
        for (v, job) in views {
            let Some(&latest) = list_checkpoints(&storage, job).await?.last() else {
                return Err(ExecError::Rejected(
                    SQLSTATE_NOT_IN_PREREQUISITE_STATE,
                    format!("materialized view \"{v}\" has no completed checkpoint to save"),
                ));
            };
            let meta = read_metadata(&storage, job, latest).await?;
            let mut state = Vec::new();
            for u in &meta.state {
                let bytes = materialize_chain(&storage, u).await?;
                let key = format!(
                    "savepoints/{}/{}/{}/kg-0-{}.arrow",
                    key_safe(name),
                    key_safe(&v),
                    key_safe(&u.uid),
                    meta.max_parallelism.saturating_sub(1)
                );
                let file = StateFile {
                    size: bytes.len() as u64,
                    crc32: crc32fast::hash(&bytes),
                    path: key.clone(),
                    epoch: meta.epoch,
                };
                storage.put(&key, Bytes::from(bytes)).await?;
                state.push(UidState {
                    uid: u.uid.clone(),
                    kind: u.kind,
                    files: vec![file],
                });
            }
            saved.push(SavepointView {
                name: v,
                positions: meta.positions.clone(),
                parallelism: meta.parallelism,
                max_parallelism: meta.max_parallelism,
                state,
            });
        }
        let meta = SavepointMetadata {
            format_version: SAVEPOINT_FORMAT_VERSION,
            name: name.to_string(),
            created_ms: chrono_now_ms(),
            epoch,
            views: saved,
        };
        // `_metadata` last: its presence marks the savepoint complete.
        storage
            .put(&metadata_key(name), Bytes::from(meta.to_bytes()?))
            .await?;
        self.pin(&meta);
        tracing::info!(
            savepoint = name,
            epoch,
            bytes = meta.size(),
            "savepoint taken"
        );
        Ok(meta)
    }

    fn pin(&self, meta: &SavepointMetadata) {
        let mut needs: BTreeMap<String, u64> = BTreeMap::new();
        for v in &meta.views {
            for (table, &offset) in &v.positions {
                let e = needs.entry(table.clone()).or_insert(offset);
                *e = (*e).min(offset);
            }
        }
        self.savepoint_pins.lock().insert(meta.name.clone(), needs);
    }

    /// Every complete savepoint (`SHOW SAVEPOINTS`), oldest first. A damaged one is
    /// listed with what could be read: its name.
    pub async fn list_savepoints(
        &self,
    ) -> Result<Vec<std::result::Result<SavepointMetadata, String>>> {
        let storage = &self.checkpoints.storage;
        let mut out = Vec::new();
        for (key, _) in storage.list("savepoints").await? {
            let Some(name) = key
                .strip_prefix("savepoints/")
                .and_then(|k| k.strip_suffix("/_metadata"))
            else {
                continue;
            };
            out.push(match self.read_savepoint(name).await {
                Ok(m) => Ok(m),
                Err(e) => Err(format!("{name}: {e}")),
            });
        }
        out.sort_by_key(|m| m.as_ref().map(|m| m.created_ms).unwrap_or(i64::MAX));
        Ok(out)
    }

    pub async fn read_savepoint(&self, name: &str) -> Result<SavepointMetadata> {
        let bytes = self
            .checkpoints
            .storage
            .get(&metadata_key(name))
            .await?
            .ok_or_else(|| {
                ExecError::Rejected(
                    SQLSTATE_UNDEFINED_SAVEPOINT,
                    format!("savepoint \"{name}\" does not exist"),
                )
            })?;
        SavepointMetadata::from_bytes(&bytes).map_err(|e| {
            ExecError::Rejected(
                SQLSTATE_INVALID_PARAMETER,
                format!("savepoint \"{name}\" cannot be used: {e}"),
            )
        })
    }

    /// Re-pins every savepoint's log positions (at startup, before any truncation).
    pub async fn load_savepoint_pins(&self) -> Result<()> {
        for m in self.list_savepoints().await?.into_iter().flatten() {
            self.pin(&m);
        }
        Ok(())
    }

    /// `DROP SAVEPOINT name` / `RELEASE SAVEPOINT name`: deletes it (metadata first,
    /// so a half-deleted savepoint is never listed as usable) and unpins its logs.
    pub async fn drop_savepoint(&self, name: &str) -> Result<()> {
        let _busy = self.savepoint_busy.try_lock().map_err(|_| busy())?;
        let storage = &self.checkpoints.storage;
        if storage.get(&metadata_key(name)).await?.is_none() {
            return Err(ExecError::Rejected(
                SQLSTATE_UNDEFINED_SAVEPOINT,
                format!("savepoint \"{name}\" does not exist"),
            ));
        }
        storage.delete(&metadata_key(name)).await?;
        for (key, _) in storage
            .list(&format!("savepoints/{}", key_safe(name)))
            .await?
        {
            storage.delete(&key).await?;
        }
        self.savepoint_pins.lock().remove(name);
        Ok(())
    }
}

/// Loads one view's state from a savepoint, matched against the uids its current plan
/// has. Nothing changes on error.
async fn load_view(
    rt: &Runtime,
    sp: &SavepointMetadata,
    saved: &SavepointView,
    job: u64,
    ignore_unclaimed: bool,
) -> Result<(RestoredJob, RestoreReport)> {
    let spec = rt
        .relations
        .lock()
        .get(&saved.name)
        .and_then(|r| r.view.clone())
        .ok_or_else(|| ExecError::Internal(format!("{} is not running", saved.name)))?;
    let mut claimed = state_uids(&spec.graph);
    claimed.push(materialize_uid(&saved.name));
    let unclaimed: Vec<String> = saved
        .state
        .iter()
        .map(|u| u.uid.clone())
        .filter(|u| !claimed.contains(u) && !is_inflight_uid(u))
        .collect();
    if !unclaimed.is_empty() && !ignore_unclaimed {
        return Err(ExecError::Rejected(
            SQLSTATE_INVALID_PARAMETER,
            format!(
                "savepoint \"{}\" has state no operator of \"{}\" claims: {} (restore with ignore_unclaimed_state = true to drop it)",
                sp.name,
                saved.name,
                unclaimed.join(", ")
            ),
        ));
    }
    let has_inflight = saved.state.iter().any(|u| is_inflight_uid(&u.uid));
    if has_inflight && saved.parallelism != spec.parallelism {
        return Err(ExecError::Rejected(
            SQLSTATE_INVALID_PARAMETER,
            format!(
                "savepoint \"{}\" holds in-flight data of an unaligned checkpoint at parallelism {}; \"{}\" runs at {}",
                sp.name, saved.parallelism, saved.name, spec.parallelism
            ),
        ));
    }
    if saved.max_parallelism != rt.config.max_parallelism {
        return Err(ExecError::Rejected(
            SQLSTATE_INVALID_PARAMETER,
            format!(
                "savepoint \"{}\" was taken with pipeline.max-parallelism {}, this server runs {}",
                sp.name, saved.max_parallelism, rt.config.max_parallelism
            ),
        ));
    }
    let storage = &rt.checkpoints.storage;
    let mut keyed = HashMap::new();
    let mut rows = HashMap::new();
    let mut carry = Vec::new();
    let mut restored_uids = Vec::new();
    for u in saved.state.iter().filter(|u| !unclaimed.contains(&u.uid)) {
        let datas = read_chain(storage, u).await?;
        let merged = tokio::task::block_in_place(|| merge_chain(u.kind, datas))?;
        match (u.kind, merged) {
            (StateKind::Keyed, DeltaData::Keyed(entries)) => {
                let live: Vec<(u32, Vec<u8>, Vec<u8>)> = entries
                    .into_iter()
                    .filter_map(|(kg, k, v)| v.map(|v| (kg, k, v)))
                    .collect();
                carry.push(StateDelta {
                    uid: u.uid.clone(),
                    data: DeltaData::Keyed(
                        live.iter()
                            .map(|(kg, k, v)| (*kg, k.clone(), Some(v.clone())))
                            .collect(),
                    ),
                });
                keyed.insert(u.uid.clone(), live);
            }
            (StateKind::Rows, DeltaData::Rows(changes)) => {
                carry.push(StateDelta {
                    uid: u.uid.clone(),
                    data: DeltaData::Rows(changes.clone()),
                });
                rows.insert(u.uid.clone(), changes);
            }
            _ => {
                return Err(ExecError::Rejected(
                    SQLSTATE_INVALID_PARAMETER,
                    format!("savepoint state of {} does not fit its kind", u.uid),
                ))
            }
        }
        restored_uids.push(u.uid.clone());
    }
    let new_uids: Vec<String> = state_uids(&spec.graph)
        .into_iter()
        .filter(|u| !restored_uids.contains(u))
        .collect();
    // The job's older checkpoints stay retained until the next checkpoint (of the
    // restored state, in full) replaces them; then garbage collection removes them.
    let mut retained = Vec::new();
    for epoch in list_checkpoints(storage, job).await? {
        if let Ok(m) = read_metadata(storage, job, epoch).await {
            retained.push(m);
        }
    }
    let meta = CheckpointMetadata {
        format_version: FORMAT_VERSION,
        job_id: job,
        job_name: saved.name.clone(),
        epoch: sp.epoch,
        trigger_time_ms: sp.created_ms,
        completed_time_ms: sp.created_ms,
        positions: saved.positions.clone(),
        state: vec![],
        full_size: 0,
        incremental_size: 0,
        parallelism: saved.parallelism,
        max_parallelism: saved.max_parallelism,
    };
    let report = RestoreReport {
        view: saved.name.clone(),
        restored_uids,
        new_uids,
        ignored_uids: unclaimed,
        replayed_rows: 0,
    };
    Ok((
        RestoredJob {
            meta,
            keyed,
            rows,
            start: JobStart {
                chain: vec![],
                retained,
                carry,
            },
        },
        report,
    ))
}

/// `RESTORE MATERIALIZED VIEW v FROM SAVEPOINT s` (`only = Some([v])`), or
/// `RESTORE ALL FROM SAVEPOINT s` / `ROLLBACK TO SAVEPOINT s` (`None`: every view the
/// savepoint holds).
pub async fn restore(
    rt: &Arc<Runtime>,
    name: &str,
    only: Option<&[String]>,
    ignore_unclaimed: bool,
) -> Result<Vec<RestoreReport>> {
    let _busy = rt.savepoint_busy.try_lock().map_err(|_| busy())?;
    let sp = rt.read_savepoint(name).await?;
    let targets: Vec<&SavepointView> = match only {
        Some(names) => names
            .iter()
            .map(|n| {
                sp.view(n).ok_or_else(|| {
                    ExecError::Rejected(
                        SQLSTATE_INVALID_PARAMETER,
                        format!("savepoint \"{name}\" holds no state of \"{n}\""),
                    )
                })
            })
            .collect::<Result<_>>()?,
        None => sp.views.iter().collect(),
    };
    let names: Vec<String> = targets.iter().map(|v| v.name.clone()).collect();
    let jobs = chosen_views(rt, Some(&names))?;
    // Every check first: nothing changes unless every view can be restored.
    let mut given = HashMap::new();
    let mut reports = Vec::new();
    {
        let w = rt.lock_writes().await;
        for saved in &targets {
            for (table, offset) in &saved.positions {
                let start = w.table_ref(table).map(|t| t.log_start());
                match start {
                    Some(s) if s <= *offset => {}
                    Some(s) => {
                        return Err(ExecError::Internal(format!(
                            "table log of {table} starts at {s}, after the savepoint's position {offset}"
                        )))
                    }
                    None => {
                        return Err(ExecError::Rejected(
                            SQLSTATE_INVALID_PARAMETER,
                            format!(
                                "savepoint \"{name}\" reads \"{table}\", which is no longer a table here"
                            ),
                        ))
                    }
                }
            }
            let upstream_all_tables = rt
                .relations
                .lock()
                .get(&saved.name)
                .is_some_and(|r| r.upstream.iter().all(|u| saved.positions.contains_key(u)));
            if !upstream_all_tables {
                return Err(ExecError::Rejected(
                    "0A000",
                    format!(
                        "\"{}\" reads another materialized view: restoring it from a savepoint is not supported yet (restore the view it reads)",
                        saved.name
                    ),
                ));
            }
        }
    }
    for (saved, (_, job)) in targets.iter().zip(&jobs) {
        let (restored, report) = load_view(rt, &sp, saved, *job, ignore_unclaimed).await?;
        given.insert(saved.name.clone(), restored);
        reports.push(report);
    }
    crate::supervisor::restart_with(rt, &names, given).await?;
    for r in &mut reports {
        r.replayed_rows = rt.last_replayed.lock().get(&r.view).copied().unwrap_or(0);
    }
    // The restored state becomes the latest checkpoint at once: a crash from here on
    // recovers it, not what the views held before the restore.
    rt.checkpoint_now().await?;
    tracing::info!(savepoint = name, views = ?names, "restored from savepoint");
    Ok(reports)
}
