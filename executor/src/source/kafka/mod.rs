//! The Kafka connector: reads a topic's partitions into a table.
//!
//! `scan.parallelism` reader threads per table (librdkafka's consumer is blocking;
//! default 1): reader `i` of `n` owns the partitions `p` with `p % n == i` and assigns
//! them itself (`assign()`, no consumer-group rebalancing: correctness never rests on
//! the broker's group state), starts each partition at the position the table logged
//! last or else at `scan.startup.mode`, and writes batches of decoded records into the
//! table together with the positions after them. New partitions are picked up within
//! `PARTITION_DISCOVERY` and read from their beginning. The consumer reads with
//! `isolation.level = read_committed`.

pub mod options;

use super::decode::{decode, BadIndexes, Encode};
use super::{BadRecordPolicy, SourceConnector, SourceContext};
use crate::buffering::BufferTimeout;
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::table_writer::UpsertOp;
use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::BaseProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_storage::source_positions::SourcePositions;

/// Most records per table write (one log entry).
const BATCH_RECORDS: usize = 20_000;
/// How long one poll waits for a record when the batch has none yet, so that the
/// reader still notices a dropped table or a partition change.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How often the topic's partitions are looked up again.
const PARTITION_DISCOVERY: Duration = Duration::from_secs(5);
/// How often a reader reports its partitions' positions and lag, and how long it
/// waits for the broker to tell a partition's end (then it reports no end this time).
const LAG_REPORT: Duration = Duration::from_secs(2);
const LAG_TIMEOUT: Duration = Duration::from_millis(500);
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// `scan.startup.mode`, for partitions the table has no logged position for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupMode {
    Earliest,
    Latest,
    /// `scan.startup.timestamp-millis`: the first record at or after this time.
    Timestamp(i64),
    /// The consumer group's committed offsets (`properties.group.id`), else earliest.
    GroupOffsets,
}

/// A Kafka message's metadata, as a column (`INCLUDE partition | offset | timestamp |
/// key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metadata {
    /// `int`
    Partition,
    /// `bigint`
    Offset,
    /// `timestamptz`: the message's timestamp (ms), NULL when the broker has none.
    Timestamp,
    /// `bytea`, NULL for a message without a key.
    Key,
}

impl Metadata {
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "partition" => Some(Self::Partition),
            "offset" => Some(Self::Offset),
            "timestamp" => Some(Self::Timestamp),
            "key" => Some(Self::Key),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct KafkaSpec {
    pub topic: String,
    pub bootstrap_servers: String,
    pub startup: StartupMode,
    pub encode: Encode,
    pub bad_records: BadRecordPolicy,
    /// `max.record.bytes`: larger records are bad records.
    pub max_record_bytes: usize,
    /// `properties.*` options, passed to librdkafka as they are.
    pub properties: BTreeMap<String, String>,
    /// Columns filled from message metadata (by column index); the payload fills the
    /// others.
    pub metadata: Vec<(usize, Metadata)>,
    /// `FORMAT UPSERT`: a record replaces the row with its primary key; a record
    /// without payload (a tombstone) deletes the row whose key its message key holds
    /// (encoded like the payload, primary-key columns only).
    pub upsert: bool,
    /// `scan.parallelism`: reader threads, each owning a share of the partitions.
    pub readers: u32,
}

impl KafkaSpec {
    /// Reader `reader` owns partition `p` when `p % readers == reader`.
    fn owns(&self, reader: u32, partition: i32) -> bool {
        partition.rem_euclid(self.readers.max(1) as i32) as u32 == reader
    }

    fn position_key(&self, partition: i32) -> String {
        format!("kafka:{}:{partition}", self.topic)
    }

    fn consumer(&self, table: &str) -> Result<BaseConsumer> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", format!("weir-{table}"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false");
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c.create()
            .map_err(|e| ExecError::Internal(format!("kafka consumer for {table}: {e}")))
    }
}

/// Starts `readers` threads reading `topic` into the context's table; returns once
/// they run.
impl SourceConnector for KafkaSpec {
    fn start(&self, ctx: SourceContext) -> Result<()> {
        for reader in 0..self.readers.max(1) {
            let consumer = self.consumer(ctx.table())?;
            let (spec, ctx) = (self.clone(), ctx.clone());
            std::thread::Builder::new()
                .name(format!("kafka-{}-{reader}", ctx.table()))
                .spawn(move || {
                    if let Err(e) = read(&ctx, &spec, reader, consumer) {
                        ctx.fail(&e.to_string());
                    }
                })
                .map_err(|e| ExecError::Internal(format!("cannot start the kafka reader: {e}")))?;
        }
        Ok(())
    }
}

