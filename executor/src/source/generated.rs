//! The loop shared by generator connectors (`nexmark`, `datagen`): rows are a pure
//! function of their index, so the position is the next index. Each batch of rows is
//! written with the position after it in one logged entry, exactly like a Kafka
//! table's offsets: after a crash generation resumes at the first index not logged and
//! produces the same rows again (no duplicate, no gap).
//!
//! An unstored source (`CREATE SOURCE` over a generator) logs only the index range of
//! each batch, not its rows: a view replaying the log from its checkpoint's position,
//! or a new view backfilling, makes the rows again with the same [`GeneratedRows`].

use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::source::SourceContext;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};
use weir_storage::source_positions::SourcePositions;

/// The rows of a generator at indexes `from..to`, in the table's schema: a pure
/// function of the index.
pub type RowsFn = Arc<dyn Fn(&SchemaRef, i64, i64) -> Result<RecordBatch> + Send + Sync>;

/// What makes a generator's rows, for generating them and for making an unstored
/// source's rows again: its rows function and the key of its next index among the
/// table's logged positions.
#[derive(Clone)]
pub struct GeneratedRows {
    pub rows: RowsFn,
    pub position_key: &'static str,
}

impl GeneratedRows {
    /// Rows `from..to` as one insert chunk; `None` when none of them is of this table
    /// (a nexmark table keeps one kind of event).
    pub fn chunk(&self, schema: &SchemaRef, from: i64, to: i64) -> Result<Option<StreamChunk>> {
        let batch = (self.rows)(schema, from, to)?;
        Ok((batch.num_rows() > 0).then(|| StreamChunk::inserts(batch)))
    }
}

/// One generator's pace.
pub struct Run {
    /// Indexes to generate; `None`: unbounded.
    pub total: Option<i64>,
    /// Most indexes per write (one log entry); a paced run writes smaller batches
    /// when the buffer timeout comes first.
    pub batch: i64,
    /// Wall-clock pace in indexes per second; `None`: as fast as possible.
    pub max_per_second: Option<f64>,
    /// When row 0 of a paced run is due (ms since the epoch; row `i` is due `i /
    /// max_per_second` later), for rows whose event time is the wall clock: a resumed
    /// run catches up. `None`: the first row generated is due when the run starts.
    pub zero_due_ms: Option<i64>,
    /// Threads that generate batches in parallel (`nexmark.split.num`); their batches
    /// are still written one after the other, in index order, so the log and the
    /// position stay those of one generator. A paced run uses one thread.
    pub splits: usize,
}

/// Whose batch is written next: batch `k` of the run covers indexes
/// `first + k * batch ..`, and split `k % splits` makes it.
struct Turn {
    next: Mutex<u64>,
    moved: Condvar,
    /// Set when a split stops early (the table was dropped, or it failed): the others
    /// stop instead of waiting for a batch that will never be written.
    stopped: AtomicBool,
}

impl Turn {
    fn new() -> Self {
        Self {
            next: Mutex::new(0),
            moved: Condvar::new(),
            stopped: AtomicBool::new(false),
        }
    }

    /// Waits until batch `k` may be written; false when the run stopped.
    fn wait_for(&self, k: u64) -> bool {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        while *next != k && !self.stopped.load(Ordering::Acquire) {
            next = self.moved.wait(next).unwrap_or_else(|e| e.into_inner());
        }
        !self.stopped.load(Ordering::Acquire)
    }

    fn done(&self, k: u64) {
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = k + 1;
        self.moved.notify_all();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _guard = self.next.lock().unwrap_or_else(|e| e.into_inner());
        self.moved.notify_all();
    }
}

/// What every split of one run shares.
struct Generation<'a> {
    ctx: &'a SourceContext,
    run: &'a Run,
    generated: &'a GeneratedRows,
    schema: SchemaRef,
    /// The index the run starts at: batch `k` covers `first + k * batch ..`. Read once,
    /// for all splits: every split must count its batches from the same index.
    first: i64,
    turn: Turn,
}

