//! Blackhole: the last operator of a `connector = 'blackhole'` sink. It takes every
//! change and keeps nothing: a sink that measures the pipeline in front of it (the
//! actor counts the records in `numRecordsIn`), as Flink's and RisingWave's do.

use crate::chunk::StreamChunk;
use crate::error::Result;
use crate::operator::Operator;

#[derive(Default)]
pub struct BlackholeOperator;

impl Operator for BlackholeOperator {
    fn name(&self) -> &str {
        "Blackhole"
    }

    fn process_chunk(&mut self, _chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        Ok(())
    }
}
