//! Processing time on a real server: `PROCTIME()` in a view, and a TUMBLE over it that
//! emits on window close. Windows close as the wall clock passes their ends (a
//! projection computing `PROCTIME()` emits the clock's time as that column's
//! watermark at every barrier), so a paced source's rows land in several one-second
//! windows, each emitted once, and every row is counted in exactly one.

use weir_sql_tests::query::{rows, wait_until};
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_windows_close_by_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    // 3000 rows at 1000 a second: about three seconds of processing time.
    c.batch_execute(
        "CREATE SOURCE seq (id bigint) WITH (connector = 'datagen', fields.id.kind = 'sequence',
           fields.id.start = '1', fields.id.end = '3000', rows-per-second = '1000');
         CREATE VIEW seq_p AS SELECT id, id % 3 AS k, PROCTIME() AS p_time FROM seq;
         CREATE MATERIALIZED VIEW per_second AS
           SELECT k, count(*) AS n, window_start, window_end
           FROM TABLE(TUMBLE(TABLE seq_p, DESCRIPTOR(p_time), INTERVAL '1' SECOND))
           GROUP BY k, window_start, window_end EMIT ON WINDOW CLOSE;",
    )
    .await
    .unwrap();
    // The last window closes about a second after the last row, without more input.
    wait_until(
        &c,
        "SELECT CAST(coalesce(sum(n), 0) AS bigint) FROM per_second",
        60,
        |r| r[0][0] == "3000",
    )
    .await;
    let got = rows(
        &c,
        "SELECT k, CAST(sum(n) AS bigint), count(*), count(DISTINCT window_start),
                min(window_end - window_start) = INTERVAL '1 second',
                max(window_end - window_start) = INTERVAL '1 second'
         FROM per_second GROUP BY k ORDER BY k",
    )
    .await;
    assert_eq!(got.len(), 3, "{got:?}");
    for r in &got {
        assert_eq!(r[1], "1000", "every row in exactly one window: {got:?}");
        assert_eq!(r[2], r[3], "each window emitted once: {got:?}");
        let windows: i64 = r[2].parse().unwrap();
        assert!(
            windows >= 3,
            "rows spread over the seconds they arrived in: {got:?}"
        );
        assert_eq!((r[4].as_str(), r[5].as_str()), ("t", "t"), "{got:?}");
    }
    // A batch SELECT reads the clock too.
    let now = rows(&c, "SELECT PROCTIME() IS NOT NULL").await;
    assert_eq!(now[0][0], "t");
}
