//! The savepoint guide's scenarios beyond recovery and a changed query (those are in
//! `savepoint.rs` and `savepoint_evolution.rs`): an A/B branch that starts a second
//! view from another view's saved state, and a dropped view's retained checkpoint
//! (RETAIN_ON_CANCELLATION) listed, restored into a new view, kept across a `kill -9`
//! and deleted. Every result is checked against an oracle: the view's query (or what
//! its restored state plus its own input means) run as a plain SELECT.

use tokio_postgres::Client;
use weir_sql_tests::process::connect_with_notices;
use weir_sql_tests::query::{error_code, rows, sorted};
use weir_sql_tests::savepoints::{
    agg_uid, assert_view, explain, insert_range, last_notice, replayed, PER_GROUP, TABLE,
};
use weir_sql_tests::WeirProcess;

/// A/B: view `b` starts from view `a`'s state in a savepoint (its uids with the view
/// name mapped), then both run on their own: equal while their queries are equal,
/// apart where the branch's query differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_starts_from_another_views_saved_state_and_runs_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let (c, notices) = connect_with_notices(server.port).await;
    c.batch_execute(TABLE).await.unwrap();
    let create_a = format!("CREATE MATERIALIZED VIEW a AS {PER_GROUP}");
    c.batch_execute(&create_a).await.unwrap();
    insert_range(&c, 1, 2000).await;
    c.batch_execute("SAVEPOINT ab").await.unwrap();
    insert_range(&c, 2001, 2100).await; // after the savepoint: 100 rows

    // Without the mapping the savepoint holds nothing of b (the error).
    let plain_b = format!("CREATE MATERIALIZED VIEW b WITH (restore_from = 'ab') AS {PER_GROUP}");
    assert_eq!(error_code(&c, &plain_b).await, "22023");
    let branch_b = plain_b.replace(
        "restore_from = 'ab'",
        "restore_from = 'ab', restore_from_view = 'a'",
    );
    // EXPLAIN previews the branch: a's aggregation state under b's uid.
    let uid_a = agg_uid(&c, &create_a).await;
    let uid_b = agg_uid(&c, &branch_b).await;
    assert_eq!(uid_b, format!("b.{}", uid_a.strip_prefix("a.").unwrap()));
    let preview = explain(&c, &branch_b).await;
    assert!(
        preview
            .iter()
            .any(|l| l == "Restore from savepoint ab (the state of view a):"),
        "{preview:?}"
    );
    assert!(
        preview
            .iter()
            .any(|l| l.trim() == format!("{uid_b}: restore")),
        "{preview:?}"
    );
    c.batch_execute(&branch_b).await.unwrap();
    let notice = last_notice(&notices).await;
    assert!(notice.contains(&uid_b), "{notice}");
    // State from the savepoint: only the 100 rows written after it were replayed.
    assert_eq!(replayed(&notice), 100, "{notice}");
    assert_view(&c, "b", PER_GROUP).await;

    // A branch whose query differs downstream of its input: the saved state holds
    // every row up to the savepoint; after it, the branch counts even ids only.
    let branch_c =
        "CREATE MATERIALIZED VIEW c WITH (restore_from = 'ab', restore_from_view = 'a') AS \
         SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE id % 2 = 0 GROUP BY g";
    c.batch_execute(branch_c).await.unwrap();
    assert_eq!(replayed(&last_notice(&notices).await), 100);

    // More writes: each view follows its own query.
    insert_range(&c, 2101, 2400).await;
    c.batch_execute("DELETE FROM t WHERE id % 14 = 0")
        .await
        .unwrap();
    c.batch_execute("UPDATE t SET v = v + 1 WHERE id % 10 = 4")
        .await
        .unwrap();
    assert_view(&c, "a", PER_GROUP).await;
    assert_view(&c, "b", PER_GROUP).await;
    // The update keeps ids, so an even id stays even: c's rows are those with an
    // even id, or an id up to the savepoint's 2000.
    assert_view(
        &c,
        "c",
        "SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE id % 2 = 0 OR id <= 2000 GROUP BY g",
    )
    .await;
    assert_ne!(
        sorted(&c, "SELECT * FROM c").await,
        sorted(&c, "SELECT * FROM a").await
    );
    // Dropping the original leaves the branches running.
    c.batch_execute("DROP MATERIALIZED VIEW a").await.unwrap();
    insert_range(&c, 2401, 2450).await;
    assert_view(&c, "b", PER_GROUP).await;

    for (sql, code) in [
        // A view the savepoint does not hold.
        (
            branch_b.replace("restore_from_view = 'a'", "restore_from_view = 'nope'").replace(
                "VIEW b",
                "VIEW d",
            ),
            "22023",
        ),
        // restore_from_view alone.
        (
            format!("CREATE MATERIALIZED VIEW d WITH (restore_from_view = 'a') AS {PER_GROUP}"),
            "22023",
        ),
        (
            format!("CREATE MATERIALIZED VIEW d WITH (restore_from = 'ab', restore_from_view = '') AS {PER_GROUP}"),
            "22023",
        ),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
}

