//! `JobUploader`: the asynchronous part of a job's checkpoints. One task per job takes
//! complete sets of deltas in epoch order, writes them as files under
//! `checkpoints/<job>/shared/`, writes `chk-<epoch>/_metadata` last, and garbage-collects
//! checkpoints beyond `num-retained` (never a file a retained checkpoint references).
//!
//! Incremental checkpoints are changelog-style: each checkpoint uploads one delta file
//! per operator uid that changed, and the metadata references the chain
//! `base, delta, delta, ...`. When the deltas outgrow the base (or the chain gets long)
//! the chain is compacted into a new base, in this task, off the data path: a k-way
//! merge streamed into a multipart upload a batch at a time (`write_keyed`), so
//! the new base is never whole in memory. Each keyed delta is written by the same
//! merge (keeping deletions), in key order (a delta that is a single frozen stream
//! is that already and is written as it comes), so a compaction reads every file in place
//! and sorts nothing; a uid that compacts merges this checkpoint's changes straight
//! into the new base (no delta that no `_metadata` would reference). With
//! `incremental = false` every checkpoint rewrites a full base per uid. A frozen state
//! table's changes are streamed in key order, into a delta or as one more input of a
//! compaction's merge (`part_inputs`, `keyed_merge::MergeInput::Stream`): never
//! encoded whole.

use super::config::CheckpointConfig;
use super::restore::{metadata_key, JobStart};
use crate::barrier::Epoch;
use crate::chunk::StreamChunk;
use crate::deploy::is_inflight_uid;
use crate::store::RowMultiset;
use arrow::array::RecordBatch;
use bytes::Bytes;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Instant;
use tokio::sync::mpsc;
use weir_storage::checkpoint_meta::{self, CheckpointMetadata, StateFile, UidState};
use weir_storage::frozen_table::{self, FrozenDelta};
use weir_storage::keyed_merge::{KeyedStream, MergeInput, OutOfKeyOrder};
use weir_storage::object_storage::ObjectStorage;
use weir_storage::object_writer::{ObjectWriter, Written};
use weir_storage::state_snapshot::{
    self, DeltaData, KeyedFileEncoder, KeyedMerge, StateDelta, StateKind,
};

pub enum WorkerMsg {
    Upload {
        epoch: Epoch,
        trigger_ms: i64,
        started: Instant,
        deadline: Instant,
        positions: BTreeMap<String, u64>,
        parts: Vec<StateDelta>,
    },
    /// Deltas of a checkpoint that did not complete: uploaded with the next one.
    Carry(Vec<StateDelta>),
}

pub struct UploadDone {
    pub job: u64,
    pub epoch: Epoch,
    pub duration_ms: u64,
    /// Of which writing the files: from the upload's start to its end.
    pub upload_ms: u64,
    pub result: std::result::Result<CheckpointMetadata, String>,
    /// Positions of every retained checkpoint after this one.
    pub retained: Vec<(Epoch, BTreeMap<String, u64>)>,
}

/// About the bytes of a chain's files that a delta of these parts (of `sizes`
/// bytes each) makes dead: each part's superseding entries at the part's own bytes
/// per entry (`None`: a part does not know, as row state does not).
fn dead_before(parts: &[&DeltaData], sizes: &[u64]) -> Option<u64> {
    parts
        .iter()
        .zip(sizes)
        .map(|(p, size)| {
            let (superseding, entries) = p.superseding()?;
            Some(superseding as u64 * (size / entries.max(1) as u64))
        })
        .sum()
}

