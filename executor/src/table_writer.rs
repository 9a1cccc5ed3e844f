//! `TableWriter`: the write path of a table: constraint checks, the durable log, the
//! latest contents (for DML), and the table's source channel into the dataflow.
//!
//! Order matters for durability: a change is appended to the table log before it is
//! applied or sent, and acknowledged only once fsynced, so anything a client was told
//! succeeded can be replayed after a crash. SQL statements are group-committed
//! ([`TableWriter::write_statement`] returns a [`Durable`] to wait on outside the write
//! lock, so concurrent statements share one fsync); connector batches and replays sync
//! before they are applied. An unsynced entry may flow into the dataflow, but no
//! barrier passes it before it is durable (`Runtime::inject_barrier` syncs first), so
//! nothing unsynced is ever readable or checkpointed.

use crate::barrier::Message;
use crate::buffering::DataSender;
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::store::RowMultiset;
use ahash::AHashMap as HashMap;
use ahash::AHashSet as HashSet;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use weir_storage::source_positions::SourcePositions;
use weir_storage::TableLog;

/// Smallest dead log prefix worth a rewrite (see [`TableWriter::truncate_log`]).
pub const TRUNCATE_MIN_BYTES: u64 = 16 << 20;

/// Largest chunk a table source emits.
pub const SOURCE_CHUNK_ROWS: usize = 8192;
/// Generator indexes made per chunk when an unstored source backfills a new view.
const BACKFILL_INDEXES: i64 = 50_000;

/// A statement's log entry on its way to disk: wait on it before acknowledging.
#[must_use = "a write is durable only once waited for"]
pub struct Durable {
    sync: std::sync::Arc<weir_storage::LogSync>,
    end: u64,
}

impl Durable {
    /// Returns once the entry is on disk (sharing the fsync with concurrent waiters).
    pub async fn wait(self) -> Result<()> {
        Ok(self.sync.wait_durable(self.end).await?)
    }
}

pub struct PrimaryKey {
    pub columns: Vec<usize>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

impl PrimaryKey {
    /// The chunk's primary keys in row format, one per row.
    fn encode(&self, chunk: &StreamChunk) -> Result<arrow::row::Rows> {
        let cols: Vec<_> = self
            .columns
            .iter()
            .map(|&i| chunk.columns()[i].clone())
            .collect();
        Ok(self.converter.convert_columns(&cols)?)
    }
}

pub struct TableWriter {
    pub id: u64,
    pub name: String,
    pub schema: SchemaRef,
    log: TableLog,
    latest: RowMultiset,
    pk: Option<PrimaryKey>,
    sender: DataSender,
    /// Where the table's connector (if any) stands after the last logged entry.
    source_positions: SourcePositions,
    /// Primary key -> row, for `FORMAT UPSERT` connectors (built on first use).
    upsert_index: Option<upsert::UpsertIndex>,
    /// The table's declared watermark (`WATERMARK FOR ...`), if any.
    watermark: Option<crate::watermark::WatermarkGenerator>,
    /// Its bounded source ended (see [`TableWriter::end_of_input`]).
    input_ended: bool,
    /// Set for an unstored source: its log holds index ranges, not rows, and no row
    /// is kept here; replays and backfills regenerate them.
    generated: Option<crate::source::generated::GeneratedRows>,
}

#[path = "table_writer_upsert.rs"]
mod upsert;
pub use upsert::UpsertOp;

impl TableWriter {
    pub fn new(
        id: u64,
        name: &str,
        schema: SchemaRef,
        pk_columns: Vec<usize>,
        log: TableLog,
        sender: DataSender,
    ) -> Result<Self> {
        let pk = if pk_columns.is_empty() {
            None
        } else {
            let fields = pk_columns
                .iter()
                .map(|&i| SortField::new(schema.field(i).data_type().clone()))
                .collect();
            Some(PrimaryKey {
                columns: pk_columns,
                converter: RowConverter::new(fields)?,
                keys: HashSet::new(),
            })
        };
        Ok(Self {
            id,
            name: name.to_string(),
            latest: RowMultiset::new(schema.clone())?,
            schema,
            log,
            pk,
            sender,
            source_positions: SourcePositions::new(),
            upsert_index: None,
            watermark: None,
            input_ended: false,
            generated: None,
        })
    }

    /// Makes this table an unstored source of `generated` rows (see the field).
    pub fn set_unstored(&mut self, generated: crate::source::generated::GeneratedRows) {
        self.generated = Some(generated);
    }

