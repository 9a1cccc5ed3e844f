//! SESSION window aggregations over a generator source (append-only) run as one
//! SessionAgg per view; over a stored table (which DML may change) as the SESSION
//! expansion's OVER windows. Both must give the batch query's answer: views over the
//! source, updating and `EMIT ON WINDOW CLOSE`, killed with `kill -9` in the middle of
//! generation and recovered from their checkpoints, equal the same queries run as a
//! batch over a stored twin of the source (the generator is deterministic by index),
//! and again once restored from a savepoint at parallelism 1 and 4.

use std::time::Duration;
use weir_sql_tests::query::{rows, sorted, value, wait_until};
use weir_sql_tests::WeirProcess;

use weir_executor::source::nexmark::queries::BID_COLUMNS as BID;

/// The views (name, query over `bid`, emits on window close): every call kind that
/// merges, keys in another order than PARTITION BY lists them, no key at all.
fn views() -> Vec<(&'static str, String, bool)> {
    let calls = "count(*) AS n, sum(price) AS total, min(price) AS lo, max(price) AS hi, \
                 avg(price) AS mean, count(*) FILTER (WHERE price > 10000000) AS big, \
                 count(DISTINCT auction) AS auctions";
    let per_bidder = format!(
        "SELECT bidder, {calls}, window_start, window_end \
         FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '2' SECOND)) \
         GROUP BY bidder, window_start, window_end"
    );
    let two_keys = "SELECT window_end, auction, count(*) AS n, max(date_time) AS latest, window_start, bidder \
         FROM TABLE(SESSION(TABLE bid PARTITION BY (bidder, auction), DESCRIPTOR(date_time), INTERVAL '5' SECOND)) \
         GROUP BY window_end, auction, window_start, bidder"
        .to_string();
    let unkeyed = "SELECT window_start, window_end, count(*) AS n, sum(price) AS total \
         FROM TABLE(SESSION(TABLE bid, DESCRIPTOR(date_time), INTERVAL '1' MILLISECOND)) \
         GROUP BY window_start, window_end"
        .to_string();
    vec![
        ("per_bidder", per_bidder.clone(), false),
        ("per_bidder_closed", per_bidder, true),
        ("two_keys", two_keys.clone(), false),
        ("two_keys_closed", two_keys, true),
        ("unkeyed", unkeyed, false),
    ]
}

