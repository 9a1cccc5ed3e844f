//! Serving: reads answered through indexes without planning must equal the same query
//! planned in full, while writes stream in; read-after-write makes other sessions'
//! acknowledged writes visible at once.
//!
//! Barriers are made rare (`barrier.interval` and the checkpoint interval are an
//! hour), so the committed epoch moves only when this test says so (FLUSH): the two
//! forms of each query read the same epoch while concurrent writes keep flowing into
//! the dataflow behind it.

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use weir_sql_tests::query::{rows, value};
use weir_sql_tests::WeirProcess;

const FROZEN: &str = "[barrier]\ninterval = \"1h\"\n[execution.checkpointing]\ninterval = \"1h\"\n";

const SCHEMA: &str = "
    CREATE TABLE t (id INT PRIMARY KEY, g INT, v INT, s TEXT);
    INSERT INTO t SELECT x, CASE WHEN x % 13 = 0 THEN NULL ELSE x % 50 END,
        CASE WHEN x % 17 = 0 THEN NULL ELSE x % 7 END, 'k' || (x % 20)
        FROM generate_series(1, 2000) AS s(x);
    CREATE MATERIALIZED VIEW v AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g;
    CREATE INDEX t_g ON t (g);
    CREATE INDEX t_s ON t (s);
    CREATE INDEX v_total ON v (total);";

/// `(served form, the same query in a form no index serves)`.
fn query_pair(rng: &mut impl Rng) -> (String, String) {
    let k = rng.random_range(-5..60);
    let id = rng.random_range(-10..2600);
    let m = rng.random_range(0..8);
    let (a, b) = (rng.random_range(0..2600), rng.random_range(0..2600));
    let t = rng.random_range(0..400);
    match rng.random_range(0..8) {
        0 => (
            format!("SELECT id, g, v, s FROM t WHERE id = {id}"),
            format!("SELECT id, g, v, s FROM t WHERE id + 0 = {id}"),
        ),
        1 => (
            format!("SELECT * FROM t WHERE g = {k}"),
            format!("SELECT * FROM t WHERE g + 0 = {k}"),
        ),
        2 => (
            format!("SELECT id, v AS value FROM t WHERE g = {k} AND v > {m}"),
            format!("SELECT id, v AS value FROM t WHERE g + 0 = {k} AND v > {m}"),
        ),
        3 => (
            format!("SELECT id FROM t WHERE id BETWEEN {a} AND {b}"),
            format!("SELECT id FROM t WHERE id + 0 BETWEEN {a} AND {b}"),
        ),
        4 => (
            format!("SELECT id, g FROM t WHERE s = 'k{k}'"),
            format!("SELECT id, g FROM t WHERE s || '' = 'k{k}'"),
        ),
        5 => (
            format!("SELECT n, total FROM v WHERE g = {k}"),
            format!("SELECT n, total FROM v WHERE g + 0 = {k}"),
        ),
        6 => (
            format!(
                "SELECT g, n FROM v WHERE total >= {t} AND total < {}",
                t + 60
            ),
            format!(
                "SELECT g, n FROM v WHERE total + 0 >= {t} AND total + 0 < {}",
                t + 60
            ),
        ),
        _ => (
            format!("SELECT id FROM t WHERE -{m} < g AND g <= {k} AND id < {a}"),
            format!("SELECT id FROM t WHERE -{m} < g + 0 AND g + 0 <= {k} AND id < {a}"),
        ),
    }
}

/// Writes through both paths (point UPDATE / DELETE by key, INSERT ... VALUES) until
/// told to stop. None of them reads, so none injects a barrier.
async fn write_until(port: u16, seed: u64, stop: Arc<AtomicBool>) -> u64 {
    let c = weir_sql_tests::process::connect_port(port).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let id = rng.random_range(1..2600);
        let sql = match rng.random_range(0..4) {
            0 => format!(
                "UPDATE t SET v = v + 1, g = {} WHERE id = {id}",
                rng.random_range(0..50)
            ),
            1 => format!(
                "UPDATE t SET s = 'k{}' WHERE id = {id}",
                rng.random_range(0..20)
            ),
            2 => format!("DELETE FROM t WHERE id = {id}"),
            _ => format!(
                "INSERT INTO t VALUES ({}, {}, {}, 'k3')",
                2000 + seed as i64 * 1_000_000 + n as i64,
                rng.random_range(0..50),
                rng.random_range(0..7)
            ),
        };
        c.batch_execute(&sql).await.unwrap();
        n += 1;
    }
    n
}