    /// Every row an unstored source has produced so far, made again (a new view's
    /// backfill), in chunks of one generator batch; empty for any other table.
    pub fn generated_contents(&self) -> Result<Vec<StreamChunk>> {
        let Some(g) = &self.generated else {
            return Ok(vec![]);
        };
        let end = self
            .source_positions
            .get(g.position_key)
            .copied()
            .unwrap_or(0) as i64;
        let mut out = Vec::new();
        let mut from = 0;
        while from < end {
            let to = (from + BACKFILL_INDEXES).min(end);
            out.extend(g.chunk(&self.schema, from, to)?);
            from = to;
        }
        Ok(out)
    }

    /// Declares the table's watermark: after each write that inserts a newer
    /// timestamp, a watermark follows the rows (see [`crate::watermark`]).
    pub fn set_watermark(&mut self, spec: crate::watermark::WatermarkSpec) -> Result<()> {
        let column_type = self.schema.field(spec.column).data_type().clone();
        self.watermark = Some(crate::watermark::WatermarkGenerator::new(
            spec,
            &column_type,
        )?);
        Ok(())
    }

    /// Loads the primary-key index of contents restored from a checkpoint (no log
    /// append, nothing sent). The rows themselves come from the restored store through
    /// [`TableWriter::set_latest`], so they are encoded and hashed once.
    pub fn restore_keys(&mut self, changes: &[StreamChunk]) -> Result<()> {
        // The contents are replaced: an upsert index is rebuilt on its next use.
        self.upsert_index = None;
        let Some(pk) = &mut self.pk else {
            return Ok(());
        };
        // A checkpoint's changes are many statements' merged into large batches: an
        // insert, its delete and a re-insert of one key can share a batch. Only their
        // sum means anything, so keys are counted, not checked statement by statement
        // (which assumes a statement's deletes come before its inserts).
        let mut net: HashMap<Box<[u8]>, i64> = HashMap::new();
        for chunk in changes {
            let rows = pk.encode(chunk)?;
            for (i, op) in chunk.ops.iter().enumerate() {
                *net.entry(rows.row(i).as_ref().into()).or_insert(0) += op.sign();
            }
        }
        for (key, n) in net {
            let present = pk.keys.contains(&key) as i64 + n;
            match present {
                0 => {
                    pk.keys.remove(&key);
                }
                1 => {
                    pk.keys.insert(key);
                }
                _ => {
                    return Err(ExecError::UniqueViolation(format!(
                        "restored contents of \"{}\" hold one primary key {present} times",
                        self.name
                    )))
                }
            }
        }
        Ok(())
    }

    /// The restored rows (a copy of the restored store's, sharing their bytes).
    pub fn set_latest(&mut self, rows: RowMultiset) {
        self.upsert_index = None;
        self.latest = rows;
    }

    /// Log offset after the last acknowledged write: this table's source position.
    pub fn log_position(&self) -> u64 {
        self.log.end_offset()
    }

    /// Log entries from `offset` on, decoded into change chunks (a source rewinding).
    pub fn read_log_from(&self, offset: u64) -> Result<Vec<StreamChunk>> {
        let entries = self.log.read_from(offset)?;
        decode_log_entries(&self.name, &self.schema, entries, self.generated.as_ref())
    }

    /// True when nothing was ever written to this table: only then may a savepoint
    /// fill it (no acknowledged write can be lost).
    pub fn never_written(&self) -> bool {
        self.log.start_offset() == 0 && self.log.end_offset() == 0
    }

    /// See [`TableLog::rebase_empty`].
    pub fn rebase_log(&mut self, base: u64) -> Result<()> {
        Ok(self.log.rebase_empty(base)?)
    }

    /// The oldest log offset still kept.
    pub fn log_start(&self) -> u64 {
        self.log.start_offset()
    }

    /// Drops log entries below `offset` (no retained checkpoint needs them), once
    /// they are worth it: dropping rewrites the entries kept (under the write lock),
    /// so it waits until the dead prefix is at least as large as what is kept and past
    /// [`TRUNCATE_MIN_BYTES`]. Copying is then paid at most once per byte written,
    /// and a busy table does not stall its writers at every checkpoint.
    pub fn truncate_log(&mut self, offset: u64) -> Result<()> {
        let dead = offset.saturating_sub(self.log.start_offset());
        let kept = self.log.end_offset().saturating_sub(offset);
        if dead > 0 && dead >= kept && dead >= TRUNCATE_MIN_BYTES {
            self.log.truncate_below(offset)?;
            tracing::debug!(table = %self.name, offset, "table log truncated");
        }
        Ok(())
    }

