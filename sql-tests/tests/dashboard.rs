//! The web dashboard in a real headless Chromium (`clients/dashboard_browser.py`,
//! Selenium over chromium-driver): its pages load without console errors, show the
//! jobs and checkpoints created through SQL, update when more rows arrive, show a
//! back-pressured operator in the job graph, and agree with the `weir_catalog`
//! tables. Screenshots of the overview, that graph and the checkpoint history go to
//! `$CARGO_TARGET_DIR/weir-screenshots/`, or to `docs/screenshots/` (linked from
//! `docs/dashboard.md`) with `WEIR_UPDATE_SCREENSHOTS=1`.

use std::path::PathBuf;
use std::process::Command;
use weir_sql_tests::clients::{client_program, manifest_dir, python};
use weir_sql_tests::query::{rows, wait_until};
use weir_sql_tests::WeirProcess;

fn screenshot_dir() -> PathBuf {
    let dir = if std::env::var_os("WEIR_UPDATE_SCREENSHOTS").is_some() {
        manifest_dir().join("../docs/screenshots")
    } else {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest_dir().join("../target"));
        target.join("weir-screenshots")
    };
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_what_the_system_tables_hold() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(
        &dir.path().join("data"),
        2,
        "[execution.checkpointing]\ninterval = \"1s\"\n",
    )
    .await;
    let c = server.connect().await;
    // A view fed by inserts, and a slow one (a failpoint sleeps 300 ms per chunk in
    // its actors: slow without taking the CPU the browser needs) fed faster than it
    // keeps up with, so that back-pressure shows in a graph.
    c.batch_execute(
        "CREATE TABLE t (k bigint, v bigint);
         INSERT INTO t SELECT x, x FROM generate_series(1, 1000) AS s(x);
         CREATE MATERIALIZED VIEW per_g AS SELECT k % 10 AS g, count(*) AS n FROM t GROUP BY k % 10;
         CREATE TABLE feed (id bigint, s text) WITH (connector = 'datagen',
           fields.id.kind = 'sequence', fields.id.start = '1', fields.id.end = '100000000',
           fields.s.length = '20', rows-per-second = '40000');
         SET failpoint.operator.slow.slow = '300';
         CREATE MATERIALIZED VIEW slow AS SELECT id % 100 AS g, count(*) AS n
           FROM feed GROUP BY id % 100;",
    )
    .await
    .unwrap();
    let busy = wait_until(
        &c,
        "SELECT job FROM weir_catalog.operators WHERE job IN ('slow', 'feed') \
         AND backpressure <> 'OK' ORDER BY job DESC LIMIT 1",
        60,
        |r| !r.is_empty(),
    )
    .await[0][0]
        .clone();
    wait_until(
        &c,
        "SELECT count(*) FROM weir_catalog.checkpoints WHERE status = 'COMPLETED'",
        60,
        |r| r[0][0].parse::<i64>().unwrap() >= 3,
    )
    .await;

    let shots = screenshot_dir();
    let out = Command::new(python())
        .arg(client_program("dashboard_browser.py"))
        .arg(format!("http://127.0.0.1:{}", server.web_port))
        .arg(server.port.to_string())
        .arg(&busy)
        .arg("per_g")
        .arg(&shots)
        .output()
        .expect("python with selenium (scripts/test.sh installs it into ~/.cache/weir-venv)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let strings = |x: &serde_json::Value| -> Vec<Vec<String>> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    };

    assert_eq!(v["console_errors"], serde_json::json!([]), "console errors");
    // The overview lists the jobs the tables list, with the same status and figures
    // (name, kind, status, parallelism, restarts).
    let mut shown = strings(&v["overview_jobs"]);
    shown.sort();
    let listed = rows(
        &c,
        "SELECT name, kind, status, parallelism::text, restarts::text FROM weir_catalog.jobs ORDER BY name",
    )
    .await;
    assert_eq!(shown, listed);
    // The graph: the slow job's fragments and the relation feeding it.
    assert!(v["graph_fragments"].as_i64().unwrap() >= 1, "{v}");
    // The page followed the 500 new rows.
    let counts = v["records_in"].as_array().unwrap();
    assert!(
        counts[1].as_i64().unwrap() >= counts[0].as_i64().unwrap() + 500,
        "{v}"
    );
    // Every completed checkpoint the page showed is one the table holds.
    let completed = rows(
        &c,
        "SELECT id::text, job, status FROM weir_catalog.checkpoints WHERE status = 'COMPLETED'",
    )
    .await;
    let page: Vec<Vec<String>> = strings(&v["checkpoints"])
        .into_iter()
        .filter(|r| r[2] == "COMPLETED")
        .collect();
    assert!(page.len() >= 3, "{v}");
    for r in &page {
        assert!(
            completed.contains(r),
            "{r:?} is not in weir_catalog.checkpoints"
        );
    }
    assert!(v["chart_points"].as_i64().unwrap() >= 3, "{v}");
    let settings = rows(&c, "SELECT count(*)::text FROM weir_catalog.settings").await;
    assert_eq!(v["settings_rows"].to_string(), settings[0][0]);
    for f in ["overview.png", "job-graph.png", "checkpoints.png"] {
        let size = std::fs::metadata(shots.join(f))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 10_000, "{f}: {size} bytes");
    }
}
