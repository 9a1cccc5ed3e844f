//! Connectors that feed tables: `CREATE TABLE t (...) WITH (connector = 'kafka', ...)`.
//!
//! A connector-fed table is an ordinary table whose writes come from the connector: each
//! batch of records is logged (fsynced) together with the connector's positions after
//! it ([`weir_storage::source_positions`]), so rows and positions are durable as one,
//! and checkpoints carry the positions in the table's own metadata. After a crash the
//! table resumes exactly after its last logged batch: no duplicate and no gap, without
//! depending on the broker's consumer-group commits. Views over the table are restored
//! and replay from the table's log as for any table.
//!
//! - [`decode`]: record payloads (JSON, CSV) to Arrow rows, bad records singled out.
//! - [`kafka`]: the Kafka reader (librdkafka): partitions, startup modes, polling.
//! - [`nexmark`]: the Nexmark generator (person, auction, bid), deterministic by event
//!   index, positioned like a Kafka partition.
//! - [`datagen`]: sequence and random columns (Flink's and RisingWave's `datagen`).
//! - [`generated`]: the write loop both generators share.

pub mod datagen;
pub mod decode;
pub mod generated;
pub mod kafka;
pub mod nexmark;

/// A table's connector.
#[derive(Debug, Clone)]
pub enum SourceSpec {
    Kafka(kafka::KafkaSpec),
    Nexmark(nexmark::NexmarkSpec),
    Datagen(datagen::DatagenSpec),
}

/// Starts the connector feeding its table.
pub fn spawn(rt: &std::sync::Arc<crate::Runtime>, spec: SourceSpec) -> crate::Result<()> {
    match spec {
        SourceSpec::Kafka(k) => kafka::spawn(rt, k),
        SourceSpec::Nexmark(n) => nexmark::spawn(rt, n),
        SourceSpec::Datagen(d) => datagen::spawn(rt, d),
    }
}

impl SourceSpec {
    /// How a generator's rows are made again (for an unstored source); `None` for a
    /// Kafka source, whose records exist only once.
    pub fn generated_rows(&self) -> Option<generated::GeneratedRows> {
        match self {
            SourceSpec::Kafka(_) => None,
            SourceSpec::Nexmark(n) => Some(nexmark::generated_rows(n)),
            SourceSpec::Datagen(d) => Some(datagen::generated_rows(d)),
        }
    }
}

/// What to do with a record that cannot be decoded into the table's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRecordPolicy {
    /// Count it (metric `weir_sourceBadRecords`, `SHOW SOURCE ERRORS`) and go on.
    Skip,
    /// Stop ingesting; the error names the record's partition and offset.
    Fail,
    /// Copy it to this Kafka topic (same broker; key `<topic>/<partition>/<offset>`,
    /// the original payload, the reason in header `weir.reason`), count it and go on.
    /// Copied before the batch's positions are logged: at least once.
    DeadLetter(String),
}

impl BadRecordPolicy {
    /// `skip`, `fail`, or `dead-letter` with the topic it needs.
    pub fn parse(s: &str, dead_letter_topic: Option<String>) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "skip" => Some(Self::Skip),
            "fail" => Some(Self::Fail),
            "dead-letter" => dead_letter_topic.map(Self::DeadLetter),
            _ => None,
        }
    }
}

/// One skipped record, for `SHOW SOURCE ERRORS`.
#[derive(Debug, Clone)]
pub struct BadRecord {
    pub table: String,
    pub partition: i32,
    pub offset: i64,
    pub reason: String,
    pub at_ms: i64,
}

/// Most bad records kept for `SHOW SOURCE ERRORS` (oldest dropped first).
pub const BAD_RECORDS_KEPT: usize = 1000;
