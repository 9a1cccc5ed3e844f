//! Savepoints against real `weir` processes: SAVEPOINT, SHOW / RELEASE / DROP SAVEPOINT,
//! RESTORE ... FROM SAVEPOINT, ROLLBACK TO SAVEPOINT, each checked against the oracle
//! (the views' queries over the tables), and every error.

use std::collections::BTreeMap;
use tokio_postgres::Client;
use weir_sql_tests::query::{error_code, rows, value};
use weir_sql_tests::WeirProcess;

const SCHEMA: &str = "CREATE TABLE t (id bigint PRIMARY KEY, g bigint, v bigint);
     CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g;
     CREATE MATERIALIZED VIEW big AS SELECT id, v FROM t WHERE v > 3000;";

async fn insert_range(c: &Client, from: i64, to: i64) {
    c.batch_execute(&format!(
        "INSERT INTO t SELECT value, value % 11, value * 3 FROM generate_series({from}, {to})"
    ))
    .await
    .unwrap();
}

/// Both views equal their queries over the table.
async fn assert_oracle(c: &Client) {
    let sorted = |mut r: Vec<Vec<String>>| {
        r.sort();
        r
    };
    let want = sorted(rows(c, "SELECT g, count(*), sum(v) FROM t GROUP BY g").await);
    let got = sorted(rows(c, "SELECT g, n, s FROM per_group").await);
    assert_eq!(got, want, "per_group differs from its query");
    let want = sorted(rows(c, "SELECT id, v FROM t WHERE v > 3000").await);
    let got = sorted(rows(c, "SELECT id, v FROM big").await);
    assert_eq!(got, want, "big differs from its query");
}

