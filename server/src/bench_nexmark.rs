//! `weir bench nexmark --query source|q0|q1|q2|q3|q4|q5|q7|q8 --events N --parallelism P`:
//! Nexmark events/s through the whole pipeline, in this process.
//!
//! The sources a query reads (`person`, `auction`, `bid`) are `CREATE SOURCE`s of the
//! `nexmark` connector (the generator in this process, like Flink's in-process Nexmark
//! source), each over the same N events, keeping its kind and no rows (their logs hold
//! index ranges); the query runs as `CREATE SINK ... AS
//! <query> WITH (connector = 'blackhole')`; `source` is the generator-only pipeline
//! (the bid table into a blackhole sink), the ceiling. Checkpoints every 10 s, exactly
//! once, hashmap state, and a 4-second watermark on `date_time`, as in the Flink
//! figures of issue 5 and Nexmark's Flink DDL (window and join state behind it is
//! cleaned). The clock runs from the
//! tables' creation until every generator logged its last event and a FLUSH (a barrier
//! through every job) returned, i.e. until the sink consumed every event.
//!
//! Reported: events/s (all kinds of events the generator produced, as Nexmark counts
//! them), events per CPU-second of this process (the "per core" figure), peak RSS. Run
//! each query in its own process so that the peak RSS is that query's. The queries are
//! `weir_executor::source::nexmark::queries` (q6 is not among them).

use crate::session::Session;
use crate::{Config, Database};
use std::time::{Duration, Instant};

use weir_executor::source::nexmark::{generator, queries};

/// The tables and query of a benchmark name.
fn query(name: &str) -> Result<(&'static [&'static str], &'static str), String> {
    if name == "source" {
        return Ok((&["bid"], "SELECT * FROM bid"));
    }
    queries::query(name).ok_or_else(|| {
        let known: Vec<&str> = queries::QUERIES.iter().map(|(n, _, _)| *n).collect();
        format!("{name}: known are source, {}", known.join(", "))
    })
}

pub async fn run(
    mut cfg: Config,
    name: String,
    events: u64,
    parallelism: u32,
) -> Result<(), String> {
    let (tables, sql) = query(&name)?;
    let dir = std::env::temp_dir().join(format!("weir-bench-nexmark-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cfg.data_dir = dir.clone();
    cfg.parallelism = parallelism;
    cfg.settings
        .insert("execution.checkpointing.interval".into(), "10s".into());
    let db = Database::open(cfg.clone()).await?;
    let mut s = Session::default();
    let cpu0 = crate::bench_kafka::cpu_seconds();
    let start = Instant::now();
    let mut ddl: Vec<String> = tables
        .iter()
        .map(|t| {
            format!(
                "CREATE SOURCE {t} ({}, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (connector = 'nexmark', nexmark.table.type = '{t}', nexmark.event.num = '{events}')",
                queries::columns(t).unwrap_or_default()
            )
        })
        .collect();
    ddl.push(format!(
        "CREATE SINK {name} AS {sql} WITH (connector = 'blackhole')"
    ));
    for stmt in &ddl {
        for r in db.execute(&mut s, stmt).await {
            r.map_err(|e| format!("{stmt}: {}", e.message))?;
        }
    }
    // Until every generator has logged its last event ...
    loop {
        let done = {
            let mut w = db.runtime().lock_writes().await;
            tables
                .iter()
                .map(|t| {
                    w.table(t)
                        .and_then(|t| t.source_positions().get("nexmark:next_event").copied())
                        .unwrap_or(0)
                })
                .min()
                .unwrap_or(0)
        };
        if done >= events {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ... and every job has processed it.
    for r in db.execute(&mut s, "FLUSH").await {
        r.map_err(|e| format!("FLUSH: {}", e.message))?;
    }
    let took = start.elapsed().as_secs_f64();
    let cpu = crate::bench_kafka::cpu_seconds() - cpu0;
    // What reached the sink, checked where the answer is known: every bid for the
    // pass-through queries (source, q0, q1).
    let sink_records = weir_executor::metrics::metrics()
        .sink_records_in
        .with_label_values(&[name.as_str()])
        .get();
    if matches!(name.as_str(), "source" | "q0" | "q1") {
        // The source keeps no rows: count the generator's bids among the events.
        let bids = (0..events as i64)
            .filter(|&n| generator::kind(n) == generator::Kind::Bid)
            .count() as u64;
        if sink_records != bids {
            return Err(format!(
                "the sink received {sink_records} changes, the generator made {bids} bids"
            ));
        }
    }
    println!(
        "nexmark {name}: events={events} parallelism={parallelism} seconds={took:.2} events_per_s={:.0} cpu_seconds={cpu:.2} events_per_cpu_second={:.0} sink_records={sink_records} peak_rss_mb={}",
        events as f64 / took,
        events as f64 / cpu.max(1e-9),
        crate::bench::peak_rss_bytes().map(|b| b / (1024 * 1024)).unwrap_or(0),
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
