//! The Kafka sink: the last operator of `CREATE SINK ... WITH (connector = 'kafka')`.
//! Every change becomes one record in the sink's format ([`super::sink_format`]).
//!
//! Two delivery guarantees (`sink.delivery-guarantee`):
//! - `at-least-once`: records are produced as they come, and at every barrier the
//!   producer is flushed before the barrier goes on, so every change before a
//!   checkpoint is acknowledged before the checkpoint can complete. After a crash the
//!   sink resumes from its checkpoint and produces the changes after it again.
//! - `exactly-once`: records are kept until the checkpoint barrier, staged there as a
//!   numbered batch in the sink's checkpointed state, and written in a Kafka
//!   transaction once that checkpoint completes ([`super::kafka_sink_txn`]). Readers
//!   with `isolation.level = read_committed` see each change once; the latency is the
//!   checkpoint interval.
//!
//! State of an exactly-once sink (keyed, key group 0, under the sink's uid): `b` + batch
//! number (big-endian) → checkpoint epoch (big-endian) + records; `n` → the next batch
//! number. Committed batches are deleted at the next checkpoint.

use super::kafka_sink_txn::{self, CommitStatus, Staged, TxnTarget};
use super::sink_format::{encode, encode_records, SinkFormat, SinkRecord};
use crate::barrier::{Barrier, Epoch};
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use weir_storage::state_snapshot::{DeltaData, KeyedEntry, StateDelta};

const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    AtLeastOnce,
    ExactlyOnce,
}

#[derive(Debug, Clone)]
pub struct KafkaSinkSpec {
    pub sink: String,
    pub topic: String,
    pub bootstrap_servers: String,
    pub format: SinkFormat,
    pub guarantee: DeliveryGuarantee,
    /// The relation's schema: its column names are the records' field names.
    pub schema: arrow::datatypes::SchemaRef,
    /// `properties.*` options, passed to librdkafka as they are.
    pub properties: BTreeMap<String, String>,
}

/// What an exactly-once sink needs from its deployment.
pub struct SinkContext {
    pub job: u64,
    /// The sink's state uid; the transactional id and marker group derive from it.
    pub uid: String,
    /// The sink's state from the checkpoint it restarts from: `(key, value)`.
    pub restored: Vec<(Vec<u8>, Vec<u8>)>,
    pub completions: broadcast::Receiver<(u64, Epoch)>,
}

pub struct KafkaSinkOperator {
    spec: KafkaSinkSpec,
    mode: Mode,
}

enum Mode {
    AtLeastOnce(BaseProducer),
    ExactlyOnce(Box<Staging>),
}

/// The exactly-once sink's side: records since the last checkpoint, and the staged
/// batches its state still holds.
struct Staging {
    uid: String,
    current: Vec<SinkRecord>,
    /// Batch numbers in the state, not yet known to be committed.
    pending: BTreeSet<u64>,
    next_seq: u64,
    committer: mpsc::UnboundedSender<Staged>,
    status: Arc<CommitStatus>,
}

fn kafka_err(sink: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExecError + '_ {
    move |e| ExecError::Internal(format!("kafka sink {sink}: {e}"))
}

fn batch_key(seq: u64) -> Vec<u8> {
    let mut k = vec![b'b'];
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

impl KafkaSinkOperator {
    pub fn new(spec: KafkaSinkSpec, ctx: SinkContext) -> Result<Self> {
        let mode = match spec.guarantee {
            DeliveryGuarantee::AtLeastOnce => {
                let mut c = ClientConfig::new();
                c.set("bootstrap.servers", &spec.bootstrap_servers);
                for (k, v) in &spec.properties {
                    c.set(k, v);
                }
                Mode::AtLeastOnce(c.create().map_err(kafka_err(&spec.sink))?)
            }
            DeliveryGuarantee::ExactlyOnce => {
                let (restored, next_seq) = kafka_sink_txn::staged_from_state(&ctx.restored)?;
                let pending = restored.iter().map(|b| b.seq).collect();
                let target = TxnTarget {
                    sink: spec.sink.clone(),
                    job: ctx.job,
                    topic: spec.topic.clone(),
                    bootstrap_servers: spec.bootstrap_servers.clone(),
                    properties: spec.properties.clone(),
                    transactional_id: format!("weir-{}", ctx.uid),
                    marker_group: format!("weir-sink-{}", ctx.uid),
                };
                let (committer, status) = kafka_sink_txn::spawn(target, restored, ctx.completions);
                Mode::ExactlyOnce(Box::new(Staging {
                    uid: ctx.uid,
                    current: Vec::new(),
                    pending,
                    next_seq,
                    committer,
                    status,
                }))
            }
        };
        Ok(Self { spec, mode })
    }
}

fn send(producer: &BaseProducer, topic: &str, r: &SinkRecord) -> Result<()> {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic);
    if let Some(k) = &r.key {
        record = record.key(k.as_slice());
    }
    if let Some(p) = &r.payload {
        record = record.payload(p.as_slice());
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((e, back))
                if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
            {
                producer.poll(Duration::from_millis(10));
                record = back;
            }
            Err((e, _)) => return Err(ExecError::Internal(format!("kafka sink: {e}"))),
        }
    }
}

