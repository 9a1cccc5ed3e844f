//! Sinks: the last operator of a `CREATE SINK` job, one connector per file, each
//! behind [`SinkConnector`] and registered in [`SinkSpec`] (one line each).
//!
//! - [`blackhole`]: takes every change, keeps nothing (measures the pipeline).
//! - [`kafka`]: every change as a JSON record, at least once (flushed per barrier) or
//!   exactly once (through [`two_phase`] and [`kafka_txn`]).
//! - [`kafka_txn`]: the exactly-once Kafka target: one transaction per completed
//!   checkpoint, with a commit marker that recovery reads.
//! - [`file`]: JSON lines files on object storage, exactly once (pending files renamed
//!   when a checkpoint completes).
//! - [`two_phase`]: two-phase commit for exactly-once sinks: batches staged in the
//!   sink's state at checkpoint barriers, committed when the checkpoint completes.
//! - [`latency`]: end-to-end latency per row, measured by a blackhole sink.
//! - [`format`]: PLAIN / UPSERT / DEBEZIUM records, and their checkpointed bytes.
//!
//! Each connector parses its own `WITH (...)` options beside its code, and is
//! registered by name in [`CONNECTORS`], one line each.

pub mod blackhole;
pub mod file;
pub mod format;
pub mod kafka;
pub mod kafka_txn;
pub mod latency;
pub mod two_phase;

use crate::connector_options::ConnectorOptions;
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use arrow::datatypes::Schema;
use std::sync::Arc;
use two_phase::SinkContext;
use weir_storage::object_storage::S3Settings;

/// What deploying and checking a sink needs to know about its connector.
pub trait SinkConnector: std::fmt::Debug + Send + Sync {
    /// The `connector = '...'` name.
    fn connector(&self) -> &'static str;

    /// Whether it commits exactly once (two-phase, when a checkpoint completes): its
    /// job must then checkpoint with aligned barriers and read only tables.
    fn exactly_once(&self) -> bool;

    /// How errors name its exactly-once setting.
    fn exactly_once_setting(&self) -> &'static str {
        "sink.delivery-guarantee = 'exactly-once'"
    }

    /// The sink's last operator, for the job `ctx.job` named `name`.
    fn build(&self, name: &str, ctx: SinkContext) -> Result<Box<dyn Operator>>;
}

/// The connector at the end of a `CREATE SINK` job.
#[derive(Debug, Clone)]
pub struct SinkSpec(Arc<dyn SinkConnector>);

impl SinkSpec {
    pub fn connector(&self) -> &dyn SinkConnector {
        self.0.as_ref()
    }
}

/// The sink a connector's options are checked against.
pub struct SinkTarget<'a> {
    /// The sink's name.
    pub name: &'a str,
    /// The rows it writes: column names become record fields.
    pub schema: &'a Schema,
    /// Object-storage settings, for sinks that write files.
    pub s3: &'a S3Settings,
}

/// Parses one connector's options (taking every key it knows).
type ParseOptions = fn(&mut ConnectorOptions, &SinkTarget<'_>) -> Result<Arc<dyn SinkConnector>>;

/// Every sink connector, by the name users write in `connector = '...'`.
const CONNECTORS: &[(&str, ParseOptions)] = &[
    ("blackhole", blackhole::parse_options),
    ("kafka", kafka::parse_options),
    ("file", file::parse_options),
];

/// The sink's connector from its `WITH (...)` options.
pub fn from_options(mut options: ConnectorOptions, target: &SinkTarget<'_>) -> Result<SinkSpec> {
    let Some(name) = options.take("connector") else {
        return Err(ExecError::InvalidParameter(
            "a sink needs connector = '...'".into(),
        ));
    };
    let parse = crate::connector_options::registered(CONNECTORS, &name, "sink ")?;
    // RisingWave's `type = 'append-only' | 'upsert'`: the format says it here.
    options.take("type");
    let spec = parse(&mut options, target)?;
    options.finish(&format!("{} sink", name.to_ascii_lowercase()))?;
    Ok(SinkSpec(spec))
}
