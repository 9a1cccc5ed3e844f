//! `weir bench nexmark --query q0|q1|q2|source --events N --parallelism P`: Nexmark
//! events/s through the whole pipeline, in this process.
//!
//! The `bid` table is fed by the `nexmark` connector (the generator in this process,
//! like Flink's in-process Nexmark source); the query runs as `CREATE SINK ... AS
//! <query> WITH (connector = 'blackhole')`; `source` is the generator-only pipeline
//! (the table into a blackhole sink), the ceiling. Checkpoints every 10 s, exactly
//! once, hashmap state, as in the Flink figures of issue 5. The clock runs from the
//! table's creation until the generator logged its last event and a FLUSH (a barrier
//! through every job) returned, i.e. until the sink consumed every event.
//!
//! Reported: events/s (all kinds of events the generator produced, as Nexmark counts
//! them), events per CPU-second of this process (the "per core" figure), peak RSS. Run
//! each query in its own process so that the peak RSS is that query's.
//! q3–q8 need joins and windows, which are not built yet.

use crate::session::Session;
use crate::{Config, Database};
use std::time::{Duration, Instant};

const BID: &str = "auction bigint, bidder bigint, price bigint, date_time timestamp, extra text";

/// The query of a Nexmark query name, over `bid`.
fn query(name: &str) -> Result<&'static str, String> {
    Ok(match name {
        "source" => "SELECT * FROM bid",
        "q0" => "SELECT auction, bidder, price, date_time, extra FROM bid",
        "q1" => "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
        "q2" => "SELECT auction, price FROM bid WHERE auction % 123 = 0",
        other => {
            return Err(format!(
                "{other}: only source, q0, q1 and q2 run yet (q3-q8 need joins and windows)"
            ))
        }
    })
}

pub async fn run(
    mut cfg: Config,
    name: String,
    events: u64,
    parallelism: u32,
) -> Result<(), String> {
    let sql = query(&name)?;
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
    let ddl = [
        format!(
            "CREATE TABLE bid ({BID}) WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '{events}')"
        ),
        if name == "source" {
            "CREATE SINK s FROM bid WITH (connector = 'blackhole')".to_string()
        } else {
            format!("CREATE SINK {name} AS {sql} WITH (connector = 'blackhole')")
        },
    ];
    for stmt in &ddl {
        for r in db.execute(&mut s, stmt).await {
            r.map_err(|e| format!("{stmt}: {}", e.message))?;
        }
    }
    // Until the generator has logged its last event ...
    loop {
        let done = {
            let mut w = db.runtime().lock_writes().await;
            w.table("bid")
                .and_then(|t| t.source_positions().get("nexmark:next_event").copied())
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
    println!(
        "nexmark {name}: events={events} parallelism={parallelism} seconds={took:.2} events_per_s={:.0} cpu_seconds={cpu:.2} events_per_cpu_second={:.0} peak_rss_mb={}",
        events as f64 / took,
        events as f64 / cpu.max(1e-9),
        crate::bench::peak_rss_bytes().map(|b| b / (1024 * 1024)).unwrap_or(0),
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