/// `RESTORE` result rows by view: (restored uids, started-empty uids, ignored, replayed).
async fn restore(c: &Client, sql: &str) -> BTreeMap<String, Vec<String>> {
    rows(c, sql)
        .await
        .into_iter()
        .map(|r| (r[0].clone(), r[1..].to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_more_writes_restore_equals_the_oracle_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Frequent checkpoints: table logs get truncated, except below the savepoint's pin.
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&data, 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 2000).await;
    c.batch_execute("SAVEPOINT s1").await.unwrap();
    let shown = rows(&c, "SHOW SAVEPOINTS").await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0][0], "s1");
    assert_eq!(shown[0][3], "big, per_group");
    assert!(shown[0][4].parse::<u64>().unwrap() > 0, "size {shown:?}");
    assert_eq!(shown[0][6], "2", "format version");
    assert_eq!(shown[0][7], "t", "tables");
    // Changes after the savepoint, across many checkpoints (and log truncations).
    c.batch_execute("DELETE FROM t WHERE id % 5 = 0")
        .await
        .unwrap(); // 400 rows
    insert_range(&c, 2001, 3000).await; // 1000 rows
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let report = restore(&c, "RESTORE ALL FROM SAVEPOINT s1").await;
    assert_eq!(report.len(), 2, "{report:?}");
    for (view, r) in &report {
        assert!(!r[0].is_empty(), "{view} restored no state: {r:?}");
        assert_eq!(r[1], "", "{view}: no uid should start empty");
        // The savepoint's state plus exactly the log written after it.
        assert_eq!(r[3], "1400", "{view} replayed {} table-log rows", r[3]);
    }
    assert_oracle(&c).await;
    // ROLLBACK TO SAVEPOINT means the same; one view alone too.
    restore(&c, "ROLLBACK TO SAVEPOINT s1").await;
    let one = restore(&c, "RESTORE MATERIALIZED VIEW per_group FROM SAVEPOINT s1").await;
    assert_eq!(one.keys().collect::<Vec<_>>(), ["per_group"]);
    assert_oracle(&c).await;
    // The restored state was checkpointed at once: a crash right after keeps it.
    server.restart().await;
    let c = server.connect().await;
    assert_oracle(&c).await;
    // Savepoints and their log pins survive a restart.
    insert_range(&c, 3001, 3100).await;
    let report = restore(&c, "RESTORE ALL FROM SAVEPOINT s1").await;
    assert_eq!(report["per_group"][3], "1500");
    assert_oracle(&c).await;
    // RELEASE deletes it, files included.
    let files = |root: &std::path::Path| -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.display().to_string());
                }
            }
        }
        out.retain(|p| p.contains("/savepoints/s1/"));
        out
    };
    let before = files(&data);
    assert!(
        before.iter().any(|p| p.ends_with("/_metadata"))
            && before.iter().any(|p| p.ends_with(".arrow")),
        "savepoint files: {before:?}"
    );
    c.batch_execute("RELEASE SAVEPOINT s1").await.unwrap();
    assert!(rows(&c, "SHOW SAVEPOINTS").await.is_empty());
    assert_eq!(
        files(&data),
        Vec::<String>::new(),
        "savepoint files left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_errors_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    insert_range(&c, 1, 500).await;
    c.batch_execute("SAVEPOINT s FOR MATERIALIZED VIEW per_group")
        .await
        .unwrap();
    assert_eq!(rows(&c, "SHOW SAVEPOINTS").await[0][3], "per_group");
    for (sql, code) in [
        ("SAVEPOINT s", "42710"),
        ("SAVEPOINT s2 FOR MATERIALIZED VIEW nope", "42P01"),
        ("RESTORE ALL FROM SAVEPOINT nope", "3B001"),
        ("ROLLBACK TO SAVEPOINT nope", "3B001"),
        ("DROP SAVEPOINT nope", "3B001"),
        ("RELEASE SAVEPOINT nope", "3B001"),
        ("RESTORE MATERIALIZED VIEW big FROM SAVEPOINT s", "22023"),
        ("RESTORE MATERIALIZED VIEW per_group FROM s", "42601"),
        (
            "RESTORE ALL FROM SAVEPOINT s WITH (something_else = true)",
            "42601",
        ),
    ] {
        assert_eq!(error_code(&c, sql).await, code, "{sql}");
    }
    assert_eq!(rows(&c, "SHOW SAVEPOINTS").await.len(), 1);
    // A view without checkpoints has no state to save.
    c.batch_execute(
        "CREATE MATERIALIZED VIEW unsaved WITH (\"execution.checkpointing.interval\" = 'off')
             AS SELECT id FROM t",
    )
    .await
    .unwrap();
    assert_eq!(
        error_code(&c, "SAVEPOINT u FOR MATERIALIZED VIEW unsaved").await,
        "55000"
    );
    // While a savepoint is being taken (its upload stalled by a failpoint), a restore
    // and a drop are refused.
    c.batch_execute("SET failpoint.object-store.put = 'stall'")
        .await
        .unwrap();
    let port = server.port;
    let spawn_taking = move || {
        tokio::spawn(async move {
            let c = weir_sql_tests::process::connect_port(port).await.unwrap();
            c.batch_execute("SAVEPOINT busy FOR MATERIALIZED VIEW big")
                .await
        })
    };
    let mut taking = spawn_taking();
    // Wait until the savepoint is being taken: dropping one that does not exist is
    // refused as busy (55006) only then (3B001 otherwise), and changes nothing. The
    // probe itself holds the savepoint lock for a moment, so the SAVEPOINT may collide
    // with it and be refused as busy; then it is started again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while error_code(&c, "DROP SAVEPOINT never_taken").await != "55006" {
        if taking.is_finished() {
            let refused = taking
                .await
                .unwrap()
                .expect_err("the savepoint finished although every upload stalls");
            assert_eq!(
                refused.code().map(|c| c.code()),
                Some("55006"),
                "only a collision with the probe may refuse the savepoint: {refused}"
            );
            taking = spawn_taking();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the savepoint never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        error_code(&c, "RESTORE ALL FROM SAVEPOINT s").await,
        "55006"
    );
    assert_eq!(error_code(&c, "DROP SAVEPOINT s").await, "55006");
    c.batch_execute("SET failpoint.object-store.put = 'off'")
        .await
        .unwrap();
    taking.await.unwrap().unwrap();
    c.batch_execute("DROP SAVEPOINT busy").await.unwrap();
    assert_eq!(rows(&c, "SHOW SAVEPOINTS").await.len(), 1);
    // A view whose query changed so that its aggregation's state means something
    // else: the savepoint's state is unclaimed, listed, and refused...
    c.batch_execute(
        "DROP MATERIALIZED VIEW per_group;
         CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, max(v) AS s FROM t GROUP BY g;",
    )
    .await
    .unwrap();
    let err = c
        .simple_query("RESTORE MATERIALIZED VIEW per_group FROM SAVEPOINT s")
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "22023");
    assert!(
        db.message().contains("per_group.hashagg")
            && db.message().contains("ignore_unclaimed_state"),
        "{}",
        db.message()
    );
    // ...unless ignored: the new aggregation starts empty and the report says so.
    let report = restore(
        &c,
        "RESTORE MATERIALIZED VIEW per_group FROM SAVEPOINT s WITH (ignore_unclaimed_state = true)",
    )
    .await;
    let r = &report["per_group"];
    assert!(r[1].contains("per_group.hashagg"), "started empty: {r:?}");
    assert!(r[2].contains("per_group.hashagg"), "ignored: {r:?}");
    // Started empty at the savepoint's log positions, the new aggregation holds only
    // what was written after the savepoint (nothing), not the table's 500 rows...
    assert_eq!(
        rows(&c, "SELECT g, n, s FROM per_group").await,
        Vec::<Vec<String>>::new(),
        "per_group should have started empty"
    );
    // ...and runs on from there.
    insert_range(&c, 501, 501).await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        rows(&c, "SELECT g, n, s FROM per_group").await,
        vec![vec!["6".to_string(), "1".into(), "1503".into()]]
    );
    // The other view was not touched.
    assert_eq!(
        value(&c, "SELECT count(*) FROM big").await,
        value(&c, "SELECT count(*) FROM t WHERE v > 3000").await
    );
    c.batch_execute("DROP SAVEPOINT s").await.unwrap();
    assert!(rows(&c, "SHOW SAVEPOINTS").await.is_empty());
}
