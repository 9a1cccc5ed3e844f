//! Checkpoint benchmark against a real server: checkpoint duration and uploaded bytes
//! with a large state of which ~1% changes per interval, then the time from `kill -9`
//! to serving again.
//!
//! `WEIR_BIN=target/release/weir cargo run --release -p weir-sql-tests --bin checkpoint_bench -- \
//!     --rows 1000000 --payload 1000 --rounds 5`
//!
//! State: `t(k bigint primary key, g bigint, payload varchar)` with `--rows` rows of
//! about `--payload` bytes (1M x 1000 B = ~1 GB of table state), and a view
//! `per_g = SELECT g, count(*), sum(length(payload)) FROM t GROUP BY g`. Each round
//! updates 1% of the rows (`k % 100 = round`) and takes a checkpoint.
//!
//! `--savepoint 1` adds a view of every row (`wide`) and, at the end, times a
//! `SAVEPOINT` of both views, one of everything (views and the table), and a
//! `RESTORE ALL FROM SAVEPOINT` of the views after 1% more changes.

use std::time::{Duration, Instant};
use weir_sql_tests::query::{rows, value};
use weir_sql_tests::WeirProcess;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (max duration ms over jobs, sum of uploaded bytes, sum of full bytes) of checkpoint `id`.
async fn checkpoint_figures(c: &tokio_postgres::Client) -> (u64, u64, u64, u64) {
    let all = rows(c, "SHOW CHECKPOINTS").await;
    let id: u64 = all
        .iter()
        .filter(|r| r[2] == "COMPLETED")
        .map(|r| r[0].parse::<u64>().unwrap())
        .max()
        .expect("a completed checkpoint");
    let mine: Vec<_> = all.iter().filter(|r| r[0] == id.to_string()).collect();
    assert!(mine.iter().all(|r| r[2] == "COMPLETED"), "{mine:?}");
    let dur = mine
        .iter()
        .map(|r| r[4].parse::<u64>().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let full = mine.iter().map(|r| r[6].parse::<u64>().unwrap_or(0)).sum();
    let incr = mine.iter().map(|r| r[7].parse::<u64>().unwrap_or(0)).sum();
    (id, dur, incr, full)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = arg("--rows", 1_000_000);
    let payload = arg("--payload", 1000);
    let rounds = arg("--rounds", 5);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "[execution.checkpointing]\ninterval = \"1h\"\ntimeout = \"30min\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k bigint PRIMARY KEY, g bigint, payload varchar);
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(length(payload)) AS bytes FROM t GROUP BY g;",
    )
    .await
    .unwrap();
    // `--savepoint 1`: also a view holding every row (~1 GB of view state), then a
    // savepoint of it and a restore, timed.
    let savepoint = arg("--savepoint", 0) == 1;
    if savepoint {
        c.batch_execute("CREATE MATERIALIZED VIEW wide AS SELECT k, g, payload FROM t")
            .await
            .unwrap();
    }
    let load = Instant::now();
    let step = 20_000;
    let mut from = 1;
    while from <= n {
        let to = (from + step - 1).min(n);
        c.batch_execute(&format!(
            "INSERT INTO t SELECT value, value % 1000, repeat('x', {payload}) || value FROM generate_series({from}, {to})"
        ))
        .await
        .unwrap();
        from = to + 1;
    }
    c.batch_execute("FLUSH").await.unwrap();
    println!(
        "loaded {n} rows of ~{payload} B in {:.1} s",
        load.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    c.batch_execute("CHECKPOINT").await.unwrap();
    let (id, dur, incr, full) = checkpoint_figures(&c).await;
    println!(
        "| first (full) | {id} | {dur} ms | {:.1} MB | {:.1} MB | {:.2} s |",
        incr as f64 / 1e6,
        full as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    for round in 0..rounds {
        c.batch_execute(&format!("UPDATE t SET g = g + 1 WHERE k % 100 = {round}"))
            .await
            .unwrap();
        let t = Instant::now();
        c.batch_execute("CHECKPOINT").await.unwrap();
        let (id, dur, incr, full) = checkpoint_figures(&c).await;
        println!(
            "| 1% changed, round {} | {id} | {dur} ms | {:.1} MB | {:.1} MB | {:.2} s |",
            round + 1,
            incr as f64 / 1e6,
            full as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
    }
    let want = value(&c, "SELECT sum(n) FROM per_g").await;
    drop(c);
    let killed = Instant::now();
    server.kill9();
    server.restart().await;
    let c = loop {
        if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(600), async {
            Ok::<_, ()>(server.connect().await)
        })
        .await
        {
            break c;
        }
    };
    let got = value(&c, "SELECT sum(n) FROM per_g").await;
    let serving = killed.elapsed();
    assert_eq!(got, want, "view after recovery");
    assert_eq!(value(&c, "SELECT count(*) FROM t").await, n.to_string());
    println!(
        "kill -9 to serving again (first correct SELECT answered): {:.2} s",
        serving.as_secs_f64()
    );
    if savepoint {
        // Views only (~1 GB of view state), then everything (views and the table).
        for (name, sql, what) in [
            (
                "bench",
                "SAVEPOINT bench FOR MATERIALIZED VIEW per_g, wide",
                "views per_g and wide",
            ),
            ("bench_all", "SAVEPOINT bench_all", "views and table t"),
        ] {
            let t = Instant::now();
            c.batch_execute(sql).await.unwrap();
            let took = t.elapsed();
            let shown = rows(&c, "SHOW SAVEPOINTS").await;
            let size = shown
                .iter()
                .find(|r| r[0] == name)
                .map(|r| r[4].parse::<f64>().unwrap())
                .unwrap();
            println!(
                "SAVEPOINT ({what}): {:.2} s, {:.1} MB",
                took.as_secs_f64(),
                size / 1e6
            );
        }
        c.batch_execute("UPDATE t SET g = g + 1 WHERE k % 100 = 50")
            .await
            .unwrap();
        let t = Instant::now();
        let report = rows(&c, "RESTORE ALL FROM SAVEPOINT bench").await;
        let took = t.elapsed();
        assert_eq!(value(&c, "SELECT count(*) FROM wide").await, n.to_string());
        println!(
            "RESTORE ALL FROM SAVEPOINT bench: {:.2} s (replayed {:?} table-log rows)",
            took.as_secs_f64(),
            report.iter().map(|r| r[4].clone()).collect::<Vec<_>>()
        );
    }
}
