//! What a source connector may do with its table, and nothing more: read where the
//! table stopped, write rows together with the positions after them, report a bad
//! record, fail. The connector never sees the runtime; the context holds it weakly,
//! so a dropped table (or a stopped database) ends the connector's next write with
//! `None` instead of keeping the table alive.
//!
//! Connectors run on their own threads (librdkafka's consumer blocks), so every call
//! here blocks on the runtime's tokio handle.

use super::BadRecord;
use crate::buffering::BufferTimeout;
use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::table_writer::{TableWriter, UpsertOp};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::{Arc, Weak};
use weir_storage::source_positions::SourcePositions;

/// A connector's handle on its table.
#[derive(Clone)]
pub struct SourceContext {
    table: String,
    runtime: Weak<Runtime>,
    handle: tokio::runtime::Handle,
}

/// The table as the connector finds it when it starts.
#[derive(Debug, Clone)]
pub struct TableStart {
    pub schema: SchemaRef,
    /// Where the table's log says the connector stopped.
    pub positions: SourcePositions,
    pub primary_key: Vec<usize>,
}

impl SourceContext {
    /// Called from a tokio task: the handle is the current runtime's.
    pub(crate) fn new(runtime: &Arc<Runtime>, table: &str) -> Self {
        runtime.registry.note_connector(table);
        Self {
            table: table.to_string(),
            runtime: Arc::downgrade(runtime),
            handle: tokio::runtime::Handle::current(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// `execution.buffer-timeout.interval` of the table's job: how long a batch waits
    /// to fill before it is written (see [`crate::buffering`]).
    pub fn buffer_timeout(&self) -> BufferTimeout {
        self.runtime
            .upgrade()
            .map(|rt| rt.config.job.buffering.timeout)
            .unwrap_or_default()
    }

    /// `None` once the table is gone.
    pub fn start(&self) -> Option<TableStart> {
        self.with_table(None, |t| {
            Box::pin(async move {
                TableStart {
                    schema: t.schema.clone(),
                    positions: t.source_positions().clone(),
                    primary_key: t.primary_key().to_vec(),
                }
            })
        })
    }

    /// Whether the table still exists (a connector with nothing to write asks, to
    /// stop once it is dropped).
    pub fn is_open(&self) -> bool {
        self.with_table(None, |_| Box::pin(async {})).is_some()
    }

    /// Appends `chunk`, logged with `positions` as one entry. `None`: the table is gone.
    pub fn write(&self, chunk: StreamChunk, positions: SourcePositions) -> Option<Result<()>> {
        self.with_table(Some(chunk.len()), |t| {
            Box::pin(t.write_from_source(chunk, positions))
        })
    }

    /// Applies upserts (`FORMAT UPSERT`), logged with `positions`.
    pub fn upsert(
        &self,
        rows: &RecordBatch,
        keys: &RecordBatch,
        ops: &[UpsertOp],
        positions: SourcePositions,
    ) -> Option<Result<()>> {
        // Borrows the batches, so not through `with_table` (whose futures own theirs).
        let rt = self.runtime.upgrade()?;
        self.handle.block_on(async {
            let mut w = rt.lock_writes_for(&self.table, rows.num_rows()).await;
            let t = w.table(&self.table)?;
            Some(t.upsert_from_source(rows, keys, ops, positions).await)
        })
    }

    /// Appends generated rows `from..to` (an unstored source logs only the range).
    pub fn write_generated(
        &self,
        from: i64,
        to: i64,
        batch: RecordBatch,
        positions: SourcePositions,
    ) -> Option<Result<()>> {
        self.with_table(Some(batch.num_rows()), |t| {
            Box::pin(t.write_generated(from, to, batch, positions))
        })
    }

    /// The source has no more rows (a bounded generator ended): every window closes.
    /// `None`: the table is gone.
    pub fn end_of_input(&self) -> Option<Result<()>> {
        self.with_table(Some(0), |t| Box::pin(t.end_of_input()))
    }

    /// A record that could not be decoded: counted, listed by `SHOW SOURCE ERRORS`.
    pub fn bad_record(&self, partition: i32, offset: i64, reason: String) {
        if let Some(rt) = self.runtime.upgrade() {
            rt.registry.note_bad_record(BadRecord {
                table: self.table.clone(),
                partition,
                offset,
                reason,
                at_ms: crate::jobs::now_ms(),
            });
        }
    }

    /// Where reading partition `partition` stands (`weir_catalog.sources`, the
    /// `pendingRecords` metric).
    pub fn partition_position(
        &self,
        connector: &'static str,
        partition: i32,
        position: i64,
        high_watermark: Option<i64>,
    ) {
        if let Some(rt) = self.runtime.upgrade() {
            rt.registry
                .note_source_partition(crate::jobs::SourcePartition {
                    table: self.table.clone(),
                    connector,
                    partition,
                    position,
                    high_watermark,
                });
        }
    }

    /// The connector stopped for good: the table shows FAILED with the reason.
    pub fn fail(&self, reason: &str) {
        tracing::error!(table = %self.table, error = %reason, "source connector stopped");
        if let Some(rt) = self.runtime.upgrade() {
            rt.registry.fail(&self.table, reason);
        }
    }

    /// Runs `f` on the table's writer under the write lock; with `Some(rows)`, `f`
    /// writes that many rows and the lock is taken once there is room for them
    /// ([`Runtime::lock_writes_for`]).
    fn with_table<T>(
        &self,
        rows: Option<usize>,
        f: impl for<'a> FnOnce(
            &'a mut TableWriter,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>,
    ) -> Option<T> {
        let rt = self.runtime.upgrade()?;
        self.handle.block_on(async {
            let mut w = match rows {
                Some(rows) => rt.lock_writes_for(&self.table, rows).await,
                None => rt.lock_writes().await,
            };
            let t = w.table(&self.table)?;
            let started = std::time::Instant::now();
            let out = f(t).await;
            // The room was checked before the lock was taken, so a write that waits
            // here holds up every other writer (see `lock_writes_for`).
            crate::runtime::warn_if_lock_held(&self.table, "a source write", started);
            Some(out)
        })
    }
}