/// Object keys may not contain every character a uid can.
pub(crate) fn key_safe(uid: &str) -> String {
    uid.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Compact when what the chain holds dead (or, not known, its deltas) exceeds half
/// of what is live (the base) and this many bytes.
const COMPACT_MIN_BYTES: u64 = 4 << 20;
/// ... or when the chain has this many files.
const COMPACT_MAX_FILES: usize = 64;

pub struct JobUploader {
    job: u64,
    name: String,
    storage: ObjectStorage,
    config: CheckpointConfig,
    parallelism: u32,
    max_parallelism: u32,
    chain: BTreeMap<String, UidState>,
    carry: Vec<StateDelta>,
    /// Recorded in every `_metadata` (see `CheckpointMetadata::plan_uids`).
    plan_uids: Vec<String>,
    retained: VecDeque<CheckpointMetadata>,
    /// The newest epoch whose table-log entries are on disk: `_metadata` records log
    /// positions, so it is written only once they are durable (see
    /// [`JobUploader::waiting_for`]).
    durable: Option<tokio::sync::watch::Receiver<Epoch>>,
}

impl JobUploader {
    pub fn new(
        job: u64,
        name: &str,
        storage: ObjectStorage,
        config: CheckpointConfig,
        parallelism: u32,
        max_parallelism: u32,
        start: JobStart,
    ) -> Self {
        Self {
            job,
            name: name.to_string(),
            storage,
            config,
            parallelism,
            max_parallelism,
            chain: start
                .chain
                .into_iter()
                .map(|u| (u.uid.clone(), u))
                .collect(),
            carry: start.carry,
            plan_uids: start.plan_uids,
            retained: start.retained.into_iter().collect(),
            durable: None,
        }
    }

    /// Completes checkpoints only once `durable` reaches their epoch.
    pub fn waiting_for(mut self, durable: tokio::sync::watch::Receiver<Epoch>) -> Self {
        self.durable = Some(durable);
        self
    }

    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<WorkerMsg>,
        done: impl Fn(UploadDone) + Send + 'static,
    ) {
        while let Some(msg) = rx.recv().await {
            match msg {
                // Overtaken data belongs to its own checkpoint only: never carried.
                WorkerMsg::Carry(d) => self
                    .carry
                    .extend(d.into_iter().filter(|x| !is_inflight_uid(&x.uid))),
                WorkerMsg::Upload {
                    epoch,
                    trigger_ms,
                    started,
                    deadline,
                    positions,
                    parts,
                } => {
                    let upload_started = std::time::Instant::now();
                    let mut deltas = std::mem::take(&mut self.carry);
                    deltas.extend(parts);
                    let mut written = Vec::new();
                    let attempt = tokio::time::timeout_at(
                        deadline.into(),
                        self.upload(epoch, trigger_ms, &positions, &deltas, &mut written),
                    )
                    .await;
                    let result = match attempt {
                        Ok(Ok(meta)) => Ok(meta),
                        Ok(Err(e)) => Err(format!("upload failed: {e}")),
                        Err(_) => Err("checkpoint expired before completing".to_string()),
                    };
                    if result.is_err() {
                        // Remove what this attempt wrote; keep its deltas for the next.
                        for key in written {
                            let _ = self.storage.delete(&key).await;
                        }
                        let _ = self.storage.delete(&metadata_key(self.job, epoch)).await;
                        self.carry = deltas
                            .into_iter()
                            .filter(|x| !is_inflight_uid(&x.uid))
                            .collect();
                    } else {
                        // Before it is reported: a frozen state table folds back
                        // once this was its last holder.
                        drop(deltas);
                        self.collect_garbage().await;
                    }
                    done(UploadDone {
                        job: self.job,
                        epoch,
                        duration_ms: started.elapsed().as_millis() as u64,
                        upload_ms: upload_started.elapsed().as_millis() as u64,
                        result,
                        retained: self
                            .retained
                            .iter()
                            .map(|m| (m.epoch, m.positions.clone()))
                            .collect(),
                    });
                }
            }
        }
    }

    /// Whether a uid's chain, with `new_bytes` more of changes, is rewritten as one
    /// base now: always without `incremental`; otherwise once the deltas outgrow the
    /// base (and [`COMPACT_MIN_BYTES`]) or the chain gets long. A checkpoint's frozen
    /// parts compact like any others: they stream into the base (`write_merged`).
    /// (Stop 58 had put compaction off for them, to spare the whole copy that
    /// compaction then made of them; that left it to the next checkpoint, which in a
    /// bounded job is the final one, whose upload is part of its run.)
    ///
    /// Where every delta says how much of the chain before it it makes dead (keyed
    /// state tables count it), the rewrite waits until the dead bytes exceed half of
    /// the live ones: a restore then reads at most 1.5 times the state. A state that
    /// grows by new keys (q17's groups per auction and day) rewrote its whole base
    /// each time its deltas outgrew it, for nothing to drop: at 100M events a
    /// third of its checkpoint bytes. Otherwise (row state, files of older
    /// versions) the deltas' size stands in for the dead bytes, against the base.
    fn needs_base(&self, u: &UidState, new_bytes: u64, new_dead: Option<u64>) -> bool {
        if !self.config.incremental {
            return true;
        }
        let new = (new_bytes > 0).then_some((new_bytes, new_dead));
        let files: Vec<(u64, Option<u64>)> = u
            .files
            .iter()
            .map(|f| (f.size, f.dead_before))
            .chain(new)
            .collect();
        if files.len() > COMPACT_MAX_FILES {
            return true;
        }
        let Some(((base, _), deltas)) = files.split_first().filter(|(_, d)| !d.is_empty()) else {
            return false;
        };
        let delta_bytes: u64 = deltas.iter().map(|(size, _)| size).sum();
        match deltas.iter().map(|(_, dead)| *dead).sum::<Option<u64>>() {
            Some(dead) => {
                let live = (base + delta_bytes).saturating_sub(dead);
                dead > (live / 2).max(COMPACT_MIN_BYTES)
            }
            None => delta_bytes > (*base).max(COMPACT_MIN_BYTES),
        }
    }

    /// A new base at `key`: `u`'s chain with `parts` applied after it.
    async fn write_base(
        &self,
        u: &UidState,
        parts: &[&DeltaData],
        key: &str,
    ) -> crate::Result<Written> {
        let datas = super::restore::read_chain(&self.storage, u).await?;
        write_merged(self.storage.writer(key), u.kind, datas, parts).await
    }

    async fn upload(
        &mut self,
        epoch: Epoch,
        trigger_ms: i64,
        positions: &BTreeMap<String, u64>,
        deltas: &[StateDelta],
        written: &mut Vec<String>,
    ) -> crate::Result<CheckpointMetadata> {
        // One file per uid, its parts in order (carried deltas first).
        let mut by_uid: BTreeMap<&str, Vec<&DeltaData>> = BTreeMap::new();
        for d in deltas {
            if !d.data.is_empty() {
                by_uid.entry(d.uid.as_str()).or_default().push(&d.data);
            }
        }
        let mut chain = self.chain.clone();
        // Overtaken (in-flight) data is replaced by this checkpoint's, never chained.
        chain.retain(|uid, _| !is_inflight_uid(uid));
        let mut uids: Vec<String> = chain.keys().cloned().collect();
        uids.extend(by_uid.keys().map(|u| u.to_string()));
        uids.sort_unstable();
        uids.dedup();
        let mut uploaded = 0u64;
        for uid in uids {
            let parts = by_uid.get(uid.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let kind = match parts.first() {
                Some(p) => p.kind(),
                None => chain[&uid].kind,
            };
            if parts.iter().any(|p| p.kind() != kind) {
                return Err(crate::ExecError::Internal(format!(
                    "mixed state kinds for uid {uid}"
                )));
            }
            let u = chain.entry(uid.clone()).or_insert_with(|| UidState {
                uid: uid.clone(),
                kind,
                files: vec![],
            });
            if u.kind != kind {
                // Merging would read one kind as the other and drop it: fail loudly.
                return Err(crate::ExecError::Internal(format!(
                    "uid {uid} changed its state kind"
                )));
            }
            // An upper bound of the delta's size: its file holds each key once.
            let sizes: Vec<u64> = parts.iter().map(|p| p.encoded_size() as u64).collect();
            let new_bytes: u64 = sizes.iter().sum();
            let new_dead = dead_before(parts, &sizes);
            let file = if !is_inflight_uid(&uid) && self.needs_base(u, new_bytes, new_dead) {
                // The chain and this checkpoint's changes merged straight into a new
                // base: the changes are never uploaded as a delta that nothing would
                // reference (and nothing would garbage-collect).
                let key = state_key(self.job, &uid, epoch, "base");
                tracing::debug!(%uid, files = u.files.len(), new_bytes, "writing a new base");
                written.push(key.clone());
                let w = self.write_base(u, parts, &key).await?;
                u.files.clear();
                StateFile::new(key, w, epoch).making_dead(Some(0))
            } else if !parts.is_empty() {
                let key = state_key(self.job, &uid, epoch, "delta");
                written.push(key.clone());
                StateFile::new(
                    key.clone(),
                    write_delta(&self.storage, &key, kind, parts).await?,
                    epoch,
                )
                .making_dead(new_dead)
            } else {
                continue;
            };
            uploaded += file.size;
            u.files.push(file);
        }
        let state: Vec<UidState> = chain.values().cloned().collect();
        let meta = CheckpointMetadata {
            format_version: checkpoint_meta::FORMAT_VERSION,
            job_id: self.job,
            job_name: self.name.clone(),
            epoch,
            trigger_time_ms: trigger_ms,
            completed_time_ms: crate::jobs::now_ms(),
            positions: positions.clone(),
            full_size: state.iter().flat_map(|u| &u.files).map(|f| f.size).sum(),
            incremental_size: uploaded,
            state,
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            plan_uids: self.plan_uids.clone(),
        };
        // `_metadata` last: its presence marks the checkpoint complete. The log
        // positions it records must be on disk first.
        if let Some(durable) = &mut self.durable {
            if durable.wait_for(|d| *d >= epoch).await.is_err() {
                return Err(crate::ExecError::Internal("runtime stopped".into()));
            }
        }
        let key = metadata_key(self.job, epoch);
        written.push(key.clone());
        self.storage
            .put(&key, Bytes::from(meta.to_bytes()?))
            .await?;
        self.chain = chain;
        self.retained.push_back(meta.clone());
        Ok(meta)
    }

    /// Drops checkpoints beyond `num-retained`, then every file only they referenced.
    async fn collect_garbage(&mut self) {
        let keep = self.config.num_retained.max(1);
        let mut removed = Vec::new();
        while self.retained.len() > keep {
            removed.push(self.retained.pop_front().expect("non-empty"));
        }
        if removed.is_empty() {
            return;
        }
        let live: HashSet<&str> = self
            .retained
            .iter()
            .flat_map(|m| m.files().map(|f| f.path.as_str()))
            .collect();
        for m in &removed {
            // Metadata first: a checkpoint without it is incomplete, never restored.
            if let Err(e) = self.storage.delete(&metadata_key(self.job, m.epoch)).await {
                tracing::warn!(job = %self.name, epoch = m.epoch, error = %e, "checkpoint GC failed");
                continue;
            }
            for f in m.files() {
                if !live.contains(f.path.as_str()) {
                    let _ = self.storage.delete(&f.path).await;
                }
            }
        }
    }
}

/// Where a uid's state file of `epoch` goes: `kind` is `delta` or `base`.
fn state_key(job: u64, uid: &str, epoch: Epoch, kind: &str) -> String {
    format!(
        "checkpoints/{job}/shared/{}/{epoch:020}.{kind}",
        key_safe(uid)
    )
}

/// Reads a uid's chain from `source` and writes it merged, as one file, at `key` in
/// `target` (a savepoint's canonical file).
pub(crate) async fn materialize_chain(
    source: &ObjectStorage,
    u: &UidState,
    target: &ObjectStorage,
    key: &str,
) -> crate::Result<Written> {
    let datas = super::restore::read_chain(source, u).await?;
    write_merged(target.writer(key), u.kind, datas, &[]).await
}

/// Writes decoded files (oldest first), with a checkpoint's `parts` applied after
/// them, merged into one file of the live state. A frozen part is one more input of
/// the merge, streamed ([`part_inputs`]): a frozen table's changes are never whole in
/// memory, in a compaction either.
async fn write_merged(
    writer: ObjectWriter,
    kind: StateKind,
    datas: Vec<DeltaData>,
    parts: &[&DeltaData],
) -> crate::Result<Written> {
    match kind {
        StateKind::Keyed => {
            let files: Vec<_> = datas.into_iter().map(DeltaData::into_keyed).collect();
            write_keyed(writer, || {
                let chain = files.iter().map(MergeInput::File);
                KeyedMerge::merging(chain.chain(part_inputs(parts)), false)
            })
            .await
        }
        StateKind::Rows => {
            let mut datas = datas;
            datas.extend(parts.iter().map(|d| (*d).clone()));
            let merged = tokio::task::block_in_place(|| merge_chain(kind, datas))?;
            write_rows(writer, &[&merged]).await
        }
    }
}

/// Writes a checkpoint's changes of one uid (its parts in order) as a delta file. A
/// keyed delta is written in key order, each key once (its last write, a deletion
/// too), so compacting it later is a merge of files read in place: the sort happens
/// here, off the data path, on one checkpoint's changes at a time, instead of on a
/// whole chain of mapped deltas at compaction (q18's third checkpoint had sorted 27M
/// entries and mapped 2.5 GB of deltas to do so).
async fn write_delta(
    storage: &ObjectStorage,
    key: &str,
    kind: StateKind,
    parts: &[&DeltaData],
) -> crate::Result<Written> {
    match kind {
        StateKind::Keyed => write_keyed(storage.writer(key), || delta_in_key_order(parts)).await,
        StateKind::Rows => write_rows(storage.writer(key), parts).await,
    }
}

/// A checkpoint's keyed parts of one uid as one delta in key order, each key once,
/// deletions kept. A single stream (frozen parts in turn) is that already and is
/// written as it comes; anything else is merged.
fn delta_in_key_order<'a>(parts: &[&'a DeltaData]) -> KeyedStream<'a> {
    let mut inputs = part_inputs(parts);
    match inputs.pop() {
        Some(MergeInput::Stream(stream)) if inputs.is_empty() => stream,
        last => Box::new(KeyedMerge::merging(inputs.into_iter().chain(last), true)),
    }
}

