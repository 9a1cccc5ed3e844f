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

use crate::checkpoint::restore::JobStart;
use crate::checkpoint::restore::{list_checkpoints, read_chain, read_metadata, RestoredJob};
use crate::checkpoint::uploader::{key_safe, materialize_chain, merge_chain};
use crate::deploy::{is_inflight_uid, rows_derived_from_state, state_uids};
use crate::error::{ExecError, Result};
use crate::jobs::now_ms;
use crate::operators::materialize::materialize_uid;
use crate::runtime::{Runtime, ViewSpec, WriteState};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_storage::checkpoint_meta::{CheckpointMetadata, StateFile, UidState, FORMAT_VERSION};
use weir_storage::object_storage::ObjectStorage;
use weir_storage::savepoint_meta::{SavepointMetadata, SavepointView, SAVEPOINT_FORMAT_VERSION};
use weir_storage::state_snapshot::{DeltaData, StateDelta, StateKind};

/// Keys are relative to `execution.checkpointing.savepoint-dir`.
fn metadata_key(name: &str) -> String {
    format!("{}/_metadata", key_safe(name))
}

fn busy() -> ExecError {
    ExecError::ObjectInUse(
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
    /// For a view that reads other views (`RESTORE ALL` only): those views. It is
    /// rebuilt from their restored contents instead of loading its own state, as at
    /// recovery: no log positions exist for a view's output.
    pub rebuilt_from: Vec<String>,
}

/// The view names (all running views when `only` is `None`) with their job ids.
fn chosen_views(rt: &Runtime, only: Option<&[String]>) -> Result<Vec<(String, u64)>> {
    let relations = rt.relations.write();
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
                _ => Err(ExecError::UndefinedTable(format!(
                    "materialized view \"{n}\" does not exist"
                ))),
            })
            .collect(),
    }
}

/// One job a savepoint copies: its name, job id, and uid -> state layout.
struct Saved {
    name: String,
    job: u64,
    table: bool,
    schemas: BTreeMap<String, String>,
}

/// What `SAVEPOINT name [FOR MATERIALIZED VIEW ...]` copies: the named views, or every
/// view and every table (so that a fresh server can be filled from it).
fn chosen_jobs(rt: &Runtime, only: Option<&[String]>) -> Result<Vec<Saved>> {
    let views = chosen_views(rt, only)?;
    let relations = rt.relations.write();
    let mut out = Vec::new();
    if only.is_none() {
        let mut tables: Vec<_> = relations.iter().filter(|(_, r)| r.view.is_none()).collect();
        tables.sort_by_key(|(n, _)| n.as_str());
        for (n, r) in tables {
            let schema = r.store.schema();
            out.push(Saved {
                name: n.clone(),
                job: r.job,
                table: true,
                schemas: BTreeMap::from([(materialize_uid(n), crate::graph::rows_layout(&schema))]),
            });
        }
    }
    for (v, job) in views {
        let spec = relations
            .get(&v)
            .and_then(|r| r.view.clone())
            .ok_or_else(|| ExecError::Internal(format!("{v} is not running")))?;
        if spec.config.checkpoint.interval.is_none() {
            return Err(ExecError::NotInPrerequisiteState(format!("materialized view \"{v}\" has checkpointing off (execution.checkpointing.interval = off): it has no state to save"),
            ));
        }
        out.push(Saved {
            schemas: spec.graph.state_schemas(&spec.schema).into_iter().collect(),
            name: v,
            job,
            table: false,
        });
    }
    Ok(out)
}

impl Runtime {
    /// Where savepoints live (`execution.checkpointing.savepoint-dir`).
    pub fn savepoint_storage(&self) -> &weir_storage::object_storage::ObjectStorage {
        &self.config.savepoint_storage
    }

