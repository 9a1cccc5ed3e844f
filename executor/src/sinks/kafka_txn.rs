//! The exactly-once Kafka sink's [`TwoPhaseTarget`]: Flink's two-phase commit, shaped
//! by what librdkafka can do.
//!
//! The sink stages numbered batches at checkpoint barriers ([`super::two_phase`]). When
//! a checkpoint completes, every staged batch up to it is written in one Kafka
//! transaction and committed. Each transaction
//! also commits, through `send_offsets_to_transaction`, an offset of the consumer group
//! `weir-sink-<uid>` equal to the number of its last batch: the *commit marker*, which
//! becomes visible atomically with the records.
//!
//! Why a marker: Flink resumes a pre-committed transaction after a crash by setting the
//! producer id and epoch of the old producer; librdkafka has no such API, and a new
//! producer with the same `transactional.id` aborts the old transaction. So recovery
//! fences the previous producer (`init_transactions`), reads the marker, drops the
//! restored batches it covers and commits the rest again. A crash anywhere therefore
//! neither loses nor repeats a batch. (The design and the broker probe behind it:
//! `notes/kafka-sink-exactly-once.md`.)
//!
//! Records written by an aborted attempt stay in the topic as aborted records, which a
//! `read_committed` reader skips on a real Kafka broker. Every record carries its batch
//! number in the header `weir.batch` and its transaction attempt in `weir.txn` (unique
//! per producer run and transaction), so a reader can tell a batch's attempts apart.
//!
//! The committed attempts form a chain an auditor can follow without trusting the
//! broker to hide aborted records. Attempts are numbered (`weir.txn`: the producer
//! run's start in milliseconds × 1,000,000 + a counter), each transaction also commits
//! its attempt number as the offset of a second group, `<marker group>.attempt`, and
//! every record names in `weir.prev` the attempt whose commit it follows (empty for the
//! first). Walking back from that offset gives exactly the committed transactions;
//! their batches must be numbered on from 0 to the marker without a repeat or a gap.
//! (Offset metadata would have been the natural place for the attempt, but the test
//! broker drops it.)

use super::two_phase::{Staged, TwoPhaseTarget};
use crate::error::{ExecError, Result};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the sink writes and how it identifies itself.
#[derive(Debug, Clone)]
pub struct TxnTarget {
    pub sink: String,
    pub topic: String,
    pub bootstrap_servers: String,
    pub properties: BTreeMap<String, String>,
    /// Stable across restarts and savepoints: derived from the sink's uid.
    pub transactional_id: String,
    pub marker_group: String,
}

/// The transactional producer with its marker groups.
struct Txn {
    target: TxnTarget,
    producer: BaseProducer,
    /// `marker_group`: the last committed batch.
    group: ConsumerGroupMetadata,
    /// `<marker_group>.attempt`: the attempt that committed it.
    attempt_group: ConsumerGroupMetadata,
    /// The next attempt number (unique across runs, see the module doc).
    next_attempt: AtomicU64,
    /// The attempt of the last committed transaction: the `weir.prev` header of the
    /// next one.
    last_committed: Mutex<String>,
}

/// A committed offset of `group` for partition 0 of `topic`, and the group's metadata
/// (to commit in a transaction).
fn committed_offset(
    target: &TxnTarget,
    group: &str,
) -> Result<(Option<u64>, ConsumerGroupMetadata)> {
    let err = kafka_err(&target.sink);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &target.bootstrap_servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(&err)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&target.topic, 0);
    let committed = consumer
        .committed_offsets(tpl, KAFKA_TIMEOUT)
        .map_err(&err)?;
    let offset = match committed.elements().first().map(|e| e.offset()) {
        Some(Offset::Offset(n)) if n >= 0 => Some(n as u64),
        _ => None,
    };
    let metadata = consumer
        .group_metadata()
        .ok_or_else(|| ExecError::Internal("kafka sink: no consumer group metadata".into()))?;
    Ok((offset, metadata))
}

/// The Kafka target: its producer exists once recovery has fenced the previous one.
pub struct KafkaTarget {
    target: TxnTarget,
    txn: Mutex<Option<Arc<Txn>>>,
}

impl KafkaTarget {
    pub fn new(target: TxnTarget) -> Self {
        Self {
            target,
            txn: Mutex::new(None),
        }
    }
}

fn kafka_err(sink: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExecError + '_ {
    move |e| ExecError::Internal(format!("kafka sink {sink}: {e}"))
}

fn joined<T>(r: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
    r.map_err(|e| ExecError::Internal(format!("kafka sink: {e}")))?
}