/// A checkpoint's keyed parts of one uid as merge inputs, oldest first. Frozen parts
/// of different actors (disjoint key groups) are one stream, part after part, each
/// sorted only when its turn comes; otherwise each frozen part is a stream of its own
/// (its changed slots sorted, then encoded a batch at a time as the merge reads them)
/// and each decoded part a file. No frozen table is encoded whole.
fn part_inputs<'a>(parts: &[&'a DeltaData]) -> Vec<MergeInput<'a>> {
    if parts.is_empty() {
        return Vec::new();
    }
    if let Some(frozen) = all_frozen(parts).and_then(frozen_table::in_turn) {
        return vec![MergeInput::Stream(frozen_table::parts_in_turn(frozen))];
    }
    let input = |part: &&'a DeltaData| match *part {
        DeltaData::Frozen(f) => Some(MergeInput::Stream(Box::new(
            f.batches_in_key_order().map(Ok),
        ))),
        DeltaData::Keyed(e) => Some(MergeInput::File(e)),
        DeltaData::Rows(_) => None,
    };
    parts.iter().filter_map(input).collect()
}

/// The parts, when every one is a frozen state table.
fn all_frozen<'a>(parts: &[&'a DeltaData]) -> Option<Vec<&'a dyn FrozenDelta>> {
    parts
        .iter()
        .map(|p| match p {
            DeltaData::Frozen(f) => Some(&**f),
            _ => None,
        })
        .collect()
}

