//! The conformance files' second mode: materialized views created **before** the rows
//! they read are written, so that every INSERT, UPDATE and DELETE of the file reaches
//! them as a change (retractions included) instead of a backfill.
//!
//! The queries that passed as views in the first mode run again against a fresh
//! server: the file's statements are replayed in order, and right before each write
//! that follows new DDL, every query not yet created is tried as a view (its tables
//! exist from then on), and so before a DROP too. At the end, or before a statement the live views would block
//! (a DROP of a table they read: 2BP01), each live view is compared with its query
//! run as a SELECT at that moment, and dropped.

use crate::WeirProcess;
use sqllogictest::Record;
use tokio_postgres::Client;

/// How the views created before loading fared.
#[derive(Default)]
pub struct ViewsFirst {
    pub passed: usize,
    pub failed: usize,
    /// Of `passed`: views no write reached (the file writes nothing after the last
    /// relation they read was created), so only their backfill was tested.
    pub unwritten: usize,
    pub first_failures: Vec<String>,
}

/// A query to maintain from the start: its record ordinal (among the file's SQL
/// records), location and SQL.
pub struct Candidate {
    pub ordinal: usize,
    pub loc: String,
    pub sql: String,
}

struct Live {
    name: String,
    loc: String,
    sql: String,
    /// A write ran while the view was live.
    written: bool,
}

fn is_write(sql: &str) -> bool {
    let l = sql.trim_start().to_ascii_lowercase();
    ["insert", "update", "delete", "copy"]
        .iter()
        .any(|w| l.starts_with(w))
}

async fn sorted(client: &Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let mut rows = crate::query::try_rows(client, sql).await?;
    rows.sort();
    Ok(rows)
}

impl ViewsFirst {
    fn fail(&mut self, loc: &str, why: String) {
        self.failed += 1;
        if self.first_failures.len() < 5 {
            self.first_failures.push(format!("{loc}: {why}"));
        }
    }

    /// Compares every live view with its query now, and drops it.
    async fn settle(&mut self, client: &Client, live: &mut Vec<Live>) {
        if live.is_empty() {
            return;
        }
        if let Err(e) = client.batch_execute("FLUSH").await {
            for v in live.drain(..) {
                self.fail(&v.loc, format!("FLUSH failed: {e}"));
            }
            return;
        }
        for v in live.drain(..) {
            let view = sorted(client, &format!("SELECT * FROM {}", v.name)).await;
            let select = sorted(client, &v.sql).await;
            match (view, select) {
                (Ok(a), Ok(b)) if a == b => {
                    self.passed += 1;
                    self.unwritten += usize::from(!v.written);
                }
                (Ok(a), Ok(b)) => self.fail(
                    &v.loc,
                    format!(
                        "created before loading: the view has {} rows, the SELECT {}",
                        a.len(),
                        b.len()
                    ),
                ),
                (Err(e), _) | (_, Err(e)) => self.fail(&v.loc, e),
            }
            let _ = client
                .batch_execute(&format!("DROP MATERIALIZED VIEW {}", v.name))
                .await;
        }
    }
}

/// Tries each pending query as a view; the ones created go live.
async fn create_pending(client: &Client, pending: &mut Vec<Candidate>, live: &mut Vec<Live>) {
    let mut still = Vec::new();
    for c in pending.drain(..) {
        let name = format!("views_first_{}", c.ordinal);
        match crate::conformance::create_view(client, &name, &c.sql).await {
            Ok(()) => live.push(Live {
                name,
                loc: c.loc,
                sql: c.sql,
                written: false,
            }),
            Err(_) => still.push(c),
        }
    }
    *pending = still;
}

/// Replays `records` (the file's records that count, in order: (ordinal, record)) on a
/// fresh server with `candidates` created as views before the writes they read.
pub async fn run(
    records: Vec<(usize, Record<sqllogictest::DefaultColumnType>)>,
    candidates: Vec<Candidate>,
    data: &std::path::Path,
) -> ViewsFirst {
    let mut out = ViewsFirst::default();
    if candidates.is_empty() {
        return out;
    }
    let server = WeirProcess::start(data, 2).await;
    let client = server.connect().await;
    let mut pending = candidates;
    let mut live = Vec::new();
    let mut ddl_since_try = true;
    for (_, record) in records {
        let Record::Statement { sql, .. } = record else {
            continue;
        };
        // Before the first write after DDL, and before a DROP (the last moment the
        // relations a query reads may exist).
        let write = is_write(&sql);
        let drop = sql.trim_start().to_ascii_lowercase().starts_with("drop");
        if ddl_since_try && (write || drop) {
            create_pending(&client, &mut pending, &mut live).await;
            ddl_since_try = false;
        }
        if write {
            live.iter_mut().for_each(|v| v.written = true);
        } else {
            ddl_since_try = true;
        }
        if let Err(e) = client.batch_execute(&sql).await {
            // A statement the live views block: compare them now, then run it.
            if e.code().map(|c| c.code()) == Some("2BP01") {
                out.settle(&client, &mut live).await;
                let _ = client.batch_execute(&sql).await;
            }
        }
    }
    create_pending(&client, &mut pending, &mut live).await;
    out.settle(&client, &mut live).await;
    for c in pending {
        out.fail(
            &c.loc,
            "could not be created as a view before loading".into(),
        );
    }
    out
}