fn create(name: &str, sql: &str, closed: bool) -> String {
    let emit = if closed { " EMIT ON WINDOW CLOSE" } else { "" };
    format!("CREATE MATERIALIZED VIEW {name} AS {sql}{emit};")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_aggregations_over_a_source_equal_the_batch_query() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let events = 200_000;
    let opts = format!(
        "connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '{events}'"
    );
    let wm = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND";
    c.batch_execute(&format!(
        "CREATE SOURCE bid ({BID}, {wm}) WITH ({opts}, nexmark.max.events.per.second = '40000', nexmark.split.num = '2');
         CREATE TABLE bid_ref ({BID}, {wm}) WITH ({opts});"
    ))
    .await
    .unwrap();

    // The plan each input gets.
    for (name, sql, closed) in views() {
        let emit = if closed { " EMIT ON WINDOW CLOSE" } else { "" };
        let plan = |relation: &str| {
            format!(
                "EXPLAIN CREATE MATERIALIZED VIEW x AS {}{emit}",
                sql.replace("TABLE bid ", &format!("TABLE {relation} "))
                    .replace("TABLE bid,", &format!("TABLE {relation},"))
            )
        };
        let over_source = rows(&c, &plan("bid")).await.concat().join("\n");
        assert!(
            over_source.contains("SessionAgg:"),
            "{name}:\n{over_source}"
        );
        assert!(
            !over_source.contains("OverWindow"),
            "{name}:\n{over_source}"
        );
        if closed {
            assert!(
                over_source.contains("emits closed sessions once"),
                "{name}:\n{over_source}"
            );
        }
        if !closed {
            let over_table = rows(&c, &plan("bid_ref")).await.concat().join("\n");
            assert!(over_table.contains("OverWindow"), "{name}:\n{over_table}");
            assert!(!over_table.contains("SessionAgg"), "{name}:\n{over_table}");
        }
    }
    for (name, sql, closed) in views() {
        c.batch_execute(&create(name, &sql, closed)).await.unwrap();
    }

    // Killed while generating, after every view checkpointed sessions.
    let completed = |r: &Vec<Vec<String>>, v: &str| {
        r.iter()
            .filter(|r| r[1] == v && r[2] == "COMPLETED")
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut before: Option<Vec<usize>> = None;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint of every view"
        );
        let done = rows(&c, "SHOW CHECKPOINTS").await;
        let now: Vec<usize> = views()
            .iter()
            .map(|(v, _, _)| completed(&done, v))
            .collect();
        match &before {
            // A checkpoint of every view after the first sessions were counted.
            Some(b) if b.iter().zip(&now).all(|(b, n)| n > b) => break,
            Some(_) => {}
            None => {
                let counted = value(&c, "SELECT coalesce(sum(n), 0) FROM per_bidder").await;
                if counted != "0" {
                    before = Some(now);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counted: i64 = value(&c, "SELECT coalesce(sum(n), 0) FROM per_bidder")
        .await
        .parse()
        .unwrap();
    let bids = (events / 50 * 46).to_string();
    eprintln!("killed with {counted} of {bids} bids in sessions");
    assert!(
        counted > 0 && counted.to_string() != bids,
        "killed mid-generation: {counted} of {bids}"
    );
    server.restart().await;
    let c = server.connect().await;

    // Every bid: the source's share of the events (Nexmark's 46 of 50 are bids).
    wait_until(&c, "SELECT coalesce(sum(n), 0) FROM per_bidder", 60, |r| {
        r[0][0] == bids
    })
    .await;
    wait_until(&c, "SELECT count(*) FROM bid_ref", 60, |r| r[0][0] == bids).await;
    c.batch_execute("FLUSH").await.unwrap();
    for (name, sql, closed) in views() {
        let batch = sql
            .replace("TABLE bid ", "TABLE bid_ref ")
            .replace("TABLE bid,", "TABLE bid_ref,");
        let want = sorted(&c, &batch).await;
        let got = sorted(&c, &format!("SELECT * FROM {name}")).await;
        // Bids are 0.1 ms apart: one session of them all without a key.
        let least = if name == "unkeyed" { 1 } else { 100 };
        assert!(want.len() >= least, "{name}: only {} sessions", want.len());
        assert_eq!(got.len(), want.len(), "{name} (closed: {closed})");
        assert_eq!(got, want, "{name} (closed: {closed})");
    }

    // Rescaled from a savepoint: the sessions' state moves by key group to 1 and then
    // 4 actors (an updating view's rows are rebuilt from it) and still equals the batch.
    c.batch_execute("SAVEPOINT sessions").await.unwrap();
    for p in [1, 4] {
        for (name, sql, closed) in views().into_iter().filter(|(n, _, _)| *n != "unkeyed") {
            let emit = if closed { " EMIT ON WINDOW CLOSE" } else { "" };
            c.batch_execute(&format!(
                "CREATE OR REPLACE MATERIALIZED VIEW {name} WITH (parallelism = {p}, \
                 restore_from = 'sessions') AS {sql}{emit}"
            ))
            .await
            .unwrap();
            let jobs = rows(&c, "SHOW JOBS").await;
            let job = jobs.iter().find(|r| r[0] == name).unwrap();
            assert_eq!(job[2], p.to_string(), "{jobs:?}");
            let batch = sql
                .replace("TABLE bid ", "TABLE bid_ref ")
                .replace("TABLE bid,", "TABLE bid_ref,");
            assert_eq!(
                sorted(&c, &format!("SELECT * FROM {name}")).await,
                sorted(&c, &batch).await,
                "{name} restored at parallelism {p}"
            );
        }
    }
}