fn sorted(mut r: Vec<Vec<String>>) -> Vec<Vec<String>> {
    r.sort();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_reads_equal_full_plans_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, FROZEN).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=3)
        .map(|seed| tokio::spawn(write_until(server.port, seed, stop.clone())))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (mut compared, mut non_empty) = (0, 0);
    for i in 0..600 {
        if i % 20 == 0 {
            // Move the readable epoch forward past the writes made meanwhile.
            c.batch_execute("FLUSH").await.unwrap();
        }
        let (served, planned) = query_pair(&mut rng);
        let how = rows(&c, &format!("EXPLAIN {served}")).await;
        assert!(
            how.iter().any(|r| r.join(" ").contains("Index lookup")),
            "{served} is not served through an index: {how:?}"
        );
        let how = rows(&c, &format!("EXPLAIN {planned}")).await;
        assert!(
            !how.iter().any(|r| r.join(" ").contains("Index lookup")),
            "{planned} must be planned in full: {how:?}"
        );
        let got = sorted(rows(&c, &served).await);
        let want = sorted(rows(&c, &planned).await);
        assert_eq!(got, want, "{served}\n  differs from\n{planned}");
        compared += 1;
        non_empty += usize::from(!want.is_empty());
    }
    stop.store(true, Ordering::Relaxed);
    let mut written = 0;
    for w in writers {
        written += w.await.unwrap();
    }
    eprintln!("{compared} comparisons ({non_empty} non-empty) under {written} concurrent writes");
    assert!(written > 100, "only {written} writes ran during the reads");
    assert!(
        non_empty * 2 > compared,
        "too few comparisons had rows: {non_empty} of {compared}"
    );
    // After everything settled, the view still equals its query.
    c.batch_execute("FLUSH").await.unwrap();
    let view = sorted(rows(&c, "SELECT g, n, total FROM v").await);
    let query = sorted(rows(&c, "SELECT g, count(*), sum(v) FROM t GROUP BY g").await);
    assert_eq!(view, query);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_after_write_sees_other_sessions_writes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 1, FROZEN).await;
    let writer = server.connect().await;
    writer
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, g INT);
             CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM t GROUP BY g;",
        )
        .await
        .unwrap();
    let reader = server.connect().await;
    assert_eq!(value(&reader, "SHOW read_after_write").await, "off");
    writer
        .batch_execute("INSERT INTO t VALUES (1, 10)")
        .await
        .unwrap();
    // Off: another session's write waits for the next barrier (an hour away here).
    assert_eq!(rows(&reader, "SELECT g FROM t WHERE id = 1").await.len(), 0);
    assert_eq!(
        rows(&reader, "SELECT n FROM per_g WHERE g = 10")
            .await
            .len(),
        0
    );
    reader
        .batch_execute("SET read_after_write = on")
        .await
        .unwrap();
    assert_eq!(value(&reader, "SELECT g FROM t WHERE id = 1").await, "10");
    for i in 2..=5 {
        writer
            .batch_execute(&format!(
                "UPDATE t SET g = 10 WHERE id = 1; INSERT INTO t VALUES ({i}, 10)"
            ))
            .await
            .unwrap();
        // Both a served point read and a planned query see it.
        assert_eq!(
            value(&reader, "SELECT n FROM per_g WHERE g = 10").await,
            i.to_string()
        );
        assert_eq!(
            value(&reader, "SELECT count(*) FROM t").await,
            i.to_string()
        );
    }
    // The extended protocol binds its parameters into the same served plan.
    let n: i64 = reader
        .query_one("SELECT n FROM per_g WHERE g = $1", &[&10i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
    let bad = reader.batch_execute("SET read_after_write = maybe").await;
    assert_eq!(
        bad.unwrap_err()
            .as_db_error()
            .map(|e| e.code().code().to_string()),
        Some("22023".to_string())
    );
    // The same through libpq-style startup options.
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(server.port)
        .user("weir")
        .dbname("weir")
        .options("-c read_after_write=on");
    let (opted, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    writer
        .batch_execute("INSERT INTO t VALUES (6, 10)")
        .await
        .unwrap();
    assert_eq!(value(&opted, "SELECT n FROM per_g WHERE g = 10").await, "6");
}

/// `[serving] read-after-write = true` turns it on for every session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_after_write_server_setting() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{FROZEN}[serving]\nread-after-write = true\n");
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 1, &config).await;
    let writer = server.connect().await;
    writer
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, g INT)")
        .await
        .unwrap();
    let reader = server.connect().await;
    assert_eq!(value(&reader, "SHOW read_after_write").await, "on");
    writer
        .batch_execute("INSERT INTO t VALUES (1, 10)")
        .await
        .unwrap();
    assert_eq!(value(&reader, "SELECT g FROM t WHERE id = 1").await, "10");
}

/// A session that reads after it writes starts the barrier of its next write at once
/// (it travels while the write waits for its fsync); a session that only writes leaves
/// its writes to the next barrier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_sessions_that_read_them_start_their_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 1, FROZEN).await;
    let app = server.connect().await;
    app.batch_execute("CREATE TABLE t (id INT PRIMARY KEY, g INT); INSERT INTO t VALUES (1, 1)")
        .await
        .unwrap();
    // Read-your-writes: this read waits for (and starts) the barrier of row 1.
    assert_eq!(value(&app, "SELECT count(*) FROM t").await, "1");
    let loader = server.connect().await;
    loader
        .batch_execute("INSERT INTO t VALUES (3, 3)")
        .await
        .unwrap();
    let other = server.connect().await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        value(&other, "SELECT count(*) FROM t").await,
        "1",
        "a write-only session's write became visible without a barrier"
    );
    app.batch_execute("INSERT INTO t VALUES (2, 2)")
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while value(&other, "SELECT count(*) FROM t").await != "3" {
        assert!(
            std::time::Instant::now() < deadline,
            "the app's write was not made visible without FLUSH"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