    /// The latest contents, including writes not yet committed to any epoch.
    pub fn latest_batch(&self) -> Result<RecordBatch> {
        if self.generated.is_some() {
            // Only UPDATE and DELETE read it, and an unstored source takes neither.
            return Err(self.unchangeable());
        }
        self.latest.to_batch()
    }

    /// How many rows the table holds, including writes not yet committed (no copy of
    /// them is made, unlike [`TableWriter::latest_batch`]).
    pub fn row_count(&self) -> usize {
        self.latest.len()
    }

    /// Column indexes of the primary key (empty without one).
    pub fn primary_key(&self) -> &[usize] {
        self.pk
            .as_ref()
            .map(|pk| pk.columns.as_slice())
            .unwrap_or(&[])
    }

    /// The connector's positions after the last logged entry (empty without one).
    pub fn source_positions(&self) -> &SourcePositions {
        &self.source_positions
    }

    /// Positions recovered at startup (from the checkpoint, then the log suffix).
    pub fn set_source_positions(&mut self, positions: SourcePositions) {
        self.source_positions = positions;
    }

    /// Writes rows a connector read, logging its positions after them in the same
    /// entry. `positions` advance even for an empty chunk (all records were skipped as
    /// bad): then an entry with no rows records them. A connector with several readers
    /// passes each reader's own positions: they are merged into the table's, so every
    /// entry logs all of them.
    ///
    /// Not synced here: the next barrier's epoch commits, and its checkpoints
    /// complete, only once the log is on disk (group commit). A crash before that
    /// loses entries no commit or checkpoint depends on, and the connector reads (or
    /// generates) them again from the last durable position. Without this, a source
    /// batch of one row (`execution.buffer-timeout.interval = 0`) costs an fsync.
    pub async fn write_from_source(
        &mut self,
        chunk: StreamChunk,
        positions: SourcePositions,
    ) -> Result<()> {
        let positions = self.merged_positions(positions);
        if positions == self.source_positions && chunk.is_empty() {
            return Ok(());
        }
        self.write_inner(chunk, false, Some(&positions), false)
            .await?;
        self.source_positions = positions;
        Ok(())
    }

    /// Writes the rows a generator made for indexes `from..to`. A stored table logs
    /// and keeps them like any connector's; an unstored source logs only the range
    /// (with the positions after it) and passes the rows on.
    pub async fn write_generated(
        &mut self,
        from: i64,
        to: i64,
        batch: RecordBatch,
        positions: SourcePositions,
    ) -> Result<()> {
        if self.generated.is_none() {
            return self
                .write_from_source(StreamChunk::inserts(batch), positions)
                .await;
        }
        let merged = self.merged_positions(positions);
        let chunk = StreamChunk::inserts(batch).with_schema(self.schema.clone())?;
        self.check_not_null(&chunk)?;
        let range = weir_storage::codec::encode_generated_range(from, to);
        // Synced with the epoch, as in `write_from_source`.
        self.log
            .append_unsynced(&weir_storage::source_positions::encode(&merged, &range)?)?;
        self.source_positions = merged;
        self.send_changes(chunk).await
    }

    /// A bounded source wrote its last row: the watermark moves past every row (see
    /// [`crate::watermark::WatermarkGenerator::end_of_input`]). Nothing is logged: a
    /// restart finds the source at its end and says so again.
    pub async fn end_of_input(&mut self) -> Result<()> {
        self.input_ended = true;
        match self.watermark.as_mut().and_then(|g| g.end_of_input()) {
            Some(w) => self.send(Message::Watermark(w)).await,
            None => Ok(()),
        }
    }

    /// Whether its bounded source wrote its last row and said so downstream.
    pub fn input_ended(&self) -> bool {
        self.input_ended
    }

    /// The table's positions with one reader's (or generator's) moved on: every
    /// entry logs all of them.
    fn merged_positions(&self, positions: SourcePositions) -> SourcePositions {
        let mut merged = self.source_positions.clone();
        merged.extend(positions);
        merged
    }

    /// Validates, logs (unless replaying), applies and sends one change chunk.
    pub async fn write(&mut self, chunk: StreamChunk, replaying: bool) -> Result<()> {
        if self.generated.is_some() {
            // Its rows are regenerated from the logged ranges: a written row would be
            // lost to every view that backfills later.
            return Err(self.unchangeable());
        }
        self.write_inner(chunk, replaying, None, true)
            .await
            .map(|_| ())
    }

