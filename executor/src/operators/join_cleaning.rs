//! Watermark state cleaning for joins: when a join key column carries a watermark on
//! both inputs (a window join on `window_start`, a join on an event-time column), no
//! later row of either side can have that key below the smaller of the two watermarks.
//! Rows under such keys can never match again, so both sides' state drops them at the
//! next barrier (inside the checkpoint's cut), and rows that still arrive with a key
//! below what was dropped are late: they are dropped too, as EMIT ON WINDOW CLOSE
//! aggregations drop theirs (Flink and RisingWave do the same). Output already emitted
//! for the dropped rows stays (an outer join's NULL-padded row included).

use crate::barrier::Watermark;
use crate::chunk::StreamChunk;
use crate::error::Result;
use arrow::array::{Array, ArrayRef, BooleanArray, Scalar};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

/// Per join key position: where the key comes from on each side, the watermarks seen,
/// and how far state was cleaned.
#[derive(Debug)]
pub struct KeyWatermarks {
    /// `sources[s][k]`: the payload column of side `s` that key `k` is a copy of.
    sources: [Vec<Option<usize>>; 2],
    /// Payload width per side (key `k` also arrives as column `width + k`).
    widths: [usize; 2],
    key_types: Vec<DataType>,
    seen: [Vec<Option<ScalarValue>>; 2],
    /// Keys below these were dropped from state; rows below them are late.
    cleaned: Vec<Option<ScalarValue>>,
}

impl KeyWatermarks {
    pub fn new(
        sources: [Vec<Option<usize>>; 2],
        widths: [usize; 2],
        key_types: Vec<DataType>,
    ) -> Self {
        let n = key_types.len();
        Self {
            sources,
            widths,
            key_types,
            seen: [vec![None; n], vec![None; n]],
            cleaned: vec![None; n],
        }
    }

    /// The key position a watermark on column `column` of side `s` is about.
    fn key_of(&self, s: usize, column: usize) -> Option<usize> {
        if column >= self.widths[s] {
            let k = column - self.widths[s];
            return (k < self.key_types.len()).then_some(k);
        }
        self.sources[s].iter().position(|c| *c == Some(column))
    }

    /// Records a watermark from side `s`.
    pub fn observe(&mut self, s: usize, w: &Watermark) {
        let Some(k) = self.key_of(s, w.column) else {
            return;
        };
        let Ok(v) = w.value.cast_to(&self.key_types[k]) else {
            return;
        };
        let slot = &mut self.seen[s][k];
        if slot.as_ref().is_none_or(|old| v > *old) {
            *slot = Some(v);
        }
    }

    /// Key positions whose joint watermark moved past what was cleaned, with it; they
    /// count as cleaned from now on.
    pub fn advance(&mut self) -> Vec<(usize, ScalarValue)> {
        let mut moved = Vec::new();
        for k in 0..self.key_types.len() {
            let (Some(a), Some(b)) = (&self.seen[0][k], &self.seen[1][k]) else {
                continue;
            };
            let joint = if a < b { a.clone() } else { b.clone() };
            if self.cleaned[k].as_ref().is_none_or(|c| joint > *c) {
                self.cleaned[k] = Some(joint.clone());
                moved.push((k, joint));
            }
        }
        moved
    }

    /// `chunk` (of side `s`) without its late rows: a key below what was cleaned.
    pub fn drop_late(&self, s: usize, mut chunk: StreamChunk) -> Result<StreamChunk> {
        for (k, below) in self.cleaned.iter().enumerate() {
            if let Some(below) = below {
                chunk = chunk.without_rows_below(self.widths[s] + k, below)?;
            }
        }
        Ok(chunk)
    }

    /// Whether any key is being cleaned (so rows may be late).
    pub fn cleaning(&self) -> bool {
        self.cleaned.iter().any(|c| c.is_some())
    }
}

/// Whether each value is below `below` (NULL: not below).
pub fn below_mask(col: &ArrayRef, below: &ScalarValue) -> Result<BooleanArray> {
    let m = arrow::compute::kernels::cmp::lt(col, &Scalar::new(below.to_array()?))?;
    Ok(match m.nulls() {
        Some(n) => BooleanArray::new(m.values() & n.inner(), None),
        None => m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(column: usize, v: i64) -> Watermark {
        Watermark {
            column,
            value: ScalarValue::Int64(Some(v)),
        }
    }

    #[test]
    fn cleans_to_the_smaller_watermark_of_both_sides_and_only_forward() {
        // Key 0 is left payload column 1 and right payload column 0.
        let mut k = KeyWatermarks::new(
            [vec![Some(1)], vec![Some(0)]],
            [2, 1],
            vec![DataType::Int64],
        );
        k.observe(0, &w(1, 10));
        assert!(k.advance().is_empty(), "one side alone cleans nothing");
        k.observe(1, &w(0, 7));
        assert_eq!(k.advance(), vec![(0, ScalarValue::Int64(Some(7)))]);
        assert!(k.advance().is_empty());
        k.observe(1, &w(0, 5));
        k.observe(0, &w(0, 100)); // not a key column
        assert!(k.advance().is_empty(), "watermarks never go back");
        k.observe(1, &w(1, 12)); // the key column itself (width 1 + key 0)
        assert_eq!(k.advance(), vec![(0, ScalarValue::Int64(Some(10)))]);
        assert!(k.cleaning());
    }
}