fn partitions(consumer: &BaseConsumer, topic: &str) -> Result<Vec<i32>> {
    let md = consumer
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| ExecError::Internal(format!("kafka metadata of {topic}: {e}")))?;
    let mut ids: Vec<i32> = md
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Where each partition starts: its logged position, else the startup mode (new
/// partitions discovered later start at their beginning).
fn start_offsets(
    consumer: &BaseConsumer,
    spec: &KafkaSpec,
    parts: &[i32],
    logged: &SourcePositions,
    initial: bool,
) -> Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    let kafka_err = |e: rdkafka::error::KafkaError| ExecError::Internal(format!("kafka: {e}"));
    let mut by_time = TopicPartitionList::new();
    let mut by_group = TopicPartitionList::new();
    for &p in parts {
        let offset = match logged.get(&spec.position_key(p)) {
            Some(&next) => Offset::Offset(next as i64),
            None if !initial => Offset::Beginning,
            None => match &spec.startup {
                StartupMode::Earliest => Offset::Beginning,
                // Resolved now, not at the first fetch: records produced once the
                // reader logged "kafka source reading" are all read.
                StartupMode::Latest => {
                    let (_, high) = consumer
                        .fetch_watermarks(&spec.topic, p, METADATA_TIMEOUT)
                        .map_err(kafka_err)?;
                    Offset::Offset(high)
                }
                StartupMode::Timestamp(ms) => {
                    by_time
                        .add_partition_offset(&spec.topic, p, Offset::Offset(*ms))
                        .map_err(kafka_err)?;
                    continue;
                }
                StartupMode::GroupOffsets => {
                    by_group.add_partition(&spec.topic, p);
                    continue;
                }
            },
        };
        tpl.add_partition_offset(&spec.topic, p, offset)
            .map_err(kafka_err)?;
    }
    // Broker look-ups; a partition they find nothing for starts at the fallback (no
    // record at or after the time: the end; no committed group offset: the start).
    let mut looked_up = Vec::new();
    if by_time.count() > 0 {
        let found = consumer.offsets_for_times(by_time, METADATA_TIMEOUT);
        looked_up.push((found.map_err(kafka_err)?, Offset::End));
    }
    if by_group.count() > 0 {
        let found = consumer.committed_offsets(by_group, METADATA_TIMEOUT);
        looked_up.push((found.map_err(kafka_err)?, Offset::Beginning));
    }
    for (found, fallback) in looked_up {
        for e in found.elements() {
            let o = match e.offset() {
                Offset::Offset(o) => Offset::Offset(o),
                _ => fallback,
            };
            tpl.add_partition_offset(&spec.topic, e.partition(), o)
                .map_err(kafka_err)?;
        }
    }
    Ok(tpl)
}

/// Records polled in one batch: `(partition, offset, payload)`, and per record its
/// timestamp and key when metadata columns or upserts need them.
struct Polled {
    records: Vec<(i32, i64, Vec<u8>)>,
    meta: Vec<(Option<i64>, Option<Vec<u8>>)>,
}

/// One polled batch, decoded: plain rows or upserts, and the bad records.
struct Decoded {
    /// Rows of the good records, in record order (plain format).
    batch: Option<RecordBatch>,
    upserts: Option<Upserts>,
    bad: BadIndexes,
}

/// The schemas a reader decodes into.
struct Schemas {
    table: SchemaRef,
    /// Every column but the metadata ones: what a payload fills.
    payload: SchemaRef,
    /// The primary-key columns: what a tombstone's key fills.
    key: SchemaRef,
}

/// One reader thread: its partitions, and the positions after its last written batch.
struct Reader<'a> {
    ctx: &'a SourceContext,
    spec: &'a KafkaSpec,
    index: u32,
    consumer: BaseConsumer,
    schemas: Schemas,
    /// Only this reader's partitions: the table writer merges each reader's positions
    /// into the table's, so one reader never moves another's back.
    positions: SourcePositions,
    known: Vec<i32>,
    last_discovery: Instant,
    last_lag_report: Instant,
    /// Created on the first bad record of a dead-letter table, then reused.
    dlq_producer: Option<BaseProducer>,
}

