//! The `datagen` connector: sequence and random columns within their bounds, a view
//! over them equal to its query, and exactly-once generation across `kill -9`
//! (compared with an uninterrupted table with the same options: rows are a function of
//! their index).

use std::time::Duration;
use weir_sql_tests::query::{error_code, rows, value, wait_until};
use weir_sql_tests::WeirProcess;

const COLUMNS: &str = "id bigint, v bigint, s text, f double precision, b boolean, ts timestamp";

fn table(name: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {name} ({COLUMNS}) WITH (connector = 'datagen',
           fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '5000',
           fields.v.min = '10', fields.v.max = '20', fields.s.length = '6',
           fields.f.min = '-1', fields.f.max = '1'{extra})"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagen_bounds_views_and_exactly_once_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(&table("d", ", rows-per-second = '0'"))
        .await
        .unwrap();
    wait_until(&c, "SELECT count(*) FROM d", 30, |r| r[0][0] == "5000").await;
    assert_eq!(
        rows(&c, "SELECT sum(id), min(v) >= 10 AND max(v) <= 20, min(length(s)) = 6 AND max(length(s)) = 6, min(f) >= -1 AND max(f) <= 1, count(DISTINCT b) FROM d").await,
        vec![vec!["12502500", "t", "t", "t", "2"].into_iter().map(String::from).collect::<Vec<_>>()]
    );
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_v AS SELECT v, count(*) AS n, sum(id) AS s FROM d GROUP BY v",
    )
    .await
    .unwrap();
    let mut got = rows(&c, "SELECT v, n, s FROM per_v").await;
    let mut want = rows(&c, "SELECT v, count(*), sum(id) FROM d GROUP BY v").await;
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // Paced at 1,000 rows/s, killed twice midway: the same rows as one uninterrupted run.
    c.batch_execute(&table("slow", ", rows-per-second = '1000'"))
        .await
        .unwrap();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        server.restart().await;
    }
    let c = server.connect().await;
    assert!(
        value(&c, "SELECT count(*) FROM slow")
            .await
            .parse::<i64>()
            .unwrap()
            < 5000,
        "the kills should land while generating"
    );
    c.batch_execute(&table("reference", ", rows-per-second = '0'"))
        .await
        .unwrap();
    for t in ["slow", "reference"] {
        wait_until(&c, &format!("SELECT count(*) FROM {t}"), 30, |r| {
            r[0][0] == "5000"
        })
        .await;
    }
    for sql in [
        "SELECT count(*) FROM (SELECT * FROM slow EXCEPT ALL SELECT * FROM reference)",
        "SELECT count(*) FROM (SELECT * FROM reference EXCEPT ALL SELECT * FROM slow)",
    ] {
        assert_eq!(value(&c, sql).await, "0", "{sql}");
    }
    for (sql, code) in [
        (table("x1", ", fields.nope.min = '1'"), "42703"),
        (table("x1", ", fields.v.kind = 'zigzag'"), "22023"),
        ("CREATE TABLE x1 (id bigint) WITH (connector = 'datagen', fields.id.kind = 'sequence', fields.id.start = '1')".to_string(), "22023"),
        (table("x1", ", colour = 'red'"), "22023"),
        (table("x1", ", rows-per-second = '-5'"), "22023"),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
}
