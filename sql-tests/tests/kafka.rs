//! Kafka-fed tables against a real Kafka-protocol broker (tansu, started by
//! `scripts/test.sh`, which exports `WEIR_TEST_KAFKA_BROKER`): JSON and CSV records
//! over several partitions into a table and a view, bad records per policy, startup
//! modes, and exactly-once ingestion across `kill -9` (no duplicate, no gap).

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::Duration;
use tokio_postgres::Client;
use weir_sql_tests::kafka::{
    broker, create_topic, ingest_across_kills, json, produce, producer, read_messages, read_topic,
};
use weir_sql_tests::process::kills_from_env;
use weir_sql_tests::query::{error_code, rows, value};
use weir_sql_tests::WeirProcess;

/// Waits until `sql` returns `want` (ingestion is asynchronous).
async fn wait_for(c: &Client, sql: &str, want: &str) {
    let mut last = String::new();
    for _ in 0..300 {
        last = value(c, sql).await;
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{sql}: waited for {want}, last saw {last}");
}

async fn assert_view_equals_query(c: &Client) {
    let mut got = rows(c, "SELECT g, n, s FROM per_g").await;
    let mut want = rows(c, "SELECT g, count(*), sum(v) FROM events GROUP BY g").await;
    got.sort();
    want.sort();
    assert_eq!(got, want, "per_g differs from its query");
}

fn table_sql(topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE events (id bigint, g bigint, v bigint) WITH (
           connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}'{extra}
         ) FORMAT PLAIN ENCODE JSON",
        broker()
    )
}