/// Reads until the table is gone (`Ok`) or reading cannot go on (`Err`).
fn read(ctx: &SourceContext, spec: &KafkaSpec, index: u32, consumer: BaseConsumer) -> Result<()> {
    let Some(mut reader) = Reader::open(ctx, spec, index, consumer)? else {
        return Ok(());
    };
    loop {
        let polled = reader.poll();
        let decoded = reader.decode(&polled)?;
        reader.handle_bad_records(&polled, &decoded)?;
        if !reader.write_batch(&polled, &decoded)? {
            return Ok(());
        }
        reader.discover_partitions()?;
        reader.report_lag();
    }
}

impl<'a> Reader<'a> {
    /// Assigns this reader's partitions at their start offsets; `None`: no table.
    fn open(
        ctx: &'a SourceContext,
        spec: &'a KafkaSpec,
        index: u32,
        consumer: BaseConsumer,
    ) -> Result<Option<Self>> {
        let Some(start) = ctx.start() else {
            return Ok(None);
        };
        if spec.upsert && start.primary_key.is_empty() {
            return Err(ExecError::Internal(format!(
                "FORMAT UPSERT needs a primary key on {}",
                ctx.table()
            )));
        }
        let schema = &start.schema;
        let columns = |keep: &dyn Fn(usize) -> bool| -> SchemaRef {
            Arc::new(Schema::new(
                (0..schema.fields().len())
                    .filter(|&i| keep(i))
                    .map(|i| schema.field(i).clone())
                    .collect::<Vec<_>>(),
            ))
        };
        let schemas = Schemas {
            payload: columns(&|i| !spec.metadata.iter().any(|(c, _)| *c == i)),
            key: Arc::new(Schema::new(
                start
                    .primary_key
                    .iter()
                    .map(|&c| schema.field(c).clone())
                    .collect::<Vec<_>>(),
            )),
            table: start.schema.clone(),
        };
        let mut reader = Reader {
            ctx,
            spec,
            index,
            schemas,
            positions: start.positions,
            known: vec![],
            last_discovery: Instant::now(),
            last_lag_report: Instant::now(),
            dlq_producer: None,
            consumer,
        };
        reader.known = reader.my_partitions()?;
        let known = &reader.known;
        reader
            .positions
            .retain(|k, _| known.iter().any(|p| spec.position_key(*p) == *k));
        let tpl = start_offsets(&reader.consumer, spec, known, &reader.positions, true)?;
        reader
            .consumer
            .assign(&tpl)
            .map_err(|e| ExecError::Internal(format!("kafka assign: {e}")))?;
        tracing::info!(table = %ctx.table(), topic = %spec.topic, partitions = reader.known.len(), "kafka source reading");
        Ok(Some(reader))
    }

    fn my_partitions(&self) -> Result<Vec<i32>> {
        let all = partitions(&self.consumer, &self.spec.topic)?;
        Ok(all
            .into_iter()
            .filter(|p| self.spec.owns(self.index, *p))
            .collect())
    }