    /// Validates, logs, applies and sends one statement's changes; the caller
    /// acknowledges the statement after waiting on the returned [`Durable`] (with the
    /// write lock released, so that concurrent statements share one fsync).
    pub async fn write_statement(&mut self, chunk: StreamChunk) -> Result<Durable> {
        if self.generated.is_some() {
            return Err(self.unchangeable());
        }
        let end = self.write_inner(chunk, false, None, false).await?;
        Ok(Durable {
            sync: self.log.sync_handle(),
            end,
        })
    }

    /// The log's unsynced tail, if any: `Runtime::inject_barrier` makes it durable
    /// before a barrier can expose or checkpoint it.
    pub fn unsynced_log(&self) -> Option<(std::sync::Arc<weir_storage::LogSync>, u64)> {
        let sync = self.log.sync_handle();
        (!sync.is_synced()).then(|| {
            let end = sync.written();
            (sync, end)
        })
    }

    fn unchangeable(&self) -> ExecError {
        ExecError::WrongObjectType(format!(
            "cannot change source \"{}\": its rows come from its connector and are not stored",
            self.name
        ))
    }

    /// Returns the log's end after the change (unsynced unless `sync_now`).
    async fn write_inner(
        &mut self,
        chunk: StreamChunk,
        replaying: bool,
        positions: Option<&SourcePositions>,
        sync_now: bool,
    ) -> Result<u64> {
        if chunk.is_empty() {
            if let Some(p) = positions {
                // Only the positions moved: log them with an empty change batch.
                let empty = RecordBatch::new_empty(self.schema.clone());
                let bytes = weir_storage::codec::encode_changes(&[], &empty)?;
                self.log
                    .append(&weir_storage::source_positions::encode(p, &bytes)?)?;
            }
            return Ok(self.log.end_offset());
        }
        self.check_not_null(&chunk)?;
        // From here on the rows carry the table's own schema (callers may build them
        // all-nullable), so what is logged replays against the table's schema.
        let chunk = chunk.with_schema(self.schema.clone())?;
        let pk_delta = self.check_primary_key(&chunk)?;
        if !replaying {
            let bytes = weir_storage::codec::encode_changes(&chunk.op_codes(), &chunk.batch)?;
            let entry = match positions {
                Some(p) => weir_storage::source_positions::encode(p, &bytes)?,
                None => bytes,
            };
            let end = self.log.append_unsynced(&entry)?;
            if sync_now {
                self.log.sync_handle().sync_to(end)?;
            }
        }
        self.latest.apply(&chunk)?;
        if let Some(mut index) = self.upsert_index.take() {
            index.apply(self, &chunk)?;
            self.upsert_index = Some(index);
        }
        if let (Some(pk), Some((removed, added))) = (&mut self.pk, pk_delta) {
            for k in removed {
                pk.keys.remove(&k);
            }
            pk.keys.extend(added);
        }
        self.send_changes(chunk).await?;
        Ok(self.log.end_offset())
    }

    /// Sends one logged change chunk into the dataflow, then the watermark it moves.
    async fn send_changes(&mut self, chunk: StreamChunk) -> Result<()> {
        // One statement is one log entry (atomic), but flows in bounded pieces so that
        // downstream exchanges and backpressure work on reasonably sized chunks.
        let n = chunk.len();
        let mut offset = 0;
        while offset < n {
            let len = SOURCE_CHUNK_ROWS.min(n - offset);
            let piece = if len == n {
                chunk.clone()
            } else {
                StreamChunk {
                    ops: chunk.ops[offset..offset + len].into(),
                    batch: chunk.batch.slice(offset, len),
                }
            };
            self.sender.send(Message::Chunk(piece)).await?;
            offset += len;
        }
        let watermark = match self.watermark.as_mut() {
            Some(g) => g.observe(&chunk)?,
            None => None,
        };
        if let Some(w) = watermark {
            self.sender.send(Message::Watermark(w)).await?;
        }
        Ok(())
    }

    /// `None` when a write of `rows` rows can be sent now without waiting; otherwise
    /// a future that waits until it can, holding no borrow of the writer (so it is
    /// awaited without the write lock: see [`crate::Runtime::lock_writes_for`]).
    pub fn wait_for_room(
        &self,
        rows: usize,
    ) -> Option<impl std::future::Future<Output = Result<()>> + Send + 'static> {
        // Its pieces and the watermark it may move.
        let messages = rows.div_ceil(SOURCE_CHUNK_ROWS) + 1;
        if self.sender.has_room(messages, rows) {
            return None;
        }
        let sender = self.sender.clone();
        Some(async move { sender.room(messages, rows).await })
    }

