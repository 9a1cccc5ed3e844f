//! Bad input never takes the server down: every statement below gets a Postgres error
//! (or a result), the session stays usable, and another session is unaffected.

use weir_sql_tests::WeirProcess;

fn bad_statements() -> Vec<String> {
    let mut v: Vec<String> = [
        "SELEC 1",
        "SELECT 'unterminated",
        "SELECT \"unterminated",
        "CREATE TABLE",
        "CREATE TABLE t (",
        "INSERT INTO",
        "INSERT INTO t VALUES (1, 'too', 'many', 'values')",
        "INSERT INTO t VALUES ('not a number', 'x')",
        "INSERT INTO t VALUES (99999999999999999999, 'x')",
        "INSERT INTO t (nope) VALUES (1)",
        "UPDATE t SET nope = 1",
        "UPDATE t SET a = 'text' WHERE a = 1",
        "DELETE FROM nope",
        "SELECT 1/0",
        "SELECT CAST('abc' AS int)",
        "SELECT * FROM t WHERE a = 'x' + 1",
        "SELECT nope()",
        "CREATE MATERIALIZED VIEW v AS SELECT nope FROM t",
        "CREATE MATERIALIZED VIEW v AS SELECT 1",
        "CREATE MATERIALIZED VIEW v AS SELECT a FROM t ORDER BY a LIMIT 1",
        "CREATE MATERIALIZED VIEW v WITH (nonsense = 1) AS SELECT a FROM t",
        "DROP TABLE nope",
        "DROP MATERIALIZED VIEW t",
        "SHOW nope",
        "SHOW CREATE MATERIALIZED VIEW t",
        "EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT nope FROM t",
        "GRANT ALL ON t TO someone",
        "COPY nope FROM STDIN",
        "COPY t FROM '/etc/passwd'",
        "COPY t TO STDOUT WITH (FORMAT binary)",
        "CREATE FUNCTION f(a int) RETURNS int LANGUAGE SQL AS $$ SELECT nope $$",
        "CREATE VIEW t AS SELECT 1",
        "DEALLOCATE nope",
        "SELECT '\u{1F600}' || 'é'",
        "SELECT 1;;; SELECT 2",
        ";",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(format!("SELECT {}1{}", "(".repeat(500), ")".repeat(500)));
    v.push(format!("SELECT '{}'", "x".repeat(1_000_000)));
    // Refused as too complex (54001) instead of occupying a worker for minutes.
    v.push(format!("SELECT {}", vec!["1"; 50_000].join(" + ")));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_errors_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let bystander = server.connect().await;
    bystander
        .batch_execute(
            "CREATE TABLE t (a int PRIMARY KEY, b text); INSERT INTO t VALUES (1, 'one');",
        )
        .await
        .unwrap();
    let client = server.connect().await;
    let mut errors = 0;
    for sql in bad_statements() {
        match client.simple_query(&sql).await {
            Ok(_) => {}
            Err(e) => {
                let db = e
                    .as_db_error()
                    .unwrap_or_else(|| panic!("{:.80}: not a Postgres error: {e}", sql));
                assert_eq!(db.code().code().len(), 5, "{:.80}: bad SQLSTATE", sql);
                errors += 1;
            }
        }
        // The same session still works after every statement.
        let r = client.simple_query("SELECT 1").await;
        assert!(r.is_ok(), "session unusable after {:.80}: {r:?}", sql);
    }
    assert!(errors >= 25, "only {errors} statements were refused");
    // Below the limit, a long expression still runs.
    let long = format!("SELECT {}", vec!["1"; 1000].join(" + "));
    let r = client.simple_query(&long).await.unwrap();
    assert!(
        matches!(&r[1], tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("1000"))
    );
    // The other session and the data are unaffected.
    let n: i64 = bystander
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}
