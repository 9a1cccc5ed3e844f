//! Lookup joins (`JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`) on a real server: a paced
//! source enriched from a table that changes while the stream runs. Each row takes
//! the table's value of its arrival and keeps it (nothing is retracted when the table
//! changes); every row is there once. Misuse is refused with 0A000, and a batch SELECT
//! reads the table as it is. After a `kill -9` the view is exact, its table restored.

use weir_sql_tests::query::{error_code, rows, sorted, wait_until};
use weir_sql_tests::WeirProcess;

const ROWS: i64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_keep_the_table_value_of_their_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE dim (key bigint PRIMARY KEY, value text);
         INSERT INTO dim VALUES (0, 'zero'), (1, 'one');",
    )
    .await
    .unwrap();
    // 3000 rows at 1000 a second: the table changes while they arrive.
    c.batch_execute(&format!(
        "CREATE SOURCE seq (id bigint) WITH (connector = 'datagen', fields.id.kind = 'sequence',
           fields.id.start = '1', fields.id.end = '{ROWS}', rows-per-second = '1000')"
    ))
    .await
    .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW enriched AS
           SELECT s.id, d.value FROM seq AS s
           JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.id % 3 = d.key;
         CREATE MATERIALIZED VIEW padded AS
           SELECT s.id, d.value FROM seq AS s
           LEFT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.id % 3 = d.key;",
    )
    .await
    .unwrap();
    let explain = rows(&c, "EXPLAIN CREATE MATERIALIZED VIEW e2 AS SELECT s.id, d.value FROM seq AS s JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.id % 3 = d.key").await;
    assert!(
        explain
            .iter()
            .any(|r| r[0].contains("HashJoin: lookup inner")),
        "{explain:?}"
    );
    // A third of the way in, key 1 changes its value and key 2 appears.
    wait_until(&c, "SELECT count(*) FROM padded", 30, |r| {
        r[0][0].parse::<i64>().unwrap() >= ROWS / 3
    })
    .await;
    c.batch_execute(
        "UPDATE dim SET value = 'ONE' WHERE key = 1; INSERT INTO dim VALUES (2, 'two');",
    )
    .await
    .unwrap();
    wait_until(&c, "SELECT count(*) FROM padded", 30, |r| {
        r[0][0] == ROWS.to_string()
    })
    .await;
    c.batch_execute("FLUSH").await.unwrap();
    let per_value = |view: &str| {
        format!(
            "SELECT coalesce(value, 'NULL'), count(*), count(DISTINCT id) FROM {view} GROUP BY 1"
        )
    };
    let got: std::collections::BTreeMap<String, (i64, i64)> = rows(&c, &per_value("padded"))
        .await
        .into_iter()
        .map(|r| (r[0].clone(), (r[1].parse().unwrap(), r[2].parse().unwrap())))
        .collect();
    // Every id once; key 1's rows with the old value before the change and the new
    // after, both kept; key 2's rows NULL-padded before it appeared.
    let total: i64 = got.values().map(|(n, _)| n).sum();
    assert_eq!(total, ROWS, "{got:?}");
    assert_eq!(got["zero"], (ROWS / 3, ROWS / 3), "{got:?}");
    let (old, new) = (got["one"].0, got["ONE"].0);
    assert!(old > 0 && new > 0 && old + new == ROWS / 3, "{got:?}");
    let (null, two) = (got["NULL"].0, got["two"].0);
    assert!(null > 0 && two > 0 && null + two == ROWS / 3, "{got:?}");
    // The inner join has the same rows without the padded ones.
    let inner = rows(&c, "SELECT count(*), count(DISTINCT id) FROM enriched").await;
    assert_eq!(inner[0][0], (ROWS - null).to_string());
    assert_eq!(inner[0][1], (ROWS - null).to_string());
    // A batch SELECT reads the table as it is now.
    assert_eq!(
        sorted(
            &c,
            "SELECT a.key, b.value FROM dim AS a JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS b ON a.key = b.key"
        )
        .await,
        vec![
            vec!["0".to_string(), "zero".into()],
            vec!["1".into(), "ONE".into()],
            vec!["2".into(), "two".into()],
        ]
    );
    for (sql, why) in [
        (
            "CREATE MATERIALIZED VIEW bad AS SELECT a.key FROM dim AS a JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS b ON a.key = b.key",
            "a left side that can delete",
        ),
        (
            "CREATE MATERIALIZED VIEW bad AS SELECT s.id FROM seq AS s RIGHT JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.id = d.key",
            "a right join",
        ),
        (
            "CREATE MATERIALIZED VIEW bad AS SELECT d.key FROM dim FOR SYSTEM_TIME AS OF PROCTIME() AS d JOIN seq AS s ON s.id = d.key",
            "the table on the left",
        ),
        (
            "CREATE MATERIALIZED VIEW bad AS SELECT * FROM dim FOR SYSTEM_TIME AS OF PROCTIME()",
            "no join",
        ),
        (
            "CREATE MATERIALIZED VIEW bad AS SELECT s.id FROM seq AS s JOIN dim FOR SYSTEM_TIME AS OF s.id AS d ON s.id = d.key",
            "an event-time temporal join",
        ),
    ] {
        assert_eq!(error_code(&c, sql).await, "0A000", "{why}: {sql}");
    }
    assert_eq!(
        rows(&c, "SELECT count(*) FROM enriched").await[0][0],
        (ROWS - null).to_string(),
        "the refused statements changed nothing"
    );
}

/// `kill -9` while a paced source streams through a lookup join: after the restart
/// the view holds every row exactly once, each with its table value. Rows after the
/// restart only match if the table state came back from the checkpoint (the join is
/// inner, so a lost table would drop them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_view_is_exact_across_kill_9() {
    const N: i64 = 6000;
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE dim (key bigint PRIMARY KEY, value text);
         INSERT INTO dim VALUES (0, 'a'), (1, 'b'), (2, 'c');
         CREATE SOURCE seq (id bigint) WITH (connector = 'datagen', fields.id.kind = 'sequence',
           fields.id.start = '1', fields.id.end = '{N}', rows-per-second = '1000');
         CREATE MATERIALIZED VIEW e AS SELECT s.id, d.value FROM seq AS s
           JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.id % 3 = d.key;"
    ))
    .await
    .unwrap();
    let count = "SELECT count(*) FROM e";
    wait_until(&c, count, 30, |r| r[0][0].parse::<i64>().unwrap() >= N / 4).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    wait_until(&c, count, 30, |r| r[0][0].parse::<i64>().unwrap() >= N / 2).await;
    server.restart().await;
    let c = server.connect().await;
    wait_until(&c, count, 60, |r| r[0][0] == N.to_string()).await;
    assert_eq!(
        rows(
            &c,
            "SELECT count(DISTINCT id), count(*) FILTER (WHERE value IS DISTINCT FROM \
               CASE id % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'c' END) FROM e"
        )
        .await,
        vec![vec![N.to_string(), "0".to_string()]],
        "every row once, with its table value"
    );
}