/// Writes row changes (in order) as one file.
async fn write_rows(writer: ObjectWriter, parts: &[&DeltaData]) -> crate::Result<Written> {
    let file = tokio::task::block_in_place(|| state_snapshot::encode_parts(parts))?;
    Ok(writer.write_all(file.into_chunks()).await?)
}

/// Streams keyed batches in key order (a merge of keyed files, a frozen table's
/// changes) into `writer` a batch at a time: the merged state is never whole in
/// memory (it had been compaction's peak, a copy of the operator's state).
/// A stream out of key order (a bug) fails the file, which is never written.
async fn write_keyed<I: Iterator<Item = Result<RecordBatch, OutOfKeyOrder>> + Send>(
    mut writer: ObjectWriter,
    merge: impl FnOnce() -> I,
) -> crate::Result<Written> {
    let streamed = async {
        let mut merge = tokio::task::block_in_place(merge);
        let mut encoder = KeyedFileEncoder::new()?;
        while let Some(batch) = tokio::task::block_in_place(|| merge.next()) {
            let batch = batch.map_err(|OutOfKeyOrder| {
                crate::ExecError::Internal("keyed state streamed out of key order".into())
            })?;
            for piece in encoder.encode(&batch)? {
                writer.write(piece).await?;
            }
        }
        for piece in encoder.finish()? {
            writer.write(piece).await?;
        }
        Ok::<_, crate::ExecError>(())
    }
    .await;
    match streamed {
        Ok(()) => Ok(writer.finish().await?),
        Err(e) => {
            writer.abort().await;
            Err(e)
        }
    }
}

