//! Savepoints across change: a view's query edited downstream of its aggregate and
//! created from a savepoint (state matched by uid, replay counted), unclaimed state
//! ignored on request, pinned uids, EXPLAIN of uids and of restores, rescaling 1 → 4 → 2,
//! and migration to a fresh server that shares only the savepoint-dir. Every result is
//! checked against the oracle: the view's query run as a plain SELECT.

use std::time::Duration;
use weir_sql_tests::process::connect_with_notices;
use weir_sql_tests::query::{error_code, rows, sorted};
use weir_sql_tests::savepoints::{
    agg_uid, assert_view, insert_range, last_notice, replayed, PER_GROUP, TABLE,
};
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_query_restores_state_by_uid_instead_of_recomputing() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let (c, notices) = connect_with_notices(server.port).await;
    c.batch_execute(TABLE).await.unwrap();
    let old = format!("CREATE MATERIALIZED VIEW per_group AS {PER_GROUP}");
    c.batch_execute(&old).await.unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW big AS SELECT id, v FROM t WHERE v > 3000")
        .await
        .unwrap();
    insert_range(&c, 1, 2000).await;
    c.batch_execute("SAVEPOINT s1").await.unwrap();
    insert_range(&c, 2001, 2100).await; // written after the savepoint: 100 rows

    // A projection, a rename and a filter downstream of the aggregate: same state.
    let new_query = "SELECT g * 10 AS g10, count(*) AS groups_rows, sum(v) / count(*) AS mean \
                     FROM t GROUP BY g HAVING count(*) > 150";
    let new = format!(
        "CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (restore_from = 's1') AS {new_query}"
    );
    let uid = agg_uid(&c, &old).await;
    assert_eq!(agg_uid(&c, &new).await, uid, "the edit keeps the uid");
    // EXPLAIN previews the restore without changing anything.
    let preview: Vec<String> = rows(&c, &format!("EXPLAIN {new}"))
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(
        preview
            .iter()
            .any(|l| l.trim() == format!("{uid}: restore")),
        "{preview:?}"
    );
    let explained = rows(&c, "EXPLAIN RESTORE ALL FROM SAVEPOINT s1").await;
    assert!(
        explained
            .iter()
            .any(|r| r[0] == "per_group" && r[1] == uid && r[2] == "restore"),
        "{explained:?}"
    );
    c.batch_execute(&new).await.unwrap();
    let notice = last_notice(&notices).await;
    assert!(notice.contains(&uid), "{notice}");
    // The aggregate state came from the savepoint: only the 100 rows written after it
    // were replayed, not the 2,100 a recomputation reads.
    assert_eq!(replayed(&notice), 100, "{notice}");
    assert_view(&c, "per_group", new_query).await;
    insert_range(&c, 2101, 2300).await;
    c.batch_execute("DELETE FROM t WHERE id % 7 = 0")
        .await
        .unwrap();
    assert_view(&c, "per_group", new_query).await;

    // A changed filter in a view without an aggregate changes what its rows mean: the
    // saved rows are unclaimed, and refused...
    let changed =
        "CREATE OR REPLACE MATERIALIZED VIEW big WITH (restore_from = 's1') AS SELECT id, v FROM t WHERE v > 4500";
    let err = c.simple_query(changed).await.unwrap_err();
    let db = err.as_db_error().unwrap();
    assert_eq!(db.code().code(), "22023");
    assert!(
        db.message().contains("big.materialize."),
        "{}",
        db.message()
    );
    assert_view(&c, "big", "SELECT id, v FROM t WHERE v > 3000").await;
    // ...(e) unless ignored: the new rows start empty and only the log after the
    // savepoint is replayed, as the notice says.
    c.batch_execute(&changed.replace(
        "restore_from = 's1'",
        "restore_from = 's1', ignore_unclaimed_state = true",
    ))
    .await
    .unwrap();
    let notice = last_notice(&notices).await;
    assert!(
        notice.contains("started empty: big.materialize."),
        "{notice}"
    );
    assert!(
        notice.contains("unclaimed state ignored: big.materialize."),
        "{notice}"
    );
    assert_view(
        &c,
        "big",
        "SELECT id, v FROM t WHERE v > 4500 AND id > 2000",
    )
    .await;

    // Pinned uids: a reworded group key derives another uid; a pin keeps the state.
    let pinned = format!(
        "CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (restore_from = 's2', \"uid.1\" = 'per_group_state') AS {PER_GROUP}"
    );
    c.batch_execute(&pinned.replace("restore_from = 's2', ", ""))
        .await
        .unwrap();
    c.batch_execute("SAVEPOINT s2 FOR MATERIALIZED VIEW per_group")
        .await
        .unwrap();
    insert_range(&c, 2301, 2350).await;
    let reworded = pinned.replace("FROM t GROUP BY g", "FROM t AS x GROUP BY x.g");
    assert_ne!(
        agg_uid(&c, &reworded.replace(", \"uid.1\" = 'per_group_state'", "")).await,
        "per_group_state"
    );
    c.batch_execute(&reworded).await.unwrap();
    let notice = last_notice(&notices).await;
    assert!(
        notice.contains("state restored for per_group_state"),
        "{notice}"
    );
    assert_eq!(replayed(&notice), 50, "{notice}");
    assert_view(&c, "per_group", PER_GROUP).await;
    for (sql, code) in [
        (
            format!("CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (\"uid.2\" = 'x') AS {PER_GROUP}"),
            "22023",
        ),
        (
            format!("CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (\"uid.x\" = 'x') AS {PER_GROUP}"),
            "22023",
        ),
        (
            format!("CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (restore_from = 'nope') AS {PER_GROUP}"),
            "3B001",
        ),
        (
            format!("CREATE MATERIALIZED VIEW other WITH (restore_from = 's1') AS {PER_GROUP}"),
            "22023",
        ),
        (
            format!("CREATE MATERIALIZED VIEW other WITH (ignore_unclaimed_state = true) AS {PER_GROUP}"),
            "22023",
        ),
        (
            format!("CREATE OR REPLACE MATERIALIZED VIEW t AS {PER_GROUP}"),
            "42809",
        ),
        ("EXPLAIN RESTORE ALL FROM SAVEPOINT nope".to_string(), "3B001"),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
    // None of the refused statements changed anything.
    assert_view(&c, "per_group", PER_GROUP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_at_parallelism_1_then_4_then_2_gives_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let (c, notices) = connect_with_notices(server.port).await;
    c.batch_execute(TABLE).await.unwrap();
    let create = |p: u32, from: &str| {
        let restore = if from.is_empty() {
            String::new()
        } else {
            format!(", restore_from = '{from}'")
        };
        format!(
            "CREATE OR REPLACE MATERIALIZED VIEW per_group WITH (parallelism = {p}{restore}) AS {PER_GROUP}"
        )
    };
    c.batch_execute(&create(1, "")).await.unwrap();
    insert_range(&c, 1, 3000).await;
    c.batch_execute("SAVEPOINT p1").await.unwrap();
    insert_range(&c, 3001, 3100).await;
    for (p, from, rows_after) in [(4, "p1", 100), (2, "p4", 40)] {
        c.batch_execute(&create(p, from)).await.unwrap();
        let notice = last_notice(&notices).await;
        assert_eq!(replayed(&notice), rows_after, "{notice}");
        let jobs = rows(&c, "SHOW JOBS").await;
        let job = jobs.iter().find(|r| r[0] == "per_group").unwrap();
        assert_eq!(job[2], p.to_string(), "{jobs:?}");
        assert_view(&c, "per_group", PER_GROUP).await;
        c.batch_execute("DELETE FROM t WHERE id % 13 = 0")
            .await
            .unwrap();
        assert_view(&c, "per_group", PER_GROUP).await;
        if p == 4 {
            c.batch_execute("SAVEPOINT p4").await.unwrap();
            insert_range(&c, 3101, 3140).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_migrates_to_a_fresh_server_and_across_state_backends() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("savepoints");
    let config = format!(
        "[execution.checkpointing]\ninterval = \"500ms\"\nsavepoint-dir = \"{}\"\n",
        shared.display()
    );
    let views = format!(
        "CREATE MATERIALIZED VIEW per_group AS {PER_GROUP};
         CREATE MATERIALIZED VIEW big AS SELECT id, v FROM t WHERE v > 3000;"
    );
    let mut old = WeirProcess::start_with_config(&dir.path().join("old"), 2, &config).await;
    let c = old.connect().await;
    c.batch_execute(TABLE).await.unwrap();
    c.batch_execute(&views).await.unwrap();
    insert_range(&c, 1, 4000).await;
    c.batch_execute("DELETE FROM t WHERE id % 9 = 0")
        .await
        .unwrap();
    c.batch_execute("SAVEPOINT move").await.unwrap();
    let want_t = sorted(&c, "SELECT * FROM t").await;
    let want_groups = sorted(&c, "SELECT * FROM per_group").await;
    old.kill9();
    assert!(
        shared.join("move").join("_metadata").exists(),
        "the savepoint lives in the savepoint-dir"
    );

    // A fresh server on the RocksDB backend: empty data dir, the same savepoint-dir.
    let rocks = format!("{config}[state.backend]\ntype = \"rocksdb\"\n");
    let mut new = WeirProcess::start_with_config(&dir.path().join("new"), 2, &rocks).await;
    let (c, notices) = connect_with_notices(new.port).await;
    let shown = rows(&c, "SHOW SAVEPOINTS").await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0][3], "big, per_group");
    assert_eq!(shown[0][7], "t");
    // A table whose columns do not fit the saved rows is refused, nothing changed.
    c.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, g integer, v bigint)")
        .await
        .unwrap();
    c.batch_execute(&views).await.unwrap();
    assert_eq!(
        error_code(&c, "RESTORE ALL FROM SAVEPOINT move").await,
        "42804"
    );
    assert_eq!(rows(&c, "SELECT count(*) FROM t").await[0][0], "0");
    c.batch_execute("DROP TABLE t CASCADE").await.unwrap();
    // The same schema: RESTORE ALL fills the never-written table and restores views.
    c.batch_execute(TABLE).await.unwrap();
    c.batch_execute(&views).await.unwrap();
    let report = rows(&c, "RESTORE ALL FROM SAVEPOINT move").await;
    let names: Vec<&str> = report.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["big", "per_group", "t"], "{report:?}");
    assert!(
        report.iter().all(|r| r[4] == "0"),
        "nothing replayed: {report:?}"
    );
    assert!(last_notice(&notices)
        .await
        .contains("restored from savepoint"));
    assert_eq!(sorted(&c, "SELECT * FROM t").await, want_t);
    assert_eq!(sorted(&c, "SELECT * FROM per_group").await, want_groups);
    assert_view(&c, "per_group", PER_GROUP).await;
    assert_view(&c, "big", "SELECT id, v FROM t WHERE v > 3000").await;
    assert!(
        dir.path().join("new/state/rocksdb/CURRENT").exists(),
        "state lives in RocksDB"
    );
    // The migrated server goes on: writes, then kill -9 and recovery.
    insert_range(&c, 4001, 4500).await;
    c.batch_execute("UPDATE t SET v = v + 1 WHERE id % 5 = 0")
        .await
        .unwrap();
    assert_view(&c, "per_group", PER_GROUP).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    new.restart().await;
    let c = new.connect().await;
    assert_eq!(
        rows(&c, "SELECT count(*) FROM t").await[0][0],
        (want_t.len() + 500).to_string()
    );
    assert_view(&c, "per_group", PER_GROUP).await;
    assert_view(&c, "big", "SELECT id, v FROM t WHERE v > 3000").await;
    // A table with writes is never overwritten: RESTORE ALL leaves it alone.
    let report = rows(&c, "RESTORE ALL FROM SAVEPOINT move").await;
    assert!(report.iter().all(|r| r[0] != "t"), "{report:?}");
    assert_view(&c, "per_group", PER_GROUP).await;

    // And back: a savepoint taken on RocksDB restores on the in-memory backend.
    c.batch_execute("SAVEPOINT back").await.unwrap();
    let want_t = sorted(&c, "SELECT * FROM t").await;
    let want_groups = sorted(&c, "SELECT * FROM per_group").await;
    new.kill9();
    let third = WeirProcess::start_with_config(&dir.path().join("third"), 2, &config).await;
    let c = third.connect().await;
    c.batch_execute(TABLE).await.unwrap();
    c.batch_execute(&views).await.unwrap();
    let report = rows(&c, "RESTORE ALL FROM SAVEPOINT back").await;
    assert_eq!(report.len(), 3, "{report:?}");
    assert_eq!(sorted(&c, "SELECT * FROM t").await, want_t);
    assert_eq!(sorted(&c, "SELECT * FROM per_group").await, want_groups);
    assert_view(&c, "big", "SELECT id, v FROM t WHERE v > 3000").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_all_rebuilds_a_view_on_a_view_from_the_restored_view() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let (c, notices) = connect_with_notices(server.port).await;
    c.batch_execute(TABLE).await.unwrap();
    c.batch_execute(&format!(
        "CREATE MATERIALIZED VIEW per_group AS {PER_GROUP};
         CREATE MATERIALIZED VIEW busy AS SELECT g, n FROM per_group WHERE n > 180;"
    ))
    .await
    .unwrap();
    let busy = "SELECT g, count(*) FROM t GROUP BY g HAVING count(*) > 180";
    insert_range(&c, 1, 2000).await;
    c.batch_execute("SAVEPOINT s").await.unwrap();
    insert_range(&c, 2001, 2300).await;
    let deleted: u64 = rows(&c, "SELECT count(*) FROM t WHERE g = 3").await[0][0]
        .parse()
        .unwrap();
    c.batch_execute("DELETE FROM t WHERE g = 3").await.unwrap();
    let explained = rows(&c, "EXPLAIN RESTORE ALL FROM SAVEPOINT s").await;
    assert!(
        explained
            .iter()
            .any(|r| r[0] == "busy" && r[2] == "rebuilt from per_group"),
        "{explained:?}"
    );
    let report = rows(&c, "RESTORE ALL FROM SAVEPOINT s").await;
    let busy_row = report.iter().find(|r| r[0] == "busy").unwrap();
    assert_eq!(busy_row[5], "per_group", "{report:?}");
    let per_group_row = report.iter().find(|r| r[0] == "per_group").unwrap();
    assert_eq!(
        per_group_row[4],
        (300 + deleted).to_string(),
        "only the log after the savepoint: {report:?}"
    );
    let said = notices.lock().unwrap().join("\n");
    assert!(
        said.contains("\"busy\" rebuilt from the restored contents of per_group"),
        "{said}"
    );
    assert_view(&c, "per_group", PER_GROUP).await;
    assert_view(&c, "busy", busy).await;
    insert_range(&c, 2301, 2400).await;
    assert_view(&c, "busy", busy).await;
    // Its own state alone cannot be restored: no log positions exist for a view's output.
    assert_eq!(
        error_code(&c, "RESTORE MATERIALIZED VIEW busy FROM SAVEPOINT s").await,
        "0A000"
    );
}
