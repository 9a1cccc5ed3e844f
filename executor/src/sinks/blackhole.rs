//! Blackhole: the last operator of a `connector = 'blackhole'` sink. It takes every
//! change and keeps nothing: a sink that measures the pipeline in front of it (the
//! changes that reach it count in `weir_sinkRecordsIn{job}`), as Flink's and
//! RisingWave's do.
//!
//! With `blackhole.checksum = 'true'` it also keeps a [`ChangeDigest`] of what it
//! received in this process (net rows and an order-independent checksum, read with
//! [`received`]): the Nexmark bench checks each query's output with it. It counts
//! what arrives, so a job that restarts and replays is counted twice.

use super::latency::LatencyProbe;
use super::two_phase::SinkContext;
use super::{SinkConnector, SinkTarget};
use crate::chunk::StreamChunk;
use crate::connector_options::{invalid, ConnectorOptions};
use crate::digest::ChangeDigest;
use crate::error::Result;
use crate::operator::Operator;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// `connector = 'blackhole'`; `blackhole.checksum`.
#[derive(Debug, Clone)]
pub struct BlackholeSpec {
    checksum: bool,
    /// `blackhole.latency.column` (its index) and `blackhole.latency.offset.ms`.
    latency: Option<(usize, i64)>,
}

/// Any FORMAT ... ENCODE is accepted: nothing is encoded.
pub(crate) fn parse_options(
    o: &mut ConnectorOptions,
    target: &SinkTarget<'_>,
) -> Result<Arc<dyn SinkConnector>> {
    o.take("format");
    o.take("encode");
    let checksum = o.take_bool("blackhole.checksum")?.unwrap_or(false);
    let offset = o.take_number("blackhole.latency.offset.ms")?;
    let latency = match o.take("blackhole.latency.column") {
        Some(column) => Some((
            LatencyProbe::column_of(target.schema, &column)?,
            offset.unwrap_or(0.0) as i64,
        )),
        None if offset.is_some() => {
            return Err(invalid(
                "blackhole.latency.offset.ms needs blackhole.latency.column",
            ))
        }
        None => None,
    };
    Ok(Arc::new(BlackholeSpec { checksum, latency }))
}

impl SinkConnector for BlackholeSpec {
    fn connector(&self) -> &'static str {
        "blackhole"
    }
    fn exactly_once(&self) -> bool {
        false
    }
    fn build(&self, name: &str, _: SinkContext) -> Result<Box<dyn Operator>> {
        let mut op = BlackholeOperator::new(name);
        if self.checksum {
            op.digest = Some(digest_of(name));
        }
        if let Some((column, offset_ms)) = &self.latency {
            op.latency = Some(LatencyProbe::new(name, *column, *offset_ms));
        }
        Ok(Box::new(op))
    }
}

type SharedDigest = Arc<Mutex<ChangeDigest>>;

/// Each checksumming blackhole's digest, by sink name: its parallel instances (and
/// its redeployments) add into one.
static DIGESTS: LazyLock<Mutex<HashMap<String, SharedDigest>>> = LazyLock::new(Default::default);

fn digest_of(sink: &str) -> SharedDigest {
    let mut all = DIGESTS.lock().unwrap_or_else(|e| e.into_inner());
    all.entry(sink.to_string()).or_default().clone()
}

/// What the checksumming blackhole sink `sink` received in this process so far.
pub fn received(sink: &str) -> Option<ChangeDigest> {
    let all = DIGESTS.lock().unwrap_or_else(|e| e.into_inner());
    let d = all.get(sink)?;
    let digest = *d.lock().unwrap_or_else(|e| e.into_inner());
    Some(digest)
}

pub struct BlackholeOperator {
    records: prometheus::IntCounter,
    digest: Option<SharedDigest>,
    latency: Option<LatencyProbe>,
}

impl BlackholeOperator {
    /// `job`: the sink's name (the metric's label).
    pub fn new(job: &str) -> Self {
        Self {
            records: crate::metrics::metrics()
                .sink_records_in
                .with_label_values(&[job]),
            digest: None,
            latency: None,
        }
    }
}

impl Operator for BlackholeOperator {
    fn name(&self) -> &str {
        "Blackhole"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        self.records.inc_by(chunk.len() as u64);
        if let Some(l) = &self.latency {
            l.observe(&chunk);
        }
        if let Some(d) = &self.digest {
            // Hashed outside the lock: parallel instances only meet to add.
            let mut mine = ChangeDigest::default();
            mine.add_chunk(&chunk)?;
            d.lock().unwrap_or_else(|e| e.into_inner()).merge(mine);
        }
        Ok(())
    }
}
