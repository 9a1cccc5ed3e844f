//! Long work that reports how far it got: the backfill of a new view, SAVEPOINT,
//! RESTORE, recovery at start. Each piece of work is a [`Task`] on the runtime's
//! [`ProgressBoard`], which `weir_catalog.progress` and the dashboard list (running
//! and the latest finished). The statement that started the work may listen: the
//! server runs each statement with a notice channel in [`NOTICES`], and a task
//! started inside it sends its progress there about once a second, which the server
//! forwards to the client as NOTICE messages while the statement still runs.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Finished tasks kept on the board.
const FINISHED_KEPT: usize = 100;
/// At most one progress notice per task this often (start and end always).
const NOTICE_EVERY: Duration = Duration::from_secs(1);

tokio::task_local! {
    /// Where the running statement's client gets its NOTICE messages.
    pub static NOTICES: UnboundedSender<String>;
}

/// What the work counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Rows,
    Bytes,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Rows => "rows",
            Unit::Bytes => "bytes",
        }
    }
}

/// One row of `weir_catalog.progress`.
#[derive(Debug, Clone)]
pub struct ProgressRow {
    pub id: u64,
    /// `backfill`, `savepoint`, `restore` or `recovery`.
    pub kind: &'static str,
    /// The view, savepoint or job the work is about.
    pub object: String,
    /// `running`, `done` or `failed`.
    pub status: &'static str,
    pub done: u64,
    pub total: Option<u64>,
    pub unit: Unit,
    pub started_ms: i64,
    pub updated_ms: i64,
    /// Units per second since the start.
    pub rate_per_s: Option<f64>,
    /// Time left at that rate.
    pub eta_ms: Option<i64>,
}

struct Entry {
    row: ProgressRow,
    started: Instant,
}

impl Entry {
    fn refresh(&mut self) {
        let secs = self.started.elapsed().as_secs_f64();
        let r = &mut self.row;
        r.updated_ms = crate::jobs::now_ms();
        r.rate_per_s = (secs > 0.0 && r.done > 0).then(|| r.done as f64 / secs);
        r.eta_ms = match (r.total, r.rate_per_s, r.status) {
            (Some(total), Some(rate), "running") if rate > 0.0 => {
                Some((total.saturating_sub(r.done) as f64 / rate * 1000.0) as i64)
            }
            _ => None,
        };
    }
}

/// Every task, running and recently finished.
#[derive(Default)]
pub struct ProgressBoard {
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Arc<Mutex<Entry>>>>,
}

impl ProgressBoard {
    /// Starts reporting a piece of work; the statement running it (if any) listens.
    pub fn start(&self, kind: &'static str, object: &str, unit: Unit, total: Option<u64>) -> Task {
        let now = crate::jobs::now_ms();
        let entry = Arc::new(Mutex::new(Entry {
            row: ProgressRow {
                id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
                kind,
                object: object.to_string(),
                status: "running",
                done: 0,
                total,
                unit,
                started_ms: now,
                updated_ms: now,
                rate_per_s: None,
                eta_ms: None,
            },
            started: Instant::now(),
        }));
        {
            let mut entries = self.entries.lock();
            entries.push_back(entry.clone());
            // Forget the oldest finished tasks past the bound; running ones stay.
            while entries.len() > FINISHED_KEPT {
                let Some(i) = entries
                    .iter()
                    .position(|e| e.lock().row.status != "running")
                else {
                    break;
                };
                entries.remove(i);
            }
        }
        let task = Task {
            entry,
            listener: NOTICES.try_with(|n| n.clone()).ok(),
            last_notice: Instant::now(),
            finished: false,
        };
        task.notice();
        task
    }

    /// Every task, oldest first, with its rate and time left as of now.
    pub fn rows(&self) -> Vec<ProgressRow> {
        self.entries
            .lock()
            .iter()
            .map(|e| {
                let mut e = e.lock();
                if e.row.status == "running" {
                    e.refresh();
                }
                e.row.clone()
            })
            .collect()
    }
}

/// A piece of work in progress. Dropped without [`Task::finish`], it counts as failed
/// (the statement returned an error or was cancelled).
pub struct Task {
    entry: Arc<Mutex<Entry>>,
    listener: Option<UnboundedSender<String>>,
    last_notice: Instant,
    finished: bool,
}