/// Records of a 3-partition topic, read by two readers, into a table and a view, bad records skipped, then
/// `kills` × kill -9 while more records arrive: exactly every record once. `config`
/// says where checkpoints go.
async fn ingest_exactly_once_across_kill_9(name: &str, config: &str, kills: u64) {
    let topic = format!("{name}-{}", std::process::id());
    create_topic(&topic, 3).await;
    let p = producer();
    let first: Vec<(i32, Vec<u8>)> = (0..3000).map(|i| ((i % 3) as i32, json(i))).collect();
    produce(&p, &topic, &first);
    // Bad records, one per kind, skipped and listed (the default policy).
    produce(
        &p,
        &topic,
        &[
            (0, b"{\"id\": 1, \"g\": ".to_vec()),
            (1, br#"{"id": "seven", "g": 1, "v": 2}"#.to_vec()),
            (
                2,
                format!(
                    r#"{{"id": 9, "g": 1, "v": 2, "pad": "{}"}}"#,
                    "x".repeat(500)
                )
                .into_bytes(),
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    // Two readers share the three partitions (0 and 2, and 1).
    c.batch_execute(&table_sql(
        &topic,
        ", max.record.bytes = '300', scan.parallelism = '2'",
    ))
    .await
    .unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g",
    )
    .await
    .unwrap();
    wait_for(&c, "SELECT count(*) FROM events", "3000").await;
    assert_view_equals_query(&c).await;
    let errors = rows(&c, "SHOW SOURCE ERRORS").await;
    assert_eq!(errors.len(), 3, "{errors:?}");
    let parts: Vec<&str> = errors.iter().map(|r| r[1].as_str()).collect();
    assert!(parts.contains(&"0") && parts.contains(&"1") && parts.contains(&"2"));
    assert!(errors.iter().all(|r| r[2] == "1000"), "offsets: {errors:?}");
    assert!(
        errors.iter().any(|r| r[3].contains("max.record.bytes")),
        "{errors:?}"
    );
    assert!(server
        .metrics()
        .await
        .contains("weir_sourceBadRecords{job_name=\"events\"} 3"));
    // weir_catalog.sources: each partition read to its end (1000 records and the bad
    // one) with its bad record counted; where the broker told the end, nothing is left.
    wait_for(
        &c,
        "SELECT string_agg(concat_ws(':', partition, position, bad_records, coalesce(lag, 0)), \
         ' ' ORDER BY partition) FROM weir_catalog.sources WHERE table_name = 'events'",
        "0:1001:1:0 1:1001:1:0 2:1001:1:0",
    )
    .await;
    wait_for(
        &c,
        "SELECT count(*) > 0 FROM weir_catalog.sources \
         WHERE table_name = 'events' AND high_watermark = 1001 AND lag = 0",
        "t",
    )
    .await;
    assert!(server
        .metrics()
        .await
        .lines()
        .any(|l| l.starts_with("weir_pendingRecords{job_name=\"events\"") && l.ends_with(" 0")));

    // Records keep coming while the server is killed again and again, each kill while
    // produced records are still on their way into the table.
    let kills = kills_from_env("WEIR_KAFKA_KILLS", kills);
    let (total, in_flight) = ingest_across_kills(&mut server, &topic, 3000, kills).await;
    eprintln!("{name}: {kills} kills, {total} records; in flight at each kill: {in_flight:?}");
    let c = server.connect().await;
    assert_eq!(
        value(&c, "SELECT count(DISTINCT id) FROM events").await,
        total.to_string(),
        "a duplicate or a gap"
    );
    assert_eq!(
        value(&c, "SELECT min(id) || '-' || max(id) FROM events").await,
        format!("0-{}", total - 1)
    );
    assert_view_equals_query(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_reach_the_table_and_view_exactly_once_across_kill_9() {
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\n";
    ingest_exactly_once_across_kill_9("events", config, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_checkpoints_on_s3() {
    let bucket = format!("weir-kafka-{}", std::process::id());
    let config = weir_sql_tests::s3::checkpoint_config(&bucket, "kafka", "300ms").await;
    ingest_exactly_once_across_kill_9("events-s3", &config, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_fail_policy_csv_latest_and_option_errors() {
    let topic = format!("strict-{}", std::process::id());
    create_topic(&topic, 1).await;
    let p = producer();
    produce(
        &p,
        &topic,
        &[
            (0, b"1,1,10".to_vec()),
            (0, b"2,x,20".to_vec()),
            (0, b"3,1,30".to_vec()),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    let c = server.connect().await;
    // fail: the records before the bad one are in, ingestion stops at it.
    c.batch_execute(
        &table_sql(&topic, ", bad_records = 'fail'").replace("ENCODE JSON", "ENCODE CSV"),
    )
    .await
    .unwrap();
    let mut errors = Vec::new();
    for _ in 0..100 {
        errors = rows(&c, "SHOW SOURCE ERRORS").await;
        if !errors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0][1].as_str(), errors[0][2].as_str()), ("0", "1"));
    assert!(errors[0][3].contains("ingestion stopped"), "{errors:?}");
    // The table's connector job shows FAILED, with where it stopped.
    let jobs = weir_sql_tests::query::wait_until(&c, "SHOW JOBS", 10, |r| {
        r.iter().any(|row| row[0] == "events" && row[1] == "FAILED")
    })
    .await;
    let job = jobs.iter().find(|r| r[0] == "events").expect("events job");
    assert_eq!(job[1], "FAILED", "{jobs:?}");
    assert!(job[4].contains("partition 0 offset 1"), "{jobs:?}");
    wait_for(&c, "SELECT count(*) FROM events", "1").await;

    // latest: records produced after the table exists. tansu answers a "latest"
    // look-up with the start of the partition's last batch (a known gap of this broker;
    // Kafka answers its end), so the last batch before the table may be read too: the
    // records are sent as two batches and only the earlier one is checked absent.
    let late = format!("late-{}", std::process::id());
    create_topic(&late, 1).await;
    produce(&p, &late, &[(0, json(1))]);
    produce(&p, &late, &[(0, json(2))]);
    c.batch_execute(
        &table_sql(&late, ", scan.startup.mode = 'latest'").replace("TABLE events", "TABLE late"),
    )
    .await
    .unwrap();
    // Once its reader has resolved where "latest" is (it logs that it reads), every
    // record produced after is read.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !server
        .log()
        .lines()
        .any(|l| l.contains("kafka source reading") && l.contains("table=late"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader of late never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    produce(&p, &late, &[(0, json(3))]);
    wait_for(&c, "SELECT count(*) FROM late WHERE id = 3", "1").await;
    assert_eq!(
        value(&c, "SELECT count(*) FROM late WHERE id = 1").await,
        "0"
    );

    // dead-letter: the bad record goes to its own topic, the good ones to the table.
    let src = format!("dl-src-{}", std::process::id());
    let dlq = format!("dl-{}", std::process::id());
    create_topic(&src, 1).await;
    create_topic(&dlq, 1).await;
    produce(
        &p,
        &src,
        &[(0, json(1)), (0, b"not json".to_vec()), (0, json(3))],
    );
    c.batch_execute(
        &table_sql(
            &src,
            &format!(", bad_records = 'dead-letter', dead-letter.topic = '{dlq}'"),
        )
        .replace("TABLE events", "TABLE dl"),
    )
    .await
    .unwrap();
    wait_for(&c, "SELECT count(*) FROM dl", "2").await;
    let dead = read_messages(&dlq);
    assert_eq!(dead.len(), 1, "one dead-letter record");
    let m = &dead[0];
    use rdkafka::message::{Headers, Message};
    assert_eq!(m.key(), Some(format!("{src}/0/1").as_bytes()));
    assert_eq!(m.payload(), Some(&b"not json"[..]));
    let reason = m
        .headers()
        .and_then(|h| h.iter().find(|h| h.key == "weir.reason"));
    assert!(reason.is_some_and(|h| h.value.is_some()), "reason header");

    // Message metadata as columns (RisingWave's INCLUDE).
    let keyed = format!("keyed-{}", std::process::id());
    create_topic(&keyed, 2).await;
    for (i, part) in [(10i64, 1), (11, 0), (12, 1)] {
        let payload = json(i);
        let key = format!("k{i}");
        p.send(
            BaseRecord::to(&keyed)
                .partition(part)
                .key(key.as_bytes())
                .payload(&payload),
        )
        .expect("send");
    }
    p.flush(Duration::from_secs(30)).expect("flush");
    c.batch_execute(&format!(
        "CREATE SOURCE meta (id bigint, g bigint, v bigint)
           INCLUDE partition INCLUDE offset AS off INCLUDE timestamp AS ts INCLUDE key AS k
           WITH (connector = 'kafka', topic = '{keyed}', properties.bootstrap.server = '{}')
           FORMAT PLAIN ENCODE JSON",
        broker()
    ))
    .await
    .unwrap();
    wait_for(&c, "SELECT count(*) FROM meta", "3").await;
    assert_eq!(
        rows(
            &c,
            "SELECT id, _kafka_partition, off, encode(k, 'hex'), ts IS NOT NULL FROM meta ORDER BY id"
        )
        .await,
        vec![
            vec!["10", "1", "0", "6b3130", "t"],
            vec!["11", "0", "0", "6b3131", "t"],
            vec!["12", "1", "1", "6b3132", "t"],
        ]
    );

    for (sql, code) in [
        (table_sql(&topic, ", scan.startup.mode = 'someday'").replace("events", "e1"), "22023"),
        (table_sql(&topic, ", bad_records = 'ignore'").replace("events", "e2"), "22023"),
        (table_sql(&topic, ", colour = 'red'").replace("events", "e3"), "22023"),
        (table_sql(&topic, ", scan.parallelism = '0'").replace("events", "e5"), "22023"),
        (table_sql(&topic, ", scan.startup.mode = 'timestamp'").replace("events", "e4"), "22023"),
        (
            table_sql(&topic, "").replace("events", "e5").replace("ENCODE JSON", "ENCODE PROTOBUF"),
            "0A000",
        ),
        (
            "CREATE TABLE e6 (a int) WITH (connector = 'pulsar', topic = 't')".to_string(),
            "0A000",
        ),
        (
            "CREATE TABLE e7 (a int) WITH (connector = 'kafka', properties.bootstrap.server = 'x:1')"
                .to_string(),
            "22023",
        ),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
    let tables = rows(&c, "SHOW TABLES").await;
    assert_eq!(
        tables.len(),
        4,
        "refused statements created nothing: {tables:?}"
    );
}

/// Sends `(key, payload)` records to partition 0 (`None` payload: a tombstone).
fn produce_keyed(p: &BaseProducer, topic: &str, records: &[(Option<&str>, Option<&str>)]) {
    for (key, payload) in records {
        let mut r = BaseRecord::<str, str>::to(topic).partition(0);
        if let Some(k) = key {
            r = r.key(k);
        }
        if let Some(v) = payload {
            r = r.payload(v);
        }
        p.send(r).expect("send");
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_records_replace_and_tombstones_delete_across_kill_9() {
    let topic = format!("accounts-{}", std::process::id());
    create_topic(&topic, 1).await;
    let p = producer();
    produce_keyed(
        &p,
        &topic,
        &[
            (Some(r#"{"id":1}"#), Some(r#"{"id":1,"balance":10}"#)),
            (Some(r#"{"id":2}"#), Some(r#"{"id":2,"balance":20}"#)),
            (Some(r#"{"id":1}"#), Some(r#"{"id":1,"balance":15}"#)),
            (Some(r#"{"id":2}"#), None),
            (Some(r#"{"id":3}"#), Some(r#"{"id":3,"balance":30}"#)),
            (Some(r#"{"id":3}"#), Some(r#"{"id":3,"balance":30}"#)),
            (None, None),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = "[execution.checkpointing]\ninterval = \"300ms\"\n";
    let mut server = WeirProcess::start_with_config(&dir.path().join("data"), 2, config).await;
    let c = server.connect().await;
    let create = format!(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint) WITH (
           connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}'
         ) FORMAT UPSERT ENCODE JSON",
        broker()
    );
    assert_eq!(
        error_code(&c, &create.replace(" PRIMARY KEY", "")).await,
        "42P16"
    );
    c.batch_execute(&create).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(balance) AS s FROM accounts",
    )
    .await
    .unwrap();
    wait_for(&c, "SELECT count(*) FROM accounts", "2").await;
    wait_for(&c, "SELECT n || '/' || s FROM totals", "2/45").await;
    assert_eq!(
        rows(&c, "SELECT id, balance FROM accounts ORDER BY id").await,
        vec![vec!["1", "15"], vec!["3", "30"]]
    );
    let errors = rows(&c, "SHOW SOURCE ERRORS").await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0][3].contains("without a message key"), "{errors:?}");
    // After a crash the key index is rebuilt from the restored rows.
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.restart().await;
    let c = server.connect().await;
    produce_keyed(
        &p,
        &topic,
        &[
            (Some(r#"{"id":3}"#), Some(r#"{"id":3,"balance":31}"#)),
            (Some(r#"{"id":1}"#), None),
            (Some(r#"{"id":4}"#), Some(r#"{"id":4,"balance":40}"#)),
        ],
    );
    wait_for(&c, "SELECT n || '/' || s FROM totals", "2/71").await;
    assert_eq!(
        rows(&c, "SELECT id, balance FROM accounts ORDER BY id").await,
        vec![vec!["3", "31"], vec!["4", "40"]]
    );
}

/// The rows an UPSERT topic holds now: per key its last record, none after a tombstone;
/// sorted.
fn upsert_rows(topic: &str) -> Vec<String> {
    use rdkafka::message::Message;
    let mut latest: std::collections::BTreeMap<String, String> = Default::default();
    for m in read_messages(topic) {
        let key = String::from_utf8_lossy(m.key().expect("upsert records are keyed")).into_owned();
        match m.payload() {
            Some(p) => {
                let row = String::from_utf8_lossy(p).into_owned();
                let g = serde_json::from_str::<serde_json::Value>(&row).unwrap()["g"].clone();
                assert_eq!(key, format!(r#"{{"g":{g}}}"#), "key of {row}");
                latest.insert(key, row)
            }
            None => latest.remove(&key),
        };
    }
    let mut rows: Vec<String> = latest.into_values().collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sinks_carry_a_views_changes_debezium_and_a_tables_rows_plain() {
    let input = format!("sink-in-{}", std::process::id());
    let changes = format!("sink-changes-{}", std::process::id());
    let plain = format!("sink-plain-{}", std::process::id());
    let upsert = format!("sink-upsert-{}", std::process::id());
    for t in [&input, &changes, &plain, &upsert] {
        create_topic(t, 1).await;
    }
    let p = producer();
    produce(
        &p,
        &input,
        &(0..500).map(|i| (0, json(i))).collect::<Vec<_>>(),
    );
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    c.batch_execute(&table_sql(&input, "")).await.unwrap();
    c.batch_execute(&format!(
        "CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g;
         CREATE SINK changes FROM per_g WITH (connector = 'kafka', topic = '{changes}',
           properties.bootstrap.server = '{b}') FORMAT DEBEZIUM ENCODE JSON;
         CREATE SINK rows FROM events WITH (connector = 'kafka', topic = '{plain}',
           properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE JSON;
         CREATE SINK latest FROM per_g WITH (connector = 'kafka', topic = '{upsert}',
           properties.bootstrap.server = '{b}', primary_key = 'g') FORMAT UPSERT ENCODE JSON;",
        b = broker()
    ))
    .await
    .unwrap();
    produce(
        &p,
        &input,
        &(500..1000).map(|i| (0, json(i))).collect::<Vec<_>>(),
    );
    wait_for(&c, "SELECT count(*) FROM events", "1000").await;
    c.batch_execute("FLUSH").await.unwrap();
    // Replaying the change events (insert `after`, delete `before`) gives the view.
    let mut contents: std::collections::BTreeMap<String, i64> = Default::default();
    for _ in 0..50 {
        contents.clear();
        for e in read_topic(&changes) {
            let v: serde_json::Value = serde_json::from_str(&e).expect("debezium json");
            match v["op"].as_str() {
                Some("c") => *contents.entry(v["after"].to_string()).or_default() += 1,
                Some("d") => *contents.entry(v["before"].to_string()).or_default() -= 1,
                other => panic!("op {other:?} in {e}"),
            }
        }
        contents.retain(|_, n| *n != 0);
        if contents.values().sum::<i64>() == 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut from_sink: Vec<String> = contents.keys().cloned().collect();
    from_sink.sort();
    let mut from_view: Vec<String> = rows(&c, "SELECT g, n, s FROM per_g")
        .await
        .into_iter()
        .map(|r| format!(r#"{{"g":{},"n":{},"s":{}}}"#, r[0], r[1], r[2]))
        .collect();
    from_view.sort();
    assert_eq!(from_sink, from_view);
    assert!(contents.values().all(|n| *n == 1));
    // UPSERT: the last record of each key (a tombstone deletes) is the view's row. The
    // sink is a job of its own, so its last epoch may still be on the way.
    let mut from_upsert = upsert_rows(&upsert);
    for _ in 0..50 {
        if from_upsert == from_view {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        from_upsert = upsert_rows(&upsert);
    }
    assert_eq!(
        from_upsert,
        from_view,
        "records of {upsert}: {:?}",
        read_messages(&upsert)
            .iter()
            .map(|m| {
                use rdkafka::message::Message;
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                (text(m.key()), text(m.payload()))
            })
            .collect::<Vec<_>>()
    );
    // The table's rows, one record each (append-only: PLAIN).
    let mut ids: Vec<i64> = read_topic(&plain)
        .iter()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(r).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    assert_eq!(
        rows(&c, "SHOW SINKS").await,
        vec![
            vec![
                "changes".to_string(),
                "per_g".into(),
                "kafka".into(),
                "RUNNING".into()
            ],
            vec![
                "latest".to_string(),
                "per_g".into(),
                "kafka".into(),
                "RUNNING".into()
            ],
            vec![
                "rows".to_string(),
                "events".into(),
                "kafka".into(),
                "RUNNING".into()
            ],
        ]
    );
}

const AVRO_SCHEMA: &str = r#"{"type": "record", "name": "reading", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "score", "type": ["null", "double"]}
]}"#;

/// One Avro datum of [`AVRO_SCHEMA`].
fn avro_record(id: i64) -> Vec<u8> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(AVRO_SCHEMA).unwrap();
    let score = if id % 4 == 0 {
        Value::Union(0, Box::new(Value::Null))
    } else {
        Value::Union(1, Box::new(Value::Double(id as f64 / 2.0)))
    };
    let value = Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("name".into(), Value::String(format!("n{id}"))),
        (
            "ts".into(),
            Value::TimestampMillis(1_700_000_000_000 + id * 1500),
        ),
        ("score".into(), score),
    ]);
    apache_avro::to_avro_datum(&schema, value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_records_with_an_inline_schema_or_a_schema_file() {
    let topic = format!("avro-{}", std::process::id());
    create_topic(&topic, 1).await;
    let p = producer();
    let mut records: Vec<(i32, Vec<u8>)> = (0..100).map(|i| (0, avro_record(i))).collect();
    // A truncated datum and one with trailing bytes: bad records, skipped and listed.
    records.insert(50, (0, avro_record(7)[..5].to_vec()));
    let mut trailing = avro_record(8);
    trailing.extend_from_slice(b"xx");
    records.insert(60, (0, trailing));
    produce(&p, &topic, &records);
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("reading.avsc");
    std::fs::write(&schema_file, AVRO_SCHEMA).unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let c = server.connect().await;
    let columns = "(id bigint, name text, ts timestamp, score double precision)";
    c.batch_execute(&format!(
        "CREATE TABLE inline_avro {columns} WITH (connector = 'kafka', topic = '{topic}',
           properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE AVRO (schema = '{AVRO_SCHEMA}');
         CREATE SOURCE file_avro {columns} WITH (connector = 'kafka', topic = '{topic}',
           properties.bootstrap.server = '{b}')
           FORMAT PLAIN ENCODE AVRO (schema.location = 'file://{f}');",
        b = broker(),
        f = schema_file.display()
    ))
    .await
    .unwrap();
    for t in ["inline_avro", "file_avro"] {
        wait_for(&c, &format!("SELECT count(*) FROM {t}"), "100").await;
        assert_eq!(
            rows(
                &c,
                &format!("SELECT id, name, ts, score FROM {t} WHERE id IN (0, 3) ORDER BY id")
            )
            .await,
            vec![
                vec!["0", "n0", "2023-11-14 22:13:20", "NULL"],
                vec!["3", "n3", "2023-11-14 22:13:24.5", "1.5"],
            ]
            .into_iter()
            .map(|r| r.into_iter().map(String::from).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
            "{t}"
        );
        assert_eq!(
            value(&c, &format!("SELECT sum(id) FROM {t}")).await,
            (0..100).sum::<i64>().to_string()
        );
    }
    let errors = rows(&c, "SHOW SOURCE ERRORS").await;
    assert_eq!(errors.len(), 4, "two bad records per table: {errors:?}");
    assert!(
        errors.iter().any(|r| r[3].contains("trailing bytes")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|r| r[3].contains("malformed Avro")),
        "{errors:?}"
    );
    // Errors, creating nothing.
    let b = broker();
    for (sql, code) in [
        (format!("CREATE TABLE a1 (id bigint) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE AVRO"), "22023"),
        (format!("CREATE TABLE a1 (id bigint) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE AVRO (schema = '{{\"type\": \"nope\"}}')"), "22023"),
        (format!("CREATE TABLE a1 (id bigint) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE AVRO (schema = '\"long\"')"), "22023"),
        (format!("CREATE TABLE a1 (id bigint) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{b}') FORMAT PLAIN ENCODE AVRO (schema.location = '/nonexistent.avsc')"), "22023"),
        (format!("CREATE TABLE a1 (id bigint PRIMARY KEY) WITH (connector = 'kafka', topic = 't', properties.bootstrap.server = '{b}') FORMAT UPSERT ENCODE AVRO (schema = '{AVRO_SCHEMA}')"), "0A000"),
    ] {
        assert_eq!(error_code(&c, &sql).await, code, "{sql}");
    }
    assert_eq!(
        value(
            &c,
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'a1'"
        )
        .await,
        "0"
    );
}
