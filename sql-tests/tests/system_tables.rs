//! `weir_catalog` against a real server: jobs, operators, exchanges, checkpoints,
//! settings and progress as SQL tables that agree with SHOW and `/metrics` and join
//! with each other; the dashboard's JSON API serving the same rows (behind the
//! password when one is set); and a real psql printing progress NOTICEs while a
//! view backfills 10M rows.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_sql_tests::query::{rows as query_rows, value, wait_until};
use weir_sql_tests::WeirProcess;

const CONFIG: &str = "[execution.checkpointing]\ninterval = \"500ms\"\n";

/// The one bigint `sql` returns.
async fn scalar_i64(c: &tokio_postgres::Client, sql: &str) -> i64 {
    let v = value(c, sql).await;
    v.parse()
        .unwrap_or_else(|_| panic!("{sql}: {v} is not a number"))
}

/// Polls `sql` (one bigint) until it is at least `want`.
async fn wait_for(c: &tokio_postgres::Client, sql: &str, want: i64) {
    wait_until(c, sql, 60, |r| {
        r[0][0].parse::<i64>().is_ok_and(|n| n >= want)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_tables_describe_the_running_dataflow() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, CONFIG).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k bigint, v bigint);
         INSERT INTO t SELECT x, x * 2 FROM generate_series(1, 1000) AS s(x);
         CREATE MATERIALIZED VIEW per_g AS SELECT k % 10 AS g, count(*) AS n, sum(v) AS s FROM t GROUP BY k % 10;
         CREATE SINK out AS SELECT k, v FROM t WHERE v > 100 WITH (connector = 'blackhole');",
    )
    .await
    .unwrap();
    wait_for(
        &c,
        "SELECT count(*) FROM weir_catalog.checkpoints WHERE job = 'per_g' AND status = 'COMPLETED'",
        1,
    )
    .await;

    // Jobs: the view and the sink (a plain table is no job), as SHOW JOBS lists them.
    let jobs = query_rows(
        &c,
        "SELECT name, kind, status, parallelism, restarts, fragments >= 1, freshness_ms < 60000 \
         FROM weir_catalog.jobs ORDER BY name",
    )
    .await;
    assert_eq!(
        jobs,
        vec![
            vec!["out", "sink", "RUNNING", "2", "0", "t", "t"],
            vec!["per_g", "materialized view", "RUNNING", "2", "0", "t", "t"],
        ]
    );
    let show = query_rows(&c, "SHOW JOBS").await;
    let shown: Vec<(&str, &str)> = show
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert!(
        shown.contains(&("per_g", "RUNNING")) && shown.contains(&("out", "RUNNING")),
        "{show:?}"
    );

    // Operators: the aggregation with its uid and state, the view's Materialize last.
    let ops = query_rows(
        &c,
        "SELECT operator, uid IS NOT NULL, parallelism, state_bytes > 0, backpressure \
         FROM weir_catalog.operators WHERE job = 'per_g' ORDER BY fragment_id, position",
    )
    .await;
    assert!(
        ops.iter()
            .any(|r| r[0] == "HashAgg" && r[1] == "t" && r[2] == "2" && r[3] == "t"),
        "{ops:?}"
    );
    assert_eq!(ops.last().unwrap()[0], "Materialize", "{ops:?}");
    assert!(ops
        .iter()
        .all(|r| ["OK", "LOW", "HIGH"].contains(&r[4].as_str())));
    // Every input row reached the first fragment's actors (records_in counts them).
    let first_in = scalar_i64(
        &c,
        "SELECT records_in FROM weir_catalog.operators WHERE job = 'per_g' AND position = 0 \
         ORDER BY fragment_id LIMIT 1",
    )
    .await;
    assert!(first_in >= 1000, "records in: {first_in}");

    // Exchanges: the table feeds the view, a hash exchange on the group key inside it.
    let edges = query_rows(
        &c,
        "SELECT from_relation, partitioning, keys IS NOT NULL FROM weir_catalog.exchanges \
         WHERE job = 'per_g' ORDER BY to_fragment, from_fragment",
    )
    .await;
    assert!(edges.iter().any(|e| e[0] == "t"), "{edges:?}");
    assert!(
        edges.iter().any(|e| e[1] == "hash" && e[2] == "t"),
        "{edges:?}"
    );

    // The tables join: completed checkpoints per job.
    let joined = query_rows(
        &c,
        "SELECT j.name, count(*) > 0 FROM weir_catalog.jobs j \
         JOIN weir_catalog.checkpoints c ON c.job = j.name \
         WHERE c.status = 'COMPLETED' GROUP BY j.name ORDER BY j.name",
    )
    .await;
    assert_eq!(joined, vec![vec!["out", "t"], vec!["per_g", "t"]]);

    // Settings: effective values and where they came from.
    let settings = query_rows(
        &c,
        "SELECT name, value, source FROM weir_catalog.settings WHERE name IN \
         ('execution.checkpointing.interval', 'parallelism.default', 'restart-strategy.type') \
         ORDER BY name",
    )
    .await;
    assert_eq!(
        settings,
        vec![
            vec!["execution.checkpointing.interval", "500ms", "config file"],
            vec!["parallelism.default", "2", "command line"],
            vec!["restart-strategy.type", "exponential-delay", "default"],
        ]
    );
    // Tools find the schema in the catalogs.
    assert_eq!(
        scalar_i64(
            &c,
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'weir_catalog'"
        )
        .await,
        9
    );
    // The progress of the view's backfill is listed, done.
    let progress = query_rows(
        &c,
        "SELECT kind, object, status, done, total, unit FROM weir_catalog.progress \
         WHERE kind = 'backfill' AND object = 'per_g'",
    )
    .await;
    assert_eq!(
        progress,
        vec![vec!["backfill", "per_g", "done", "1000", "1000", "rows"]]
    );

    // `/metrics` has the per-second gauges the operators table reads, by `job_name`.
    // (Actors publish them at their first barrier at least half a second in.)
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = server.metrics().await;
        if metrics.lines().any(|l| {
            l.starts_with("weir_numRecordsInPerSecond{") && l.contains("job_name=\"per_g\"")
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The dashboard's API serves the same rows as JSON.
    let api = server.web_get("/api/catalog/jobs", &[]).await;
    assert!(api.starts_with("HTTP/1.1 200"), "{api}");
    let body: serde_json::Value =
        serde_json::from_str(api.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["columns"][0], "name");
    let mut names: Vec<&str> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["out", "per_g"]);
    assert!(server
        .web_get("/api/catalog/no_such_table", &[])
        .await
        .starts_with("HTTP/1.1 404"));
    let page = server.web_get("/", &[]).await;
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("/assets/app.js"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_asks_for_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(
        &dir.path().join("data"),
        1,
        "[auth]\npassword = \"s3cret\"\n",
    )
    .await;
    let denied = server.web_get("/api/catalog/jobs", &[]).await;
    assert!(denied.starts_with("HTTP/1.1 401"), "{denied}");
    assert!(denied.contains("WWW-Authenticate: Basic"), "{denied}");
    // `any:wrong` and `any:s3cret` in Basic credentials.
    let wrong = server
        .web_get("/", &["Authorization: Basic YW55Ondyb25n"])
        .await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    let ok = server
        .web_get(
            "/api/catalog/jobs",
            &["Authorization: Basic YW55OnMzY3JldA=="],
        )
        .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

/// A real psql prints the backfill's progress while CREATE MATERIALIZED VIEW runs
/// over a table of 10M rows (an md5 of each): several NOTICEs, the first ones well before the command
/// completes, the last one saying it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_prints_progress_notices_during_a_backfill_of_10m_rows() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE big (id bigint, v bigint);
         INSERT INTO big SELECT x, x % 1000 FROM generate_series(1, 10000000) AS s(x);",
    )
    .await
    .unwrap();
    let start = Instant::now();
    let mut psql = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args([
            "-U",
            "weir",
            "-d",
            "weir",
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
        ])
        // An md5 per row makes the backfill take seconds, not a fraction of one.
        .arg(
            "CREATE MATERIALIZED VIEW per_v AS \
             SELECT v, count(*) AS n, max(md5(CAST(id AS text))) AS h FROM big GROUP BY v",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql (Debian package postgresql-client)");
    // psql prints NOTICEs to stderr as they arrive; note when each line came.
    let stderr = psql.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .map(|l| (start.elapsed(), l))
            .collect::<Vec<_>>()
    });
    let out = psql.wait_with_output().unwrap();
    let finished = start.elapsed();
    let notices = lines.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CREATE_MATERIALIZED_VIEW"),
        "{stdout} {notices:?}"
    );
    let progress: Vec<&(Duration, String)> = notices
        .iter()
        .filter(|(_, l)| l.starts_with("NOTICE:  backfill of per_v: "))
        .collect();
    assert!(
        progress.len() >= 3,
        "{notices:?} (statement took {finished:?})"
    );
    assert!(
        progress[0].1.contains(" of 10000000 rows"),
        "{:?}",
        progress[0]
    );
    assert!(
        finished - progress[1].0 >= Duration::from_millis(300),
        "the second notice came {:?} before the end: not while the statement ran",
        finished - progress[1].0
    );
    let last = &progress.last().unwrap().1;
    assert!(
        last.contains("10000000 of 10000000 rows (100%), done in"),
        "{last}"
    );
    assert_eq!(scalar_i64(&c, "SELECT sum(n) FROM per_v").await, 10_000_000);
}

