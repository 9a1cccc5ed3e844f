//! Watermarks declared on tables (`WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`),
//! generated from inserted rows, carried through filters, projections and aggregations
//! that keep the column (at parallelism 1 and 4), and shown as the Prometheus gauge
//! `weir_currentOutputWatermark` of each relation; also on a Kafka-fed source.

use weir_sql_tests::kafka::{broker, create_topic, produce, producer};
use weir_sql_tests::query::{error_code, wait_until};
use weir_sql_tests::WeirProcess;

/// The relation's `currentOutputWatermark` in ms, if it has one.
async fn watermark(server: &WeirProcess, job: &str) -> Option<i64> {
    let text = server.metrics().await;
    let prefix = format!("weir_currentOutputWatermark{{job_name=\"{job}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// 2024-01-01 00:00:00 UTC in ms.
const BASE_MS: i64 = 1_704_067_200_000;

async fn wait_watermark(server: &WeirProcess, job: &str, want: i64) {
    for _ in 0..100 {
        if watermark(server, job).await == Some(want) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "{job}: watermark {:?}, expected {want}",
        watermark(server, job).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_follow_the_rows_through_views() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id bigint, ts timestamp, v bigint,
           WATERMARK FOR ts AS ts - INTERVAL '5' SECOND);
         CREATE MATERIALIZED VIEW per_ts AS SELECT ts, count(*) AS n FROM ev GROUP BY ts;
         SET parallelism.default = 4;
         CREATE MATERIALIZED VIEW positive AS SELECT id, ts FROM ev WHERE v > 0;
         CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n FROM ev;",
    )
    .await
    .unwrap();
    c.batch_execute(
        "INSERT INTO ev VALUES (1, '2024-01-01 00:00:10', 1), (2, '2024-01-01 00:00:07', -1);
         FLUSH",
    )
    .await
    .unwrap();
    for job in ["ev", "per_ts", "positive"] {
        wait_watermark(&server, job, BASE_MS + 5_000).await;
    }
    assert_eq!(
        watermark(&server, "total").await,
        None,
        "a view without the column has no watermark"
    );
    // A late row leaves it; a newer row moves it.
    c.batch_execute("INSERT INTO ev VALUES (3, '2024-01-01 00:00:01', 1); FLUSH")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(watermark(&server, "ev").await, Some(BASE_MS + 5_000));
    c.batch_execute("INSERT INTO ev VALUES (4, '2024-01-01 00:01:00', 1); FLUSH")
        .await
        .unwrap();
    for job in ["ev", "per_ts", "positive"] {
        wait_watermark(&server, job, BASE_MS + 55_000).await;
    }
    // Errors, creating nothing.
    for (sql, code) in [
        (
            "CREATE TABLE w1 (id bigint, WATERMARK FOR id AS id - INTERVAL '1' SECOND)",
            "42804",
        ),
        (
            "CREATE TABLE w1 (ts timestamp, WATERMARK FOR nope AS nope)",
            "42703",
        ),
        (
            "CREATE TABLE w1 (ts timestamp, WATERMARK FOR ts AS ts + INTERVAL '1' SECOND)",
            "0A000",
        ),
        (
            "CREATE TABLE w1 (ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '1' FORTNIGHT)",
            "0A000",
        ),
    ] {
        assert_eq!(error_code(&c, sql).await, code, "{sql}");
    }
    wait_until(
        &c,
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'w1'",
        5,
        |r| r[0][0] == "0",
    )
    .await;

    // A Kafka-fed source with a watermark: the largest timestamp over both partitions.
    let topic = format!("wm-{}", std::process::id());
    create_topic(&topic, 2).await;
    let records: Vec<(i32, Vec<u8>)> = (0..20)
        .map(|i| {
            let json = format!(r#"{{"id": {i}, "ts": "2024-01-01T00:00:{:02}"}}"#, 20 + i);
            (i % 2, json.into_bytes())
        })
        .collect();
    produce(&producer(), &topic, &records);
    c.batch_execute(&format!(
        "CREATE SOURCE clicks (id bigint, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
           WITH (connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}')
           FORMAT PLAIN ENCODE JSON",
        broker()
    ))
    .await
    .unwrap();
    wait_watermark(&server, "clicks", BASE_MS + 37_000).await;
}
