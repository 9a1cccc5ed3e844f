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
//! - [`context`]: what a connector may do with its table (it never sees the runtime).
//!
//! Each connector parses its own `WITH (...)` options beside its code and is
//! registered by name in [`CONNECTORS`], one line each.

pub mod context;
pub mod datagen;
pub mod decode;
pub mod generated;
pub mod kafka;
pub mod nexmark;

use crate::connector_options::ConnectorOptions;
use crate::error::{ExecError, Result};
pub use context::SourceContext;
use std::sync::Arc;

/// A table's connector: what `CREATE TABLE ... WITH (connector = '...')` parsed into.
pub trait SourceConnector: std::fmt::Debug + Send + Sync {
    /// Starts feeding the context's table; returns once the connector runs. It stops
    /// by itself when the table is dropped.
    fn start(&self, ctx: SourceContext) -> Result<()>;

    /// How its rows are made again for an unstored source (`CREATE SOURCE` over a
    /// generator); `None` for a connector whose records exist only once (Kafka).
    fn generated_rows(&self) -> Option<generated::GeneratedRows> {
        None
    }
}

pub type SourceSpec = Arc<dyn SourceConnector>;

/// The table a connector's options are checked against.
pub struct ConnectorTable<'a> {
    pub name: &'a str,
    /// Column names, in order (`INCLUDE ... AS name`, generator fields).
    pub columns: &'a [String],
    pub has_primary_key: bool,
}

/// Parses one connector's options (taking every key it knows).
type ParseOptions = fn(&mut ConnectorOptions, &ConnectorTable<'_>) -> Result<SourceSpec>;

/// Every source connector, by the name users write in `connector = '...'`.
const CONNECTORS: &[(&str, ParseOptions)] = &[
    ("kafka", kafka::options::parse),
    ("nexmark", nexmark::options::parse),
    ("datagen", datagen::parse_options),
];

/// The table's connector from its `WITH (...)` options; `None` for a table written by
/// SQL only (which then takes no options).
pub fn from_options(
    mut options: ConnectorOptions,
    table: &ConnectorTable<'_>,
) -> Result<Option<SourceSpec>> {
    let Some(name) = options.take("connector") else {
        return match options.first_unknown() {
            Some(k) => Err(ExecError::InvalidParameter(format!(
                "unknown table option \"{k}\" (a table takes options only with a connector)"
            ))),
            None => Ok(None),
        };
    };
    let parse = crate::connector_options::registered(CONNECTORS, &name, "")?;
    let spec = parse(&mut options, table)?;
    options.finish(&format!("{} connector", name.to_ascii_lowercase()))?;
    Ok(Some(spec))
}

/// Starts `spec` feeding `table`.
pub fn spawn(rt: &Arc<crate::Runtime>, table: &str, spec: &SourceSpec) -> Result<()> {
    spec.start(SourceContext::new(rt, table))
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
