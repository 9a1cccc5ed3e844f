//! What executing a statement produces, independent of the wire protocol.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

#[derive(Debug)]
pub enum Output {
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A command tag such as `INSERT 0 3` or `CREATE_MATERIALIZED_VIEW`.
    Command {
        tag: String,
        rows: Option<usize>,
    },
    /// `COPY ... FROM STDIN` started: the client sends `columns` fields per row.
    CopyIn {
        columns: usize,
    },
    /// `COPY ... TO STDOUT`: the data, one line per row (and a header in CSV).
    CopyOut {
        columns: usize,
        lines: Vec<Vec<u8>>,
    },
    TransactionStart(String),
    TransactionEnd(String),
    Empty,
}

impl Output {
    pub fn command(tag: &str) -> Output {
        Output::Command {
            tag: tag.to_string(),
            rows: None,
        }
    }
    pub fn rows(tag: &str, n: usize) -> Output {
        Output::Command {
            tag: tag.to_string(),
            rows: Some(n),
        }
    }
}
