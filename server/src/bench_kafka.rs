//! `weir bench kafka --broker host:port --records N --partitions P`: Kafka → table →
//! view ingest throughput and produce-to-visible latency, at 1 s checkpoints.
//!
//! The topic is filled first (producing is not timed); then the table and a GROUP BY
//! view over it are created and the time until every record is readable in the table
//! gives records/s, and records per CPU-second of this process (the "per core"
//! figure: all of Weir's threads, user + system time). Then single records are produced
//! one at a time, each timed from the broker's acknowledgement until a SELECT sees it.

use crate::session::Session;
use crate::{Config, Database};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::{Duration, Instant};

/// User + system CPU seconds of this process so far (Linux).
pub(crate) fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}

async fn count(db: &Database, sql: &str) -> Result<u64, String> {
    let mut s = Session::default();
    match db.execute(&mut s, sql).await.into_iter().next() {
        Some(Ok(crate::output::Output::Rows { batches, .. })) => batches
            .first()
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .map(|a| a.value(0) as u64)
            })
            .ok_or_else(|| format!("{sql}: no count")),
        Some(Err(e)) => Err(e.message),
        other => Err(format!("{sql}: {other:?}")),
    }
}

fn record(id: u64) -> Vec<u8> {
    format!(r#"{{"id": {id}, "g": {}, "v": {}}}"#, id % 1000, id).into_bytes()
}

fn send(p: &BaseProducer, topic: &str, partition: i32, payload: &[u8]) -> Result<(), String> {
    loop {
        match p.send(
            BaseRecord::<(), [u8]>::to(topic)
                .partition(partition)
                .payload(payload),
        ) {
            Ok(()) => return Ok(()),
            Err((e, _)) => {
                if e.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::QueueFull) {
                    return Err(format!("produce: {e}"));
                }
                p.poll(Duration::from_millis(20));
            }
        }
    }
}

pub async fn run(
    mut cfg: Config,
    broker: String,
    records: u64,
    partitions: i32,
) -> Result<(), String> {
    let topic = format!("weir-bench-{}", std::process::id());
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker)
        .create()
        .map_err(|e| e.to_string())?;
    for r in admin
        .create_topics(
            [&NewTopic::new(
                &topic,
                partitions,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new(),
        )
        .await
        .map_err(|e| e.to_string())?
    {
        r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
    }
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .create()
        .map_err(|e| e.to_string())?;
    let filling = Instant::now();
    for id in 0..records {
        send(
            &producer,
            &topic,
            (id % partitions as u64) as i32,
            &record(id),
        )?;
    }
    producer
        .flush(Duration::from_secs(300))
        .map_err(|e| e.to_string())?;
    println!(
        "topic {topic}: {records} records in {partitions} partitions produced in {:.1}s (not timed)",
        filling.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("weir-bench-kafka-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cfg.data_dir = dir.clone();
    cfg.settings
        .insert("execution.checkpointing.interval".into(), "1s".into());
    let db = Database::open(cfg.clone()).await?;
    let mut s = Session::default();
    for sql in [
        format!(
            "CREATE TABLE events (id bigint, g bigint, v bigint) WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{broker}') FORMAT PLAIN ENCODE JSON"
        ),
        "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g"
            .to_string(),
    ] {
        for r in db.execute(&mut s, &sql).await {
            r.map_err(|e| format!("{sql}: {}", e.message))?;
        }
    }
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    while count(&db, "SELECT count(*) FROM events").await? < records {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let in_view = count(&db, "SELECT sum(n) FROM per_g").await?;
    println!(
        "kafka ingest: records={records} partitions={partitions} seconds={took:.2} records_per_s={:.0} cpu_seconds={cpu:.2} records_per_cpu_second={:.0} view_rows_counted={in_view} peak_rss_mb={}",
        records as f64 / took,
        records as f64 / cpu.max(1e-9),
        crate::bench::peak_rss_bytes().map(|b| b / (1024 * 1024)).unwrap_or(0),
    );

    // Latency: one record at a time, acknowledged by the broker, until a SELECT of the
    // view sees it.
    let mut latencies = Vec::new();
    for i in 0..50u64 {
        let id = records + i;
        send(&producer, &topic, 0, &record(id))?;
        producer
            .flush(Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        let acked = Instant::now();
        let want = records + i + 1;
        while count(&db, "SELECT sum(n) FROM per_g").await? < want {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(acked.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "produce -> visible in the view (50 single records): p50={:.0}ms p90={:.0}ms p99={:.0}ms max={:.0}ms",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        latencies[latencies.len() - 1]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