/// Merges a chain of decoded files into one: last write wins for keyed state,
/// multiplicities add up for rows.
pub(crate) fn merge_chain(kind: StateKind, datas: Vec<DeltaData>) -> crate::Result<DeltaData> {
    match kind {
        StateKind::Keyed => {
            let files: Vec<_> = datas.into_iter().map(DeltaData::into_keyed).collect();
            Ok(DeltaData::Keyed(state_snapshot::merge_keyed(&files)))
        }
        StateKind::Rows => {
            // An insert-only chain (an append-only table, say) merges by concatenation:
            // nothing cancels out, so no row needs hashing.
            let insert_only = datas.iter().all(|d| match d {
                DeltaData::Rows(changes) => changes
                    .iter()
                    .all(|(codes, _)| codes.iter().all(|c| *c == 1)),
                DeltaData::Keyed(_) | DeltaData::Frozen(_) => true,
            });
            if insert_only {
                return Ok(DeltaData::Rows(
                    datas.into_iter().flat_map(DeltaData::into_rows).collect(),
                ));
            }
            let mut set: Option<RowMultiset> = None;
            for d in datas {
                let DeltaData::Rows(changes) = d else {
                    continue;
                };
                for (codes, batch) in changes {
                    let set = match &mut set {
                        Some(s) => s,
                        None => set.insert(RowMultiset::new(batch.schema())?),
                    };
                    set.apply(&StreamChunk::from_op_codes(&codes, batch)?)?;
                }
            }
            match set {
                None => Ok(DeltaData::Rows(vec![])),
                Some(s) => {
                    let batch = s.to_batch()?;
                    let n = batch.num_rows();
                    Ok(DeltaData::Rows(vec![(vec![1i8; n], batch)]))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use weir_storage::object_storage::S3Settings;
    use weir_storage::state_snapshot::{KeyedEntries, KeyedEntry};
    use weir_storage::state_table::StateValue;
    use weir_storage::{KeyGroup, MemoryStateBackend, StateTable};

    /// Object storage in a fresh local folder (kept while the `TempDir` lives).
    fn local_storage() -> (tempfile::TempDir, ObjectStorage) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let storage = ObjectStorage::open(path, &S3Settings::default()).unwrap();
        (dir, storage)
    }

    /// A new job's uploader on `storage`, with no chain yet.
    fn new_uploader(storage: &ObjectStorage) -> JobUploader {
        let start = JobStart {
            chain: vec![],
            retained: vec![],
            carry: vec![],
            plan_uids: vec!["u".into()],
        };
        let config = CheckpointConfig::default();
        JobUploader::new(1, "job", storage.clone(), config, 1, 128, start)
    }

    /// A job's uploader on a local folder, and where its results arrive.
    fn uploader_on(
        storage: &ObjectStorage,
    ) -> (
        mpsc::UnboundedSender<WorkerMsg>,
        mpsc::UnboundedReceiver<UploadDone>,
    ) {
        let uploader = new_uploader(storage);
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        tokio::spawn(uploader.run(rx, move |d| {
            let _ = done_tx.send(d);
        }));
        (tx, done_rx)
    }

    /// A complete checkpoint's parts, due within two minutes.
    fn upload(epoch: Epoch, parts: Vec<StateDelta>) -> WorkerMsg {
        WorkerMsg::Upload {
            epoch,
            trigger_ms: 0,
            started: Instant::now(),
            deadline: Instant::now() + Duration::from_secs(120),
            positions: BTreeMap::new(),
            parts,
        }
    }

    #[derive(Clone)]
    struct Counter(u64);

    impl StateValue for Counter {
        fn encode_into(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_be_bytes());
        }
        fn decode(bytes: &[u8]) -> Option<Self> {
            Some(Counter(u64::from_be_bytes(bytes.try_into().ok()?)))
        }
    }

    /// A chain whose deltas add keys is not rewritten however much they outgrow the
    /// base; one whose deltas replace keys is, once half of what it holds is dead.
    /// Without the dead bytes known, the deltas are weighed against the base.
    #[test]
    fn a_base_is_rewritten_for_dead_bytes_not_for_growth() {
        let (_dir, storage) = local_storage();
        let uploader = new_uploader(&storage);
        let file = |size: u64, dead_before| StateFile {
            path: String::new(),
            size,
            crc32: 0,
            epoch: 0,
            dead_before,
        };
        let chain = |files| UidState {
            uid: "u".into(),
            kind: StateKind::Keyed,
            files,
        };
        let mb = 1 << 20;
        let growing = chain(vec![file(10 * mb, Some(0)), file(20 * mb, Some(0))]);
        assert!(!uploader.needs_base(&growing, 20 * mb, Some(0)));
        // 40 MB, 17 dead: more than half of the 23 live.
        let replacing = chain(vec![file(20 * mb, Some(0)), file(10 * mb, Some(8 * mb))]);
        assert!(uploader.needs_base(&replacing, 10 * mb, Some(9 * mb)));
        assert!(!uploader.needs_base(&replacing, 10 * mb, Some(0)));
        assert!(!uploader.needs_base(&replacing, 0, None), "no new file");
        let unknown = chain(vec![file(10 * mb, None), file(6 * mb, None)]);
        assert!(uploader.needs_base(&unknown, 6 * mb, None));
        assert!(!uploader.needs_base(&unknown, 3 * mb, None));
        assert!(
            uploader.needs_base(&growing, 6 * mb, None),
            "one file not known"
        );
        let long = chain(vec![file(mb, Some(0)); COMPACT_MAX_FILES]);
        assert!(uploader.needs_base(&long, mb, Some(0)));
    }

    /// A large delta reaches the uploader as a frozen state table. Written from it
    /// (alone, and merged after a carried part with a later one), the chain reads
    /// back as the state; once the uploader is done with it, the table folds back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frozen_deltas_read_back_as_the_state() {
        let (_dir, storage) = local_storage();
        let (tx, mut done_rx) = uploader_on(&storage);
        let mut table: StateTable<Counter> = StateTable::new("u", 128, MemoryStateBackend::new());
        let mut state: BTreeMap<(u32, Vec<u8>), u64> = BTreeMap::new();
        let mut kinds = Vec::new();
        for epoch in 1..=4u64 {
            for i in 0..100_000u64 {
                // A stride prime to 150,000: 100,000 distinct keys each epoch.
                let stride = [7, 11, 13, 17][epoch as usize - 1] * 7_919;
                let k = (i * stride % 150_000).to_be_bytes();
                let kg = KeyGroup::of_key(&k, 128).0;
                if i % 5 == epoch {
                    table.remove(&k);
                    state.remove(&(kg, k.to_vec()));
                } else {
                    table.get_or_insert_with(&k, || Counter(0)).0 += i;
                    *state.entry((kg, k.to_vec())).or_insert(0) += i;
                }
            }
            table.flush().unwrap();
            let data = match table.take_checkpoint_delta() {
                DeltaData::Frozen(f) => DeltaData::Frozen(std::sync::Arc::new(StreamedOnly(f))),
                data => data,
            };
            kinds.push(matches!(data, DeltaData::Frozen(_)));
            let parts = vec![StateDelta {
                uid: "u".into(),
                data,
            }];
            if epoch == 2 {
                // A checkpoint that did not complete: its parts go with the next.
                tx.send(WorkerMsg::Carry(parts)).unwrap();
                continue;
            }
            tx.send(upload(epoch, parts)).unwrap();
            let meta = done_rx.recv().await.unwrap().result.unwrap();
            assert!(
                read_back(&storage, &meta.state[0]).await == counter_entries(&state),
                "epoch {epoch}: the chain reads back as the state"
            );
            assert_eq!(table.len(), state.len());
        }
        // Epochs 1 and 2 froze; 3 was taken while 2 was still held (carried), so it
        // froze as a second layer, and the two frozen parts of one actor merged as
        // streams; 4 froze again after the table folded back.
        assert_eq!(kinds, [true, true, true, true]);
    }

    /// A model of counters as the entries its state file holds.
    fn counter_entries(state: &BTreeMap<(u32, Vec<u8>), u64>) -> Vec<KeyedEntry> {
        let entry = |((kg, k), v): (&(u32, Vec<u8>), &u64)| {
            (*kg, k.clone(), Some(v.to_be_bytes().to_vec()))
        };
        state.iter().map(entry).collect()
    }

    /// The entries of a chain's files, each file checked to be in key order with
    /// each key once, and the state they read back as.
    async fn read_back(storage: &ObjectStorage, chain: &UidState) -> Vec<KeyedEntry> {
        let datas = super::super::restore::read_chain(storage, chain)
            .await
            .unwrap();
        let files: Vec<_> = datas.into_iter().map(DeltaData::into_keyed).collect();
        for (f, entries) in chain.files.iter().zip(&files) {
            let keys: Vec<_> = entries.iter().map(|(kg, k, _)| (kg, k)).collect();
            assert!(
                keys.windows(2).all(|w| w[0] < w[1]),
                "{} is in key order, each key once",
                f.path
            );
        }
        state_snapshot::merge_keyed(&files).to_entries()
    }

    /// A fresh table of `keys` (their values `value(key)`), frozen by a checkpoint,
    /// as a part that fails the test if the uploader encodes it whole.
    fn frozen_part(keys: impl Iterator<Item = u64>, value: impl Fn(u64) -> u64) -> StateDelta {
        let mut table: StateTable<Counter> = StateTable::new("u", 128, MemoryStateBackend::new());
        for k in keys {
            table.get_or_insert_with(&k.to_be_bytes(), || Counter(value(k)));
        }
        table.flush().unwrap();
        let DeltaData::Frozen(frozen) = table.take_checkpoint_delta() else {
            panic!("a large delta freezes");
        };
        StateDelta {
            uid: "u".into(),
            data: DeltaData::Frozen(std::sync::Arc::new(StreamedOnly(frozen))),
        }
    }

    /// A frozen part the uploader may only stream: encoded whole (`to_entries`, a
    /// copy of the changes beside the operator's state), it panics.
    #[derive(Debug)]
    struct StreamedOnly(std::sync::Arc<dyn FrozenDelta>);

    impl FrozenDelta for StreamedOnly {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn estimated_size(&self) -> usize {
            self.0.estimated_size()
        }
        fn batches_in_key_order(&self) -> Box<dyn Iterator<Item = RecordBatch> + Send + '_> {
            self.0.batches_in_key_order()
        }
        fn key_groups(&self) -> Option<(u32, u32)> {
            self.0.key_groups()
        }
        fn to_entries(&self) -> KeyedEntries {
            panic!("the uploader encoded a frozen part whole");
        }
    }

    /// At p = 2 one uid's checkpoint has two frozen parts, one per actor, over
    /// disjoint key groups: written one after the other they are one delta in key
    /// order. Parts that overlap (the same keys twice) are merged instead, the later
    /// part's writes winning. Either way the chain reads back as the state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frozen_parts_of_two_actors_read_back_as_the_state() {
        let (_dir, storage) = local_storage();
        let (tx, mut done_rx) = uploader_on(&storage);
        let kg = |k: u64| KeyGroup::of_key(&k.to_be_bytes(), 128).0;
        let mut state: BTreeMap<(u32, Vec<u8>), u64> = BTreeMap::new();
        let keys = 0..200_000u64;
        let actor_parts = vec![
            frozen_part(keys.clone().filter(|k| kg(*k) >= 64), |k| k),
            frozen_part(keys.clone().filter(|k| kg(*k) < 64), |k| k),
        ];
        state.extend(keys.clone().map(|k| ((kg(k), k.to_be_bytes().to_vec()), k)));
        let overlapping = vec![
            frozen_part(keys.clone().step_by(2), |k| k + 1),
            frozen_part(keys.clone().step_by(3), |k| k + 2),
        ];
        for k in keys.clone() {
            let later = [(3, 2), (2, 1)].into_iter().find(|(step, _)| k % step == 0);
            if let Some((_, plus)) = later {
                state.insert((kg(k), k.to_be_bytes().to_vec()), k + plus);
            }
        }
        // The decision `write_delta` makes on these parts: in turn, then merged.
        let in_turn = |parts: &[StateDelta]| {
            let datas: Vec<&DeltaData> = parts.iter().map(|p| &p.data).collect();
            all_frozen(&datas).and_then(frozen_table::in_turn).is_some()
        };
        assert!(in_turn(&actor_parts) && !in_turn(&overlapping));
        tx.send(upload(1, actor_parts)).unwrap();
        done_rx.recv().await.unwrap().result.unwrap();
        tx.send(upload(2, overlapping)).unwrap();
        let meta = done_rx.recv().await.unwrap().result.unwrap();
        let files: Vec<_> = meta.state[0].files.iter().map(|f| &f.path).collect();
        assert!(
            files.len() == 2 && files.iter().all(|f| f.ends_with(".delta")),
            "two deltas, not compacted: {files:?}"
        );
        assert!(
            read_back(&storage, &meta.state[0]).await == counter_entries(&state),
            "the chain reads back as the state"
        );
    }

    /// A frozen part that makes the deltas outgrow the base compacts the chain at
    /// once, streamed into the base (a stream input of the chain's merge, never
    /// encoded whole); a smaller one after it is a delta again. After each the chain reads
    /// back as the state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_frozen_part_streams_into_a_compacted_base() {
        let (_dir, storage) = local_storage();
        let (tx, mut done_rx) = uploader_on(&storage);
        let kg = |k: u64| KeyGroup::of_key(&k.to_be_bytes(), 128).0;
        let mut state: BTreeMap<(u32, Vec<u8>), u64> = BTreeMap::new();
        // (keys, added to each key's value): 100k keys, 500k more, the first 100k again.
        let checkpoints = [(0..100_000u64, 0), (100_000..600_000, 0), (0..100_000, 7)];
        let mut chains: Vec<Vec<String>> = Vec::new();
        for (epoch, (keys, plus)) in (1..).zip(checkpoints) {
            let part = frozen_part(keys.clone(), |k| k + plus);
            state.extend(keys.map(|k| ((kg(k), k.to_be_bytes().to_vec()), k + plus)));
            tx.send(upload(epoch, vec![part])).unwrap();
            let meta = done_rx.recv().await.unwrap().result.unwrap();
            assert!(
                read_back(&storage, &meta.state[0]).await == counter_entries(&state),
                "epoch {epoch}: the chain reads back as the state"
            );
            let files = meta.state[0].files.iter();
            chains.push(
                files
                    .map(|f| f.path.rsplit('.').next().unwrap().to_string())
                    .collect(),
            );
        }
        assert_eq!(
            chains,
            [vec!["delta"], vec!["base"], vec!["base", "delta"]],
            "the frozen part that outgrew the chain compacted it"
        );
    }

    async fn stored_state_files(storage: &ObjectStorage) -> HashSet<String> {
        let listed = storage.list("checkpoints/1/shared").await.unwrap();
        listed.into_iter().map(|(key, _)| key).collect()
    }

    /// The state files of every checkpoint whose `_metadata` is stored.
    async fn referenced_state_files(storage: &ObjectStorage) -> HashSet<String> {
        let mut files = HashSet::new();
        for epoch in super::super::restore::list_checkpoints(storage, 1)
            .await
            .unwrap()
        {
            let meta = super::super::restore::read_metadata(storage, 1, epoch)
                .await
                .unwrap();
            files.extend(meta.files().map(|f| f.path.clone()));
        }
        files
    }

    /// Checkpoints of a keyed state large enough that its chain is compacted (the
    /// deltas outgrow the base) and that a base goes up as a multipart upload: after
    /// every checkpoint, the chain its `_metadata` records reads back as the state
    /// (every write applied in order), each of its deltas is in key order, and no
    /// state file is left that no checkpoint references.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compacted_chains_read_back_as_the_state() {
        let (_dir, storage) = local_storage();
        let (tx, mut done_rx) = uploader_on(&storage);
        let mut next = weir_storage::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut state: BTreeMap<(u32, Vec<u8>), Vec<u8>> = BTreeMap::new();
        let (mut compactions, mut largest_base, mut meta_deltas) = (0, 0, 0);
        for epoch in 1..=8u64 {
            // Random keys: repeated within a delta, deletions of absent keys too.
            let delta: Vec<KeyedEntry> = (0..100_000)
                .map(|_| {
                    let k = next(300_000);
                    let value = (next(10) != 0).then(|| vec![k as u8; 64 + next(64) as usize]);
                    ((k % 128) as u32, k.to_be_bytes().to_vec(), value)
                })
                .collect();
            for (kg, key, value) in &delta {
                match value {
                    Some(v) => state.insert((*kg, key.clone()), v.clone()),
                    None => state.remove(&(*kg, key.clone())),
                };
            }
            let parts = vec![StateDelta {
                uid: "u".into(),
                data: DeltaData::Keyed(KeyedEntries::from_entries(delta)),
            }];
            tx.send(upload(epoch, parts)).unwrap();
            let meta = done_rx.recv().await.unwrap().result.unwrap();
            let chain = &meta.state[0];
            let first = &chain.files[0];
            if first.path.ends_with(".base") && first.epoch == epoch {
                compactions += 1;
                largest_base = largest_base.max(first.size);
            }
            meta_deltas += chain
                .files
                .iter()
                .filter(|f| f.path.ends_with(".delta"))
                .count();
            let read = read_back(&storage, chain).await;
            assert_eq!(
                stored_state_files(&storage).await,
                referenced_state_files(&storage).await,
                "epoch {epoch}: every stored state file is referenced by a checkpoint"
            );
            let expected: Vec<KeyedEntry> = state
                .iter()
                .map(|((kg, k), v)| (*kg, k.clone(), Some(v.clone())))
                .collect();
            assert!(
                read == expected,
                "epoch {epoch}: the chain reads back as the state"
            );
        }
        assert!(compactions >= 2, "compacted {compactions} times");
        assert!(
            meta_deltas > 0,
            "deltas between compactions were written too"
        );
        assert!(
            largest_base > 16 << 20,
            "a base above a multipart part: {largest_base} bytes"
        );
    }
}