/// SHOW CHECKPOINTS rows with status RETAINED: (view, path).
async fn retained(c: &Client) -> Vec<(String, String)> {
    rows(
        c,
        "SELECT job, path FROM weir_catalog.checkpoints WHERE status = 'RETAINED' ORDER BY job",
    )
    .await
    .into_iter()
    .map(|r| (r[0].clone(), r[1].clone()))
    .collect()
}

/// RETAIN_ON_CANCELLATION keeps a dropped view's newest checkpoint: SHOW CHECKPOINTS
/// lists it, a new view restores from it like a savepoint (replaying only the log
/// after it), it outlives a `kill -9`, and DROP CHECKPOINT deletes it. The default
/// deletes a dropped view's checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_views_retained_checkpoint_restores_into_a_new_view() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let (c, notices) = connect_with_notices(server.port).await;
    c.batch_execute(TABLE).await.unwrap();
    // The default deletes: a view dropped with it leaves nothing behind.
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW gone AS {PER_GROUP}"))
        .await
        .unwrap();
    c.batch_execute(
        "SET execution.checkpointing.externalized-checkpoint-retention = 'RETAIN_ON_CANCELLATION'",
    )
    .await
    .unwrap();
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW kept AS {PER_GROUP}"))
        .await
        .unwrap();
    insert_range(&c, 1, 2000).await;
    c.batch_execute("CHECKPOINT").await.unwrap();
    insert_range(&c, 2001, 2100).await; // after the checkpoint: 100 rows
    c.batch_execute("DROP MATERIALIZED VIEW gone; DROP MATERIALIZED VIEW kept")
        .await
        .unwrap();
    let listed = retained(&c).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let (view, path) = listed[0].clone();
    assert_eq!(view, "kept");
    assert!(path.starts_with("checkpoints/"), "{path}");
    assert!(
        dir.path()
            .join("data")
            .join(&path)
            .join("_metadata")
            .exists(),
        "the retained checkpoint's files stay: {path}"
    );

    // Restored into a new view (another name: the uids are mapped) like a savepoint.
    let create = |name: &str| {
        format!(
            "CREATE MATERIALIZED VIEW {name} WITH (restore_from_checkpoint = '{path}') AS {PER_GROUP}"
        )
    };
    let preview = explain(&c, &create("back")).await;
    assert!(
        preview
            .iter()
            .any(|l| *l == format!("Restore from retained checkpoint {path}:")),
        "{preview:?}"
    );
    c.batch_execute(&create("back")).await.unwrap();
    let notice = last_notice(&notices).await;
    assert!(
        notice.contains(&format!("restored from retained checkpoint \"{path}\"")),
        "{notice}"
    );
    assert_eq!(replayed(&notice), 100, "{notice}");
    assert_view(&c, "back", PER_GROUP).await;

    // Kept across a crash: still listed, and restorable again.
    server.restart().await;
    let (c, notices) = connect_with_notices(server.port).await;
    assert_eq!(retained(&c).await, listed);
    insert_range(&c, 2101, 2200).await;
    c.batch_execute(&create("again")).await.unwrap();
    assert_eq!(replayed(&last_notice(&notices).await), 200);
    assert_view(&c, "again", PER_GROUP).await;

    // Deleted by statement: gone from the list and from storage; the views restored
    // from it run on their own checkpoints.
    c.batch_execute(&format!("DROP CHECKPOINT '{path}'"))
        .await
        .unwrap();
    assert!(retained(&c).await.is_empty());
    assert!(!dir.path().join("data").join(&path).exists(), "{path}");
    for (sql, code) in [
        (create("third"), "42704"),
        (format!("DROP CHECKPOINT '{path}'"), "42704"),
        ("DROP CHECKPOINT nope".to_string(), "42601"),
        (
            format!(
                "CREATE MATERIALIZED VIEW third WITH (restore_from = 'x', restore_from_checkpoint = '{path}') AS {PER_GROUP}"
            ),
            "22023",
        ),
        (
            "SET execution.checkpointing.externalized-checkpoint-retention = 'SOMETIMES'"
                .to_string(),
            "22023",
        ),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
    c.batch_execute("DELETE FROM t WHERE id % 3 = 0")
        .await
        .unwrap();
    c.batch_execute("CHECKPOINT").await.unwrap();
    server.restart().await;
    let c = server.connect().await;
    assert_view(&c, "back", PER_GROUP).await;
    assert_view(&c, "again", PER_GROUP).await;
}

