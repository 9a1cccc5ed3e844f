//! A lookup join (`JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`): Flink's and RisingWave's
//! processing-time temporal join, as a mode of [`HashJoinOperator`].
//!
//! The right side is a table kept in the join's state like any join side; its changes
//! update that state and emit nothing. Each left row is matched against the table as
//! it is when the row arrives, emitted, and forgotten: the left side keeps no state, so
//! an enrichment join over an endless stream stays as small as its table. Output rows
//! are never retracted when the table changes later (that is the processing-time
//! meaning), which is why the left input must only insert (`mark_append_only_inputs`):
//! a left delete could not know which table rows its insert had met.

use super::{Bucket, HashJoinOperator, JoinKind};
use crate::chunk::{Op, StreamChunk};
use crate::error::Result;
use arrow::array::{Array, ArrayRef, UInt32Array};

impl HashJoinOperator {
    /// Applies a chunk of side `s` in lookup mode.
    pub(super) fn lookup_side(
        &mut self,
        s: usize,
        chunk: StreamChunk,
        out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        if s == 1 {
            return self.update_table(chunk);
        }
        let width = self.spec.side_types[0].len();
        let keys = self.keys(&chunk, width)?;
        let mut candidates: Vec<(usize, usize)> = Vec::new();
        for (i, (k, matchable)) in keys.iter().enumerate() {
            if let Some(b) = self.states[1].get(k).filter(|_| *matchable) {
                candidates.extend(b.ids().map(|j| (i, j)));
            }
        }
        let mask = self.evaluate_filter(0, &chunk, &keys, &candidates)?;
        let matches = |c: usize| mask.as_ref().is_none_or(|m| m.is_valid(c) && m.value(c));
        // Output rows: (left row, table row or None for a NULL-padded one).
        let mut left: Vec<u32> = Vec::new();
        let mut right: Vec<&[u8]> = Vec::new();
        let mut ops: Vec<Op> = Vec::new();
        let mut next = 0;
        for (i, op) in chunk.ops.iter().enumerate() {
            let mut matched = false;
            while next < candidates.len() && candidates[next].0 == i {
                let c = next;
                next += 1;
                if !matches(c) {
                    continue;
                }
                let bucket = self.states[1]
                    .get(&keys[i].0)
                    .expect("candidate buckets exist");
                let at = candidates[c].1;
                matched = true;
                for _ in 0..bucket.count(at) {
                    left.push(i as u32);
                    right.push(bucket.row(at));
                    ops.push(*op);
                }
            }
            if !matched && self.spec.kind == JoinKind::LeftOuter {
                left.push(i as u32);
                right.push(&self.null_rows[1]);
                ops.push(*op);
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        let idx = UInt32Array::from(left);
        let mut columns: Vec<ArrayRef> = chunk.columns()[..width]
            .iter()
            .map(|c| arrow::compute::take(c.as_ref(), &idx, None))
            .collect::<arrow::error::Result<_>>()?;
        columns.extend(self.columns_of(1, &right)?);
        out.push(StreamChunk::from_columns(
            ops,
            self.spec.output_schema.clone(),
            columns,
        )?);
        Ok(())
    }

    /// A change of the table: stored, nothing emitted.
    fn update_table(&mut self, chunk: StreamChunk) -> Result<()> {
        let width = self.spec.side_types[1].len();
        let keys = self.keys(&chunk, width)?;
        let rows = (width > 0)
            .then(|| self.converters[1].convert_columns(&chunk.columns()[..width]))
            .transpose()?;
        for (i, op) in chunk.ops.iter().enumerate() {
            let key = &keys[i].0;
            let row = rows.as_ref().map(|r| r.row(i));
            let bucket = self.states[1].get_or_insert_with(key, Bucket::default);
            bucket.apply(row.as_ref().map_or(&[][..], |r| r.as_ref()), op.sign(), 0);
            if bucket.is_empty() {
                self.states[1].remove(key);
            }
        }
        Ok(())
    }
}