impl Task {
    /// `n` more units done.
    pub fn advance(&mut self, n: u64) {
        self.entry.lock().row.done += n;
        self.maybe_notice();
    }

    /// The total became known (or changed).
    pub fn set_total(&mut self, total: u64) {
        self.entry.lock().row.total = Some(total);
    }

    /// The work completed.
    pub fn finish(mut self) {
        self.end("done");
    }

    fn end(&mut self, status: &'static str) {
        self.finished = true;
        {
            let mut e = self.entry.lock();
            e.row.status = status;
            if status == "done" {
                e.row.total = Some(e.row.total.unwrap_or(0).max(e.row.done));
            }
            e.refresh();
        }
        self.notice();
    }

    fn maybe_notice(&mut self) {
        if self.listener.is_some() && self.last_notice.elapsed() >= NOTICE_EVERY {
            self.last_notice = Instant::now();
            self.notice();
        }
    }

    fn notice(&self) {
        let Some(listener) = &self.listener else {
            return;
        };
        let text = {
            let mut e = self.entry.lock();
            e.refresh();
            describe(&e.row)
        };
        let _ = listener.send(text);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if !self.finished {
            self.end("failed");
        }
    }
}

/// The NOTICE text: `backfill of v: 1200000 of 10000000 rows (12%), 950000 rows/s,
/// about 9 s left`.
pub fn describe(r: &ProgressRow) -> String {
    let unit = r.unit.as_str();
    let mut text = format!("{} of {}: {}", r.kind, r.object, r.done);
    match r.total {
        Some(t) if t > 0 => {
            text += &format!(" of {t} {unit} ({}%)", r.done.min(t) * 100 / t);
        }
        _ => text += &format!(" {unit}"),
    }
    match r.status {
        "running" => {
            if let Some(rate) = r.rate_per_s {
                text += &format!(", {rate:.0} {unit}/s");
            }
            if let Some(eta) = r.eta_ms {
                text += &format!(", about {} s left", (eta + 999) / 1000);
            }
        }
        status => {
            let secs = (r.updated_ms - r.started_ms) as f64 / 1000.0;
            text += &format!(", {status} in {secs:.1} s");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_started_inside_a_listening_statement_sends_its_progress() {
        let board = ProgressBoard::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        NOTICES
            .scope(tx, async {
                let mut task = board.start("backfill", "v", Unit::Rows, Some(4));
                task.advance(4);
                assert_eq!(board.rows()[0].done, 4);
                assert_eq!(board.rows()[0].status, "running");
                task.finish();
            })
            .await;
        let first = rx.recv().await.expect("a notice at the start");
        assert_eq!(first, "backfill of v: 0 of 4 rows (0%)");
        // The advance came within a second of the start: no notice for it.
        let last = rx.recv().await.expect("a notice at the end");
        assert!(
            last.starts_with("backfill of v: 4 of 4 rows (100%), done in "),
            "{last}"
        );
        assert_eq!(board.rows()[0].status, "done");
    }

    #[test]
    fn a_task_dropped_unfinished_is_failed_and_lists_without_a_listener() {
        let board = ProgressBoard::default();
        let mut task = board.start("restore", "sp", Unit::Bytes, None);
        task.advance(100);
        drop(task);
        let rows = board.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].status, rows[0].done, rows[0].total),
            ("failed", 100, None)
        );
        assert_eq!(rows[0].eta_ms, None);
    }

    #[test]
    fn finished_tasks_past_the_bound_are_forgotten_oldest_first() {
        let board = ProgressBoard::default();
        let running = board.start("backfill", "long", Unit::Rows, None);
        for i in 0..FINISHED_KEPT + 5 {
            board
                .start("savepoint", &format!("s{i}"), Unit::Bytes, None)
                .finish();
        }
        let rows = board.rows();
        assert_eq!(rows.len(), FINISHED_KEPT);
        assert_eq!(rows[0].object, "long", "the running task is kept");
        assert_eq!(
            rows.last().unwrap().object,
            format!("s{}", FINISHED_KEPT + 4)
        );
        drop(running);
    }
}
