//! Watermark state cleaning for joins.
//!
//! **By key.** When a join key column carries a watermark on
//! both inputs (a window join on `window_start`, a join on an event-time column), no
//! later row of either side can have that key below the smaller of the two watermarks.
//! Rows under such keys can never match again, so both sides' state drops them at the
//! next barrier (inside the checkpoint's cut), and rows that still arrive with a key
//! below what was dropped are late: they are dropped too, as EMIT ON WINDOW CLOSE
//! aggregations drop theirs (Flink and RisingWave do the same). Output already emitted
//! for the dropped rows stays (an outer join's NULL-padded row included).
//!
//! **By interval** (Flink's interval joins: `b.ts BETWEEN a.ts AND a.ts + INTERVAL
//! ...`, Nexmark q4's `B.date_time BETWEEN A.date_time AND A.expires`). A condition
//! `x >= y + c` with `x` a time column of side `s` and `y` one of the other side means
//! that once the other side's watermark on `y` passes `w`, no future row there can
//! match a row of side `s` whose `x` is below `w + c`: those rows are dead. They leave
//! the state at the next barrier (the other side's match counts keep counting them, as
//! they still exist). Rows of the other side behind the watermark that was used are
//! late and dropped; a row of side `s` below the threshold is still joined with what
//! the state holds (its input may lag the other one), and cleaned at the next barrier.

use crate::barrier::Watermark;
use crate::chunk::StreamChunk;
use crate::error::Result;
use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

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

/// A time bound of an interval join: rows of `side` whose payload column `column` is
/// below (the other side's watermark on its payload column `other_column`) +
/// `offset_ms` can never match again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalBound {
    pub side: usize,
    pub column: usize,
    pub other_column: usize,
    pub offset_ms: i64,
}

/// Buckets' (time in ms, join key), to be taken oldest first. A bucket is in the index
/// once per bound, at the time of its oldest row noted since it was last cleaned (the
/// join marks the bucket, [`IntervalWatermarks::note`]), not once per row: q7 at 10M events/s
/// stores 9.2M bids under a few hundred thousand prices, and an entry per row cost a
/// key copy per bid. Cleaning a bucket notes it again at the time of its oldest
/// survivor. A row older than its bucket's entry (out of order) is cleaned when that
/// entry comes due: later, never wrongly. Entries mostly arrive in time order (a
/// source in event-time order), so those go to a queue (O(1) each, no key
/// comparisons); only an entry older than the queue's newest goes to a heap.
#[derive(Debug, Default, Clone)]
struct TimeIndex {
    in_order: VecDeque<(i64, Vec<u8>)>,
    out_of_order: BinaryHeap<Reverse<(i64, Vec<u8>)>>,
}

impl TimeIndex {
    fn push(&mut self, ms: i64, key: &[u8]) {
        match self.in_order.back() {
            Some((t, _)) if *t > ms => self.out_of_order.push(Reverse((ms, key.to_vec()))),
            _ => self.in_order.push_back((ms, key.to_vec())),
        }
    }

    /// Takes the keys of every entry older than `threshold`.
    fn take_below(&mut self, threshold: i64, keys: &mut Vec<Vec<u8>>) {
        while self.in_order.front().is_some_and(|(t, _)| *t < threshold) {
            keys.push(self.in_order.pop_front().expect("peeked").1);
        }
        while self
            .out_of_order
            .peek()
            .is_some_and(|Reverse((t, _))| *t < threshold)
        {
            keys.push(self.out_of_order.pop().expect("peeked").0 .1);
        }
    }

    fn clear(&mut self) {
        self.in_order.clear();
        self.out_of_order.clear();
    }
}

/// Watermarks by payload column and the interval bounds they drive.
#[derive(Debug, Default)]
pub struct IntervalWatermarks {
    bounds: Vec<IntervalBound>,
    /// Milliseconds of the latest watermark per (side, payload column).
    seen: [Vec<(usize, i64)>; 2],
    /// Per bound: the threshold rows of its side were cleaned below (ms).
    applied: Vec<Option<i64>>,
    /// Per bound: (time in ms, join key) of the rows stored on its side, oldest first,
    /// so that cleaning visits only the buckets that hold dead rows.
    index: Vec<TimeIndex>,
    /// Per bound: rows restored from a checkpoint are not in `index` yet (the first
    /// cleaning scans the whole side).
    unindexed: Vec<bool>,
}

/// Where cleaning a bound must look.
pub enum DueKeys {
    /// Every key of the side (after a restore).
    All,
    Some(Vec<Vec<u8>>),
}

impl IntervalWatermarks {
    pub fn new(bounds: Vec<IntervalBound>, restored: bool) -> Self {
        let n = bounds.len();
        Self {
            bounds,
            seen: [Vec::new(), Vec::new()],
            applied: vec![None; n],
            index: vec![TimeIndex::default(); n],
            unindexed: vec![restored; n],
        }
    }

    /// (bound, payload column) of the bounds whose rows live on side `s`.
    pub fn bounds_on(&self, s: usize) -> Vec<(usize, usize)> {
        self.bounds
            .iter()
            .enumerate()
            .filter(|(_, b)| b.side == s)
            .map(|(i, b)| (i, b.column))
            .collect()
    }