    pub async fn send(&self, msg: Message) -> Result<()> {
        self.sender.send(msg).await
    }

    fn check_not_null(&self, chunk: &StreamChunk) -> Result<()> {
        for (i, field) in self.schema.fields().iter().enumerate() {
            if !field.is_nullable() && chunk.columns()[i].null_count() > 0 {
                return Err(ExecError::NotNullViolation(format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    field.name(),
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// Returns the primary keys this chunk removes and adds, or a unique violation.
    #[allow(clippy::type_complexity)]
    fn check_primary_key(
        &self,
        chunk: &StreamChunk,
    ) -> Result<Option<(Vec<Box<[u8]>>, Vec<Box<[u8]>>)>> {
        let Some(pk) = &self.pk else { return Ok(None) };
        let rows = pk.encode(chunk)?;
        let mut removed: HashSet<Box<[u8]>> = HashSet::new();
        let mut added: HashSet<Box<[u8]>> = HashSet::new();
        for (i, op) in chunk.ops.iter().enumerate() {
            if *op == Op::Delete {
                let k: Box<[u8]> = rows.row(i).as_ref().into();
                if !added.remove(&k) {
                    removed.insert(k);
                }
            }
        }
        for (i, op) in chunk.ops.iter().enumerate() {
            if *op == Op::Insert {
                let k: Box<[u8]> = rows.row(i).as_ref().into();
                let exists = pk.keys.contains(&k) && !removed.contains(&k);
                if exists || added.contains(&k) {
                    let key_text = pk
                        .columns
                        .iter()
                        .map(|&c| {
                            arrow::util::display::array_value_to_string(&chunk.columns()[c], i)
                                .unwrap_or_default()
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    let names = pk
                        .columns
                        .iter()
                        .map(|&c| self.schema.field(c).name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(ExecError::UniqueViolation(format!(
                        "duplicate key value violates unique constraint \"{}_pkey\": Key ({names})=({key_text}) already exists",
                        self.name
                    )));
                }
                added.insert(k);
            }
        }
        Ok(Some((
            removed.into_iter().collect(),
            added.into_iter().collect(),
        )))
    }
}

/// Decodes table-log entries into change chunks of the table's schema. An unstored
/// source's entries hold index ranges: with `generated` their rows are made again,
/// without it (the table's own contents, which keep none of them) they are skipped.
pub fn decode_log_entries(
    name: &str,
    schema: &SchemaRef,
    entries: Vec<weir_storage::table_log::LogEntry>,
    generated: Option<&crate::source::generated::GeneratedRows>,
) -> Result<Vec<StreamChunk>> {
    let mut out = Vec::with_capacity(entries.len());
    for (_, payload) in entries {
        let (_, changes) = weir_storage::source_positions::split(&payload)?;
        if let Some((from, to)) = weir_storage::codec::decode_generated_range(changes) {
            if let Some(g) = generated {
                out.extend(g.chunk(schema, from, to)?);
            }
            continue;
        }
        for (codes, batch) in weir_storage::codec::decode_change_batches(changes)? {
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = batch.with_schema(schema.clone()).map_err(|e| {
                ExecError::Internal(format!(
                    "table log of {name} does not match its schema: {e}"
                ))
            })?;
            out.push(StreamChunk::from_op_codes(&codes, batch)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod restore_tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn writer(dir: &std::path::Path) -> TableWriter {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("g", DataType::Int64, false),
        ]));
        let (log, _) = TableLog::open(&dir.join("t.log")).unwrap();
        let (tx, _rx) = tokio::sync::mpsc::channel(4);
        let tx = tx.into();
        TableWriter::new(1, "t", schema, vec![0], log, tx).unwrap()
    }

    fn chunk(ops: Vec<Op>, ids: Vec<i64>, gs: Vec<i64>) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("g", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(Int64Array::from(gs)),
            ],
        )
        .unwrap();
        StreamChunk::new(ops, batch)
    }

    #[test]
    fn a_merged_checkpoint_batch_restores_by_its_sum() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path());
        // INSERT 4, then UPDATE 4 (delete + insert), merged into one batch.
        let merged = chunk(
            vec![Op::Insert, Op::Delete, Op::Insert, Op::Insert],
            vec![4, 4, 4, 5],
            vec![0, 0, 1, 0],
        );
        w.restore_keys(&[merged]).unwrap();
        assert_eq!(w.pk.as_ref().unwrap().keys.len(), 2);
        // A key held twice is refused.
        let twice = chunk(vec![Op::Insert], vec![5], vec![1]);
        assert!(w.restore_keys(&[twice]).is_err());
    }
}
