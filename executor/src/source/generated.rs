//! The loop shared by generator connectors (`nexmark`, `datagen`): rows are a pure
//! function of their index, so the position is the next index. Each batch of rows is
//! written with the position after it in one logged entry, exactly like a Kafka
//! table's offsets: after a crash generation resumes at the first index not logged and
//! produces the same rows again (no duplicate, no gap).
//!
//! An unstored source (`CREATE SOURCE` over a generator) logs only the index range of
//! each batch, not its rows: a view replaying the log from its checkpoint's position,
//! or a new view backfilling, makes the rows again with the same [`GeneratedRows`].

use crate::error::{ExecError, Result};
use crate::runtime::Runtime;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use weir_storage::source_positions::SourcePositions;

/// The rows of a generator at indexes `from..to`, in the table's schema: a pure
/// function of the index.
pub type RowsFn = Arc<dyn Fn(&SchemaRef, i64, i64) -> Result<RecordBatch> + Send + Sync>;

/// What makes an unstored source's rows again: its rows function and the key of its
/// next index among the table's logged positions.
#[derive(Clone)]
pub struct GeneratedRows {
    pub rows: RowsFn,
    pub position_key: &'static str,
}

/// One generator's table and pace.
pub struct Run {
    pub table: String,
    /// The key of the next index in the table's logged positions.
    pub position_key: &'static str,
    /// Indexes to generate; `None`: unbounded.
    pub total: Option<i64>,
    /// Indexes per write (one log entry).
    pub batch: i64,
    /// Wall-clock pace in indexes per second; `None`: as fast as possible.
    pub max_per_second: Option<f64>,
}

/// Starts a thread that writes `rows(schema, from, to)` batches into the table; it stops
/// when the table is dropped or `total` is reached.
pub fn spawn(rt: &Arc<Runtime>, run: Run, rows: RowsFn) -> Result<()> {
    rt.note_connector(&run.table);
    let weak = Arc::downgrade(rt);
    let handle = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name(format!("generate-{}", run.table))
        .spawn(move || {
            if let Err(e) = generate(&weak, &handle, &run, rows) {
                tracing::error!(table = %run.table, error = %e, "generator stopped");
                if let Some(rt) = weak.upgrade() {
                    rt.fail_source(&run.table, &e.to_string());
                }
            }
        })
        .map_err(|e| ExecError::Internal(format!("cannot start the generator: {e}")))?;
    Ok(())
}

fn generate(
    rt: &Weak<Runtime>,
    handle: &tokio::runtime::Handle,
    run: &Run,
    rows: RowsFn,
) -> Result<()> {
    let (schema, mut next) = {
        let Some(rt) = rt.upgrade() else {
            return Ok(());
        };
        let mut w = handle.block_on(rt.lock_writes());
        let Some(t) = w.table(&run.table) else {
            return Ok(());
        };
        (
            t.schema.clone(),
            t.source_positions()
                .get(run.position_key)
                .copied()
                .unwrap_or(0) as i64,
        )
    };
    let started = Instant::now();
    let first = next;
    loop {
        let end = match run.total {
            Some(total) if next >= total => return Ok(()),
            Some(total) => (next + run.batch).min(total),
            None => next + run.batch,
        };
        let batch = rows(&schema, next, end)?;
        let positions = SourcePositions::from([(run.position_key.to_string(), end as u64)]);
        let Some(rt) = rt.upgrade() else {
            return Ok(());
        };
        let written = handle.block_on(async {
            let mut w = rt.lock_writes().await;
            let t = w.table(&run.table)?;
            Some(t.write_generated(next, end, batch, positions).await)
        });
        match written {
            None => return Ok(()),
            Some(r) => r?,
        }
        next = end;
        if let Some(rate) = run.max_per_second {
            let due = Duration::from_secs_f64((next - first) as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
}
