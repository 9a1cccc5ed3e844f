//! Exactly-once end to end: a Kafka topic → a Kafka-fed table → a view → two
//! exactly-once Kafka sinks (the table's rows as FORMAT PLAIN, the view's changes as
//! FORMAT DEBEZIUM), while the server is killed with `kill -9` at varying moments
//! during ingestion (`WEIR_KAFKA_KILLS`, default 5). The sink topics, read with
//! `read_committed`, must hold every change exactly once: each input id once, and the
//! change events replaying to exactly the view's rows.
//!
//! The broker here (tansu) still shows records of *aborted* transactions to
//! `read_committed` readers (a known gap of it; Kafka hides them). A crash in the
//! middle of a commit leaves such an aborted attempt, which recovery writes again.
//! So the test reads batches by their `weir.batch` header and requires every attempt
//! of a batch to be identical, then checks the batches, each taken once, against the
//! oracle: what a Kafka `read_committed` reader sees. It prints how many repeated
//! attempts it saw.

use rand::Rng;
use rdkafka::message::{Headers, Message};
use std::collections::BTreeMap;
use std::time::Duration;
use weir_sql_tests::kafka::{
    broker, create_topic, json, produce, produce_paced, producer, read_messages,
};
use weir_sql_tests::process::{kill_rng, kills_from_env};
use weir_sql_tests::query::{value, wait_until};
use weir_sql_tests::sinks::{per_g_oracle, per_g_rows, replay_debezium};
use weir_sql_tests::WeirProcess;

/// The committed batches of a sink topic: batch number → its records' payloads.
struct Batches {
    batches: BTreeMap<u64, Vec<String>>,
    /// Attempts beyond the first of some batch (aborted transactions tansu shows).
    repeated_attempts: usize,
}

fn header(m: &rdkafka::message::OwnedMessage, key: &str) -> String {
    let h = m.headers().expect("sink records carry headers");
    (0..h.count())
        .map(|i| h.get(i))
        .find(|h| h.key == key)
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_else(|| panic!("no {key} header"))
}

fn read_batches(topic: &str) -> Batches {
    // batch → attempt → payloads, attempts in the order they appear.
    let mut attempts: BTreeMap<u64, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for m in read_messages(topic) {
        let batch: u64 = header(&m, "weir.batch").parse().expect("batch number");
        let txn = header(&m, "weir.txn");
        let payload = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let list = attempts.entry(batch).or_default();
        match list.iter_mut().find(|(t, _)| *t == txn) {
            Some((_, p)) => p.push(payload),
            None => list.push((txn, vec![payload])),
        }
    }
    let mut repeated_attempts = 0;
    let batches = attempts
        .into_iter()
        .map(|(batch, list)| {
            let first = list[0].1.clone();
            for (txn, p) in &list[1..] {
                assert_eq!(
                    p, &first,
                    "batch {batch} of {topic}: attempt {txn} differs from the first"
                );
            }
            repeated_attempts += list.len() - 1;
            (batch, first)
        })
        .collect();
    Batches {
        batches,
        repeated_attempts,
    }
}

/// The ids of the PLAIN sink, once the sink caught up with `total` records.
async fn wait_for_rows(topic: &str, total: usize) -> Batches {
    for _ in 0..300 {
        let b = read_batches(topic);
        if b.batches.values().map(Vec::len).sum::<usize>() >= total {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the sink {topic} did not catch up with {total} records");
}

async fn exactly_once_across_kill_9(name: &str, config: &str, kills: u64) {
    let pid = std::process::id();
    let input = format!("{name}-in-{pid}");
    let rows_topic = format!("{name}-rows-{pid}");
    let changes_topic = format!("{name}-changes-{pid}");
    create_topic(&input, 3).await;
    create_topic(&rows_topic, 1).await;
    create_topic(&changes_topic, 1).await;
    let p = producer();
    let first: Vec<(i32, Vec<u8>)> = (0..2000).map(|i| ((i % 3) as i32, json(i))).collect();
    produce(&p, &input, &first);
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE events (id bigint, g bigint, v bigint) WITH (
           connector = 'kafka', topic = '{input}', properties.bootstrap.server = '{b}'
         ) FORMAT PLAIN ENCODE JSON;
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g;
         CREATE SINK rows_out FROM events WITH (connector = 'kafka', topic = '{rows_topic}',
           properties.bootstrap.server = '{b}', sink.delivery-guarantee = 'exactly-once')
           FORMAT PLAIN ENCODE JSON;
         CREATE SINK changes_out FROM per_g WITH (connector = 'kafka', topic = '{changes_topic}',
           properties.bootstrap.server = '{b}', sink.delivery-guarantee = 'exactly-once')
           FORMAT DEBEZIUM ENCODE JSON;",
        b = broker()
    ))
    .await
    .unwrap();

    let kills = kills_from_env("WEIR_KAFKA_KILLS", kills);
    let total = 8000i64;
    // Production is paced to last through the kills; kill moments are random.
    let writer = produce_paced(
        &input,
        2000..total,
        Duration::from_millis(25 * (kills / 5).max(1)),
    );
    let mut rng = kill_rng();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1100))).await;
        server.restart().await;
    }
    writer.join().unwrap();
    let c = server.connect().await;
    wait_until(&c, "SELECT count(*) FROM events", 60, |r| {
        r[0][0] == total.to_string()
    })
    .await;

    // The table's rows: every id exactly once, in batches numbered without a gap.
    let rows = wait_for_rows(&rows_topic, total as usize).await;
    let numbers: Vec<u64> = rows.batches.keys().copied().collect();
    assert_eq!(
        numbers,
        (0..numbers.len() as u64).collect::<Vec<_>>(),
        "a gap in the batches"
    );
    let mut ids: Vec<i64> = rows
        .batches
        .values()
        .flatten()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(r).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids.len(), total as usize, "a duplicate or a gap");
    assert_eq!(ids, (0..total).collect::<Vec<_>>(), "a duplicate or a gap");

    // The view's changes replay to exactly its rows (and the oracle's).
    let oracle = per_g_oracle(total);
    let mut changes = read_batches(&changes_topic);
    for _ in 0..150 {
        if replay_debezium(changes.batches.values().flatten().cloned()) == oracle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        changes = read_batches(&changes_topic);
    }
    let numbers: Vec<u64> = changes.batches.keys().copied().collect();
    assert_eq!(numbers, (0..numbers.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        replay_debezium(changes.batches.values().flatten().cloned()),
        oracle
    );
    let view = per_g_rows(&c).await;
    assert_eq!(view, oracle, "the view differs from the oracle");
    eprintln!(
        "{name}: {kills} kills; {} + {} batches; repeated (aborted) attempts seen: {} + {}",
        rows.batches.len(),
        changes.batches.len(),
        rows.repeated_attempts,
        changes.repeated_attempts
    );
    if std::env::var("WEIR_TEST_VERBOSE").is_ok() {
        let log = std::fs::read_to_string(dir.path().join("data.log")).unwrap_or_default();
        for l in log.lines().filter(|l| l.contains("kafka sink")) {
            eprintln!("{l}");
        }
    }
    assert_eq!(
        value(&c, "SELECT count(*) FROM per_g").await,
        "7",
        "the view lost a group"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_to_view_to_sink_exactly_once_across_kill_9() {
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\n";
    exactly_once_across_kill_9("eos", config, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_checkpoints_on_s3() {
    let bucket = format!("weir-eos-{}", std::process::id());
    let config = weir_sql_tests::s3::checkpoint_config(&bucket, "eos", "300ms").await;
    exactly_once_across_kill_9("eos-s3", &config, 5).await;
}
