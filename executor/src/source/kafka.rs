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

use super::decode::{decode, Encode};
use super::{BadRecord, BadRecordPolicy};
use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use crate::runtime::Runtime;
use crate::table_writer::UpsertOp;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use weir_storage::source_positions::SourcePositions;

/// Most records per table write (one log entry).
const BATCH_RECORDS: usize = 20_000;
/// Longest a batch waits to fill before it is written.
const BATCH_WAIT: Duration = Duration::from_millis(100);
/// How often the topic's partitions are looked up again.
const PARTITION_DISCOVERY: Duration = Duration::from_secs(5);
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
    pub table: String,
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

    fn consumer(&self) -> Result<BaseConsumer> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", format!("weir-{}", self.table))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false");
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c.create()
            .map_err(|e| ExecError::Internal(format!("kafka consumer for {}: {e}", self.table)))
    }
}

/// Starts reading `spec.topic` into `spec.table`; returns once the reader runs. The
/// reader stops by itself when the table is dropped.
pub fn spawn(rt: &Arc<Runtime>, spec: KafkaSpec) -> Result<()> {
    rt.note_connector(&spec.table);
    for reader in 0..spec.readers.max(1) {
        let consumer = spec.consumer()?;
        let weak = Arc::downgrade(rt);
        let handle = tokio::runtime::Handle::current();
        let spec = spec.clone();
        std::thread::Builder::new()
            .name(format!("kafka-{}-{reader}", spec.table))
            .spawn(move || {
                if let Err(e) = read(&weak, &handle, &spec, reader, consumer) {
                    tracing::error!(table = %spec.table, error = %e, "kafka source stopped");
                    if let Some(rt) = weak.upgrade() {
                        rt.fail_source(&spec.table, &e.to_string());
                    }
                }
            })
            .map_err(|e| ExecError::Internal(format!("cannot start the kafka reader: {e}")))?;
    }
    Ok(())
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

/// One polled batch, decoded: plain rows, or upserts.
struct Decoded<'a> {
    schema: &'a arrow::datatypes::SchemaRef,
    /// Rows of the good records, in record order (plain format).
    batch: &'a Option<arrow::array::RecordBatch>,
    upserts: &'a Option<Upserts>,
}

/// Writes the decoded records before record index `upto` into the table, logged with
/// `positions`. `None` when the table was dropped.
fn write(
    rt: &Runtime,
    handle: &tokio::runtime::Handle,
    spec: &KafkaSpec,
    d: Decoded<'_>,
    upto: usize,
    positions: SourcePositions,
) -> Option<Result<()>> {
    handle.block_on(async {
        let mut w = rt.lock_writes().await;
        let t = w.table(&spec.table)?;
        Some(match d.upserts {
            Some(u) => {
                let ops: Vec<UpsertOp> = u
                    .order
                    .iter()
                    .filter(|(r, _)| *r < upto)
                    .map(|(_, op)| *op)
                    .collect();
                t.upsert_from_source(&u.rows, &u.keys, &ops, positions)
                    .await
            }
            None => {
                // Every record before the first bad one is good, so the first `upto`
                // rows are exactly those records (`upto` is at most the row count
                // whenever it is not the whole batch).
                let rows = match d.batch {
                    Some(b) => b.slice(0, upto.min(b.num_rows())),
                    None => arrow::array::RecordBatch::new_empty(d.schema.clone()),
                };
                t.write_from_source(StreamChunk::inserts(rows), positions)
                    .await
            }
        })
    })
}