    /// One batch: up to BATCH_RECORDS records, written once its first record has
    /// waited the buffer timeout (`execution.buffer-timeout.interval`), or at once
    /// when nothing more is there with the timeout `0`. With none, after IDLE_POLL.
    fn poll(&self) -> Polled {
        let idle_until = Instant::now() + IDLE_POLL;
        let timeout = self.ctx.buffer_timeout();
        // When the batch's first record came.
        let mut first_at: Option<Instant> = None;
        let keep_meta = !self.spec.metadata.is_empty() || self.spec.upsert;
        let mut polled = Polled {
            records: vec![],
            meta: vec![],
        };
        while polled.records.len() < BATCH_RECORDS {
            let now = Instant::now();
            let wait = match first_at.map(|first| timeout.deadline(first)) {
                None if now >= idle_until => break,
                None => idle_until - now,
                // Immediate: what the client already holds, then the batch goes.
                Some(_) if timeout == BufferTimeout::Immediate => Duration::ZERO,
                Some(Some(t)) if now >= t => break,
                Some(Some(t)) => t - now,
                // FullOnly: the batch waits until it is full.
                Some(None) => IDLE_POLL,
            };
            match self.consumer.poll(wait) {
                None if timeout == BufferTimeout::Immediate && first_at.is_some() => break,
                None => {}
                Some(Ok(m)) => {
                    first_at.get_or_insert_with(Instant::now);
                    polled.records.push((
                        m.partition(),
                        m.offset(),
                        m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    ));
                    if keep_meta {
                        polled
                            .meta
                            .push((m.timestamp().to_millis(), m.key().map(<[u8]>::to_vec)));
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(table = %self.ctx.table(), error = %e, "kafka poll");
                    break;
                }
            }
        }
        polled
    }

    fn decode(&self, p: &Polled) -> Result<Decoded> {
        let (spec, s) = (self.spec, &self.schemas);
        if spec.upsert {
            let (u, bad) = decode_upserts(spec, s, &p.records, &p.meta)?;
            return Ok(Decoded {
                batch: None,
                upserts: Some(u),
                bad,
            });
        }
        let payloads: Vec<&[u8]> = p.records.iter().map(|(_, _, b)| b.as_slice()).collect();
        let (batch, bad) = decode(&s.payload, &spec.encode, &payloads, spec.max_record_bytes)?;
        let batch = match batch {
            Some(b) if !spec.metadata.is_empty() => {
                let good: Vec<usize> = (0..p.records.len())
                    .filter(|i| !bad.iter().any(|(b, _)| b == i))
                    .collect();
                Some(with_metadata(
                    &s.table, spec, b, &good, &p.records, &p.meta,
                )?)
            }
            other => other,
        };
        Ok(Decoded {
            batch,
            upserts: None,
            bad,
        })
    }

    /// The positions after `records`, on top of the written ones.
    fn positions_after(&self, records: &[(i32, i64, Vec<u8>)]) -> SourcePositions {
        let mut next = self.positions.clone();
        for (p, o, _) in records {
            next.insert(self.spec.position_key(*p), (*o + 1) as u64);
        }
        next
    }

    /// Applies `bad_records`: `fail` writes the records before the first bad one and
    /// stops; `dead-letter` copies them out; all are counted and listed.
    fn handle_bad_records(&mut self, p: &Polled, d: &Decoded) -> Result<()> {
        let spec = self.spec;
        if let (Some((i, reason)), BadRecordPolicy::Fail) = (d.bad.first(), &spec.bad_records) {
            let (part, offset, _) = &p.records[*i];
            let msg = format!(
                "bad record in {} partition {part} offset {offset}: {reason} (bad_records = 'fail': ingestion stopped)",
                spec.topic
            );
            // The records before it are kept: written with the positions up to it.
            let upto = self.positions_after(&p.records[..*i]);
            self.write(d, *i, upto).unwrap_or(Ok(()))?;
            self.ctx.bad_record(*part, *offset, msg.clone());
            return Err(ExecError::Internal(msg));
        }
        if let (BadRecordPolicy::DeadLetter(dlq), false) = (&spec.bad_records, d.bad.is_empty()) {
            dead_letter(spec, &mut self.dlq_producer, dlq, &d.bad, &p.records)?;
        }
        for (i, reason) in &d.bad {
            let (part, offset, _) = &p.records[*i];
            self.ctx.bad_record(*part, *offset, reason.clone());
        }
        Ok(())
    }

    /// Writes the batch with the positions after it; `false` once the table is gone.
    fn write_batch(&mut self, p: &Polled, d: &Decoded) -> Result<bool> {
        let next = self.positions_after(&p.records);
        if next == self.positions {
            return Ok(self.ctx.is_open());
        }
        match self.write(d, p.records.len(), next.clone()) {
            None => Ok(false),
            Some(Ok(())) => {
                self.positions = next;
                Ok(true)
            }
            Some(Err(e)) => Err(ExecError::Internal(format!(
                "writing records of {} into {}: {e}",
                self.spec.topic,
                self.ctx.table()
            ))),
        }
    }

    /// Writes the decoded records before record index `upto`, logged with `positions`.
    /// `None` when the table was dropped.
    fn write(&self, d: &Decoded, upto: usize, positions: SourcePositions) -> Option<Result<()>> {
        if let Some(u) = &d.upserts {
            let ops: Vec<UpsertOp> = u
                .order
                .iter()
                .filter(|(r, _)| *r < upto)
                .map(|(_, op)| *op)
                .collect();
            return self.ctx.upsert(&u.rows, &u.keys, &ops, positions);
        }
        // Every record before the first bad one is good, so the first `upto` rows are
        // exactly those records (`upto` is at most the row count whenever it is not
        // the whole batch).
        let rows = match &d.batch {
            Some(b) => b.slice(0, upto.min(b.num_rows())),
            None => RecordBatch::new_empty(self.schemas.table.clone()),
        };
        self.ctx.write(StreamChunk::inserts(rows), positions)
    }

    /// Every LAG_REPORT, each partition's position and end (its high watermark, asked
    /// of the broker with a short timeout: Flink's Kafka source polls end offsets too).
    fn report_lag(&mut self) {
        if self.last_lag_report.elapsed() < LAG_REPORT {
            return;
        }
        self.last_lag_report = Instant::now();
        for &p in &self.known {
            // A partition nothing was read from yet has no position to report.
            let Some(&position) = self.positions.get(&self.spec.position_key(p)) else {
                continue;
            };
            let end = self
                .consumer
                .fetch_watermarks(&self.spec.topic, p, LAG_TIMEOUT)
                .ok()
                .map(|(_, high)| high)
                .filter(|h| *h >= 0);
            self.ctx
                .partition_position("kafka", p, position as i64, end);
        }
    }

    /// Every PARTITION_DISCOVERY, assigns partitions added to the topic since.
    fn discover_partitions(&mut self) -> Result<()> {
        if self.last_discovery.elapsed() < PARTITION_DISCOVERY {
            return Ok(());
        }
        self.last_discovery = Instant::now();
        let now = self.my_partitions()?;
        let added: Vec<i32> = now
            .iter()
            .filter(|p| !self.known.contains(p))
            .copied()
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        tracing::info!(table = %self.ctx.table(), partitions = ?added, "kafka source found new partitions");
        // Every record polled so far is written, so the partitions already assigned
        // are exactly where the table's log says: only add the new.
        let more = start_offsets(&self.consumer, self.spec, &added, &self.positions, false)?;
        self.consumer
            .incremental_assign(&more)
            .map_err(|e| ExecError::Internal(format!("kafka assign: {e}")))?;
        self.known = now;
        Ok(())
    }
}

/// The table's rows: payload columns from `payload`, metadata columns from the good
/// records' messages (`good`: their indexes in the polled batch).
fn with_metadata(
    schema: &arrow::datatypes::SchemaRef,
    spec: &KafkaSpec,
    payload: arrow::array::RecordBatch,
    good: &[usize],
    records: &[(i32, i64, Vec<u8>)],
    meta: &[(Option<i64>, Option<Vec<u8>>)],
) -> Result<arrow::array::RecordBatch> {
    use arrow::array::{ArrayRef, BinaryArray, Int32Array, Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, TimeUnit};
    let mut payload_columns = payload.columns().iter();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let array: ArrayRef = match spec.metadata.iter().find(|(c, _)| *c == i) {
            None => payload_columns
                .next()
                .cloned()
                .ok_or_else(|| ExecError::Internal("payload has too few columns".into()))?,
            Some((_, Metadata::Partition)) => Arc::new(Int32Array::from_iter_values(
                good.iter().map(|&g| records[g].0),
            )),
            Some((_, Metadata::Offset)) => Arc::new(Int64Array::from_iter_values(
                good.iter().map(|&g| records[g].1),
            )),
            Some((_, Metadata::Timestamp)) => {
                let a = TimestampMillisecondArray::from_iter(good.iter().map(|&g| meta[g].0));
                match field.data_type() {
                    DataType::Timestamp(TimeUnit::Millisecond, tz) => {
                        Arc::new(a.with_timezone_opt(tz.clone()))
                    }
                    other => arrow::compute::cast(&a, other)
                        .map_err(|e| ExecError::Internal(e.to_string()))?,
                }
            }
            Some((_, Metadata::Key)) => Arc::new(BinaryArray::from_iter(
                good.iter().map(|&g| meta[g].1.as_deref()),
            )),
        };
        columns.push(array);
    }
    arrow::array::RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| ExecError::Internal(format!("metadata columns: {e}")))
}