impl TwoPhaseTarget for KafkaTarget {
    fn recover<'a>(&'a self, _restored: &'a [Staged]) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async move {
            let target = self.target.clone();
            let (txn, marker) =
                joined(tokio::task::spawn_blocking(move || Txn::open(target)).await)?;
            *self.txn.lock() = Some(Arc::new(txn));
            Ok(marker)
        })
    }

    fn commit<'a>(&'a self, batches: &'a [Staged]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let txn =
                self.txn.lock().clone().ok_or_else(|| {
                    ExecError::Internal("kafka sink: commit before recovery".into())
                })?;
            let batches = batches.to_vec();
            joined(tokio::task::spawn_blocking(move || txn.commit(&batches)).await)
        })
    }
}

impl Txn {
    /// Fences any previous producer of this sink (aborting its open transaction) and
    /// reads the commit marker: the number of the last committed batch, if any.
    fn open(target: TxnTarget) -> Result<(Txn, Option<u64>)> {
        let sink = target.sink.clone();
        let err = kafka_err(&sink);
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &target.bootstrap_servers);
        for (k, v) in &target.properties {
            c.set(k, v);
        }
        c.set("transactional.id", &target.transactional_id);
        let producer: BaseProducer = c.create().map_err(&err)?;
        producer.init_transactions(KAFKA_TIMEOUT).map_err(&err)?;
        let (marker, group) = committed_offset(&target, &target.marker_group)?;
        let (last_attempt, attempt_group) =
            committed_offset(&target, &format!("{}.attempt", target.marker_group))?;
        let run_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Ok((
            Txn {
                target,
                producer,
                group,
                attempt_group,
                next_attempt: AtomicU64::new(run_ms.saturating_mul(1_000_000)),
                last_committed: Mutex::new(last_attempt.map(|a| a.to_string()).unwrap_or_default()),
            },
            marker,
        ))
    }

    /// Commits `offset` for partition 0 of the sink's topic to `group`, within the open
    /// transaction (visible only if it commits).
    fn offset_in_transaction(&self, group: &ConsumerGroupMetadata, offset: u64) -> Result<()> {
        let err = kafka_err(&self.target.sink);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.target.topic, 0, Offset::Offset(offset as i64))
            .map_err(&err)?;
        self.producer
            .send_offsets_to_transaction(&tpl, group, KAFKA_TIMEOUT)
            .map_err(&err)
    }

    /// Writes `batches` (in order) and the marker of the last one in one transaction.
    fn commit(&self, batches: &[Staged]) -> Result<()> {
        let err = kafka_err(&self.target.sink);
        let last = batches.last().map(|b| b.seq).unwrap_or_default();
        let attempt_number = self.next_attempt.fetch_add(1, Ordering::SeqCst);
        let attempt = attempt_number.to_string();
        let prev = self.last_committed.lock().clone();
        self.producer.begin_transaction().map_err(&err)?;
        let written = (|| {
            for b in batches {
                let seq = b.seq.to_string();
                for r in b.records.iter() {
                    let headers = OwnedHeaders::new()
                        .insert(Header {
                            key: "weir.batch",
                            value: Some(seq.as_str()),
                        })
                        .insert(Header {
                            key: "weir.txn",
                            value: Some(attempt.as_str()),
                        })
                        .insert(Header {
                            key: "weir.prev",
                            value: Some(prev.as_str()),
                        });
                    let mut record =
                        BaseRecord::<[u8], [u8]>::to(&self.target.topic).headers(headers);
                    if let Some(k) = &r.key {
                        record = record.key(k.as_slice());
                    }
                    if let Some(p) = &r.payload {
                        record = record.payload(p.as_slice());
                    }
                    send(&self.producer, record).map_err(&err)?;
                }
            }
            self.offset_in_transaction(&self.group, last)?;
            self.offset_in_transaction(&self.attempt_group, attempt_number)?;
            self.producer
                .commit_transaction(KAFKA_TIMEOUT)
                .map_err(&err)
        })();
        match &written {
            Ok(()) => *self.last_committed.lock() = attempt,
            Err(_) => {
                let _ = self.producer.abort_transaction(KAFKA_TIMEOUT);
            }
        }
        written
    }
}

/// Sends one record, waiting while librdkafka's queue is full.
pub(crate) fn send<'a>(
    producer: &BaseProducer,
    mut record: BaseRecord<'a, [u8], [u8]>,
) -> std::result::Result<(), rdkafka::error::KafkaError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((e, r))
                if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
            {
                producer.poll(Duration::from_millis(10));
                record = r;
            }
            Err((e, _)) => return Err(e),
        }
    }
}
