//! Blackhole: the last operator of a `connector = 'blackhole'` sink. It takes every
//! change and keeps nothing: a sink that measures the pipeline in front of it (the
//! changes that reach it count in `weir_sinkRecordsIn{job}`), as Flink's and
//! RisingWave's do.

use super::two_phase::SinkContext;
use super::{SinkConnector, SinkTarget};
use crate::chunk::StreamChunk;
use crate::connector_options::ConnectorOptions;
use crate::error::Result;
use crate::operator::Operator;
use std::sync::Arc;

/// `connector = 'blackhole'`: no options.
#[derive(Debug, Clone)]
pub struct BlackholeSpec;

/// Any FORMAT ... ENCODE is accepted: nothing is encoded.
pub(crate) fn parse_options(
    o: &mut ConnectorOptions,
    _: &SinkTarget<'_>,
) -> Result<Arc<dyn SinkConnector>> {
    o.take("format");
    o.take("encode");
    Ok(Arc::new(BlackholeSpec))
}

impl SinkConnector for BlackholeSpec {
    fn connector(&self) -> &'static str {
        "blackhole"
    }
    fn exactly_once(&self) -> bool {
        false
    }
    fn build(&self, name: &str, _: SinkContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(BlackholeOperator::new(name)))
    }
}

pub struct BlackholeOperator {
    records: prometheus::IntCounter,
}

impl BlackholeOperator {
    /// `job`: the sink's name (the metric's label).
    pub fn new(job: &str) -> Self {
        Self {
            records: crate::metrics::metrics()
                .sink_records_in
                .with_label_values(&[job]),
        }
    }
}

impl Operator for BlackholeOperator {
    fn name(&self) -> &str {
        "Blackhole"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        self.records.inc_by(chunk.len() as u64);
        Ok(())
    }
}
