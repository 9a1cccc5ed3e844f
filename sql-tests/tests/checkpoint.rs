//! Checkpoints, recovery and restart strategies against real `weir` processes.
//!
//! Failures are injected with failpoints (`SET failpoint.<name> = ...`, enabled by
//! `WEIR_FAILPOINTS=1`, which the test harness sets) and with `kill -9`.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio_postgres::Client;
use weir_sql_tests::query::{error_code, rows, value, wait_until};
use weir_sql_tests::WeirProcess;

const SCHEMA: &str = "CREATE TABLE t (id bigint PRIMARY KEY, g bigint, v bigint);
     CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g;
     CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM t;";

/// The oracle: per_group and total computed from the table's rows.
async fn assert_views_match_table(client: &Client) {
    let table = rows(client, "SELECT g, v FROM t").await;
    let mut want: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for r in &table {
        let e = want.entry(r[0].parse().unwrap()).or_default();
        e.0 += 1;
        e.1 += r[1].parse::<i64>().unwrap();
    }
    let got: BTreeMap<i64, (i64, i64)> = rows(client, "SELECT g, n, s FROM per_group")
        .await
        .into_iter()
        .map(|r| {
            (
                r[0].parse().unwrap(),
                (r[1].parse().unwrap(), r[2].parse().unwrap()),
            )
        })
        .collect();
    assert_eq!(got, want, "per_group differs from the table");
    let n = value(client, "SELECT n FROM total").await;
    assert_eq!(n, table.len().to_string(), "total differs from the table");
}

async fn insert_range(client: &Client, from: i64, to: i64) {
    client
        .batch_execute(&format!(
            "INSERT INTO t SELECT value, value % 13, value * 3 FROM generate_series({from}, {to})"
        ))
        .await
        .unwrap();
}

