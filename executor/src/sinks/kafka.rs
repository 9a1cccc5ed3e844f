//! The Kafka sink: the last operator of `CREATE SINK ... WITH (connector = 'kafka')`.
//! Every change becomes one record in the sink's format ([`super::format`]).
//!
//! Two delivery guarantees (`sink.delivery-guarantee`):
//! - `at-least-once`: records are produced as they come, and at every barrier the
//!   producer is flushed before the barrier goes on, so every change before a
//!   checkpoint is acknowledged before the checkpoint can complete. After a crash the
//!   sink resumes from its checkpoint and produces the changes after it again.
//! - `exactly-once`: records are kept until the checkpoint barrier, staged there as a
//!   numbered batch in the sink's checkpointed state, and written in a Kafka
//!   transaction once that checkpoint completes ([`super::two_phase`] with
//!   [`super::kafka_txn`]). Readers with `isolation.level = read_committed` see
//!   each change once; the latency is the checkpoint interval.

use super::format::{encode, named, SinkFormat, SinkRecord};
use super::kafka_txn::{KafkaTarget, TxnTarget};
use super::two_phase::{SinkContext, Staging};
use super::{SinkConnector, SinkTarget};
use crate::barrier::{Barrier, Epoch};
use crate::chunk::StreamChunk;
use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use weir_storage::state_snapshot::StateDelta;

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
    /// `sink.transactional-id-prefix` (Flink's option): the exactly-once sink's
    /// transactional id is `<prefix>-<uid>` and its marker group `<prefix>-sink-<uid>`,
    /// so two databases writing to one Kafka cluster must use different prefixes.
    pub transactional_id_prefix: String,
}

/// `connector = 'kafka'` options: `topic`, `properties.bootstrap.server`, other
/// `properties.*`, `FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON` (UPSERT with
/// `primary_key = 'col, ...'`), `sink.delivery-guarantee = 'at-least-once'` (the
/// default) or `'exactly-once'`, and `sink.transactional-id-prefix` (default `weir`).
pub(crate) fn parse_options(
    o: &mut ConnectorOptions,
    target: &SinkTarget<'_>,
) -> Result<Arc<dyn SinkConnector>> {
    let topic = o.require("topic", "kafka sink", "...")?;
    let bootstrap_servers = o
        .take_any(&[
            "properties.bootstrap.server",
            "properties.bootstrap.servers",
        ])
        .ok_or_else(|| invalid("the kafka sink needs properties.bootstrap.server = 'host:port'"))?;
    let transactional_id_prefix = match o.take("sink.transactional-id-prefix") {
        None => "weir".to_string(),
        Some(p) if p.is_empty() => {
            return Err(invalid("sink.transactional-id-prefix must not be empty"))
        }
        Some(p) => p,
    };
    let guarantee = match o
        .take("sink.delivery-guarantee")
        .map(|g| g.to_ascii_lowercase())
    {
        None => DeliveryGuarantee::AtLeastOnce,
        Some(g) if g == "at-least-once" => DeliveryGuarantee::AtLeastOnce,
        Some(g) if g == "exactly-once" => DeliveryGuarantee::ExactlyOnce,
        Some(other) => {
            return Err(invalid(format!(
                "invalid sink.delivery-guarantee: {other} (exactly-once or at-least-once)"
            )))
        }
    };
    match o.take("encode") {
        Some(e) if !e.eq_ignore_ascii_case("json") => {
            return Err(ExecError::Unsupported(format!(
                "sink ENCODE {e} is not supported yet (JSON is)"
            )))
        }
        _ => {}
    }
    let format = record_format(o, target.schema)?;
    let properties: BTreeMap<String, String> = o.take_prefixed("properties.").into_iter().collect();
    if properties.contains_key("transactional.id") {
        return Err(invalid(
            "properties.transactional.id is derived from the sink's uid; set sink.transactional-id-prefix instead",
        ));
    }
    Ok(Arc::new(KafkaSinkSpec {
        sink: target.name.to_string(),
        topic,
        bootstrap_servers,
        format,
        guarantee,
        schema: Arc::new(target.schema.clone()),
        properties,
        transactional_id_prefix,
    }))
}

