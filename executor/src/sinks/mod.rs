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
//! - [`format`]: PLAIN / UPSERT / DEBEZIUM records, and their checkpointed bytes.
//!
//! The server parses each connector's options (`server/src/sink.rs`) into its spec.

pub mod blackhole;
pub mod file;
pub mod format;
pub mod kafka;
pub mod kafka_txn;
pub mod two_phase;

use crate::error::Result;
use crate::operator::Operator;
use two_phase::SinkContext;

/// What deploying and checking a sink needs to know about its connector.
pub trait SinkConnector {
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
pub enum SinkSpec {
    Blackhole(blackhole::BlackholeSpec),
    Kafka(kafka::KafkaSinkSpec),
    File(file::FileSinkSpec),
}

impl SinkSpec {
    pub fn connector(&self) -> &dyn SinkConnector {
        match self {
            SinkSpec::Blackhole(s) => s,
            SinkSpec::Kafka(s) => s,
            SinkSpec::File(s) => s,
        }
    }
}
