//! Unstored generator sources: `CREATE SOURCE ... WITH (connector = 'nexmark' |
//! 'datagen')` keeps no rows; its log holds the index range of each batch. Views
//! created while it generates, a `kill -9` in the middle, and a view created after it
//! finished (backfilled by regenerating) must all equal the same queries over a stored
//! twin (`CREATE TABLE` with the same connector and options: the generator is
//! deterministic by index, so the twin holds exactly the source's rows). Reading or
//! writing the source directly is refused with a clear error. The source generates
//! with two threads (`nexmark.split.num`), the twin with one: the same rows.

use std::time::Duration;
use weir_sql_tests::query::{error_code, rows, sorted, value, wait_until};
use weir_sql_tests::WeirProcess;

use weir_executor::source::nexmark::queries::{BID_COLUMNS as BID, QUERIES};

/// The late view over the source equals the same query over the stored twin.
async fn assert_per_bidder_equals_its_twin(c: &tokio_postgres::Client) {
    assert_eq!(
        sorted(c, "SELECT * FROM per_bidder").await,
        sorted(
            c,
            "SELECT bidder, count(*) AS n FROM bid_ref GROUP BY bidder"
        )
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstored_sources_regenerate_rows_for_views_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[execution.checkpointing]\ninterval = \"200ms\"\n";
    let mut server = WeirProcess::start_with_config(&data, 2, config).await;
    let c = server.connect().await;
    let opts = "connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '300000'";
    let wm = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND";
    // q7 over the source: its max(price) per window keeps one value (the input is
    // append-only) and its join is cleaned through the watermark on window_end.
    let q7 = QUERIES.iter().find(|(n, _, _)| *n == "q7").unwrap().2;
    let q7_ref = q7
        .replace("TABLE bid,", "TABLE bid_ref,")
        .replace("FROM bid B", "FROM bid_ref B");
    assert_ne!(q7, q7_ref);
    c.batch_execute(&format!(
        "CREATE SOURCE bid ({BID}, {wm}) WITH ({opts}, nexmark.max.events.per.second = '50000', nexmark.split.num = '2');
         CREATE TABLE bid_ref ({BID}) WITH ({opts});
         CREATE MATERIALIZED VIEW per_auction AS
           SELECT auction, count(*) AS n, max(price) AS top FROM bid GROUP BY auction;
         CREATE MATERIALIZED VIEW some_bids AS
           SELECT auction, bidder, price, date_time FROM bid WHERE MOD(auction, 7) = 0;
         CREATE MATERIALIZED VIEW q7 AS {q7};"
    ))
    .await
    .unwrap();
    // A savepoint while generating (after a first checkpoint), restored at the end.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let generated = "SELECT coalesce(sum(n), 0) FROM per_auction";
    while value(&c, generated).await == "0"
        || !rows(&c, "SHOW CHECKPOINTS")
            .await
            .iter()
            .any(|r| r[1] == "per_auction" && r[2] == "COMPLETED")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint of per_auction"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.batch_execute("SAVEPOINT early").await.unwrap();
    // Killed while generating: the source resumes after its last logged range and the
    // views replay the ranges after their checkpoints, regenerating those rows.
    let generated: i64 = value(&c, "SELECT sum(n) FROM per_auction")
        .await
        .parse()
        .unwrap();
    assert!(generated < 276000, "generation ended before the kill");
    eprintln!("killed with {generated} of 276000 bids counted");
    server.restart().await;
    let c = server.connect().await;
    let metrics = server.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("weir_lastCheckpointRestoreTimestamp{job_name=\"per_auction\"}")),
        "per_auction was not restored from a checkpoint:\n{metrics}"
    );
    wait_until(&c, "SELECT sum(n) FROM per_auction", 60, |r| {
        r[0][0] == "276000"
    })
    .await;
    wait_until(&c, "SELECT count(*) FROM bid_ref", 60, |r| {
        r[0][0] == "276000"
    })
    .await;
    c.batch_execute("FLUSH").await.unwrap();
    let q_auction =
        "SELECT auction, count(*) AS n, max(price) AS top FROM bid_ref GROUP BY auction";
    let q_some = "SELECT auction, bidder, price, date_time FROM bid_ref WHERE MOD(auction, 7) = 0";
    assert_eq!(
        sorted(&c, "SELECT * FROM per_auction").await,
        sorted(&c, q_auction).await
    );
    let some = sorted(&c, "SELECT * FROM some_bids").await;
    assert!(!some.is_empty());
    assert_eq!(some, sorted(&c, q_some).await);
    let q7_rows = sorted(&c, "SELECT * FROM q7").await;
    assert!(!q7_rows.is_empty());
    assert_eq!(q7_rows, sorted(&c, &q7_ref).await);
    let metrics = server.metrics().await;
    let cleaned: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("weir_stateKeysCleaned{operator=\"q7.hashjoin."))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    // The join's right side holds one row per window: thousands cleaned means bids
    // left the left side, which needs the watermark on window_end.
    assert!(
        cleaned > 10_000,
        "q7's join cleaned {cleaned} rows:\n{metrics}"
    );

    // A view created after the source finished is backfilled by regenerating it.
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_bidder AS SELECT bidder, count(*) AS n FROM bid GROUP BY bidder",
    )
    .await
    .unwrap();
    assert_per_bidder_equals_its_twin(&c).await;

    // The source's checkpoints hold none of its rows, the stored twin's all of them.
    c.batch_execute("CHECKPOINT").await.unwrap();
    let full_size = |job: &'static str| {
        let c = &c;
        async move {
            let r = rows(c, "SHOW CHECKPOINTS").await;
            r.iter()
                .rev()
                .find(|r| r[1] == job && r[2] == "COMPLETED")
                .map(|r| r[6].parse::<u64>().unwrap())
                .unwrap_or_else(|| panic!("no completed checkpoint of {job}: {r:?}"))
        }
    };
    let (source, twin) = (full_size("bid").await, full_size("bid_ref").await);
    assert!(
        twin > 1 << 20,
        "the stored twin keeps its rows: {twin} bytes"
    );
    assert!(source < 4 << 10, "the source keeps no rows: {source} bytes");

    // Read or changed directly: refused, and nothing changes.
    for (sql, code) in [
        ("SELECT * FROM bid", "0A000"),
        ("SELECT count(*) FROM bid", "0A000"),
        ("INSERT INTO bid VALUES (1, 2, 3, now(), 'x')", "42809"),
        ("DELETE FROM bid WHERE auction = 1000", "42809"),
        ("UPDATE bid SET price = 0", "42809"),
    ] {
        assert_eq!(error_code(&c, sql).await, code, "{sql}");
    }
    assert_eq!(value(&c, "SELECT sum(n) FROM per_auction").await, "276000");

    // A datagen source: a 1..5,000 sequence, summed by a view.
    c.batch_execute(
        "CREATE SOURCE seq (id bigint, v bigint) WITH (connector = 'datagen',
           fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '5000',
           fields.v.min = '0', fields.v.max = '9', rows-per-second = '0');
         CREATE MATERIALIZED VIEW seq_sum AS SELECT count(*) AS n, sum(id) AS s FROM seq;",
    )
    .await
    .unwrap();
    wait_until(&c, "SELECT n, s FROM seq_sum", 60, |r| {
        r[0][0] == "5000" && r[0][1] == "12502500"
    })
    .await;
    // After a restart every view is restored, not rebuilt from rows nobody kept.
    server.restart().await;
    let c = server.connect().await;
    assert_eq!(value(&c, "SELECT sum(n) FROM per_auction").await, "276000");
    assert_eq!(value(&c, "SELECT s FROM seq_sum").await, "12502500");
    assert_eq!(
        sorted(&c, "SELECT * FROM some_bids").await,
        sorted(&c, q_some).await
    );
    // A savepoint holds the views' state and the source's position (no rows): the
    // one taken while generating rewinds the views to then, and the restore replays
    // every range after it, regenerating those rows.
    let report = rows(&c, "RESTORE ALL FROM SAVEPOINT early").await;
    let restored: Vec<&str> = report.iter().map(|r| r[0].as_str()).collect();
    for view in ["per_auction", "some_bids", "q7"] {
        assert!(restored.contains(&view), "{view} not restored: {report:?}");
    }
    wait_until(&c, "SELECT sum(n) FROM per_auction", 60, |r| {
        r[0][0] == "276000"
    })
    .await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        sorted(&c, "SELECT * FROM per_auction").await,
        sorted(&c, q_auction).await
    );
    assert_eq!(
        sorted(&c, "SELECT * FROM some_bids").await,
        sorted(&c, q_some).await
    );
    assert_eq!(sorted(&c, "SELECT * FROM q7").await, q7_rows);
    assert_per_bidder_equals_its_twin(&c).await;
    // DROP SOURCE: refused while a view reads it, then done.
    assert_eq!(error_code(&c, "DROP SOURCE seq").await, "2BP01");
    c.batch_execute("DROP MATERIALIZED VIEW seq_sum; DROP SOURCE seq")
        .await
        .unwrap();
    assert_eq!(error_code(&c, "DROP SOURCE seq").await, "42P01");
    c.batch_execute("DROP SOURCE IF EXISTS seq").await.unwrap();
}
