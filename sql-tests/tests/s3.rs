//! Checkpoints on a real S3-compatible endpoint (moto_server, started by
//! `scripts/test.sh`, which exports `WEIR_TEST_S3_ENDPOINT`): checkpoint, kill -9,
//! restore from S3.

use weir_sql_tests::query::{rows, value};
use weir_sql_tests::s3::{checkpoint_config, endpoint, http};
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_round_trip_through_a_real_s3_endpoint() {
    let endpoint = endpoint();
    let bucket = format!("weir-test-{}", std::process::id());
    let config = checkpoint_config(&bucket, "cluster-a", "300ms").await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, &config).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY, g bigint);
         CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n FROM t GROUP BY g;
         INSERT INTO t SELECT value, value % 7 FROM generate_series(1, 5000);
         CHECKPOINT;
         DELETE FROM t WHERE id <= 100;",
    )
    .await
    .unwrap();
    let completed: Vec<_> = rows(&c, "SHOW CHECKPOINTS")
        .await
        .into_iter()
        .filter(|r| r[2] == "COMPLETED")
        .collect();
    assert!(
        completed
            .iter()
            .any(|r| r[8].starts_with(&format!("s3://{bucket}/cluster-a/checkpoints/"))),
        "{completed:?}"
    );
    let listing = http(
        &endpoint,
        "GET",
        &format!("/{bucket}?list-type=2&prefix=cluster-a/"),
    )
    .await;
    assert!(
        listing.contains("_metadata"),
        "no metadata in the bucket: {listing}"
    );
    assert!(
        listing.contains(".delta"),
        "no state files in the bucket: {listing}"
    );
    server.restart().await;
    let c = server.connect().await;
    assert_eq!(value(&c, "SELECT sum(n) FROM per_group").await, "4900");
    assert_eq!(value(&c, "SELECT count(*) FROM t").await, "4900");
    let m = server.metrics().await;
    assert!(
        m.contains("weir_lastCheckpointRestoreTimestamp{job_name=\"per_group\"}"),
        "per_group was not restored from S3"
    );
}
