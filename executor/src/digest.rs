//! An order-independent digest of a changelog: net rows (inserts minus deletes) and a
//! checksum (the wrapping sum of inserted rows' hashes minus deleted rows'). Two
//! changelogs that leave the same rows behind have the same digest whatever their
//! order, batching or retractions, so a streaming job's output can be checked against
//! the same query run as a batch (the Nexmark bench's output check).

use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use arrow::array::RecordBatch;
use datafusion::common::hash_utils::{create_hashes, RandomState};

/// Fixed, so that digests printed by different runs can be compared.
const SEED: u64 = 0x5745_4952;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeDigest {
    pub rows: i64,
    pub checksum: u64,
}

impl ChangeDigest {
    /// Adds every row of `batch` once, as inserts.
    pub fn add_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        for h in row_hashes(batch)? {
            self.checksum = self.checksum.wrapping_add(h);
        }
        self.rows += batch.num_rows() as i64;
        Ok(())
    }

    /// Adds another digest (of more changes of the same changelog).
    pub fn merge(&mut self, other: ChangeDigest) {
        self.rows += other.rows;
        self.checksum = self.checksum.wrapping_add(other.checksum);
    }

    /// Adds a chunk's inserts and subtracts its deletes.
    pub fn add_chunk(&mut self, chunk: &StreamChunk) -> Result<()> {
        for (h, op) in row_hashes(&chunk.batch)?.into_iter().zip(chunk.ops.iter()) {
            let signed = h.wrapping_mul(op.sign() as u64);
            self.checksum = self.checksum.wrapping_add(signed);
            self.rows += op.sign();
        }
        Ok(())
    }
}

/// One hash per row, over all its columns.
fn row_hashes(batch: &RecordBatch) -> Result<Vec<u64>> {
    let mut hashes = vec![0; batch.num_rows()];
    create_hashes(batch.columns(), &RandomState::with_seed(SEED), &mut hashes)
        .map_err(|e| ExecError::Internal(format!("hashing rows for a digest: {e}")))?;
    Ok(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::Op;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(k: &[i64], v: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(k.to_vec())),
                Arc::new(StringArray::from(v.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn same_rows_left_behind_same_digest() {
        let mut stream = ChangeDigest::default();
        stream
            .add_chunk(&StreamChunk::inserts(batch(&[1, 2], &["a", "b"])))
            .unwrap();
        // Row 2 is updated to "c": a delete and an insert.
        stream
            .add_chunk(&StreamChunk::new(
                vec![Op::Delete, Op::Insert],
                batch(&[2, 2], &["b", "c"]),
            ))
            .unwrap();
        let mut final_rows = ChangeDigest::default();
        final_rows.add_rows(&batch(&[2, 1], &["c", "a"])).unwrap();
        assert_eq!(stream, final_rows);
        assert_eq!(final_rows.rows, 2);
        let mut other = ChangeDigest::default();
        other.add_rows(&batch(&[2, 1], &["b", "a"])).unwrap();
        assert_ne!(other, final_rows);
    }
}