    /// A row stored under `key` with time `ms` for bound `bound`, in a bucket whose
    /// index marks are `marks`: the bucket enters the index unless it is there already.
    pub fn note(&mut self, bound: usize, ms: i64, key: &[u8], marks: &mut u8) {
        let bit = Self::mark_bit(bound);
        if *marks & bit == 0 {
            self.index[bound].push(ms, key);
            *marks |= bit;
        }
    }

    /// The mark a bucket carries while it is in bound `bound`'s index. Bounds past
    /// the eighth share no bit (0): their buckets enter the index with every row.
    pub fn mark_bit(bound: usize) -> u8 {
        1u8.checked_shl(bound as u32).unwrap_or(0)
    }

    /// The keys that may hold rows of bound `bound` below `threshold`.
    pub fn due(&mut self, bound: usize, threshold: i64) -> DueKeys {
        let index = &mut self.index[bound];
        if std::mem::take(&mut self.unindexed[bound]) {
            index.clear();
            return DueKeys::All;
        }
        let mut keys = Vec::new();
        index.take_below(threshold, &mut keys);
        // A bound with a mark bit indexes a bucket once until it is cleaned, so its
        // keys are distinct but for a bucket a retraction emptied and an insert made
        // again (its old entry stays): cleaning such a key twice is harmless, while
        // sorting millions of keys to find it cost a tenth of q7's end.
        if Self::mark_bit(bound) == 0 {
            keys.sort_unstable();
            keys.dedup();
        }
        DueKeys::Some(keys)
    }

    pub fn observe(&mut self, s: usize, w: &Watermark) {
        let Some(ms) = crate::watermark::millis(w) else {
            return;
        };
        let seen = &mut self.seen[s];
        match seen.iter_mut().find(|(c, _)| *c == w.column) {
            Some((_, v)) => *v = (*v).max(ms),
            None => seen.push((w.column, ms)),
        }
    }

    /// Bounds whose threshold moved: (bound, side, column, threshold in ms).
    pub fn advance(&mut self) -> Vec<(usize, usize, usize, i64)> {
        let mut moved = Vec::new();
        for (i, b) in self.bounds.iter().enumerate() {
            let Some(&(_, wm)) = self.seen[1 - b.side]
                .iter()
                .find(|(c, _)| *c == b.other_column)
            else {
                continue;
            };
            let threshold = wm.saturating_add(b.offset_ms);
            if self.applied[i].is_none_or(|a| threshold > a) {
                self.applied[i] = Some(threshold);
                moved.push((i, b.side, b.column, threshold));
            }
        }
        moved
    }

    /// (column, ms) below which rows of side `s` are late: behind their own side's
    /// watermark that some cleaning relied on (a row that old could have matched rows
    /// already cleaned). A row of a bound's own side below its threshold is not late:
    /// it may still match rows of the other side in state (a lagging input), so it is
    /// joined, and cleaned at the next barrier.
    pub fn late_below(&self, s: usize) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.bounds
            .iter()
            .zip(&self.applied)
            .filter(move |(b, _)| b.side != s)
            .filter_map(|(b, a)| a.map(|a| (b.other_column, a - b.offset_ms)))
    }
}

/// A timestamp column as milliseconds (NULL stays NULL).
pub fn millis_of(col: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let ms = arrow::compute::cast(
        col,
        &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
    )?;
    let ms = arrow::compute::cast(&ms, &DataType::Int64)?;
    let ms = ms
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .expect("cast to Int64");
    Ok(ms.iter().collect())
}

/// `ms` as a value of a timestamp column's type (for comparisons with it).
pub fn threshold_value(ms: i64, t: &DataType) -> Result<ScalarValue> {
    let tz = match t {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    Ok(ScalarValue::TimestampMillisecond(Some(ms), tz).cast_to(t)?)
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
    fn interval_bounds_follow_the_other_sides_watermark() {
        // Left rows (column 2) are dead below the right watermark on column 0 - 10 s.
        let mut iw = IntervalWatermarks::new(
            vec![IntervalBound {
                side: 0,
                column: 2,
                other_column: 0,
                offset_ms: -10_000,
            }],
            false,
        );
        let (mut k1, mut k2) = (0u8, 0u8);
        iw.note(0, 39_000, b"k1", &mut k1);
        iw.note(0, 41_000, b"k2", &mut k2);
        iw.note(0, 39_500, b"k1", &mut k1);
        assert_eq!((k1, k2), (1, 1), "each bucket is indexed, once");
        let ts = |column: usize, ms: i64| Watermark {
            column,
            value: ScalarValue::TimestampMillisecond(Some(ms), None),
        };
        iw.observe(0, &ts(0, 50_000));
        assert!(
            iw.advance().is_empty(),
            "the left side's own watermark does not count"
        );
        iw.observe(1, &ts(0, 50_000));
        assert_eq!(iw.advance(), vec![(0, 0, 2, 40_000)]);
        match iw.due(0, 40_000) {
            DueKeys::Some(keys) => assert_eq!(keys, vec![b"k1".to_vec()]),
            DueKeys::All => panic!("indexed"),
        }
        assert_eq!(iw.late_below(0).count(), 0);
        assert_eq!(iw.late_below(1).collect::<Vec<_>>(), vec![(0, 50_000)]);
        iw.observe(1, &ts(0, 45_000));
        assert!(iw.advance().is_empty(), "watermarks never go back");
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
