//! The exactly-once Kafka sink's committer: Flink's two-phase commit, shaped by what
//! librdkafka can do.
//!
//! At each checkpoint barrier the sink *stages* the records of the epochs since the
//! previous one as a numbered batch, and that batch is part of the sink's checkpointed
//! state (the pre-commit). When the checkpoint completes, this committer writes every
//! staged batch up to it in one Kafka transaction and commits it. Each transaction
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

use super::sink_format::SinkRecord;
use crate::barrier::Epoch;
use crate::error::{ExecError, Result};
use parking_lot::Mutex;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the sink waits at its first checkpoint for the committer to have fenced the
/// previous producer and read the marker; past it the job fails and restarts.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One staged batch: the records of the epochs up to checkpoint `epoch`.
#[derive(Debug, Clone)]
pub struct Staged {
    pub seq: u64,
    pub epoch: Epoch,
    pub records: Arc<Vec<SinkRecord>>,
}

/// Where the committer writes and how it identifies itself.
#[derive(Debug, Clone)]
pub struct TxnTarget {
    pub sink: String,
    pub job: u64,
    pub topic: String,
    pub bootstrap_servers: String,
    pub properties: BTreeMap<String, String>,
    /// Stable across restarts and savepoints: derived from the sink's uid.
    pub transactional_id: String,
    pub marker_group: String,
}

/// What the committer reports back to the sink operator.
#[derive(Default)]
pub struct CommitStatus {
    /// Recovery is done: the previous producer is fenced and the marker read.
    ready: AtomicBool,
    /// The next batch number must be at least this (one past the marker).
    min_next_seq: AtomicU64,
    /// Every batch numbered below this is committed: the sink forgets them.
    committed_below: AtomicU64,
    /// Why committing failed; the sink fails its job with it.
    error: Mutex<Option<String>>,
}

impl CommitStatus {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    pub fn min_next_seq(&self) -> u64 {
        self.min_next_seq.load(Ordering::SeqCst)
    }
    pub fn committed_below(&self) -> u64 {
        self.committed_below.load(Ordering::SeqCst)
    }
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }
    fn fail(&self, e: String) {
        tracing::error!(error = %e, "kafka sink transaction failed");
        self.error.lock().get_or_insert(e);
    }
}

/// The transactional producer with its marker group.
struct Txn {
    target: TxnTarget,
    producer: BaseProducer,
    group: ConsumerGroupMetadata,
    /// Unique per producer run: with `attempts`, the `weir.txn` header.
    run: String,
    attempts: AtomicU64,
}

fn kafka_err(sink: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExecError + '_ {
    move |e| ExecError::Internal(format!("kafka sink {sink}: {e}"))
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
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &target.bootstrap_servers)
            .set("group.id", &target.marker_group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(&err)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&target.topic, 0);
        let committed = consumer
            .committed_offsets(tpl, KAFKA_TIMEOUT)
            .map_err(&err)?;
        let marker = match committed.elements().first().map(|e| e.offset()) {
            Some(Offset::Offset(n)) if n >= 0 => Some(n as u64),
            _ => None,
        };
        let group = consumer
            .group_metadata()
            .ok_or_else(|| ExecError::Internal("kafka sink: no consumer group metadata".into()))?;
        Ok((
            Txn {
                target,
                producer,
                group,
                run: format!(
                    "{}.{}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos())
                ),
                attempts: AtomicU64::new(0),
            },
            marker,
        ))
    }

    /// Writes `batches` (in order) and the marker of the last one in one transaction.
    fn commit(&self, batches: &[Staged]) -> Result<()> {
        let err = kafka_err(&self.target.sink);
        let last = batches.last().map(|b| b.seq).unwrap_or_default();
        let attempt = format!(
            "{}.{}",
            self.run,
            self.attempts.fetch_add(1, Ordering::SeqCst)
        );
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
            let mut marker = TopicPartitionList::new();
            marker
                .add_partition_offset(&self.target.topic, 0, Offset::Offset(last as i64))
                .map_err(&err)?;
            self.producer
                .send_offsets_to_transaction(&marker, &self.group, KAFKA_TIMEOUT)
                .map_err(&err)?;
            self.producer
                .commit_transaction(KAFKA_TIMEOUT)
                .map_err(&err)
        })();
        if written.is_err() {
            let _ = self.producer.abort_transaction(KAFKA_TIMEOUT);
        }
        written
    }
}

/// Sends one record, waiting while librdkafka's queue is full.
fn send<'a>(
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

