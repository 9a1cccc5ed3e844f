//! Checkpoints on a real S3-compatible endpoint (moto_server, started by
//! `scripts/test.sh`, which exports `WEIR_TEST_S3_ENDPOINT`): checkpoint, kill -9,
//! restore from S3; a large state file as a multipart upload.

use weir_sql_tests::query::{rows, value};
use weir_sql_tests::s3::{checkpoint_config, endpoint, http};
use weir_sql_tests::WeirProcess;
use weir_storage::object_storage::{ObjectStorage, S3Settings};

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

/// A state file larger than a part (a compacted base) goes up as a multipart upload
/// and reads back byte for byte with the size and CRC-32 the writer reported; an
/// aborted or dropped upload leaves neither an object nor a pending upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_state_files_go_up_as_multipart_uploads() {
    let endpoint = endpoint();
    let bucket = format!("weir-multipart-{}", std::process::id());
    let created = http(&endpoint, "PUT", &format!("/{bucket}")).await;
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
    let settings = S3Settings {
        endpoint: Some(endpoint.clone()),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: true,
        ..Default::default()
    };
    let storage = ObjectStorage::open(&format!("s3://{bucket}/p"), &settings).unwrap();
    // 40 MiB in pieces of 1 MiB plus odd ones: three parts of 16 MiB, the last short.
    let pieces: Vec<bytes::Bytes> = (0..43u32)
        .map(|i| bytes::Bytes::from(vec![i as u8; if i % 3 == 0 { 999_983 } else { 1 << 20 }]))
        .collect();
    let expected = pieces.concat();
    let written = storage
        .writer("big")
        .write_all(pieces.clone())
        .await
        .unwrap();
    assert_eq!(written.size, expected.len() as u64);
    let read = storage
        .get("big")
        .await
        .unwrap()
        .expect("the object exists");
    assert!(read.as_ref() == expected.as_slice(), "same bytes");
    assert_eq!(written.crc32, crc32fast::hash(&expected));
    let mut aborted = storage.writer("aborted");
    for p in pieces.iter().take(20) {
        aborted.write(p.clone()).await.unwrap();
    }
    aborted.abort().await;
    assert!(storage.get("aborted").await.unwrap().is_none());
    // A writer dropped mid-upload (its checkpoint expired) aborts in the background.
    let mut dropped = storage.writer("dropped");
    for p in pieces.iter().take(20) {
        dropped.write(p.clone()).await.unwrap();
    }
    let listing = format!("/{bucket}?uploads");
    let uploads = http(&endpoint, "GET", &listing).await;
    assert!(
        uploads.contains("p/dropped"),
        "the upload started: {uploads}"
    );
    drop(dropped);
    let mut uploads = http(&endpoint, "GET", &listing).await;
    for _ in 0..100 {
        if !uploads.contains("p/dropped") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        uploads = http(&endpoint, "GET", &listing).await;
    }
    assert!(uploads.starts_with("HTTP/1.1 200"), "{uploads}");
    assert!(
        !uploads.contains("p/aborted"),
        "a pending upload is left: {uploads}"
    );
    assert!(
        !uploads.contains("p/dropped"),
        "a dropped upload is left: {uploads}"
    );
    assert!(storage.get("dropped").await.unwrap().is_none());
}
