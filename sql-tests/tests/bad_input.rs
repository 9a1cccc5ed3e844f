//! Bad input never takes the server down: every statement below gets a Postgres error
//! (or a result), the session stays usable, and another session is unaffected.

use weir_sql_tests::WeirProcess;

/// What a statement must get: an error with exactly this SQLSTATE, or success.
enum Expect {
    Error(&'static str),
    Accepted,
}
use Expect::*;

/// Each statement with the one answer Postgres semantics call for. Statements that are
/// valid (an emoji, empty statements, a 1 MB literal) must succeed: a server that
/// refuses everything would otherwise pass.
fn bad_statements() -> Vec<(String, Expect)> {
    let mut v: Vec<(String, Expect)> = [
        ("SELEC 1", Error("42601")),
        ("SELECT 'unterminated", Error("42601")),
        ("SELECT \"unterminated", Error("42601")),
        ("CREATE TABLE", Error("42601")),
        ("CREATE TABLE t (", Error("42601")),
        ("INSERT INTO", Error("42601")),
        (
            "INSERT INTO t VALUES (1, 'too', 'many', 'values')",
            Error("42601"),
        ),
        ("INSERT INTO t VALUES ('not a number', 'x')", Error("22P02")),
        (
            "INSERT INTO t VALUES (99999999999999999999, 'x')",
            Error("22003"),
        ),
        ("INSERT INTO t (nope) VALUES (1)", Error("42703")),
        ("UPDATE t SET nope = 1", Error("42703")),
        ("UPDATE t SET a = 'text' WHERE a = 1", Error("42804")),
        ("DELETE FROM nope", Error("42P01")),
        ("SELECT 1/0", Error("22012")),
        ("SELECT CAST('abc' AS int)", Error("22P02")),
        ("SELECT * FROM t WHERE a = 'x' + 1", Error("42804")),
        ("SELECT nope()", Error("42883")),
        (
            "CREATE MATERIALIZED VIEW v AS SELECT nope FROM t",
            Error("42703"),
        ),
        ("CREATE MATERIALIZED VIEW v AS SELECT 1", Error("0A000")),
        (
            "CREATE MATERIALIZED VIEW v_top AS SELECT a FROM t ORDER BY a LIMIT 1",
            Accepted,
        ),
        (
            "CREATE MATERIALIZED VIEW v_top AS SELECT a FROM t",
            Error("42P07"),
        ),
        (
            "CREATE MATERIALIZED VIEW v WITH (nonsense = 1) AS SELECT a FROM t",
            Error("22023"),
        ),
        ("DROP TABLE nope", Error("42P01")),
        ("DROP MATERIALIZED VIEW t", Error("42809")),
        ("SHOW nope", Error("42704")),
        ("SHOW CREATE MATERIALIZED VIEW t", Error("42809")),
        (
            "EXPLAIN CREATE MATERIALIZED VIEW v AS SELECT nope FROM t",
            Error("42703"),
        ),
        ("GRANT ALL ON t TO someone", Error("0A000")),
        ("COPY nope FROM STDIN", Error("42P01")),
        ("COPY t FROM '/etc/passwd'", Error("0A000")),
        ("COPY t TO STDOUT WITH (FORMAT binary)", Error("0A000")),
        (
            "CREATE FUNCTION f(a int) RETURNS int LANGUAGE SQL AS $$ SELECT nope $$",
            Error("42P13"),
        ),
        ("CREATE VIEW t AS SELECT 1", Error("42P07")),
        ("DEALLOCATE nope", Error("26000")),
        ("SELECT '\u{1F600}' || 'é'", Accepted),
        ("SELECT 1;;; SELECT 2", Accepted),
        (";", Accepted),
    ]
    .into_iter()
    .map(|(s, e)| (s.to_string(), e))
    .collect();
    // Nested deeper than the parser allows: too complex, as Postgres's stack depth limit.
    let nested = format!("SELECT {}1{}", "(".repeat(500), ")".repeat(500));
    v.push((nested, Error("54001")));
    v.push((format!("SELECT '{}'", "x".repeat(1_000_000)), Accepted));
    // Refused as too complex (54001) instead of occupying a worker for minutes.
    v.push((
        format!("SELECT {}", vec!["1"; 50_000].join(" + ")),
        Error("54001"),
    ));
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
    let mut wrong = Vec::new();
    for (sql, expect) in bad_statements() {
        let got = match client.simple_query(&sql).await {
            Ok(_) => None,
            Err(e) => {
                let db = e
                    .as_db_error()
                    .unwrap_or_else(|| panic!("{:.80}: not a Postgres error: {e}", sql));
                Some((db.code().code().to_string(), db.message().to_string()))
            }
        };
        match (&expect, &got) {
            (Error(code), Some((got, _))) if got == code => {}
            (Accepted, None) => {}
            _ => wrong.push(format!(
                "{:.80}: expected {}, got {got:?}",
                sql,
                describe(&expect)
            )),
        }
        // The same session still works after every statement.
        let r = client.simple_query("SELECT 1").await;
        assert!(r.is_ok(), "session unusable after {:.80}: {r:?}", sql);
    }
    assert!(wrong.is_empty(), "wrong answers:\n{}", wrong.join("\n"));
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

fn describe(e: &Expect) -> String {
    match e {
        Error(code) => format!("error {code}"),
        Accepted => "success".into(),
    }
}
