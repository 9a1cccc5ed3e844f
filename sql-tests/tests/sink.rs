//! The blackhole sink against a real server: it receives the relation's contents and
//! every change (counted by its actors' `numRecordsIn`), and it is back after kill -9.

use weir_sql_tests::query::{rows, wait_until};
use weir_sql_tests::WeirProcess;

/// Sum of `weir_numRecordsIn` over the actors of `job`.
fn records_in(metrics: &str, job: &str) -> f64 {
    let label = format!("job_name=\"{job}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("weir_numRecordsIn{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_sink_receives_every_change_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id bigint, v bigint);
         INSERT INTO t SELECT value, value * 2 FROM generate_series(1, 1000);
         CREATE SINK drain FROM t WITH (connector = 'blackhole');
         INSERT INTO t SELECT value, value * 2 FROM generate_series(1001, 1500);
         DELETE FROM t WHERE id <= 100;
         FLUSH;",
    )
    .await
    .unwrap();
    // The 1,000 rows it started from, 500 inserts and 100 deletes.
    assert_eq!(records_in(&server.metrics().await, "drain"), 1600.0);
    // A checkpoint of the sink completed after those changes, so that the restart
    // resumes from it (a condition, not a sleep).
    let completed = |r: &[Vec<String>]| {
        r.iter()
            .filter(|r| r[1] == "drain" && r[2] == "COMPLETED")
            .count()
    };
    let before = completed(&rows(&c, "SHOW CHECKPOINTS").await);
    wait_until(&c, "SHOW CHECKPOINTS", 30, |r| completed(r) > before).await;
    server.restart().await;
    let c = server.connect().await;
    assert_eq!(
        rows(&c, "SHOW SINKS").await,
        vec![vec!["drain", "t", "blackhole", "RUNNING"]]
    );
    c.batch_execute(
        "INSERT INTO t SELECT value, value * 2 FROM generate_series(2001, 2300); FLUSH;",
    )
    .await
    .unwrap();
    // Resumed from its checkpoint: only the new rows reach it, not the contents again.
    assert_eq!(records_in(&server.metrics().await, "drain"), 300.0);
}