fn read(
    rt: &Weak<Runtime>,
    handle: &tokio::runtime::Handle,
    spec: &KafkaSpec,
    reader: u32,
    consumer: BaseConsumer,
) -> Result<()> {
    let (schema, mut positions, pk) = {
        let Some(rt) = rt.upgrade() else {
            return Ok(());
        };
        let mut w = handle.block_on(rt.lock_writes());
        let Some(t) = w.table(&spec.table) else {
            return Ok(());
        };
        (
            t.schema.clone(),
            t.source_positions().clone(),
            t.primary_key().to_vec(),
        )
    };
    if spec.upsert && pk.is_empty() {
        return Err(ExecError::Internal(format!(
            "FORMAT UPSERT needs a primary key on {}",
            spec.table
        )));
    }
    let pk_schema: arrow::datatypes::SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        pk.iter()
            .map(|&c| schema.field(c).clone())
            .collect::<Vec<_>>(),
    ));
    // The payload fills every column but the metadata ones.
    let payload_schema: arrow::datatypes::SchemaRef = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| !spec.metadata.iter().any(|(c, _)| c == i))
            .map(|(_, f)| f.as_ref().clone())
            .collect::<Vec<_>>(),
    ));
    // This reader's partitions, and only their positions: the table writer merges each
    // reader's positions into the table's, so one reader never moves another's back.
    let mine =
        |all: Vec<i32>| -> Vec<i32> { all.into_iter().filter(|p| spec.owns(reader, *p)).collect() };
    let mut known = mine(partitions(&consumer, &spec.topic)?);
    positions.retain(|k, _| known.iter().any(|p| spec.position_key(*p) == *k));
    let tpl = start_offsets(&consumer, spec, &known, &positions, true)?;
    consumer
        .assign(&tpl)
        .map_err(|e| ExecError::Internal(format!("kafka assign: {e}")))?;
    let mut last_discovery = Instant::now();
    // Created on the first bad record of a dead-letter table, then reused.
    let mut dlq_producer = None;
    tracing::info!(table = %spec.table, topic = %spec.topic, partitions = known.len(), "kafka source reading");
    loop {
        // One batch: up to BATCH_RECORDS records or BATCH_WAIT.
        let started = Instant::now();
        let mut records: Vec<(i32, i64, Vec<u8>)> = Vec::new();
        let mut meta: Vec<(Option<i64>, Option<Vec<u8>>)> = Vec::new();
        while records.len() < BATCH_RECORDS && started.elapsed() < BATCH_WAIT {
            match consumer.poll(Duration::from_millis(20)) {
                None => {}
                Some(Ok(m)) => {
                    records.push((
                        m.partition(),
                        m.offset(),
                        m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    ));
                    if !spec.metadata.is_empty() || spec.upsert {
                        meta.push((m.timestamp().to_millis(), m.key().map(<[u8]>::to_vec)));
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(table = %spec.table, error = %e, "kafka poll");
                    break;
                }
            }
        }
        let Some(rt) = rt.upgrade() else {
            return Ok(());
        };
        let mut next = positions.clone();
        for (p, o, _) in &records {
            next.insert(spec.position_key(*p), (*o + 1) as u64);
        }
        let (batch, bad, upserts) = if spec.upsert {
            let (u, bad) = decode_upserts(
                spec,
                (&schema, &payload_schema, &pk_schema),
                &records,
                &meta,
            )?;
            (None, bad, Some(u))
        } else {
            let payloads: Vec<&[u8]> = records.iter().map(|(_, _, b)| b.as_slice()).collect();
            let (batch, bad) = decode(
                &payload_schema,
                &spec.encode,
                &payloads,
                spec.max_record_bytes,
            )?;
            let batch = match batch {
                Some(b) if !spec.metadata.is_empty() => {
                    let good: Vec<usize> = (0..records.len())
                        .filter(|i| !bad.iter().any(|(b, _)| b == i))
                        .collect();
                    Some(with_metadata(&schema, spec, b, &good, &records, &meta)?)
                }
                other => other,
            };
            (batch, bad, None)
        };
        if let Some((i, reason)) = bad.first() {
            let (p, o, _) = &records[*i];
            if spec.bad_records == BadRecordPolicy::Fail {
                let msg = format!(
                    "bad record in {} partition {p} offset {o}: {reason} (bad_records = 'fail': ingestion stopped)",
                    spec.topic
                );
                // The records before it are kept: written with the positions up to it.
                let mut upto = positions.clone();
                for (p, o, _) in &records[..*i] {
                    upto.insert(spec.position_key(*p), (*o + 1) as u64);
                }
                let decoded = Decoded {
                    schema: &schema,
                    batch: &batch,
                    upserts: &upserts,
                };
                write(&rt, handle, spec, decoded, *i, upto).unwrap_or(Ok(()))?;
                rt.note_bad_record(BadRecord {
                    table: spec.table.clone(),
                    partition: *p,
                    offset: *o,
                    reason: msg.clone(),
                    at_ms: crate::checkpoint::uploader::chrono_now_ms(),
                });
                return Err(ExecError::Internal(msg));
            }
        }
        if let (BadRecordPolicy::DeadLetter(dlq), false) = (&spec.bad_records, bad.is_empty()) {
            dead_letter(spec, &mut dlq_producer, dlq, &bad, &records)?;
        }
        for (i, reason) in &bad {
            let (p, o, _) = &records[*i];
            rt.note_bad_record(BadRecord {
                table: spec.table.clone(),
                partition: *p,
                offset: *o,
                reason: reason.clone(),
                at_ms: crate::checkpoint::uploader::chrono_now_ms(),
            });
        }
        if next != positions {
            let decoded = Decoded {
                schema: &schema,
                batch: &batch,
                upserts: &upserts,
            };
            match write(&rt, handle, spec, decoded, records.len(), next.clone()) {
                None => return Ok(()), // the table was dropped
                Some(Ok(())) => positions = next,
                Some(Err(e)) => {
                    return Err(ExecError::Internal(format!(
                        "writing records of {} into {}: {e}",
                        spec.topic, spec.table
                    )))
                }
            }
        }
        if last_discovery.elapsed() >= PARTITION_DISCOVERY {
            last_discovery = Instant::now();
            let now = mine(partitions(&consumer, &spec.topic)?);
            let added: Vec<i32> = now.iter().filter(|p| !known.contains(p)).copied().collect();
            if !added.is_empty() {
                tracing::info!(table = %spec.table, partitions = ?added, "kafka source found new partitions");
                // Every record polled so far is written, so the partitions already
                // assigned are exactly where the table's log says: only add the new.
                let more = start_offsets(&consumer, spec, &added, &positions, false)?;
                consumer
                    .incremental_assign(&more)
                    .map_err(|e| ExecError::Internal(format!("kafka assign: {e}")))?;
                known = now;
            }
        }
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
    (schema, payload_schema, pk_schema): (
        &arrow::datatypes::SchemaRef,
        &arrow::datatypes::SchemaRef,
        &arrow::datatypes::SchemaRef,
    ),
    records: &[(i32, i64, Vec<u8>)],
    meta: &[(Option<i64>, Option<Vec<u8>>)],
) -> Result<(Upserts, super::decode::BadIndexes)> {
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
