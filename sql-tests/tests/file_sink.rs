//! The file sink, exactly once across `kill -9`: a table and a view over it write JSON
//! lines files (the table's rows as FORMAT PLAIN, the view's changes as FORMAT
//! DEBEZIUM) to a local folder, and to the S3 endpoint (moto, started by
//! `scripts/test.sh`), while the server is killed (20 times by default, `WEIR_SINK_KILLS`)
//! after batches of writes, each time with acknowledged rows not yet committed. The
//! committed files (the folder's top level) must hold every row exactly once and
//! replay to exactly the view's rows, numbered without a gap, with no pending file left.

use rand::Rng;
use std::time::Duration;
use weir_sql_tests::process::{kill_rng, kills_from_env};
use weir_sql_tests::query::wait_until;
use weir_sql_tests::sinks::{per_g_oracle, per_g_rows, replay_debezium};
use weir_sql_tests::WeirProcess;
use weir_storage::object_storage::{ObjectStorage, S3Settings};

/// Rows in the committed parts under `storage`. Parts never change once committed,
/// so `seen` keeps each part's row count and only new parts are read: the check must
/// stay well under the 300 ms checkpoint interval however many parts there are, or the
/// sink always catches up before it (and the kill would land with nothing in flight).
async fn committed_rows(
    storage: &ObjectStorage,
    seen: &mut std::collections::HashMap<String, usize>,
) -> usize {
    for (k, _) in storage.list("").await.expect("list sink folder") {
        if k.starts_with("_pending/") || seen.contains_key(&k) {
            continue;
        }
        let bytes = storage.get(&k).await.unwrap().expect("listed part exists");
        seen.insert(k, bytes.iter().filter(|b| **b == b'\n').count());
    }
    seen.values().sum()
}

/// The committed part files under `storage`, in name (= commit) order, and how many
/// pending files remain.
async fn parts(storage: &ObjectStorage) -> (Vec<(u64, Vec<String>)>, usize) {
    let mut keys = storage.list("").await.expect("list sink folder");
    keys.sort();
    let mut out = Vec::new();
    let mut pending = 0;
    for (k, _) in keys {
        if k.starts_with("_pending/") {
            pending += 1;
            continue;
        }
        let n: u64 = k
            .strip_prefix("part-")
            .and_then(|r| r.strip_suffix(".jsonl"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected file {k} in the sink folder"));
        let bytes = storage.get(&k).await.unwrap().expect("listed part exists");
        let lines = String::from_utf8(bytes.to_vec())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        out.push((n, lines));
    }
    (out, pending)
}

async fn file_sink_exactly_once_across_kill_9(
    config: &str,
    base: &str,
    s3: &S3Settings,
    kills: u64,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, g bigint, v bigint);
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g;
         CREATE SINK rows_out FROM events WITH (connector = 'file', path = '{base}/rows')
           FORMAT PLAIN ENCODE JSON;
         CREATE SINK changes_out FROM per_g WITH (connector = 'file', path = '{base}/changes')
           FORMAT DEBEZIUM ENCODE JSON;"
    ))
    .await
    .unwrap();
    let kills = kills_from_env("WEIR_SINK_KILLS", kills);
    let per_round = 300i64;
    let insert = |from: i64| {
        format!(
            "INSERT INTO events SELECT value, value % 7, value * 10 FROM generate_series({from}, {})",
            from + per_round - 1
        )
    };
    // Each round's INSERT is acknowledged (durable in the table's log); the kill then
    // lands, at a random moment, while acknowledged rows are not yet in a committed
    // part (asserted: if the sink caught up, another INSERT goes first).
    let rows = ObjectStorage::open(&format!("{base}/rows"), s3).unwrap();
    let changes = ObjectStorage::open(&format!("{base}/changes"), s3).unwrap();
    let mut rng = kill_rng();
    let mut inserted = 0i64;
    let mut in_flight = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for k in 0..kills {
        let c = server.connect().await;
        c.batch_execute(&insert(inserted)).await.unwrap();
        inserted += per_round;
        // Within one checkpoint interval of the acknowledgement, at a random moment.
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..250))).await;
        loop {
            let committed = committed_rows(&rows, &mut seen).await;
            if (committed as i64) < inserted {
                in_flight.push(inserted - committed as i64);
                break;
            }
            assert!(
                inserted < (k as i64 + 10) * per_round,
                "kill {k}: the sink keeps committing everything at once"
            );
            c.batch_execute(&insert(inserted)).await.unwrap();
            inserted += per_round;
        }
        server.restart().await;
    }
    let c = server.connect().await;
    c.batch_execute(&insert(inserted)).await.unwrap();
    let total = inserted + per_round;
    wait_until(&c, "SELECT count(*) FROM events", 30, |r| {
        r[0][0] == total.to_string()
    })
    .await;

    let oracle = per_g_oracle(total);
    let mut last = (vec![], 0, vec![], 0);
    for _ in 0..150 {
        let (r, rp) = parts(&rows).await;
        let (ch, cp) = parts(&changes).await;
        let n: usize = r.iter().map(|(_, l)| l.len()).sum();
        // Pending files are renamed when their checkpoint completes, which can be
        // just after the last rows show up: wait for that too (asserted below).
        let done = n >= total as usize
            && (rp, cp) == (0, 0)
            && replay_debezium(ch.iter().flat_map(|(_, l)| l.clone())) == oracle;
        last = (r, rp, ch, cp);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (r, rp, ch, cp) = last;
    for (what, files) in [("rows", &r), ("changes", &ch)] {
        let numbers: Vec<u64> = files.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            numbers,
            (0..numbers.len() as u64).collect::<Vec<_>>(),
            "{what}: a gap in the committed parts"
        );
    }
    let mut ids: Vec<i64> = r
        .iter()
        .flat_map(|(_, l)| l.iter())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..total).collect::<Vec<_>>(), "a duplicate or a gap");
    assert_eq!(
        replay_debezium(ch.iter().flat_map(|(_, l)| l.clone())),
        oracle
    );
    assert_eq!(
        per_g_rows(&c).await,
        oracle,
        "the view differs from the oracle"
    );
    assert_eq!((rp, cp), (0, 0), "pending files left after every commit");
    eprintln!(
        "file sink: {kills} kills, {total} rows; acknowledged but uncommitted at each kill: {in_flight:?}; {} + {} committed parts",
        r.len(),
        ch.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_writes_each_change_once_across_kill_9() {
    let out = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\n";
    let base = out.path().display().to_string();
    file_sink_exactly_once_across_kill_9(config, &base, &S3Settings::default(), 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_on_s3_with_checkpoints_on_s3() {
    let bucket = format!("weir-files-{}", std::process::id());
    let config = weir_sql_tests::s3::checkpoint_config(&bucket, "chk", "300ms").await;
    let s3 = S3Settings {
        endpoint: Some(weir_sql_tests::s3::endpoint()),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: true,
        ..Default::default()
    };
    file_sink_exactly_once_across_kill_9(&config, &format!("s3://{bucket}/out"), &s3, 20).await;
}
