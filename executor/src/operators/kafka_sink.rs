//! The Kafka sink (at-least-once): the last operator of `CREATE SINK ... WITH
//! (connector = 'kafka')`. Every change is produced as one JSON record; at every barrier
//! the producer is flushed before the barrier goes on, so every change before a
//! checkpoint is acknowledged by the broker before the checkpoint can complete. After a
//! crash the sink resumes from its checkpoint and produces the changes after it again:
//! nothing is lost, some records may repeat. (Exactly-once, with transactions
//! committed on checkpoint completion, is designed in
//! `notes/kafka-sink-exactly-once.md`, not built.)
//!
//! Formats: `PLAIN` (the row; a delete is an error, as for an append-only sink) and
//! `DEBEZIUM` (`{"before": row | null, "after": row | null, "op": "c" | "d"}`).

use crate::barrier::Barrier;
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::BTreeMap;
use std::time::Duration;

const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFormat {
    Plain,
    Debezium,
}

#[derive(Debug, Clone)]
pub struct KafkaSinkSpec {
    pub sink: String,
    pub topic: String,
    pub bootstrap_servers: String,
    pub format: SinkFormat,
    /// `properties.*` options, passed to librdkafka as they are.
    pub properties: BTreeMap<String, String>,
}

pub struct KafkaSinkOperator {
    spec: KafkaSinkSpec,
    producer: BaseProducer,
}

fn kafka_err(sink: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExecError + '_ {
    move |e| ExecError::Internal(format!("kafka sink {sink}: {e}"))
}

impl KafkaSinkOperator {
    pub fn new(spec: KafkaSinkSpec) -> Result<Self> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &spec.bootstrap_servers);
        for (k, v) in &spec.properties {
            c.set(k, v);
        }
        let producer = c.create().map_err(kafka_err(&spec.sink))?;
        Ok(Self { spec, producer })
    }

    fn send(&self, payload: &[u8]) -> Result<()> {
        loop {
            match self
                .producer
                .send(BaseRecord::<(), [u8]>::to(&self.spec.topic).payload(payload))
            {
                Ok(()) => return Ok(()),
                Err((e, _))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(kafka_err(&self.spec.sink)(e)),
            }
        }
    }
}

/// Each row of `chunk` as a JSON object (NULLs included as `null`).
fn json_rows(chunk: &StreamChunk) -> Result<Vec<Vec<u8>>> {
    let mut buf = Vec::new();
    {
        let mut w = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
        w.write(&chunk.batch)
            .map_err(|e| ExecError::Internal(e.to_string()))?;
        w.finish().map_err(|e| ExecError::Internal(e.to_string()))?;
    }
    Ok(buf
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

impl Operator for KafkaSinkOperator {
    fn name(&self) -> &str {
        "KafkaSink"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let rows = json_rows(&chunk)?;
        for (row, op) in rows.iter().zip(chunk.ops.iter()) {
            match (self.spec.format, op) {
                (SinkFormat::Plain, Op::Insert) => self.send(row)?,
                (SinkFormat::Plain, Op::Delete) => {
                    return Err(ExecError::Internal(format!(
                        "sink {} is FORMAT PLAIN (append-only) but its input deleted a row; use FORMAT DEBEZIUM",
                        self.spec.sink
                    )))
                }
                (SinkFormat::Debezium, op) => {
                    let row = String::from_utf8_lossy(row);
                    let event = match op {
                        Op::Insert => format!(r#"{{"before":null,"after":{row},"op":"c"}}"#),
                        Op::Delete => format!(r#"{{"before":{row},"after":null,"op":"d"}}"#),
                    };
                    self.send(event.as_bytes())?;
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Everything before the barrier is acknowledged before the barrier moves on.
    fn on_barrier(&mut self, _barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        tokio::task::block_in_place(|| self.producer.flush(FLUSH_TIMEOUT))
            .map_err(kafka_err(&self.spec.sink))
    }
}