/// SAVEPOINT and RESTORE report their bytes: NOTICEs to the statement's client, rows
/// of `weir_catalog.progress`, and the savepoint in `weir_catalog.savepoints` as in
/// SHOW SAVEPOINTS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_and_restore_report_progress() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(&dir.path().join("data"), 2, CONFIG).await;
    let (c, notices) = weir_sql_tests::process::connect_with_notices(server.port).await;
    c.batch_execute(
        "CREATE TABLE t (k bigint, v bigint);
         INSERT INTO t SELECT x, x FROM generate_series(1, 5000) AS s(x);
         CREATE MATERIALIZED VIEW per_g AS SELECT k % 100 AS g, count(*) AS n FROM t GROUP BY k % 100;",
    )
    .await
    .unwrap();
    c.batch_execute("SAVEPOINT sp").await.unwrap();
    c.batch_execute("RESTORE ALL FROM SAVEPOINT sp")
        .await
        .unwrap();
    let tasks = query_rows(
        &c,
        "SELECT kind, status, unit, done = total, total > 0 FROM weir_catalog.progress \
         WHERE kind IN ('savepoint', 'restore') ORDER BY id",
    )
    .await;
    assert_eq!(
        tasks[0],
        vec!["savepoint", "done", "bytes", "t", "t"],
        "{tasks:?}"
    );
    assert!(
        tasks[1..]
            .iter()
            .all(|t| t == &["restore", "done", "bytes", "t", "t"]),
        "{tasks:?}"
    );
    assert!(tasks.len() >= 2, "{tasks:?}");
    let said = notices.lock().unwrap().clone();
    assert!(
        said.iter()
            .any(|n| n.starts_with("savepoint of sp: ") && n.contains("done in")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|n| n.starts_with("restore of per_g from sp: ") && n.contains("done in")),
        "{said:?}"
    );
    let listed = query_rows(
        &c,
        "SELECT name, views, size > 0 FROM weir_catalog.savepoints",
    )
    .await;
    assert_eq!(listed, vec![vec!["sp", "per_g", "t"]]);
    let shown = query_rows(&c, "SHOW SAVEPOINTS").await;
    assert_eq!(
        (shown[0][0].as_str(), shown[0][3].as_str()),
        ("sp", "per_g")
    );
}
