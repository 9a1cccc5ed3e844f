//! Upgrading Weir (docs/savepoints.md, "Upgrading Weir"): the current binary starts on
//! data directories that older builds left behind (`sql-tests/fixtures/upgrade/<rev>/`,
//! made by `scripts/make-upgrade-fixture.sh <rev>` from `workload.sql`): their catalog,
//! table logs, checkpoints and savepoint `before_upgrade`, in whatever format version
//! that build wrote. Every view equals its query after recovery (a view whose plan now
//! derives other uids is rebuilt from its tables, not restored with operators that
//! start empty), again after restoring each view from `before_upgrade` (refused, and
//! unchanged, for a view whose state no longer fits), after more writes and after a
//! crash.

use std::path::{Path, PathBuf};
use tokio_postgres::Client;
use weir_sql_tests::query::{error_code, rows, sorted};
use weir_sql_tests::WeirProcess;

/// Each view of `workload.sql` and its query.
const VIEWS: &[(&str, &str)] = &[
    (
        "per_group",
        "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM t GROUP BY g",
    ),
    (
        "distinct_v",
        "SELECT g % 3 AS h, count(DISTINCT v % 100) AS dv FROM t GROUP BY g % 3",
    ),
    (
        "averaged",
        "SELECT g, avg(v) AS a FROM t GROUP BY g HAVING count(*) > 400",
    ),
    ("big", "SELECT id, v FROM t WHERE v > 9000"),
    ("names", "SELECT name, count(*) AS n FROM u GROUP BY name"),
];

fn fixtures() -> Vec<PathBuf> {
    let dir = weir_sql_tests::clients::manifest_dir().join("fixtures/upgrade");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("data").is_dir())
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no fixtures in {}", dir.display());
    found
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

async fn assert_views(c: &Client, fixture: &str, when: &str) {
    for (view, query) in VIEWS {
        let got = sorted(c, &format!("SELECT * FROM {view}")).await;
        assert!(!got.is_empty(), "{fixture} {when}: {view} is empty");
        assert_eq!(got, sorted(c, query).await, "{fixture} {when}: {view}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_by_older_builds_recovers_and_restores() {
    for fixture in fixtures() {
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        let revision = std::fs::read_to_string(fixture.join("REVISION")).unwrap_or_default();
        eprintln!("fixture {name}:\n{revision}");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        copy_dir(&fixture.join("data"), &data);
        let mut server = WeirProcess::start(&data, 2).await;
        let c = server.connect().await;
        // The rows as the old build left them: 5500 ids, every 7th of the first 5000
        // deleted.
        let count = rows(&c, "SELECT count(*) FROM t").await;
        assert_eq!(count[0][0], (5500 - 5000 / 7).to_string(), "{name}");
        assert_views(&c, &name, "after recovery").await;
        let saved = rows(
            &c,
            "SELECT format_version FROM weir_catalog.savepoints WHERE name = 'before_upgrade'",
        )
        .await;
        assert_eq!(saved.len(), 1, "{name}: the old savepoint is listed");
        eprintln!("{name}: savepoint format version {}", saved[0][0]);
        // Views whose plan derives the same uids restore; one whose uids changed is
        // refused as unclaimed and stays as recovery rebuilt it from its tables. Since
        // 46ed15a, avg(bigint) is numeric, not double (another state), and a view's
        // stored rows carry the plan's fingerprint in their uid.
        let plan = rows(&c, "EXPLAIN RESTORE ALL FROM SAVEPOINT before_upgrade").await;
        let changed: Vec<&str> = VIEWS
            .iter()
            .map(|(v, _)| *v)
            .filter(|v| {
                plan.iter()
                    .any(|r| r[0] == *v && r[2].contains("unclaimed"))
            })
            .collect();
        let expected: &[&str] = if name == "46ed15a" {
            &["averaged", "big"]
        } else {
            &[]
        };
        assert_eq!(changed, expected, "{name}: {plan:?}");
        for (view, _) in VIEWS {
            let restore = format!("RESTORE MATERIALIZED VIEW {view} FROM SAVEPOINT before_upgrade");
            if changed.contains(view) {
                assert_eq!(error_code(&c, &restore).await, "22023", "{name}: {view}");
            } else {
                c.batch_execute(&restore)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {restore}: {e:?}"));
            }
        }
        assert_views(&c, &name, "after RESTORE").await;
        c.batch_execute(
            "INSERT INTO t SELECT value, value % 11, value * 3 FROM generate_series(5501, 6000); \
             DELETE FROM t WHERE id % 13 = 0; INSERT INTO u VALUES (3, 'name 3'), (11, 'name 0')",
        )
        .await
        .unwrap();
        assert_views(&c, &name, "after more writes").await;
        // And once more across a crash of the current binary.
        c.batch_execute("CHECKPOINT").await.unwrap();
        server.restart().await;
        let c = server.connect().await;
        assert_views(&c, &name, "after a restart").await;
    }
}

/// A data directory whose table logs are gone (lost, or never copied: the fixtures'
/// logs were once left out of git by `*.log`). Tables and views recover from their
/// checkpoints; a RESTORE that would replay the lost entries after the savepoint is
/// refused (55000: the log starts after the savepoint's position) instead of
/// answering with the savepoint's stale state, and leaves
/// the view as it was; later writes continue the log after the checkpoints' positions,
/// so they count after a crash too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_table_log_refuses_restore_and_keeps_later_writes() {
    let fixture = fixtures().pop().unwrap();
    let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture.join("data"), &data);
    std::fs::remove_dir_all(data.join("tables")).unwrap();
    let mut server = WeirProcess::start(&data, 2).await;
    let c = server.connect().await;
    assert_views(&c, &name, "after recovery without logs").await;
    let restore = "RESTORE MATERIALIZED VIEW per_group FROM SAVEPOINT before_upgrade";
    assert_eq!(error_code(&c, restore).await, "55000", "{name}");
    assert_views(&c, &name, "after the refused RESTORE").await;
    c.batch_execute(
        "INSERT INTO t SELECT value, value % 11, value * 3 FROM generate_series(5501, 6000); \
         DELETE FROM t WHERE id % 13 = 0; CHECKPOINT",
    )
    .await
    .unwrap();
    assert_views(&c, &name, "after more writes").await;
    c.batch_execute("INSERT INTO t VALUES (7001, 1, 1), (7002, 2, 2)")
        .await
        .unwrap();
    server.restart().await;
    let c = server.connect().await;
    let count = rows(&c, "SELECT count(*) FROM t WHERE id > 7000").await;
    assert_eq!(
        count[0][0], "2",
        "{name}: writes after the checkpoint survive"
    );
    assert_views(&c, &name, "after a restart").await;
}