/// Copies bad records to the dead-letter topic and waits for the broker's
/// acknowledgement, before their batch's positions are logged.
fn dead_letter(
    spec: &KafkaSpec,
    producer: &mut Option<rdkafka::producer::BaseProducer>,
    topic: &str,
    bad: &[(usize, String)],
    records: &[(i32, i64, Vec<u8>)],
) -> Result<()> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let err = |e: rdkafka::error::KafkaError| {
        ExecError::Internal(format!("dead-letter topic {topic}: {e}"))
    };
    if producer.is_none() {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &spec.bootstrap_servers);
        for (k, v) in &spec.properties {
            c.set(k, v);
        }
        *producer = Some(c.create().map_err(err)?);
    }
    let producer: &BaseProducer = producer.as_ref().expect("created above");
    for (i, reason) in bad {
        let (p, o, payload) = &records[*i];
        let key = format!("{}/{p}/{o}", spec.topic);
        let headers = OwnedHeaders::new().insert(Header {
            key: "weir.reason",
            value: Some(reason.as_bytes()),
        });
        producer
            .send(
                BaseRecord::to(topic)
                    .key(key.as_bytes())
                    .payload(payload.as_slice())
                    .headers(headers),
            )
            .map_err(|(e, _)| err(e))?;
    }
    producer.flush(METADATA_TIMEOUT).map_err(err)
}

