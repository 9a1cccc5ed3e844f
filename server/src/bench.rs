//! `weir bench ...`: benchmarks whose figures go into the README.
//!
//! `weir bench ingest --rows N --groups G --parallelism P` starts an embedded database
//! in a temporary data dir, creates `t(k bigint, v bigint)` and
//! `CREATE MATERIALIZED VIEW agg AS SELECT k, count(*), sum(v) FROM t GROUP BY k`, then
//! times `INSERT INTO t SELECT i % G, i FROM generate_series(1, N)` until the view
//! reflects every row (FLUSH), and reports rows/s and the process's peak RSS.

use crate::session::Session;
use crate::{Config, Database};
use std::time::Instant;

#[derive(clap::Subcommand, Clone)]
pub enum BenchCommand {
    /// Ingest into a table feeding a GROUP BY view.
    Ingest {
        #[arg(long, default_value_t = 10_000_000)]
        rows: u64,
        #[arg(long, default_value_t = 1_000_000)]
        groups: u64,
    },
}

/// Peak resident set size of this process in bytes (Linux: VmHWM).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

async fn exec(db: &Database, s: &mut Session, sql: &str) -> Result<(), String> {
    for r in db.execute(s, sql).await {
        r.map_err(|e| format!("{sql}: {}", e.message))?;
    }
    Ok(())
}

pub async fn run(cmd: BenchCommand, mut cfg: Config) -> Result<(), String> {
    match cmd {
        BenchCommand::Ingest { rows, groups } => {
            let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            cfg.data_dir = dir.clone();
            let db = Database::open(cfg.clone()).await?;
            let mut s = Session::default();
            exec(&db, &mut s, "CREATE TABLE t (k BIGINT, v BIGINT)").await?;
            exec(
                &db,
                &mut s,
                "CREATE MATERIALIZED VIEW agg AS SELECT k, count(*) AS n, sum(v) AS total FROM t GROUP BY k",
            )
            .await?;
            let start = Instant::now();
            exec(
                &db,
                &mut s,
                &format!(
                    "INSERT INTO t SELECT i % {groups}, i FROM generate_series(1, {rows}) AS g(i)"
                ),
            )
            .await?;
            let inserted = start.elapsed();
            exec(&db, &mut s, "FLUSH").await?;
            let total = start.elapsed();
            let mut check = Session::default();
            let out = db.execute(&mut check, "SELECT count(*) FROM agg").await;
            let groups_seen = match out.into_iter().next() {
                Some(Ok(crate::output::Output::Rows { batches, .. })) => {
                    arrow::util::pretty::pretty_format_batches(&batches)
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                }
                other => format!("{other:?}"),
            };
            println!(
                "ingest rows={rows} groups={groups} parallelism={} insert_ack={:.2}s view_fresh={:.2}s rows_per_s={:.0} peak_rss_mb={}",
                cfg.parallelism,
                inserted.as_secs_f64(),
                total.as_secs_f64(),
                rows as f64 / total.as_secs_f64(),
                peak_rss_bytes().map(|b| b / (1024 * 1024)).unwrap_or(0),
            );
            println!("groups in view:\n{groups_seen}");
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        }
    }
}
