//! Latency against throughput: `execution.buffer-timeout.interval` decides when a paced
//! source writes its batches, and buffer debloating bounds what queues on channels.
//! Both must leave results exact: every view ends equal to the same query over a
//! stored twin of the input.
//!
//! Batches are observable through a view: one source batch is one log entry, written
//! under the write lock, so a barrier (and a reader) sees all of its rows or none.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use weir_sql_tests::query::{rows, value};
use weir_sql_tests::WeirProcess;

use weir_executor::source::nexmark::queries::BID_COLUMNS as BID;

/// Bids among the first `n` Nexmark events (46 of every 50).
fn bids_in(n: i64) -> i64 {
    (0..n)
        .filter(|&i| {
            weir_executor::source::nexmark::generator::kind(i)
                == weir_executor::source::nexmark::generator::Kind::Bid
        })
        .count() as i64
}

/// Creates a paced source of `events` bids' events (with `source_opts`), a GROUP BY
/// view over it (a hash exchange at parallelism 2) and its stored twin; polls the
/// view's row total until every bid is in; returns the distinct totals seen.
async fn observe_totals(
    c: &tokio_postgres::Client,
    events: i64,
    rate: i64,
    source_opts: &str,
) -> BTreeSet<i64> {
    let opts = format!(
        "connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '{events}'"
    );
    c.batch_execute(&format!(
        "CREATE SOURCE bid ({BID}) WITH ({opts}, nexmark.max.events.per.second = '{rate}'{source_opts});
         CREATE TABLE bid_ref ({BID}) WITH ({opts});
         CREATE MATERIALIZED VIEW per_auction AS
           SELECT auction, count(*) AS n, max(price) AS top FROM bid GROUP BY auction;"
    ))
    .await
    .unwrap();
    let all = bids_in(events);
    let total = "SELECT coalesce(sum(n), 0) FROM per_auction";
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = BTreeSet::new();
    loop {
        let n: i64 = value(c, total).await.parse().unwrap();
        seen.insert(n);
        if n == all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} of {all} bids after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got = rows(c, "SELECT * FROM per_auction").await;
    let mut want = rows(
        c,
        "SELECT auction, count(*) AS n, max(price) AS top FROM bid_ref GROUP BY auction",
    )
    .await;
    got.sort();
    want.sort();
    assert_eq!(got, want, "the view differs from its query over the twin");
    seen
}

/// `-1`: a paced source writes only full batches (20,000 events here), so a reader
/// sees the bids of 0, 20,000, 40,000 or all 60,000 events, never a total between;
/// with debloating on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_full_batches_with_the_timeout_off_and_debloating_on() {
    let dir = tempfile::tempdir().unwrap();
    let config = "barrier.interval = \"50ms\"\n\
                  [execution.buffer-timeout]\ninterval = \"-1\"\n\
                  [taskmanager.network.memory.buffer-debloat]\nenabled = true\ntarget = \"200ms\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let seen = observe_totals(&c, 60_000, 20_000, ", nexmark.batch.events = '20000'").await;
    let batches: BTreeSet<i64> = [0, 20_000, 40_000, 60_000].map(bids_in).into();
    assert!(
        seen.is_subset(&batches),
        "a reader saw totals {seen:?}, not only whole batches {batches:?}"
    );
}

/// `0`: each event is written as soon as it is due, so a reader polling every 20 ms
/// over 4 s sees the total grow in many small steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_at_once_with_the_timeout_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = "barrier.interval = \"50ms\"\n[execution.buffer-timeout]\ninterval = \"0\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let seen = observe_totals(&c, 20_000, 5_000, "").await;
    assert!(
        seen.len() >= 20,
        "a reader saw only {} distinct totals: {seen:?}",
        seen.len()
    );
}

/// A source whose consumer is back-pressured waits for room on its table's channel
/// without the write lock, so writes to other tables go on meanwhile. Before that,
/// the generator held the lock while it waited (here up to 3 s per chunk, the slow
/// view's pace), and an INSERT into an unrelated table waited behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_back_pressured_source_does_not_hold_up_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    // Periodic barriers 10 s apart, and no checkpoints: what holds the lock here is
    // the writers alone.
    let config = "barrier.interval = \"10s\"\n";
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k bigint);
         CREATE TABLE feed (id bigint) WITH (connector = 'datagen',
           fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '100000000',
           rows-per-second = '50000');
         CREATE MATERIALIZED VIEW slow AS SELECT id % 10 AS g, count(*) AS n
           FROM feed GROUP BY id % 10;
         SET failpoint.operator.slow.slow = '3000';",
    )
    .await
    .unwrap();
    weir_sql_tests::query::wait_until(
        &c,
        "SELECT job FROM weir_catalog.operators WHERE job = 'feed' AND backpressure <> 'OK'",
        60,
        |r| !r.is_empty(),
    )
    .await;
    let mut took = Vec::new();
    for k in 0..5 {
        let t0 = Instant::now();
        c.execute(&format!("INSERT INTO t VALUES ({k})"), &[])
            .await
            .unwrap();
        took.push(t0.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The server warns about whatever held the write lock, or a slow fsync: if this
    // fails, its warnings say which.
    assert!(
        took.iter().all(|d| *d < Duration::from_secs(1)),
        "INSERTs into t waited on the back-pressured source: {took:?}; server warnings: {:?}",
        server
            .log()
            .lines()
            .filter(|l| l.contains("WARN"))
            .collect::<Vec<_>>()
    );
    // Nothing was lost while the source waited: once the view keeps up again, it
    // counts every row the table holds, in one snapshot.
    c.batch_execute("SET failpoint.operator.slow.slow = 'off'")
        .await
        .unwrap();
    let both = "SELECT (SELECT sum(n) FROM slow), (SELECT count(*) FROM feed), \
                (SELECT count(*) FROM t)";
    let r = weir_sql_tests::query::wait_until(&c, both, 120, |r| r[0][0] == r[0][1]).await;
    assert_eq!(r[0][2], "5");
}