    /// `SAVEPOINT name [FOR MATERIALIZED VIEW a, b]`; returns when it is complete.
    ///
    /// Every job is checkpointed at one forced epoch, and that epoch's checkpoint of
    /// each job is copied: views' positions and tables' rows agree. Periodic
    /// checkpoints wait meanwhile, so none garbage-collects a file being copied.
    pub async fn take_savepoint(
        self: &Arc<Self>,
        name: &str,
        only: Option<&[String]>,
    ) -> Result<SavepointMetadata> {
        let _busy = self.savepoint_busy.try_lock().map_err(|_| busy())?;
        let storage = self.checkpoints.storage.clone();
        let target = self.savepoint_storage();
        if target.get(&metadata_key(name)).await?.is_some() {
            return Err(ExecError::DuplicateObject(format!(
                "savepoint \"{name}\" already exists"
            )));
        }
        let jobs = chosen_jobs(self, only)?;
        let _hold = self.checkpoints.hold_periodic();
        let epoch = self.checkpoint_now().await?;
        let mut metas = Vec::new();
        for job in jobs {
            let what = if job.table {
                "table"
            } else {
                "materialized view"
            };
            if !list_checkpoints(&storage, job.job).await?.contains(&epoch) {
                return Err(ExecError::NotInPrerequisiteState(format!(
                        "{what} \"{}\" has no completed checkpoint {epoch} to save (is checkpointing on, and did the checkpoint fail?)",
                        job.name
                    ),
                ));
            }
            let meta = read_metadata(&storage, job.job, epoch).await?;
            metas.push((job, meta));
        }
        // Progress in bytes of the checkpoint files read (a chain of incremental files
        // per uid, merged into one file per uid here).
        let chain_bytes = |u: &UidState| u.files.iter().map(|f| f.size).sum::<u64>();
        let total = metas
            .iter()
            .flat_map(|(_, m)| &m.state)
            .map(chain_bytes)
            .sum();
        let mut task =
            self.progress
                .start("savepoint", name, crate::progress::Unit::Bytes, Some(total));
        let mut saved = Vec::new();
        for (job, meta) in metas {
            let mut state = Vec::new();
            for u in &meta.state {
                let key = format!(
                    "{}/{}/{}/kg-0-{}.arrow",
                    key_safe(name),
                    key_safe(&job.name),
                    key_safe(&u.uid),
                    meta.max_parallelism.saturating_sub(1)
                );
                let w = materialize_chain(&storage, u, target, &key).await?;
                task.advance(chain_bytes(u));
                let file = StateFile::new(key, w, meta.epoch);
                state.push(UidState {
                    uid: u.uid.clone(),
                    kind: u.kind,
                    files: vec![file],
                });
            }
            saved.push(SavepointView {
                name: job.name,
                positions: meta.positions.clone(),
                parallelism: meta.parallelism,
                max_parallelism: meta.max_parallelism,
                state,
                schemas: job.schemas,
                table: job.table,
            });
        }
        let meta = SavepointMetadata {
            format_version: SAVEPOINT_FORMAT_VERSION,
            name: name.to_string(),
            created_ms: now_ms(),
            epoch,
            views: saved,
        };
        // `_metadata` last: its presence marks the savepoint complete.
        target
            .put(&metadata_key(name), Bytes::from(meta.to_bytes()?))
            .await?;
        self.pin(&meta);
        task.finish();
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
        let mut out = Vec::new();
        for (key, _) in self.savepoint_storage().list("").await? {
            let Some(name) = key.strip_suffix("/_metadata").filter(|n| !n.contains('/')) else {
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
            .savepoint_storage()
            .get(&metadata_key(name))
            .await?
            .ok_or_else(|| {
                ExecError::UndefinedSavepoint(format!("savepoint \"{name}\" does not exist"))
            })?;
        SavepointMetadata::from_bytes(&bytes).map_err(|e| {
            ExecError::InvalidParameter(format!("savepoint \"{name}\" cannot be used: {e}"))
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
        let storage = self.savepoint_storage();
        if storage.get(&metadata_key(name)).await?.is_none() {
            return Err(ExecError::UndefinedSavepoint(format!(
                "savepoint \"{name}\" does not exist"
            )));
        }
        storage.delete(&metadata_key(name)).await?;
        for (key, _) in storage.list(&key_safe(name)).await? {
            storage.delete(&key).await?;
        }
        self.savepoint_pins.lock().remove(name);
        Ok(())
    }
}

/// How a savepoint's state for one view matches a plan's uids: what a restore would
/// do (`EXPLAIN RESTORE`), decided before anything changes.
#[derive(Debug, Clone, Default)]
pub struct UidMatch {
    /// Saved uids the plan claims: their state is loaded.
    pub matched: Vec<String>,
    /// Saved uids no operator of the plan claims.
    pub unclaimed: Vec<String>,
    /// Uids of the plan with no saved state: they start empty.
    pub new: Vec<String>,
    /// Matched uids whose saved layout differs from the operator's: (uid, saved, now).
    pub misfit: Vec<(String, String, String)>,
    /// Views this one reads (`RESTORE ALL`): it is rebuilt from them instead.
    pub rebuilt_from: Vec<String>,
}

/// Matches a saved view against a plan. Data an unaligned checkpoint overtook is
/// claimed only by the very same query (its rows uid is the same), since it belongs to
/// the old plan's channels.
pub fn match_uids(saved: &SavepointView, spec: &ViewSpec) -> UidMatch {
    let layouts = spec.graph.state_schemas(&spec.schema);
    let same_query = saved.schemas.contains_key(&spec.graph.output_uid)
        || saved.state.iter().any(|u| u.uid == spec.graph.output_uid);
    let mut m = UidMatch::default();
    for u in &saved.state {
        if is_inflight_uid(&u.uid) {
            if same_query {
                m.matched.push(u.uid.clone());
            } else {
                m.unclaimed.push(u.uid.clone());
            }
            continue;
        }
        match layouts.iter().find(|(uid, _)| *uid == u.uid) {
            Some((_, now)) => {
                if let Some(was) = saved.schemas.get(&u.uid) {
                    if was != now {
                        m.misfit.push((u.uid.clone(), was.clone(), now.clone()));
                    }
                }
                m.matched.push(u.uid.clone());
            }
            None => m.unclaimed.push(u.uid.clone()),
        }
    }
    let mut stateful = state_uids(&spec.graph);
    // An aggregation view's rows are derived from its state, never stored.
    if !rows_derived_from_state(&spec.graph) {
        stateful.push(spec.graph.output_uid.clone());
    }
    m.new = stateful
        .into_iter()
        .filter(|u| !m.matched.contains(u))
        .collect();
    m
}

/// How a savepoint's rows of a table match the table here.
fn match_table(saved: &SavepointView, schema: &arrow::datatypes::Schema) -> UidMatch {
    let uid = materialize_uid(&saved.name);
    let now = crate::graph::rows_layout(schema);
    let mut m = UidMatch::default();
    for u in &saved.state {
        if u.uid == uid {
            if let Some(was) = saved.schemas.get(&uid).filter(|was| **was != now) {
                m.misfit.push((uid.clone(), was.clone(), now.clone()));
            }
            m.matched.push(uid.clone());
        } else {
            m.unclaimed.push(u.uid.clone());
        }
    }
    m
}

/// Refuses a restore that cannot be done as asked. Nothing has changed yet.
fn check_match(
    rt: &Runtime,
    sp: &SavepointMetadata,
    saved: &SavepointView,
    m: &UidMatch,
    parallelism: u32,
    ignore_unclaimed: bool,
) -> Result<()> {
    if !m.misfit.is_empty() {
        return Err(ExecError::DatatypeMismatch(format!(
            "savepoint \"{}\" has state for \"{}\" that does not fit: {}",
            sp.name,
            saved.name,
            m.misfit
                .iter()
                .map(|(uid, was, now)| format!("{uid} was saved as {was}, it is now {now}"))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    if !m.unclaimed.is_empty() && !ignore_unclaimed {
        return Err(ExecError::InvalidParameter(format!(
                "savepoint \"{}\" has state no operator of \"{}\" claims: {} (restore with ignore_unclaimed_state = true to drop it)",
                sp.name,
                saved.name,
                m.unclaimed.join(", ")
            ),
        ));
    }
    if m.matched.iter().any(|u| is_inflight_uid(u)) && saved.parallelism != parallelism {
        return Err(ExecError::InvalidParameter(format!(
                "savepoint \"{}\" holds in-flight data of an unaligned checkpoint at parallelism {}; \"{}\" runs at {parallelism}",
                sp.name, saved.parallelism, saved.name
            ),
        ));
    }
    if saved.max_parallelism != rt.config.max_parallelism {
        return Err(ExecError::InvalidParameter(format!(
            "savepoint \"{}\" was taken with pipeline.max-parallelism {}, this server runs {}",
            sp.name, saved.max_parallelism, rt.config.max_parallelism
        )));
    }
    Ok(())
}

/// Reads the matched uids' state. Keyed state carries its key group on every entry,
/// so it loads at any parallelism: each actor reads its own key-group range.
async fn load_matched(
    rt: &Runtime,
    storage: &ObjectStorage,
    sp: &SavepointMetadata,
    saved: &SavepointView,
    m: UidMatch,
    job: u64,
) -> Result<(RestoredJob, RestoreReport)> {
    let mut keyed = HashMap::new();
    let mut rows = HashMap::new();
    let mut carry = Vec::new();
    let matched: Vec<&UidState> = saved
        .state
        .iter()
        .filter(|u| m.matched.contains(&u.uid))
        .collect();
    let file_bytes = |u: &UidState| u.files.iter().map(|f| f.size).sum::<u64>();
    let mut task = rt.progress.start(
        "restore",
        &format!("{} from {}", saved.name, sp.name),
        crate::progress::Unit::Bytes,
        Some(matched.iter().map(|u| file_bytes(u)).sum()),
    );
    for u in matched {
        let datas = read_chain(storage, u).await?;
        task.advance(file_bytes(u));
        let merged = tokio::task::block_in_place(|| merge_chain(u.kind, datas))?;
        match (u.kind, merged) {
            (StateKind::Keyed, DeltaData::Keyed(entries)) => {
                // Merged: live entries only. Columns share their buffers (no copy).
                carry.push(StateDelta {
                    uid: u.uid.clone(),
                    data: DeltaData::Keyed(entries.clone()),
                });
                keyed.insert(u.uid.clone(), entries);
            }
            (StateKind::Rows, DeltaData::Rows(changes)) => {
                carry.push(StateDelta {
                    uid: u.uid.clone(),
                    data: DeltaData::Rows(changes.clone()),
                });
                rows.insert(u.uid.clone(), changes);
            }
            _ => {
                return Err(ExecError::DatatypeMismatch(format!(
                    "savepoint state of {} does not fit its kind",
                    u.uid
                )))
            }
        }
    }
    // The job's older checkpoints stay retained until the next checkpoint (of the
    // restored state, in full) replaces them; then garbage collection removes them.
    let cps = &rt.checkpoints.storage;
    let mut retained = Vec::new();
    for epoch in list_checkpoints(cps, job).await? {
        if let Ok(m) = read_metadata(cps, job, epoch).await {
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
        plan_uids: vec![],
    };
    task.finish();
    let report = RestoreReport {
        view: saved.name.clone(),
        restored_uids: m.matched,
        new_uids: m.new,
        ignored_uids: m.unclaimed,
        replayed_rows: 0,
        rebuilt_from: vec![],
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
                plan_uids: vec![],
            },
        },
        report,
    ))
}

/// Every relation a view restored from `saved` reads must be a table here, and its log
/// must still hold the savepoint's position (or be about to start there: `filled`).
fn check_sources(
    w: &WriteState,
    sp: &SavepointMetadata,
    saved: &SavepointView,
    upstream: &[String],
    filled: &[&SavepointView],
) -> Result<()> {
    if !upstream.iter().all(|u| saved.positions.contains_key(u)) {
        return Err(ExecError::Unsupported(format!(
                "\"{}\" reads another materialized view: its own state cannot be restored (no log positions exist for a view's output); RESTORE ALL rebuilds it from the restored views it reads",
                saved.name
            ),
        ));
    }
    for (table, offset) in &saved.positions {
        if let Some(t) = filled.iter().find(|t| &t.name == table) {
            if t.positions.get(table) != Some(offset) {
                return Err(ExecError::InvalidParameter(format!(
                    "savepoint \"{}\" saved \"{}\" and \"{table}\" at different positions",
                    sp.name, saved.name
                )));
            }
            continue;
        }
        match w.table_ref(table).map(|t| t.log_start()) {
            Some(s) if s <= *offset => {}
            Some(s) => {
                return Err(ExecError::NotInPrerequisiteState(format!(
                        "savepoint \"{}\" needs the log of \"{table}\" from position {offset}, but it starts at {s} here (was the table re-created, or its log file lost? a savepoint that holds the table fills it only while it is empty and was never written)",
                        sp.name
                    ),
                ))
            }
            None => {
                return Err(ExecError::InvalidParameter(format!(
                        "savepoint \"{}\" reads \"{table}\", which is not a table here",
                        sp.name
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// The savepoint's state of view `from` (by default the new view's own name) as the
/// state of `view`: a branch when the names differ ([`SavepointView::renamed`]).
fn saved_as(sp: &SavepointMetadata, from: &str, view: &str) -> Result<SavepointView> {
    if from == view {
        Ok(saved_view(sp, view)?.clone())
    } else {
        Ok(saved_view(sp, from)?.renamed(view))
    }
}

/// The savepoint's state of one view (not a table's rows).
fn saved_view<'a>(sp: &'a SavepointMetadata, view: &str) -> Result<&'a SavepointView> {
    sp.views
        .iter()
        .find(|v| v.name == view && !v.table)
        .ok_or_else(|| {
            ExecError::InvalidParameter(format!(
                "savepoint \"{}\" holds no state of \"{view}\"",
                sp.name
            ))
        })
}

/// Where a new view's state comes from: a savepoint (`restore_from = 's'`) or a
/// dropped view's retained checkpoint (`restore_from_checkpoint = '<path>'`), and for
/// a branch `restore_from_view = 'a'` (another view's state in the savepoint; a
/// retained checkpoint holds one view, which is the default).
pub struct SavedStateRef<'a> {
    pub source: SavedSource<'a>,
    pub view: Option<&'a str>,
}

pub enum SavedSource<'a> {
    Savepoint(&'a str),
    Checkpoint(&'a str),
}

impl SavedStateRef<'_> {
    /// The saved state in a savepoint's shape, the storage its files are in, and the
    /// state in it that new view `view` takes, under `view`'s name.
    async fn read(
        &self,
        rt: &Runtime,
        view: &str,
    ) -> Result<(SavepointMetadata, ObjectStorage, SavepointView)> {
        let (sp, storage) = match self.source {
            SavedSource::Savepoint(name) => (
                rt.read_savepoint(name).await?,
                rt.savepoint_storage().clone(),
            ),
            SavedSource::Checkpoint(path) => (
                rt.retained_as_savepoint(path).await?,
                rt.checkpoints.storage.clone(),
            ),
        };
        let from = match (self.view, &self.source) {
            (Some(v), _) => v,
            // A retained checkpoint holds the dropped view's state only.
            (None, SavedSource::Checkpoint(_)) => sp.views.first().map_or(view, |v| &v.name),
            (None, SavedSource::Savepoint(_)) => view,
        };
        let saved = saved_as(&sp, from, view)?;
        Ok((sp, storage, saved))
    }
}

/// `CREATE [OR REPLACE] MATERIALIZED VIEW v WITH (restore_from = 's') AS ...`: the
/// state to deploy the new plan `spec` (as job `job`) with, matched by uid. Nothing
/// changes here; deploy the result under the write lock.
pub async fn state_for_new_view(
    rt: &Arc<Runtime>,
    from: SavedStateRef<'_>,
    view: &str,
    spec: &ViewSpec,
    job: u64,
    ignore_unclaimed: bool,
) -> Result<(crate::deploy::Restore, RestoreReport)> {
    let _busy = rt.savepoint_busy.try_lock().map_err(|_| busy())?;
    let (sp, storage, saved) = from.read(rt, view).await?;
    {
        let w = rt.lock_writes().await;
        check_sources(&w, &sp, &saved, &spec.graph.upstream_relations(), &[])?;
    }
    let m = match_uids(&saved, spec);
    check_match(rt, &sp, &saved, &m, spec.parallelism, ignore_unclaimed)?;
    let (restored, report) = load_matched(rt, &storage, &sp, &saved, m, job).await?;
    Ok((crate::deploy::Restore::From(Box::new(restored)), report))
}

/// `EXPLAIN CREATE ... WITH (restore_from = 's')`: how the new plan's uids match.
pub async fn preview_new_view(
    rt: &Runtime,
    from: SavedStateRef<'_>,
    view: &str,
    spec: &ViewSpec,
) -> Result<UidMatch> {
    let (_, _, saved) = from.read(rt, view).await?;
    Ok(match_uids(&saved, spec))
}

/// `EXPLAIN RESTORE ...`: per view (and table the savepoint would fill) how its uids
/// match, without changing anything.
pub async fn explain_restore(
    rt: &Arc<Runtime>,
    name: &str,
    only: Option<&[String]>,
) -> Result<Vec<(String, UidMatch)>> {
    let sp = rt.read_savepoint(name).await?;
    let mut out = Vec::new();
    let w = rt.lock_writes().await;
    for saved in targets(&sp, only)? {
        let spec = rt
            .relations
            .write()
            .get(&saved.name)
            .and_then(|r| r.view.clone())
            .ok_or_else(|| {
                ExecError::UndefinedTable(format!(
                    "materialized view \"{}\" does not exist",
                    saved.name
                ))
            })?;
        let reads_views = views_read(rt, &w, &saved.name);
        if only.is_none() && !reads_views.is_empty() {
            let m = UidMatch {
                rebuilt_from: reads_views,
                ..UidMatch::default()
            };
            out.push((saved.name.clone(), m));
            continue;
        }
        out.push((saved.name.clone(), match_uids(saved, &spec)));
    }
    for t in fillable(rt, &w, &sp, only) {
        let schema = rt.relations.write().get(&t.name).map(|r| r.store.schema());
        if let Some(schema) = schema {
            out.push((t.name.clone(), match_table(t, &schema)));
        }
    }
    Ok(out)
}

/// The relations `view` reads that are not tables here (other views).
fn views_read(rt: &Runtime, w: &WriteState, view: &str) -> Vec<String> {
    rt.relations
        .write()
        .get(view)
        .map(|r| r.upstream.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|u| !w.has_table(u))
        .collect()
}

/// The views a RESTORE names, or every view the savepoint holds.
fn targets<'a>(
    sp: &'a SavepointMetadata,
    only: Option<&[String]>,
) -> Result<Vec<&'a SavepointView>> {
    match only {
        Some(names) => names.iter().map(|n| saved_view(sp, n)).collect(),
        None => Ok(sp.views.iter().filter(|v| !v.table).collect()),
    }
}

/// Tables `RESTORE ALL` fills from the savepoint: those that exist here and were never
/// written (a fresh server pointed at the savepoint-dir). A table with any write keeps
/// its contents: a restore never loses an acknowledged write.
fn fillable<'a>(
    rt: &Runtime,
    w: &WriteState,
    sp: &'a SavepointMetadata,
    only: Option<&[String]>,
) -> Vec<&'a SavepointView> {
    if only.is_some() {
        return vec![];
    }
    sp.views
        .iter()
        .filter(|t| t.table)
        .filter(|t| w.table_ref(&t.name).is_some_and(|tw| tw.never_written()))
        .filter(|t| rt.relations.write().contains_key(&t.name))
        .collect()
}

/// `RESTORE MATERIALIZED VIEW v FROM SAVEPOINT s` (`only = Some([v])`), or
/// `RESTORE ALL FROM SAVEPOINT s` / `ROLLBACK TO SAVEPOINT s` (`None`: every view the
/// savepoint holds, and its tables' rows into tables here that were never written).
pub async fn restore(
    rt: &Arc<Runtime>,
    name: &str,
    only: Option<&[String]>,
    ignore_unclaimed: bool,
) -> Result<Vec<RestoreReport>> {
    let _busy = rt.savepoint_busy.try_lock().map_err(|_| busy())?;
    let sp = rt.read_savepoint(name).await?;
    let targets = targets(&sp, only)?;
    let names: Vec<String> = targets.iter().map(|v| v.name.clone()).collect();
    let jobs = chosen_views(rt, Some(&names))?;
    // Every check first: nothing changes unless every view can be restored. With
    // RESTORE ALL, a view reading views is rebuilt from them (`rebuilt`), not loaded.
    let mut rebuilt: HashMap<String, Vec<String>> = HashMap::new();
    let filled: Vec<&SavepointView> = {
        let w = rt.lock_writes().await;
        let filled = fillable(rt, &w, &sp, only);
        let relations = rt.relations.write();
        for t in &filled {
            if let Some((reader, _)) = relations
                .iter()
                .find(|(v, r)| r.upstream.contains(&t.name) && !names.contains(v))
            {
                return Err(ExecError::NotInPrerequisiteState(format!(
                        "RESTORE ALL would fill table \"{}\" from savepoint \"{name}\", but \"{reader}\" reads it and the savepoint holds no state of it (drop it, or create it after the restore)",
                        t.name
                    ),
                ));
            }
        }
        drop(relations);
        for saved in &targets {
            let reads_views = views_read(rt, &w, &saved.name);
            if only.is_none() && !reads_views.is_empty() {
                rebuilt.insert(saved.name.clone(), reads_views);
                continue;
            }
            let upstream = rt
                .relations
                .write()
                .get(&saved.name)
                .map(|r| r.upstream.clone())
                .unwrap_or_default();
            check_sources(&w, &sp, saved, &upstream, &filled)?;
        }
        filled
    };
    let mut given = HashMap::new();
    let mut reports = Vec::new();
    for (saved, (_, job)) in targets.iter().zip(&jobs) {
        if let Some(reads_views) = rebuilt.remove(&saved.name) {
            // Redeployed from its latest checkpoint, which for a view reading views
            // means a rebuild from their (restored) contents.
            reports.push(RestoreReport {
                view: saved.name.clone(),
                restored_uids: vec![],
                new_uids: vec![],
                ignored_uids: vec![],
                replayed_rows: 0,
                rebuilt_from: reads_views,
            });
            continue;
        }
        let spec = rt
            .relations
            .write()
            .get(&saved.name)
            .and_then(|r| r.view.clone())
            .ok_or_else(|| ExecError::Internal(format!("{} is not running", saved.name)))?;
        let m = match_uids(saved, &spec);
        check_match(rt, &sp, saved, &m, spec.parallelism, ignore_unclaimed)?;
        let (restored, report) =
            load_matched(rt, rt.savepoint_storage(), &sp, saved, m, *job).await?;
        given.insert(saved.name.clone(), restored);
        reports.push(report);
    }
    let mut fills = Vec::new();
    for t in filled {
        let (schema, job) = {
            let relations = rt.relations.write();
            let r = relations
                .get(&t.name)
                .ok_or_else(|| ExecError::Internal(format!("{} is not running", t.name)))?;
            (r.store.schema(), r.job)
        };
        let m = match_table(t, &schema);
        check_match(rt, &sp, t, &m, 1, ignore_unclaimed)?;
        let (restored, report) = load_matched(rt, rt.savepoint_storage(), &sp, t, m, job).await?;
        fills.push((t.name.clone(), restored));
        reports.push(report);
    }
    crate::supervisor::restart_with(rt, &names, given, fills).await?;
    for r in reports.iter_mut().filter(|r| r.rebuilt_from.is_empty()) {
        r.replayed_rows = rt.registry.replayed_rows(&r.view);
    }
    // The restored state becomes the latest checkpoint at once: a crash from here on
    // recovers it, not what the views held before the restore.
    rt.checkpoint_now().await?;
    tracing::info!(savepoint = name, views = ?names, "restored from savepoint");
    Ok(reports)
}

impl Runtime {
    /// Fills a table that was never written with a savepoint's rows: its log starts at
    /// the savepoint's position (so the views restored with it replay nothing twice),
    /// and its checkpoints continue from the filled rows. Call under the write lock
    /// with every view reading the table stopped.
    pub(crate) fn fill_table(
        &self,
        w: &mut WriteState,
        name: &str,
        restored: RestoredJob,
    ) -> Result<Option<tokio::task::JoinHandle<()>>> {
        let (job, store) = {
            let relations = self.relations.write();
            let r = relations
                .get(name)
                .ok_or_else(|| ExecError::Internal(format!("{name} is not running")))?;
            (r.job, r.store.clone())
        };
        let writer = w
            .table(name)
            .ok_or_else(|| ExecError::Internal(format!("{name} is not a table")))?;
        let position = restored.meta.positions.get(name).copied().unwrap_or(0);
        let chunks = match restored.rows.get(&materialize_uid(name)) {
            Some(rows) => store.chunks_of(rows)?,
            None => vec![],
        };
        writer.rebase_log(position)?;
        // A connector-fed table resumes where the savepoint's copy of it stood.
        writer.set_source_positions(crate::runtime::source_positions_of(
            name,
            &restored.meta.positions,
        ));
        let rows = crate::runtime::load_table_rows(writer, &store, &chunks)?;
        // The caller awaits the previous uploader before anything reads checkpoints.
        let previous = self.checkpoints.unregister_job(job);
        self.checkpoints.register_job(
            job,
            name,
            self.config.job.checkpoint.clone(),
            1,
            vec![name.to_string()],
            1,
            restored.start,
        );
        self.note_restore(name);
        tracing::info!(
            table = name,
            rows,
            position,
            "table filled from a savepoint"
        );
        Ok(previous)
    }
}
