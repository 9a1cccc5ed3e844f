//! The test Kafka-protocol broker (tansu, started by `scripts/test.sh`, which exports
//! `WEIR_TEST_KAFKA_BROKER`): topics, producing, and reading a partition to its end.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::Duration;

pub fn broker() -> String {
    std::env::var("WEIR_TEST_KAFKA_BROKER").expect(
        "WEIR_TEST_KAFKA_BROKER is not set: run the suite with ./scripts/test.sh, which starts the broker",
    )
}

pub async fn create_topic(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .create()
        .expect("admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let res = admin
        .create_topics([&topic], &AdminOptions::new())
        .await
        .expect("create topics");
    for r in res {
        r.expect("topic created");
    }
}

pub fn producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// Sends `(partition, payload)` records and waits until the broker has them.
pub fn produce(p: &BaseProducer, topic: &str, records: &[(i32, Vec<u8>)]) {
    for (part, payload) in records {
        loop {
            match p.send(
                BaseRecord::<(), [u8]>::to(topic)
                    .partition(*part)
                    .payload(payload),
            ) {
                Ok(()) => break,
                Err((e, _)) => {
                    // Queue full: let deliveries drain.
                    assert!(
                        matches!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "produce: {e}"
                    );
                    p.poll(Duration::from_millis(50));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// Every message of partition 0 of `topic`, from the beginning to its end now, read
/// with `isolation.level = read_committed`.
pub fn read_messages(topic: &str) -> Vec<OwnedMessage> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "weir-test-reader")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    loop {
        match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(m)) => out.push(m.detach()),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => return out,
            Some(Err(e)) => panic!("read {topic}: {e}"),
        }
    }
}

/// The payloads of partition 0 of `topic` (see [`read_messages`]).
pub fn read_topic(topic: &str) -> Vec<String> {
    read_messages(topic)
        .iter()
        .map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
        .collect()
}

/// A JSON record `{"id", "g" = id % 7, "v" = id * 10}`.
pub fn json(id: i64) -> Vec<u8> {
    format!(r#"{{"id": {id}, "g": {}, "v": {}}}"#, id % 7, id * 10).into_bytes()
}

/// Produces [`json`] records `ids` over 3 partitions in chunks of 200, pausing `pause`
/// after each, on a thread of its own: ingestion that lasts through a test's kills.
pub fn produce_paced(
    topic: &str,
    ids: std::ops::Range<i64>,
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        let p = producer();
        for chunk in ids.collect::<Vec<_>>().chunks(200) {
            let recs: Vec<(i32, Vec<u8>)> =
                chunk.iter().map(|&i| ((i % 3) as i32, json(i))).collect();
            produce(&p, &topic, &recs);
            std::thread::sleep(pause);
        }
    })
}