/// Starts `run.splits` threads that write `generated`'s batches into the table; they
/// stop when the table is dropped or `total` is reached.
pub fn spawn(ctx: SourceContext, run: Run, generated: GeneratedRows) -> Result<()> {
    std::thread::Builder::new()
        .name(format!("generate-{}", ctx.table()))
        .spawn(move || {
            let Some(start) = ctx.start() else {
                return;
            };
            let first = start
                .positions
                .get(generated.position_key)
                .copied()
                .unwrap_or(0) as i64;
            let g = Generation {
                ctx: &ctx,
                run: &run,
                generated: &generated,
                schema: start.schema,
                first,
                turn: Turn::new(),
            };
            match generate_splits(&g) {
                Err(e) => ctx.fail(&e.to_string()),
                // A bounded run wrote its last row (and was not stopped by a drop).
                Ok(()) if run.total.is_some() && !g.turn.is_stopped() => {
                    if let Some(Err(e)) = ctx.end_of_input() {
                        ctx.fail(&e.to_string());
                    }
                }
                Ok(()) => {}
            }
        })
        .map_err(|e| ExecError::Internal(format!("cannot start the generator: {e}")))?;
    Ok(())
}

/// Runs every split (this thread is split 0) until all have ended; the first error.
fn generate_splits(g: &Generation<'_>) -> Result<()> {
    if let Some(rate) = g.run.max_per_second {
        return generate_paced(g, rate);
    }
    let one = |split: u64| {
        let result = generate(g, split);
        if result.is_err() {
            g.turn.stop();
        }
        result
    };
    std::thread::scope(|scope| {
        let splits = g.run.splits.max(1) as u64;
        let others: Vec<_> = (1..splits).map(|s| scope.spawn(move || one(s))).collect();
        let mut result = one(0);
        for h in others {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(ExecError::Internal("a generator split panicked".into())));
            result = result.and(r);
        }
        result
    })
}

fn generate(g: &Generation<'_>, split: u64) -> Result<()> {
    let run = g.run;
    let splits = run.splits.max(1) as u64;
    let mut k = split;
    loop {
        let from = g.first + k as i64 * run.batch;
        let end = match run.total {
            // Later batches start later still: every split ends here in turn.
            Some(total) if from >= total => return Ok(()),
            Some(total) => (from + run.batch).min(total),
            None => from + run.batch,
        };
        let batch = (g.generated.rows)(&g.schema, from, end)?;
        if !g.turn.wait_for(k) {
            return Ok(());
        }
        if !write(g, from, end, batch)? {
            return Ok(());
        }
        g.turn.done(k);
        k += splits;
    }
}

/// A run paced to `rate` rows per second of wall clock: row `i` is due `(i - first) /
/// rate` seconds after the start and is never written before. A batch is written
/// when it is full or when its oldest row has waited the buffer timeout, and then
/// holds every row due by then (at least one). One thread: batches vary in size.
fn generate_paced(g: &Generation<'_>, rate: f64) -> Result<()> {
    let run = g.run;
    let timeout = g.ctx.buffer_timeout();
    let first_due = run.zero_due_ms.map(|ms| {
        let ms = ms as f64 + g.first as f64 * 1000.0 / rate;
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    });
    let started = start_of(first_due);
    let due = |i: i64| Duration::from_secs_f64((i - g.first).max(0) as f64 / rate);
    let mut from = g.first;
    loop {
        let limit = run
            .total
            .map_or(from + run.batch, |t| (from + run.batch).min(t));
        if from >= limit {
            return Ok(());
        }
        let full_at = due(limit - 1);
        let send_at = timeout
            .deadline(due(from))
            .map_or(full_at, |d| d.min(full_at));
        if let Some(wait) = send_at.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        let due_now = g.first + (started.elapsed().as_secs_f64() * rate) as i64 + 1;
        let end = due_now.clamp(from + 1, limit);
        let batch = (g.generated.rows)(&g.schema, from, end)?;
        if !write(g, from, end, batch)? {
            return Ok(());
        }
        from = end;
    }
}

/// The instant the first row is due: now, or `first_due` (waiting for it when it is
/// still ahead).
fn start_of(first_due: Option<SystemTime>) -> Instant {
    let Some(due) = first_due else {
        return Instant::now();
    };
    match SystemTime::now().duration_since(due) {
        Ok(late) => Instant::now()
            .checked_sub(late)
            .unwrap_or_else(Instant::now),
        Err(ahead) => {
            std::thread::sleep(ahead.duration());
            Instant::now()
        }
    }
}

/// Writes rows `from..end` with the position after them; `false` once the table is
/// gone (the run stops).
fn write(g: &Generation<'_>, from: i64, end: i64, batch: RecordBatch) -> Result<bool> {
    let positions = SourcePositions::from([(g.generated.position_key.to_string(), end as u64)]);
    match g.ctx.write_generated(from, end, batch, positions) {
        None => {
            g.turn.stop();
            Ok(false)
        }
        Some(r) => r.map(|()| true),
    }
}