impl Staging {
    fn check(&self) -> Result<()> {
        match self.status.error() {
            Some(e) => Err(ExecError::Internal(e)),
            None => Ok(()),
        }
    }

    /// Waits (at the first checkpoint of a run) until the committer has read the
    /// marker, so that new batch numbers never reuse a committed one.
    fn await_ready(&self) -> Result<()> {
        let start = Instant::now();
        while !self.status.is_ready() {
            self.check()?;
            if start.elapsed() > kafka_sink_txn::SETUP_TIMEOUT {
                return Err(ExecError::Internal(
                    "kafka sink: the transactional producer did not start (broker unreachable?)"
                        .into(),
                ));
            }
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(10)));
        }
        self.check()
    }

    fn snapshot(&mut self, epoch: Epoch) -> Result<Vec<StateDelta>> {
        self.await_ready()?;
        self.next_seq = self.next_seq.max(self.status.min_next_seq());
        let mut entries: Vec<KeyedEntry> = Vec::new();
        let below = self.status.committed_below();
        while let Some(&seq) = self.pending.first() {
            if seq >= below {
                break;
            }
            self.pending.pop_first();
            entries.push((0, batch_key(seq), None));
        }
        if !self.current.is_empty() {
            let seq = self.next_seq;
            self.next_seq += 1;
            let records = std::mem::take(&mut self.current);
            let mut value = epoch.to_be_bytes().to_vec();
            value.extend_from_slice(&encode_records(&records));
            entries.push((0, batch_key(seq), Some(value)));
            self.pending.insert(seq);
            self.committer
                .send(Staged {
                    seq,
                    epoch,
                    records: Arc::new(records),
                })
                .map_err(|_| ExecError::Internal("kafka sink: committer stopped".into()))?;
        }
        entries.push((0, b"n".to_vec(), Some(self.next_seq.to_be_bytes().to_vec())));
        Ok(vec![StateDelta {
            uid: self.uid.clone(),
            data: DeltaData::Keyed(entries),
        }])
    }
}

impl Operator for KafkaSinkOperator {
    fn name(&self) -> &str {
        "KafkaSink"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        // A sink of a view runs the view's query: its columns carry the planner's names.
        let chunk = if chunk.batch.schema().fields() == self.spec.schema.fields() {
            chunk
        } else {
            let batch = arrow::array::RecordBatch::try_new(
                self.spec.schema.clone(),
                chunk.batch.columns().to_vec(),
            )
            .map_err(|e| ExecError::Internal(format!("kafka sink: {e}")))?;
            StreamChunk {
                ops: chunk.ops,
                batch,
            }
        };
        let records = encode(&self.spec.format, &self.spec.sink, &chunk)?;
        match &mut self.mode {
            Mode::AtLeastOnce(producer) => {
                for r in &records {
                    send(producer, &self.spec.topic, r)?;
                }
                producer.poll(Duration::ZERO);
            }
            Mode::ExactlyOnce(s) => {
                s.check()?;
                s.current.extend(records);
            }
        }
        Ok(())
    }

    /// At least once: everything before the barrier is acknowledged before the barrier
    /// moves on. Exactly once: a failed commit fails the job here.
    fn on_barrier(&mut self, _barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        match &mut self.mode {
            Mode::AtLeastOnce(producer) => {
                tokio::task::block_in_place(|| producer.flush(FLUSH_TIMEOUT))
                    .map_err(kafka_err(&self.spec.sink))
            }
            Mode::ExactlyOnce(s) => s.check(),
        }
    }

    fn snapshot(&mut self, epoch: Epoch) -> Result<Vec<StateDelta>> {
        match &mut self.mode {
            Mode::AtLeastOnce(_) => Ok(vec![]),
            Mode::ExactlyOnce(s) => s.snapshot(epoch),
        }
    }
}