fn metric(text: &str, name: &str, job: &str) -> Option<f64> {
    let prefix = format!("weir_{name}{{job_name=\"{job}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_restores_from_checkpoint_and_replays_only_the_log_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 20_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    // Deletes and updates after the checkpoint: the replayed suffix retracts.
    c.batch_execute("DELETE FROM t WHERE id % 5 = 0; UPDATE t SET g = g + 1 WHERE id % 7 = 0")
        .await
        .unwrap();
    insert_range(&c, 20_001, 20_100).await;
    let checkpoints = rows(&c, "SHOW CHECKPOINTS").await;
    assert!(
        checkpoints
            .iter()
            .any(|r| r[2] == "COMPLETED" && r[1] == "per_group"),
        "no completed checkpoint of per_group: {checkpoints:?}"
    );
    server.restart().await; // kill -9, then start again
    let c = server.connect().await;
    assert_views_match_table(&c).await;
    assert_eq!(value(&c, "SELECT count(*) FROM t").await, "16100");
    // The views were restored from a checkpoint, not rebuilt from scratch.
    let m = server.metrics().await;
    assert!(
        metric(&m, "lastCheckpointRestoreTimestamp", "per_group").unwrap_or(0.0) > 0.0,
        "per_group was not restored from a checkpoint"
    );
    let replayed: u64 = server
        .log()
        .lines()
        .rev()
        .find(|l| l.contains("recovered from checkpoints"))
        .and_then(|l| l.split("replayed_table_rows=").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("recovery log line");
    assert!(
        replayed < 20_000,
        "recovery replayed {replayed} table rows: the checkpoint was not used"
    );
    // Writes keep working and the views keep up after recovery.
    insert_range(&c, 30_000, 30_010).await;
    assert_views_match_table(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_failure_restarts_only_its_region_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n\
                  [restart-strategy]\ntype = \"fixed-delay\"\n\
                  [restart-strategy.fixed-delay]\nattempts = 3\ndelay = \"2s\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW downstream AS SELECT count(*) AS groups FROM per_group",
    )
    .await
    .unwrap();
    insert_range(&c, 1, 5_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    c.batch_execute("SET failpoint.actor.fail.per_group = 'once'")
        .await
        .unwrap();
    insert_range(&c, 5_001, 6_000).await;
    // The failure happens when an actor reaches the new rows: wait for it.
    let jobs = wait_until(&c, "SHOW JOBS", 10, |r| {
        r.iter()
            .any(|row| row[0] == "per_group" && row[1] == "RESTARTING")
    })
    .await;
    let status = |jobs: &[Vec<String>], name: &str| {
        jobs.iter()
            .find(|r| r[0] == name)
            .map(|r| r[1].clone())
            .unwrap()
    };
    assert_eq!(status(&jobs, "per_group"), "RESTARTING", "{jobs:?}");
    assert_eq!(status(&jobs, "total"), "RUNNING", "{jobs:?}");
    // While per_group waits for its restart, the other view keeps running and serving.
    insert_range(&c, 6_001, 6_500).await;
    assert_eq!(value(&c, "SELECT n FROM total").await, "6500");
    // The failed view serves its last consistent contents meanwhile.
    let n: i64 = value(&c, "SELECT sum(n) FROM per_group")
        .await
        .parse()
        .unwrap();
    assert!(n <= 6000, "failed view shows {n} rows");
    wait_until(&c, "SHOW JOBS", 20, |r| {
        r.iter().all(|row| row[1] == "RUNNING")
    })
    .await;
    assert_views_match_table(&c).await;
    assert_eq!(value(&c, "SELECT groups FROM downstream").await, "13");
    let jobs = rows(&c, "SHOW JOBS").await;
    let pg = jobs.iter().find(|r| r[0] == "per_group").unwrap();
    assert_eq!(pg[3], "1", "restarts: {jobs:?}");
    assert!(pg[4].contains("injected actor failure"), "{jobs:?}");
    let m = server.metrics().await;
    assert_eq!(metric(&m, "numRestarts", "per_group"), Some(1.0));
    assert_eq!(metric(&m, "numRestarts", "total"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_restart_limit_is_failed_serves_old_contents_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 1, config).await;
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, g bigint, v bigint)")
        .await
        .unwrap();
    // Per view: at most one restart, after 100 ms.
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_group WITH (\"restart-strategy.type\" = 'fixed-delay',
           \"restart-strategy.fixed-delay.attempts\" = 1, \"restart-strategy.fixed-delay.delay\" = '100ms')
         AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g;
         CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM t;",
    )
    .await
    .unwrap();
    insert_range(&c, 1, 1_000).await;
    c.batch_execute("FLUSH").await.unwrap();
    c.batch_execute("SET failpoint.actor.fail.per_group = 'always'")
        .await
        .unwrap();
    insert_range(&c, 1_001, 1_100).await;
    // First failure: restarted once; the restarted job fails again: FAILED.
    let jobs = wait_until(&c, "SHOW JOBS", 20, |r| {
        r.iter()
            .any(|row| row[0] == "per_group" && row[1] == "FAILED")
    })
    .await;
    let pg = jobs.iter().find(|r| r[0] == "per_group").unwrap();
    assert_eq!(pg[3], "1", "{jobs:?}");
    // It keeps serving its last consistent contents; other views carry on.
    let n: i64 = value(&c, "SELECT sum(n) FROM per_group")
        .await
        .parse()
        .unwrap();
    assert!(n <= 1_100, "{n}");
    insert_range(&c, 1_101, 1_200).await;
    assert_eq!(value(&c, "SELECT n FROM total").await, "1200");
    // A statement resumes it once the cause is gone.
    c.batch_execute("SET failpoint.actor.fail.per_group = 'off'")
        .await
        .unwrap();
    c.batch_execute("ALTER MATERIALIZED VIEW per_group RESUME")
        .await
        .unwrap();
    wait_until(&c, "SHOW JOBS", 10, |r| {
        r.iter().all(|row| row[1] == "RUNNING")
    })
    .await;
    assert_views_match_table(&c).await;
    assert_eq!(
        error_code(&c, "ALTER MATERIALIZED VIEW nope RESUME").await,
        "42P01"
    );
    assert_eq!(
        error_code(&c, "ALTER MATERIALIZED VIEW t RESUME").await,
        "42809"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_uploads_past_the_tolerance_restart_the_job_and_expired_checkpoints_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[execution.checkpointing]\ninterval = \"1h\"\ntimeout = \"500ms\"\n\
                  tolerable-failed-checkpoints = 1\n\
                  [restart-strategy]\ntype = \"fixed-delay\"\n\
                  [restart-strategy.fixed-delay]\nattempts = 5\ndelay = \"100ms\"\n";
    let server = WeirProcess::start_with_config(&data, 1, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 2_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    // A stalled upload expires at the timeout; its files are removed.
    c.batch_execute("SET failpoint.object-store.put = 'stall'")
        .await
        .unwrap();
    insert_range(&c, 2_001, 3_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    let failed: Vec<_> = rows(&c, "SHOW CHECKPOINTS")
        .await
        .into_iter()
        .filter(|r| r[2] == "FAILED")
        .collect();
    assert!(
        failed.iter().any(|r| r[9].contains("expired")),
        "no expired checkpoint: {failed:?}"
    );
    let expired_id = failed[0][0].clone();
    c.batch_execute("SET failpoint.object-store.put = 'off'")
        .await
        .unwrap();
    // The deltas of the expired checkpoint are carried into the next one.
    insert_range(&c, 3_001, 3_100).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    let last = rows(&c, "SHOW CHECKPOINTS").await;
    assert!(
        last.iter().rev().take(2).all(|r| r[2] == "COMPLETED"),
        "{last:?}"
    );
    let leftovers: Vec<_> = walk(&data.join("checkpoints"))
        .into_iter()
        .filter(|p| {
            p.contains(&format!("chk-{expired_id}")) || p.contains(&format!("{expired_id:0>20}"))
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "files of the expired checkpoint remain: {leftovers:?}"
    );
    // Two consecutive failures exceed tolerable-failed-checkpoints = 1: restart.
    c.batch_execute("SET failpoint.object-store.put = 'fail'")
        .await
        .unwrap();
    c.batch_execute("CHECKPOINT; CHECKPOINT").await.unwrap();
    c.batch_execute("SET failpoint.object-store.put = 'off'")
        .await
        .unwrap();
    let jobs = wait_until(&c, "SHOW JOBS", 20, |r| {
        r.iter().any(|row| row[3] != "0") && r.iter().all(|row| row[1] == "RUNNING")
    })
    .await;
    assert!(
        jobs.iter()
            .any(|r| r[4].contains("tolerable-failed-checkpoints")),
        "{jobs:?}"
    );
    assert_views_match_table(&c).await;
    // Recovery after all this is still exact.
    drop(c);
    let mut server = server;
    server.restart().await;
    assert_views_match_table(&server.connect().await).await;
}

/// Every file path under `dir`, as text.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_latest_checkpoint_falls_back_to_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[execution.checkpointing]\ninterval = \"1h\"\nnum-retained = 2\n";
    let mut server = WeirProcess::start_with_config(&data, 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 3_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    insert_range(&c, 3_001, 4_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    insert_range(&c, 4_001, 4_500).await;
    // Damage every state file of the newest checkpoint of per_group.
    let newest = rows(&c, "SHOW CHECKPOINTS")
        .await
        .into_iter()
        .filter(|r| r[1] == "per_group" && r[2] == "COMPLETED")
        .map(|r| r[0].parse::<u64>().unwrap())
        .max()
        .unwrap();
    let mut damaged = 0;
    for f in walk(&data.join("checkpoints")) {
        if f.ends_with(&format!("{newest:020}.delta")) && f.contains("per_group") {
            let mut b = std::fs::read(&f).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0x5a;
            std::fs::write(&f, b).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "no state file of checkpoint {newest} found");
    server.restart().await;
    let c = server.connect().await;
    assert_views_match_table(&c).await;
    assert_eq!(value(&c, "SELECT count(*) FROM t").await, "4500");
    let m = server.metrics().await;
    assert_eq!(
        metric(&m, "checkpointRestoreFallbacks", "per_group"),
        Some(1.0)
    );
    assert!(server.log().contains("falling back to the one before"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_mode_recovers_without_losses() {
    // AT_LEAST_ONCE does not block inputs at barriers, so a snapshot may include
    // records after its barrier, and a restore replays them again: views may count
    // such records twice, never lose one. The table itself is exact (one input).
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"100ms\"\nmode = \"AT_LEAST_ONCE\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    for i in 0..20 {
        insert_range(&c, i * 500 + 1, (i + 1) * 500).await;
    }
    server.restart().await;
    let c = server.connect().await;
    assert_eq!(value(&c, "SELECT count(*) FROM t").await, "10000");
    let per_group = rows(&c, "SELECT g, n FROM per_group").await;
    let table = rows(&c, "SELECT g, count(*) FROM t GROUP BY g").await;
    let want: BTreeMap<String, i64> = table
        .into_iter()
        .map(|r| (r[0].clone(), r[1].parse().unwrap()))
        .collect();
    assert_eq!(per_group.len(), want.len());
    for r in per_group {
        let n: i64 = r[1].parse().unwrap();
        assert!(
            n >= want[&r[0]],
            "group {} lost rows: {n} < {}",
            r[0],
            want[&r[0]]
        );
    }
    assert_eq!(
        value(&c, "SHOW execution.checkpointing.mode").await,
        "AT_LEAST_ONCE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_show_their_source_and_bad_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"3s\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 1, config).await;
    let c = server.connect().await;
    let show = |k: &'static str| {
        let c = &c;
        async move { rows(c, &format!("SHOW {k}")).await[0].clone() }
    };
    assert_eq!(
        show("execution.checkpointing.interval").await,
        ["3s", "config file"]
    );
    assert_eq!(
        show("execution.checkpointing.timeout").await,
        ["10min", "default"]
    );
    assert_eq!(
        show("restart-strategy.type").await,
        ["exponential-delay", "default"]
    );
    c.batch_execute("SET execution.checkpointing.interval = '1s'")
        .await
        .unwrap();
    assert_eq!(
        show("execution.checkpointing.interval").await,
        ["1s", "session"]
    );
    for bad in [
        "SET execution.checkpointing.mode = 'SOMETIMES'",
        "SET execution.checkpointing.interval = 'soon'",
        "SET restart-strategy.type = 'pray'",
        "SET execution.checkpointing.num-retained = 0",
    ] {
        assert_eq!(error_code(&c, bad).await, "22023", "{bad}");
    }
    assert_eq!(
        error_code(&c, "SET jobmanager.execution.failover-strategy = 'full'").await,
        "55P02"
    );
    c.batch_execute("CREATE TABLE t (k int)").await.unwrap();
    // Unaligned checkpoints are a variant of EXACTLY_ONCE, one at a time (as in Flink).
    for bad in [
        "\"execution.checkpointing.mode\" = 'AT_LEAST_ONCE'",
        "\"execution.checkpointing.max-concurrent-checkpoints\" = '2'",
    ] {
        let sql = format!(
            "CREATE MATERIALIZED VIEW u WITH (\"execution.checkpointing.unaligned.enabled\" = 'true', {bad}) AS SELECT k FROM t"
        );
        assert_eq!(error_code(&c, &sql).await, "22023", "{sql}");
    }
    assert_eq!(
        error_code(
            &c,
            "CREATE MATERIALIZED VIEW v WITH (\"execution.checkpointing.timeout\" = 'never') AS SELECT k FROM t"
        )
        .await,
        "22023"
    );
    // Metrics carry Flink's names.
    c.batch_execute("CREATE MATERIALIZED VIEW v AS SELECT count(*) FROM t; INSERT INTO t VALUES (1); CHECKPOINT")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let m = server.metrics().await;
    for name in [
        "lastCheckpointDuration",
        "lastCheckpointSize",
        "lastCheckpointFullSize",
        "numberOfCompletedCheckpoints",
        "numberOfInProgressCheckpoints",
        "numRecordsIn",
        "numRecordsOut",
        "busyTimeMsPerSecond",
        "backPressuredTimeMsPerSecond",
        "idleTimeMsPerSecond",
        "checkpointAlignmentTime",
    ] {
        assert!(
            m.contains(&format!("weir_{name}")),
            "metric {name} missing:\n{m}"
        );
    }
    assert!(metric(&m, "numberOfCompletedCheckpoints", "v").unwrap_or(0.0) >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_failover_restarts_every_view_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n\
                  [restart-strategy]\ntype = \"fixed-delay\"\n\
                  [restart-strategy.fixed-delay]\nattempts = 3\ndelay = \"200ms\"\n\
                  [jobmanager.execution]\nfailover-strategy = \"full\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 3_000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    let before = metric(
        &server.metrics().await,
        "lastCheckpointRestoreTimestamp",
        "total",
    );
    assert_eq!(before, None, "total was never restored yet");
    c.batch_execute("SET failpoint.actor.fail.per_group = 'once'")
        .await
        .unwrap();
    insert_range(&c, 3_001, 3_500).await;
    wait_until(&c, "SHOW JOBS", 20, |r| {
        r.iter()
            .any(|row| row[0] == "per_group" && row[3] == "1" && row[1] == "RUNNING")
    })
    .await;
    // `full`: the healthy view is restarted from its checkpoint too.
    let mut restored = false;
    for _ in 0..100 {
        let m = server.metrics().await;
        if metric(&m, "lastCheckpointRestoreTimestamp", "total").is_some() {
            restored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(restored, "total was not restarted by full failover");
    wait_until(&c, "SHOW JOBS", 20, |r| {
        r.iter().all(|row| row[1] == "RUNNING")
    })
    .await;
    assert_views_match_table(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_operator_shows_as_backpressure_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY, g bigint, v bigint);
         CREATE MATERIALIZED VIEW slow AS SELECT g, count(*) AS n FROM t GROUP BY g;
         SET failpoint.operator.slow.slow = '20';",
    )
    .await
    .unwrap();
    // Many small chunks: each one costs the slow view 20 ms, so its channels fill and
    // the table's source actor waits on them.
    let writer = tokio::spawn({
        let port = server.port;
        async move {
            let c = weir_sql_tests::process::connect_port(port).await.unwrap();
            for i in 0..400 {
                c.batch_execute(&format!("INSERT INTO t VALUES ({i}, {}, 1)", i % 5))
                    .await
                    .unwrap();
            }
        }
    });
    let mut seen = 0i64;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let m = server.metrics().await;
        seen = m
            .lines()
            .filter(|l| {
                l.starts_with("weir_backPressuredTimeMsPerSecond{") && l.contains("job_name=\"t\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
            .max()
            .unwrap_or(0)
            .max(seen);
        if seen > 100 {
            break;
        }
    }
    assert!(seen > 100, "table source never back-pressured: {seen} ms/s");
    c.batch_execute("SET failpoint.operator.slow.slow = 'off'")
        .await
        .unwrap();
    writer.await.unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(value(&c, "SELECT sum(n) FROM slow").await, "400");
}

/// Unaligned checkpoints (Flink's `execution.checkpointing.unaligned.enabled`) under
/// backpressure: a slow aggregation keeps every queue in front of it full. Aligned
/// barriers wait behind those queues and expire at the 2 s timeout; unaligned ones
/// overtake them, store the data they overtook with the checkpoint, and complete. A
/// `kill -9` after that recovers both views exactly (the unaligned one by replaying
/// the stored in-flight data before the table log's suffix). The aligned view is the
/// slowest (400 ms a chunk) so that its few queued chunks still outlast the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_checkpoints_complete_under_backpressure_and_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\ntimeout = \"2s\"\n\
                  tolerable-failed-checkpoints = 1000\n";
    let mut server = WeirProcess::start_with_config(&data, 2, config).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ta (id bigint PRIMARY KEY, g bigint, v bigint);
         CREATE TABLE tu (id bigint PRIMARY KEY, g bigint, v bigint);
         CREATE MATERIALIZED VIEW aligned_v AS SELECT g, count(*) AS n, sum(v) AS s FROM ta GROUP BY g;
         CREATE MATERIALIZED VIEW unaligned_v WITH (\"execution.checkpointing.unaligned.enabled\" = 'true')
             AS SELECT g, count(*) AS n, sum(v) AS s FROM tu GROUP BY g;
         CREATE TABLE tt (id bigint PRIMARY KEY, g bigint, v bigint);
         CREATE MATERIALIZED VIEW switching_v WITH (
                 \"execution.checkpointing.unaligned.enabled\" = 'true',
                 \"execution.checkpointing.aligned-checkpoint-timeout\" = '300ms')
             AS SELECT g, count(*) AS n, sum(v) AS s FROM tt GROUP BY g;
         SET failpoint.operator.slow.aligned_v = '400';
         SET failpoint.operator.slow.unaligned_v = '100';
         SET failpoint.operator.slow.switching_v = '100';",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&c, "SHOW execution.checkpointing.unaligned.enabled").await[0][0],
        "false",
        "the session default stays aligned"
    );
    // One writer per table, one row per INSERT: many small chunks fill every queue.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for table in ["ta", "tu", "tt"] {
        let (port, stop) = (server.port, stop.clone());
        writers.push(tokio::spawn(async move {
            let c = weir_sql_tests::process::connect_port(port).await.unwrap();
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let sql = format!("INSERT INTO {table} VALUES ({i}, {}, {i})", i % 7);
                if c.batch_execute(&sql).await.is_err() {
                    break;
                }
            }
        }));
    }
    // Wait for an unaligned checkpoint that stored overtaken data while the aligned
    // view's checkpoints expire.
    let mut history = Vec::new();
    let mut ok = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        history = rows(&c, "SHOW CHECKPOINTS").await;
        let completed_unaligned = history
            .iter()
            .filter(|r| r[1] == "unaligned_v" && r[2] == "COMPLETED")
            .count();
        let expired_aligned = history
            .iter()
            .filter(|r| r[1] == "aligned_v" && r[2] == "FAILED" && r[9].contains("expired"))
            .count();
        let inflight_stored = walk(&data.join("checkpoints"))
            .iter()
            .any(|p| p.contains("unaligned_v.inflight."));
        // Starts aligned, switches to unaligned after 300 ms of alignment.
        let completed_switching = history
            .iter()
            .filter(|r| r[1] == "switching_v" && r[2] == "COMPLETED")
            .count();
        if completed_unaligned >= 2
            && completed_switching >= 2
            && expired_aligned >= 1
            && inflight_stored
        {
            ok = true;
            break;
        }
    }
    let show = |job: &str| -> Vec<String> {
        history
            .iter()
            .filter(|r| r[1] == job)
            .map(|r| format!("{} {} {}ms {}", r[0], r[2], r[4], r[9]))
            .collect()
    };
    assert!(
        ok,
        "wanted completed unaligned checkpoints with in-flight data and expired aligned ones;\n\
         unaligned_v: {:?}\nswitching_v: {:?}\naligned_v: {:?}",
        show("unaligned_v"),
        show("switching_v"),
        show("aligned_v")
    );
    eprintln!(
        "unaligned_v: {:?}\nswitching_v: {:?}\naligned_v: {:?}",
        show("unaligned_v"),
        show("switching_v"),
        show("aligned_v")
    );
    server.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    server.restart().await;
    let c = server.connect().await;
    for (view, table) in [
        ("unaligned_v", "tu"),
        ("switching_v", "tt"),
        ("aligned_v", "ta"),
    ] {
        let want = rows(
            &c,
            &format!("SELECT g, count(*), sum(v) FROM {table} GROUP BY g ORDER BY g"),
        )
        .await;
        let got = rows(&c, &format!("SELECT g, n, s FROM {view} ORDER BY g")).await;
        assert_eq!(got, want, "{view} differs from {table} after kill -9");
        assert!(!want.is_empty());
    }
}

/// Bids `from..to`: auction `i % 3`, one every 100 ms of event time from 2024-01-01.
async fn insert_bids(client: &Client, from: i64, to: i64) {
    let rows: Vec<String> = (from..to)
        .map(|i| {
            let (s, ms) = (i / 10, i % 10 * 100);
            format!(
                "({i}, {}, {}, '2024-01-01 00:{:02}:{:02}.{ms:03}')",
                i % 3,
                i * 37 % 100,
                s / 60,
                s % 60
            )
        })
        .collect();
    client
        .batch_execute(&format!("INSERT INTO bids VALUES {}", rows.join(", ")))
        .await
        .unwrap();
}

/// A sliced HOP aggregation (EMIT ON WINDOW CLOSE) keeps its open slides and windows
/// in its checkpoints: killed with windows open, restored, replaying the log after
/// the checkpoint and fed more rows, it closes every window with the answer of the
/// same query without EMIT ON WINDOW CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliced_hop_windows_resume_from_a_checkpoint_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let query = "SELECT auction, window_start, window_end, count(*) AS n, sum(price) AS total, \
         max(price) AS hi FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '2' SECOND, \
         INTERVAL '6' SECOND)) GROUP BY auction, window_start, window_end";
    c.batch_execute(&format!(
        "CREATE TABLE bids (id bigint PRIMARY KEY, auction bigint, price bigint, ts timestamp,
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         CREATE MATERIALIZED VIEW sliced AS {query} EMIT ON WINDOW CLOSE;
         CREATE MATERIALIZED VIEW unsliced AS {query};"
    ))
    .await
    .unwrap();
    insert_bids(&c, 0, 300).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    // After the checkpoint: replayed from the table's log at recovery.
    insert_bids(&c, 300, 400).await;
    let before = value(&c, "SELECT count(*) FROM sliced").await;
    server.restart().await; // kill -9, then start again
    let c = server.connect().await;
    let m = server.metrics().await;
    assert!(
        metric(&m, "lastCheckpointRestoreTimestamp", "sliced").unwrap_or(0.0) > 0.0,
        "sliced was not restored from a checkpoint"
    );
    insert_bids(&c, 400, 600).await;
    // A bid a minute after the last closes every window of the bids above.
    c.batch_execute("INSERT INTO bids VALUES (1000000, 9, 1, '2024-01-01 00:02:00')")
        .await
        .unwrap();
    // 3 auctions × the windows that hold bids from 0 s to 59.9 s (starts -4 s .. 58 s
    // every 2 s): 32 each.
    wait_until(&c, "SELECT count(*) FROM sliced", 30, |r| r[0][0] == "96").await;
    let n: i64 = before.parse().unwrap();
    assert!(n > 0 && n < 96, "windows closed before the kill: {n}");
    let closed = "SELECT * FROM unsliced WHERE window_end <= TIMESTAMP '2024-01-01 00:01:06'";
    let sliced = "SELECT * FROM sliced";
    for (a, b) in [(sliced, closed), (closed, sliced)] {
        let diff = format!("SELECT count(*) FROM ({a} EXCEPT {b}) x");
        assert_eq!(value(&c, &diff).await, "0", "{diff}");
    }
}