/// Starts the committer of one sink actor. `restored` are the batches of the
/// checkpoint the job restarts from (all of them belong to completed checkpoints).
pub fn spawn(
    target: TxnTarget,
    restored: Vec<Staged>,
    completions: broadcast::Receiver<(u64, Epoch)>,
) -> (mpsc::UnboundedSender<Staged>, Arc<CommitStatus>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let status = Arc::new(CommitStatus::default());
    tokio::spawn(run(target, restored, rx, completions, status.clone()));
    (tx, status)
}

async fn run(
    target: TxnTarget,
    restored: Vec<Staged>,
    mut staged: mpsc::UnboundedReceiver<Staged>,
    mut completions: broadcast::Receiver<(u64, Epoch)>,
    status: Arc<CommitStatus>,
) {
    let job = target.job;
    let (txn, marker) = match tokio::task::spawn_blocking(move || Txn::open(target)).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => return status.fail(e.to_string()),
        Err(e) => return status.fail(format!("kafka sink setup: {e}")),
    };
    let txn = Arc::new(txn);
    // Restored batches: the marker says which the previous run committed.
    let mut queue: BTreeMap<u64, Staged> = BTreeMap::new();
    let mut completed: Epoch = 0;
    let mut below = marker.map_or(0, |m| m + 1);
    for b in restored {
        if marker.is_some_and(|m| b.seq <= m) {
            below = below.max(b.seq + 1);
        } else {
            completed = completed.max(b.epoch);
            queue.insert(b.seq, b);
        }
    }
    tracing::info!(
        sink = %txn.target.sink,
        marker = ?marker,
        recommit = ?queue.keys().collect::<Vec<_>>(),
        "kafka sink recovered: batches up to the marker were committed"
    );
    status.committed_below.store(below, Ordering::SeqCst);
    status.min_next_seq.store(
        below.max(queue.keys().last().map_or(0, |s| s + 1)),
        Ordering::SeqCst,
    );
    status.ready.store(true, Ordering::SeqCst);
    // Epochs already known complete per job run do not matter: any completion notice
    // of this job covers every batch staged for an epoch up to it.
    let mut open = true;
    loop {
        let due: Vec<Staged> = queue
            .values()
            .take_while(|b| b.epoch <= completed)
            .cloned()
            .collect();
        if !due.is_empty() {
            let t = txn.clone();
            let batches = due.clone();
            match tokio::task::spawn_blocking(move || t.commit(&batches)).await {
                Ok(Ok(())) => {
                    for b in &due {
                        queue.remove(&b.seq);
                    }
                    let next = due.last().map_or(0, |b| b.seq + 1);
                    status.committed_below.fetch_max(next, Ordering::SeqCst);
                }
                Ok(Err(e)) => return status.fail(e.to_string()),
                Err(e) => return status.fail(format!("kafka sink commit: {e}")),
            }
            continue;
        }
        if !open {
            // The sink stopped: what is still staged is in its checkpoint, and the next
            // run commits it after reading the marker.
            return;
        }
        tokio::select! {
            b = staged.recv() => match b {
                Some(b) => { queue.insert(b.seq, b); }
                None => open = false,
            },
            done = completions.recv() => match done {
                Ok((j, epoch)) if j == job => completed = completed.max(epoch),
                Ok(_) => {}
                // Missed notices: a later completion of this job covers them.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => open = false,
            },
        }
    }
}

/// Batches by number from a sink's restored keyed state (see
/// [`super::kafka_sink::KafkaSinkOperator`]), and the next batch number it recorded.
pub fn staged_from_state(entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(Vec<Staged>, u64)> {
    let damaged = || ExecError::Internal("damaged kafka sink state".into());
    let mut batches = HashMap::new();
    let mut next = 0;
    for (key, value) in entries {
        match key.split_first() {
            Some((b'n', _)) => {
                next = u64::from_be_bytes(value.as_slice().try_into().map_err(|_| damaged())?)
            }
            Some((b'b', seq)) => {
                let seq = u64::from_be_bytes(seq.try_into().map_err(|_| damaged())?);
                let (epoch, records) = value.split_first_chunk::<8>().ok_or_else(damaged)?;
                batches.insert(
                    seq,
                    Staged {
                        seq,
                        epoch: u64::from_be_bytes(*epoch),
                        records: Arc::new(super::sink_format::decode_records(records)?),
                    },
                );
            }
            _ => return Err(damaged()),
        }
    }
    let mut batches: Vec<Staged> = batches.into_values().collect();
    batches.sort_by_key(|b| b.seq);
    Ok((batches, next))
}
