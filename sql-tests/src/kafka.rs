//! The test Kafka-protocol broker (tansu, started by `scripts/test.sh`, which exports
//! `WEIR_TEST_KAFKA_BROKER`): topics, producing, and reading a partition to its end.

use crate::query::value;
use crate::WeirProcess;
use rand::Rng;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
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

/// [`json`] records produced from `first` on, over 3 partitions, in chunks with a
/// pause after each, on a thread of its own until stopped: ingestion that lasts exactly
/// as long as a test's kills.
pub struct Production {
    /// The next id to produce: `first..next` are on the broker.
    next: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Production {
    pub fn start(topic: &str, first: i64, chunk: i64, pause: Duration) -> Production {
        let next = Arc::new(AtomicI64::new(first));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (topic, next, stop) = (topic.to_string(), next.clone(), stop.clone());
            move || {
                let p = producer();
                while !stop.load(Ordering::SeqCst) {
                    let from = next.load(Ordering::SeqCst);
                    let recs: Vec<(i32, Vec<u8>)> = (from..from + chunk)
                        .map(|i| ((i % 3) as i32, json(i)))
                        .collect();
                    produce(&p, &topic, &recs);
                    next.store(from + chunk, Ordering::SeqCst);
                    std::thread::sleep(pause);
                }
            }
        });
        Production { next, stop, thread }
    }

    /// The ids produced so far are `first..produced()`.
    pub fn produced(&self) -> i64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Stops producing; returns the end (exclusive) of the ids produced.
    pub fn stop(self) -> i64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("producer thread");
        self.next.load(Ordering::SeqCst)
    }
}

/// Produces [`json`] records from `first` on into `topic` while the server is killed
/// `kills` times (see [`kill_while_ingesting`]), then waits (60 s at most) until the
/// table `events` holds every one. Returns the end (exclusive) of the ids produced
/// and the records in flight at each kill.
pub async fn ingest_across_kills(
    server: &mut WeirProcess,
    topic: &str,
    first: i64,
    kills: u64,
) -> (i64, Vec<i64>) {
    let count = "SELECT count(*) FROM events";
    let production = Production::start(topic, first, 20, Duration::from_millis(20));
    let in_flight = kill_while_ingesting(server, &production, kills, count).await;
    let total = production.stop();
    let c = server.connect().await;
    crate::query::wait_until(&c, count, 60, |r| r[0][0] == total.to_string()).await;
    (total, in_flight)
}

/// `kills` × `kill -9` (and restart) while `production` writes into the table that
/// `count_sql` counts, at random moments (seeded, see [`crate::process::kill_rng`]).
/// Each kill waits until the restarted server ingested something new (progress) while
/// produced records are not yet in the table (in flight), and fails after 60 s without.
/// Returns, per kill, how many records were in flight.
async fn kill_while_ingesting(
    server: &mut WeirProcess,
    production: &Production,
    kills: u64,
    count_sql: &str,
) -> Vec<i64> {
    let mut rng = crate::process::kill_rng();
    let mut in_flight = Vec::new();
    for k in 0..kills {
        let c = server.connect().await;
        let before: i64 = value(&c, count_sql).await.parse().unwrap();
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
        // Kill once the restarted server ingested something new and produced records
        // are waiting to be ingested (the reader keeps up, so this can take a few polls).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let waiting = loop {
            let n: i64 = value(&c, count_sql).await.parse().unwrap();
            let waiting = production.produced() - n;
            if n > before && waiting > 0 {
                break waiting;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kill {k}: in 60 s since the restart, never ingesting with records in flight \
                 ({before} rows before, {n} now, {waiting} waiting)"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        in_flight.push(waiting);
        server.restart().await;
    }
    in_flight
}