/// `weir savepoint ...` against the server: its JSON and exit status.
fn cli(port: u16, args: &[&str]) -> (i32, serde_json::Value) {
    let out = std::process::Command::new(weir_sql_tests::process::weir_binary())
        .arg("savepoint")
        .args(args)
        .args(["--port", &port.to_string(), "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"));
    (out.status.code().unwrap_or(-1), doc)
}

/// `scripts/deploy-view.sh` against the server; its exit status and stderr.
fn deploy(port: u16, view: &str, query: &str, check: &str) -> (i32, String) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), query).unwrap();
    let script = weir_sql_tests::clients::manifest_dir().join("../scripts/deploy-view.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args([view, file.path().to_str().unwrap(), check])
        .env("WEIR_PORT", port.to_string())
        .env("WEIR", weir_sql_tests::process::weir_binary())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The savepoint CLI speaks to a running server (JSON out, non-zero exit status on
/// failure), and the scripted deploy built on it replaces a view from a savepoint and
/// rolls back to the query before when the new one is refused or its check fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_automates_a_deploy_that_rolls_back_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(TABLE).await.unwrap();
    c.batch_execute(&format!("CREATE MATERIALIZED VIEW v AS {PER_GROUP}"))
        .await
        .unwrap();
    insert_range(&c, 1, 1000).await;
    let port = server.port;

    let (status, doc) = cli(port, &["create", "nightly", "--view", "v"]);
    assert_eq!(status, 0, "{doc}");
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["rows"][0]["name"], "nightly", "{doc}");
    assert_eq!(doc["rows"][0]["views"], "v", "{doc}");
    let (status, doc) = cli(port, &["list"]);
    assert_eq!(
        (status, doc["rows"].as_array().unwrap().len()),
        (0, 1),
        "{doc}"
    );
    insert_range(&c, 1001, 1100).await;
    let (status, doc) = cli(port, &["restore", "nightly", "--view", "v"]);
    assert_eq!(status, 0, "{doc}");
    assert_eq!(doc["rows"][0]["replayed_rows"], "100", "{doc}");
    let notices = doc["notices"].as_array().unwrap();
    assert!(
        notices.iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("restored from savepoint \"nightly\"")),
        "{doc}"
    );
    assert_view(&c, "v", PER_GROUP).await;
    // Failures: the server's SQLSTATE, exit status 1; no server, exit status 2.
    let (status, doc) = cli(port, &["drop", "nope"]);
    assert_eq!((status, doc["ok"].clone()), (1, false.into()), "{doc}");
    assert_eq!(doc["sqlstate"], "3B001", "{doc}");
    let (status, doc) = cli(port, &["create", "nightly"]);
    assert_eq!(
        (status, doc["sqlstate"].clone()),
        (1, "42710".into()),
        "{doc}"
    );
    let closed = weir_sql_tests::process::free_port();
    let (status, doc) = cli(closed, &["list"]);
    assert_eq!((status, doc["ok"].clone()), (2, false.into()), "{doc}");
    let (status, _) = cli(port, &["drop", "nightly"]);
    assert_eq!(status, 0);

    // A deploy that passes its check: the new query runs on the saved state.
    let doubled = "SELECT g, count(*) AS n, sum(v) * 2 AS s2 FROM t GROUP BY g";
    let (status, log) = deploy(
        port,
        "v",
        doubled,
        "SELECT count(*) = 11 FROM v WHERE s2 % 2 = 0",
    );
    assert_eq!(status, 0, "{log}");
    assert_view(&c, "v", doubled).await;
    // The new query is refused (its state would not be claimed): rolled back.
    let (status, log) = deploy(port, "v", "SELECT g, max(v) AS top FROM t GROUP BY g", "");
    assert_eq!(status, 1, "{log}");
    assert!(log.contains("the new query was refused"), "{log}");
    assert!(log.contains("rolled back"), "{log}");
    assert_view(&c, "v", doubled).await;
    // The new query deploys but its check fails (a forced failure): rolled back to
    // the query before, with its state from the savepoint.
    let tripled = "SELECT g, count(*) AS n, sum(v) * 3 AS s3 FROM t GROUP BY g";
    let (status, log) = deploy(port, "v", tripled, "SELECT false");
    assert_eq!(status, 1, "{log}");
    assert!(log.contains("the check failed"), "{log}");
    assert!(log.contains("rolled back"), "{log}");
    insert_range(&c, 1101, 1200).await;
    assert_view(&c, "v", doubled).await;
}
