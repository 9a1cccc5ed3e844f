//! `weir bench ...`: benchmarks whose figures go into the README.
//!
//! `weir bench ingest --rows N --groups G --parallelism P` starts an embedded database
//! in a temporary data dir, creates `t(k bigint, v bigint)` and
//! `CREATE MATERIALIZED VIEW agg AS SELECT k, count(*), sum(v) FROM t GROUP BY k`, then
//! times `INSERT INTO t SELECT i % G, i FROM generate_series(1, N)` until the view
//! reflects every row (FLUSH), and reports rows/s and the process's peak RSS.
//!
//! With `--batch B` the rows arrive as `N / B` statements of `B` rows (continuous
//! ingest, so barriers and checkpoints interleave with the data), and
//! `--checkpoint-interval off|1s|10s` sets `execution.checkpointing.interval`: the
//! checkpoint-overhead figures in the README compare these runs.

use crate::session::Session;
use crate::{Config, Database};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Subcommand, Clone)]
pub enum BenchCommand {
    /// Ingest into a table feeding a GROUP BY view.
    Ingest {
        #[arg(long, default_value_t = 10_000_000)]
        rows: u64,
        #[arg(long, default_value_t = 1_000_000)]
        groups: u64,
        /// Rows per INSERT statement (default: all rows in one statement).
        #[arg(long)]
        batch: Option<u64>,
        /// `execution.checkpointing.interval` for the run (`off`, `1s`, `10s`, ...).
        #[arg(long)]
        checkpoint_interval: Option<String>,
    },
    /// Nexmark events through queries into blackhole sinks (`source`: the ceiling).
    Nexmark {
        /// source, q0 ... q8, or several separated by commas (one process, one input)
        #[arg(long, value_delimiter = ',', required = true)]
        query: Vec<String>,
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        #[arg(long, default_value_t = 1)]
        parallelism: u32,
        /// Events per second of event time (`nexmark.event.rate`; the Flink harness's
        /// default is 10,000,000, Nexmark's default 10,000)
        #[arg(long, default_value_t = 10_000_000)]
        event_rate: u64,
        /// flink: one source builds every event, views split it by kind; tables: one
        /// source per kind
        #[arg(long, value_enum, default_value_t = crate::bench_nexmark::Shape::Flink)]
        shape: crate::bench_nexmark::Shape,
        /// Compare each output with the query run as a batch over a stored twin
        #[arg(long)]
        check: bool,
        /// Pace the input to this many events per second of wall clock
        /// (`nexmark.max.events.per.second`); event time then runs with the wall clock
        /// and the sinks of source, q0, q1 and q5 measure end-to-end latency
        #[arg(long)]
        max_events_per_second: Option<u64>,
        /// `execution.buffer-timeout.interval` (`0`, `100ms`, `-1`, ...)
        #[arg(long, allow_hyphen_values = true)]
        buffer_timeout: Option<String>,
        /// `taskmanager.network.memory.buffer-debloat.enabled = true`
        #[arg(long)]
        debloat: bool,
        /// Events per generated batch (`nexmark.batch.events`; default the
        /// connector's)
        #[arg(long)]
        batch_events: Option<u64>,
    },
    /// Kafka topic -> table -> view: records/s, records per CPU-second, latency.
    Kafka {
        /// The broker (`host:port`), e.g. the one `scripts/kafka-broker.sh` starts.
        #[arg(long)]
        broker: String,
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
}

/// Peak resident set size of this process in bytes (Linux: VmHWM).
pub fn peak_rss_bytes() -> Option<u64> {
    status_kb("VmHWM:").map(|kb| kb * 1024)
}

/// A kB figure of `/proc/self/status`.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The most anonymous memory (heap, stacks: `RssAnon`) this process held while it
/// ran: its resident set without the pages of the binary's code and other mapped
/// files, which the kernel keeps no high-water mark of, so a thread samples it.
/// Flink's heap after GC, which benchmarks compare with, likewise leaves out the
/// JVM's code cache and metaspace.
pub struct AnonPeak {
    peak_kb: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl AnonPeak {
    /// Samples every 10 ms until dropped.
    pub fn start() -> Self {
        let peak = Self {
            peak_kb: Default::default(),
            stop: Default::default(),
        };
        let (peak_kb, stop) = (peak.peak_kb.clone(), peak.stop.clone());
        let sample = move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(kb) = status_kb("RssAnon:") {
                    peak_kb.fetch_max(kb, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("anon-peak".into())
            .spawn(sample)
        {
            tracing::warn!(error = %e, "cannot sample anonymous memory");
        }
        peak
    }

    /// The largest sample so far (or now), in MiB.
    pub fn peak_mb(&self) -> u64 {
        let now = status_kb("RssAnon:").unwrap_or(0);
        self.peak_kb.load(Ordering::Relaxed).max(now) / 1024
    }
}

impl Drop for AnonPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn exec(db: &Database, s: &mut Session, sql: &str) -> Result<(), String> {
    for r in db.execute(s, sql).await {
        r.map_err(|e| format!("{sql}: {}", e.message))?;
    }
    Ok(())
}

pub async fn run(cmd: BenchCommand, mut cfg: Config) -> Result<(), String> {
    match cmd {
        BenchCommand::Kafka {
            broker,
            records,
            partitions,
        } => crate::bench_kafka::run(cfg, broker, records, partitions).await,
        BenchCommand::Nexmark {
            query,
            events,
            parallelism,
            event_rate,
            shape,
            check,
            max_events_per_second,
            buffer_timeout,
            debloat,
            batch_events,
        } => {
            let mut set = |k: &str, v: String| -> Result<(), String> {
                crate::settings::validate(k, &v)?;
                cfg.settings.insert(k.into(), v);
                Ok(())
            };
            if let Some(t) = buffer_timeout {
                set("execution.buffer-timeout.interval", t)?;
            }
            if debloat {
                set(
                    "taskmanager.network.memory.buffer-debloat.enabled",
                    "true".into(),
                )?;
            }
            let run = crate::bench_nexmark::Run {
                queries: query,
                events,
                parallelism,
                event_rate: max_events_per_second.unwrap_or(event_rate),
                shape,
                check,
                max_events_per_second,
                base_time_ms: None,
                batch_events,
            };
            crate::bench_nexmark::run(cfg, run).await
        }
        BenchCommand::Ingest {
            rows,
            groups,
            batch,
            checkpoint_interval,
        } => {
            let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            cfg.data_dir = dir.clone();
            if let Some(i) = &checkpoint_interval {
                crate::settings::validate("execution.checkpointing.interval", i)?;
                cfg.settings
                    .insert("execution.checkpointing.interval".into(), i.clone());
            }
            let batch = batch.unwrap_or(rows).max(1);
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
            let mut from = 1;
            while from <= rows {
                let to = (from + batch - 1).min(rows);
                exec(
                    &db,
                    &mut s,
                    &format!(
                        "INSERT INTO t SELECT i % {groups}, i FROM generate_series({from}, {to}) AS g(i)"
                    ),
                )
                .await?;
                from = to + 1;
            }
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
            let completed = db
                .runtime()
                .checkpoints
                .history()
                .iter()
                .filter(|r| {
                    r.status == weir_executor::checkpoint::stats::CheckpointStatus::Completed
                })
                .count();
            println!(
                "ingest rows={rows} groups={groups} batch={batch} checkpoint_interval={} checkpoints_completed={completed} parallelism={} insert_ack={:.2}s view_fresh={:.2}s rows_per_s={:.0} peak_rss_mb={}",
                checkpoint_interval.as_deref().unwrap_or("10s"),
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