/// An upsert batch: whole rows, deleted keys, and the records in arrival order
/// (record index, operation).
struct Upserts {
    rows: arrow::array::RecordBatch,
    keys: arrow::array::RecordBatch,
    order: Vec<(usize, UpsertOp)>,
}

/// Decodes a `FORMAT UPSERT` batch: payloads into rows, tombstones' message keys into
/// primary keys. Returns the upserts and the bad records (by record index).
fn decode_upserts(
    spec: &KafkaSpec,
    schemas: &Schemas,
    records: &[(i32, i64, Vec<u8>)],
    meta: &[(Option<i64>, Option<Vec<u8>>)],
) -> Result<(Upserts, BadIndexes)> {
    let (schema, payload_schema, pk_schema) = (&schemas.table, &schemas.payload, &schemas.key);
    let (puts, tombs): (Vec<usize>, Vec<usize>) =
        (0..records.len()).partition(|&i| !records[i].2.is_empty());
    let mut bad = Vec::new();
    // Rows.
    let payloads: Vec<&[u8]> = puts.iter().map(|&i| records[i].2.as_slice()).collect();
    let (rows, put_bad) = decode(
        payload_schema,
        &spec.encode,
        &payloads,
        spec.max_record_bytes,
    )?;
    bad.extend(put_bad.into_iter().map(|(j, r)| (puts[j], r)));
    let good_puts: Vec<usize> = puts
        .iter()
        .copied()
        .filter(|i| !bad.iter().any(|(b, _)| b == i))
        .collect();
    let rows = match rows {
        Some(b) if !spec.metadata.is_empty() => {
            with_metadata(schema, spec, b, &good_puts, records, meta)?
        }
        Some(b) => b,
        None => arrow::array::RecordBatch::new_empty(schema.clone()),
    };
    // Tombstones' keys.
    let mut keyed = Vec::new();
    for &i in &tombs {
        match meta.get(i).and_then(|(_, k)| k.as_deref()) {
            Some(_) => keyed.push(i),
            None => bad.push((i, "a tombstone (no payload) without a message key".into())),
        }
    }
    let keys_raw: Vec<&[u8]> = keyed
        .iter()
        .map(|&i| meta[i].1.as_deref().unwrap_or_default())
        .collect();
    let (keys, key_bad) = decode(pk_schema, &spec.encode, &keys_raw, spec.max_record_bytes)?;
    bad.extend(
        key_bad
            .into_iter()
            .map(|(j, r)| (keyed[j], format!("tombstone key: {r}"))),
    );
    let good_tombs: Vec<usize> = keyed
        .iter()
        .copied()
        .filter(|i| !bad.iter().any(|(b, _)| b == i))
        .collect();
    let keys = keys.unwrap_or_else(|| arrow::array::RecordBatch::new_empty(pk_schema.clone()));
    bad.sort_by_key(|(i, _)| *i);
    // Both lists are ascending: merge them back into arrival order.
    let mut order = Vec::with_capacity(good_puts.len() + good_tombs.len());
    let (mut p, mut t) = (0, 0);
    while p < good_puts.len() || t < good_tombs.len() {
        if t >= good_tombs.len() || (p < good_puts.len() && good_puts[p] < good_tombs[t]) {
            order.push((good_puts[p], UpsertOp::Upsert(p)));
            p += 1;
        } else {
            order.push((good_tombs[t], UpsertOp::Delete(t)));
            t += 1;
        }
    }
    Ok((Upserts { rows, keys, order }, bad))
}
