//! Exactly-once end to end: a Kafka topic → a Kafka-fed table → a view → two
//! exactly-once Kafka sinks (the table's rows as FORMAT PLAIN, the view's changes as
//! FORMAT DEBEZIUM), while the server is killed with `kill -9` at random moments during
//! ingestion (`WEIR_KAFKA_KILLS`, default 20), each kill with records in flight. The
//! sinks' committed output must hold every change exactly once: each input id once, and
//! the change events replaying to exactly the view's rows.
//!
//! The sinks' output is read through their commit chain (see
//! `weir_sql_tests::kafka_sink`): the broker here shows aborted transactions.

use weir_sql_tests::kafka::{broker, create_topic, ingest_across_kills, json, produce, producer};
use weir_sql_tests::kafka_sink::wait_committed;
use weir_sql_tests::process::kills_from_env;
use weir_sql_tests::query::value;
use weir_sql_tests::sinks::{per_g_oracle, per_g_rows, replay_debezium};
use weir_sql_tests::WeirProcess;

async fn exactly_once_across_kill_9(name: &str, config: &str, kills: u64) {
    let pid = std::process::id();
    let input = format!("{name}-in-{pid}");
    let rows_topic = format!("{name}-rows-{pid}");
    let changes_topic = format!("{name}-changes-{pid}");
    // Unique per run: two tests (or databases) on one broker must not fence each other.
    let prefix = format!("{name}-{pid}");
    create_topic(&input, 3).await;
    create_topic(&rows_topic, 1).await;
    create_topic(&changes_topic, 1).await;
    let p = producer();
    let first: Vec<(i32, Vec<u8>)> = (0..2000).map(|i| ((i % 3) as i32, json(i))).collect();
    produce(&p, &input, &first);
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let pipeline = weir_sql_tests::sinks::events_pipeline_sql(&input, &rows_topic, &prefix);
    c.batch_execute(&format!(
        "{pipeline}
         CREATE SINK changes_out FROM per_g WITH (connector = 'kafka', topic = '{changes_topic}',
           properties.bootstrap.server = '{b}', sink.delivery-guarantee = 'exactly-once',
           sink.transactional-id-prefix = '{prefix}')
           FORMAT DEBEZIUM ENCODE JSON;",
        b = broker()
    ))
    .await
    .unwrap();
    let rows_group = format!("{prefix}-sink-rows_out.sink");
    let changes_group = format!("{prefix}-sink-changes_out.sink");

    let kills = kills_from_env("WEIR_KAFKA_KILLS", kills);
    let (total, in_flight) = ingest_across_kills(&mut server, &input, 2000, kills).await;
    let c = server.connect().await;

    // The table's rows: every id exactly once.
    let rows = wait_committed(&rows_topic, &rows_group, |c| {
        c.records().count() >= total as usize
    })
    .await;
    let mut ids: Vec<i64> = rows
        .records()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids.len(), total as usize, "a duplicate or a gap");
    assert_eq!(ids, (0..total).collect::<Vec<_>>(), "a duplicate or a gap");

    // The view's changes replay to exactly its rows (and the oracle's).
    let oracle = per_g_oracle(total);
    let changes = wait_committed(&changes_topic, &changes_group, |c| {
        replay_debezium(c.records()) == oracle
    })
    .await;
    assert_eq!(replay_debezium(changes.records()), oracle);
    let view = per_g_rows(&c).await;
    assert_eq!(view, oracle, "the view differs from the oracle");
    eprintln!(
        "{name}: {kills} kills, {total} records, in flight at each kill: {in_flight:?}; \
         committed batches {} + {}; aborted attempts seen {} + {}",
        rows.batches.len(),
        changes.batches.len(),
        rows.aborted_attempts,
        changes.aborted_attempts
    );
    assert_eq!(
        value(&c, "SELECT count(*) FROM per_g").await,
        "7",
        "the view lost a group"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_to_view_to_sink_exactly_once_across_kill_9() {
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\n";
    exactly_once_across_kill_9("eos", config, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_checkpoints_on_s3() {
    let bucket = format!("weir-eos-{}", std::process::id());
    let config = weir_sql_tests::s3::checkpoint_config(&bucket, "eos", "300ms").await;
    exactly_once_across_kill_9("eos-s3", &config, 20).await;
}