/// `FORMAT PLAIN | DEBEZIUM`, or `UPSERT` keyed by `primary_key = 'col, ...'`.
fn record_format(
    o: &mut ConnectorOptions,
    schema: &arrow::datatypes::Schema,
) -> Result<SinkFormat> {
    let format = o.take("format").unwrap_or_else(|| "plain".into());
    match (format.to_ascii_lowercase().as_str(), o.take("primary_key")) {
        ("plain", None) => Ok(SinkFormat::Plain),
        ("debezium", None) => Ok(SinkFormat::Debezium),
        ("upsert", Some(pk)) => Ok(SinkFormat::Upsert(key_columns(&pk, schema)?)),
        ("upsert", None) => Err(invalid(
            "FORMAT UPSERT needs primary_key = 'column, ...' (the message key)",
        )),
        ("plain" | "debezium", Some(_)) => Err(invalid("primary_key is only for FORMAT UPSERT")),
        (other, _) => Err(ExecError::Unsupported(format!(
            "sink FORMAT {other} is not supported yet (PLAIN, UPSERT and DEBEZIUM are)"
        ))),
    }
}

/// Positions of the `primary_key` columns (comma-separated names) in `schema`.
fn key_columns(list: &str, schema: &arrow::datatypes::Schema) -> Result<Vec<usize>> {
    list.split(',')
        .map(|c| {
            let c = c.trim().trim_matches('"');
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(c))
                .ok_or_else(|| {
                    ExecError::UndefinedColumn(format!("primary_key column \"{c}\" does not exist"))
                })
        })
        .collect()
}

impl SinkConnector for KafkaSinkSpec {
    fn connector(&self) -> &'static str {
        "kafka"
    }
    fn exactly_once(&self) -> bool {
        self.guarantee == DeliveryGuarantee::ExactlyOnce
    }
    fn build(&self, _: &str, ctx: SinkContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(KafkaSinkOperator::new(self.clone(), ctx)?))
    }
}

pub struct KafkaSinkOperator {
    spec: KafkaSinkSpec,
    mode: Mode,
}

enum Mode {
    AtLeastOnce(BaseProducer),
    ExactlyOnce(Box<Staging>),
}

fn kafka_err(sink: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExecError + '_ {
    move |e| ExecError::Internal(format!("kafka sink {sink}: {e}"))
}

impl KafkaSinkOperator {
    pub fn new(spec: KafkaSinkSpec, ctx: SinkContext) -> Result<Self> {
        let mode = match spec.guarantee {
            DeliveryGuarantee::AtLeastOnce => {
                let mut c = ClientConfig::new();
                c.set("bootstrap.servers", &spec.bootstrap_servers);
                // librdkafka retries a failed request while later ones succeed, which
                // reorders records unless the producer is idempotent; an UPSERT sink's
                // delete and insert of a key must stay in order (Kafka's Java client
                // has it on by default).
                c.set("enable.idempotence", "true");
                for (k, v) in &spec.properties {
                    c.set(k, v);
                }
                Mode::AtLeastOnce(c.create().map_err(kafka_err(&spec.sink))?)
            }
            DeliveryGuarantee::ExactlyOnce => {
                let target = KafkaTarget::new(TxnTarget {
                    sink: spec.sink.clone(),
                    topic: spec.topic.clone(),
                    bootstrap_servers: spec.bootstrap_servers.clone(),
                    properties: spec.properties.clone(),
                    transactional_id: format!("{}-{}", spec.transactional_id_prefix, ctx.uid),
                    marker_group: format!("{}-sink-{}", spec.transactional_id_prefix, ctx.uid),
                });
                Mode::ExactlyOnce(Box::new(Staging::start(&spec.sink, Arc::new(target), ctx)?))
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
    super::kafka_txn::send(producer, record).map_err(kafka_err(topic))
}

impl Operator for KafkaSinkOperator {
    fn name(&self) -> &str {
        "KafkaSink"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let chunk = named(chunk, &self.spec.schema)?;
        let records = encode(&self.spec.format, &self.spec.sink, &chunk)?;
        match &mut self.mode {
            Mode::AtLeastOnce(producer) => {
                for r in &records {
                    send(producer, &self.spec.topic, r)?;
                }
                producer.poll(Duration::ZERO);
            }
            Mode::ExactlyOnce(s) => s.push(records)?,
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
