//! HashJoin: a symmetric hash join with retraction, for every equi-join kind.
//!
//! Both inputs arrive hash-exchanged on the join key, so one actor sees every row of
//! its key groups from both sides. Each side keeps its rows in a [`StateTable`] keyed
//! by the join key (one bucket of rows per key, one entry per copy of a row). A row from
//! one side is matched against the other side's bucket; the extra, non-equi condition
//! is evaluated over all candidate pairs of a chunk at once (vectorised), then the
//! chunk's rows are applied in order.
//!
//! Each stored (distinct) row carries its copy count and its *degree*: how many rows
//! of the other side it currently matches. Outer joins emit a NULL-padded row while the degree is 0 and retract it
//! when the first match appears (and the other way round); semi joins emit a row when
//! its degree leaves 0 and anti joins while it is 0. So every kind is correct under
//! deletes on either side, with output emitted as the changes arrive. A left mark join
//! emits every left row with `mark = degree > 0`, replacing it when the mark flips.
//!
//! Input layout per side: `[payload columns..., join key columns...]` (a projection
//! before the exchange computes the keys); the output is the payload columns of the
//! side(s) the join kind returns.
//!
//! A lookup join (`spec.lookup`, [`lookup`]) keeps only the right side and never
//! retracts: Flink's processing-time temporal join.

mod bucket;
mod lookup;

use bucket::Bucket;

use crate::barrier::{Barrier, Epoch, Watermark};
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::join_cleaning::{
    millis_of, threshold_value, DueKeys, IntervalBound, IntervalWatermarks, KeyWatermarks,
};
use crate::operators::spec::{BuildContext, StateRestore, StreamSpec, WatermarkFlow};
use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use weir_storage::state_snapshot::StateDelta;
use weir_storage::{StateBackend, StateTable};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    LeftOuter,
    RightOuter,
    FullOuter,
    LeftSemi,
    LeftAnti,
    RightSemi,
    RightAnti,
    /// Every left row with a boolean `mark`: whether it has a match (DataFusion plans
    /// a correlated `EXISTS` inside an OR this way).
    LeftMark,
}

impl JoinKind {
    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Inner => "inner",
            JoinKind::LeftOuter => "left outer",
            JoinKind::RightOuter => "right outer",
            JoinKind::FullOuter => "full outer",
            JoinKind::LeftSemi => "left semi",
            JoinKind::LeftAnti => "left anti",
            JoinKind::RightSemi => "right semi",
            JoinKind::RightAnti => "right anti",
            JoinKind::LeftMark => "left mark",
        }
    }

    /// Whether output rows pair both sides (else one side's rows alone).
    fn pairs(self) -> bool {
        matches!(
            self,
            JoinKind::Inner | JoinKind::LeftOuter | JoinKind::RightOuter | JoinKind::FullOuter
        )
    }

    /// Side `s` (0 left, 1 right) emits its row alone (NULL-padded for outer joins)
    /// while the row has no match.
    fn alone_when_unmatched(self, s: usize) -> bool {
        match self {
            JoinKind::LeftOuter | JoinKind::LeftAnti => s == 0,
            JoinKind::RightOuter | JoinKind::RightAnti => s == 1,
            JoinKind::FullOuter => true,
            _ => false,
        }
    }

    /// Side `s` emits its row alone while it has at least one match (semi joins).
    fn alone_when_matched(self, s: usize) -> bool {
        match self {
            JoinKind::LeftSemi => s == 0,
            JoinKind::RightSemi => s == 1,
            _ => false,
        }
    }

    /// The sides whose payload the output carries.
    fn output_sides(self) -> &'static [usize] {
        match self {
            JoinKind::LeftSemi | JoinKind::LeftAnti | JoinKind::LeftMark => &[0],
            JoinKind::RightSemi | JoinKind::RightAnti => &[1],
            _ => &[0, 1],
        }
    }
}

#[derive(Debug, Clone)]
pub struct HashJoinSpec {
    pub uid: String,
    pub kind: JoinKind,
    /// Payload column types of each side's input (the key columns follow them).
    pub side_types: [Vec<DataType>; 2],
    pub key_types: Vec<DataType>,
    /// `IS NOT DISTINCT FROM` keys (set operations): NULL matches NULL.
    pub null_equals_null: bool,
    /// The non-equi condition, over `left payload ++ right payload`.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    pub output_schema: SchemaRef,
    /// Per side, per key: the payload column the key is a copy of (for watermarks).
    pub key_sources: [Vec<Option<usize>>; 2],
    /// Time bounds of the condition (interval joins), for cleaning by watermark.
    pub interval_bounds: Vec<IntervalBound>,
    /// Both inputs only ever insert (set at deployment, see [`crate::append_only`]):
    /// a new row is stored as a new entry without looking for an equal one, since no
    /// delete will ever need to find it (q7 keeps every bid under its price).
    pub append_only_inputs: bool,
    /// A lookup join (`JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`, inner or left outer):
    /// the right side is a table probed as it is when each left row arrives; only the
    /// table is stored and its changes emit nothing ([`lookup`]).
    pub lookup: bool,
}

impl HashJoinSpec {
    /// Uid of one side's rows.
    pub fn side_uid(&self, s: usize) -> String {
        format!("{}.{}", self.uid, if s == 0 { "left" } else { "right" })
    }

    /// Layout of one side's state: the key types and that side's row types.
    pub fn side_state_schema(&self, s: usize) -> String {
        let list = |v: &[DataType]| {
            v.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "join keys({}) rows({}) degree",
            list(&self.key_types),
            list(&self.side_types[s])
        )
    }
}

/// What one output row holds.
#[derive(Clone, Copy)]
enum OutRow {
    Pair(usize, usize),
    /// Side `s`'s row alone (index into that side's row list).
    Alone(usize, usize),
    /// A left row with its mark (LEFT MARK joins).
    Marked(usize, bool),
}

/// Output rows under construction: encoded rows of each side and what to emit.
#[derive(Default)]
struct Emitted {
    rows: [Vec<Vec<u8>>; 2],
    out: Vec<(Op, OutRow)>,
}

impl Emitted {
    fn push_row(&mut self, s: usize, row: &[u8]) -> usize {
        self.rows[s].push(row.to_vec());
        self.rows[s].len() - 1
    }

    /// `net` copies of `row`: inserts when positive, deletes when negative.
    fn emit(&mut self, net: i64, row: OutRow) {
        let op = if net > 0 { Op::Insert } else { Op::Delete };
        for _ in 0..net.unsigned_abs() {
            self.out.push((op, row));
        }
    }
}

pub struct HashJoinOperator {
    spec: HashJoinSpec,
    key_converter: Option<RowConverter>,
    converters: [RowConverter; 2],
    /// The encoding of an all-NULL row per side (outer join padding).
    null_rows: [Vec<u8>; 2],
    states: [StateTable<Bucket>; 2],
    /// `left payload ++ right payload`, for evaluating the non-equi condition.
    filter_schema: SchemaRef,
    /// Watermarks on key columns, and how far state was cleaned by them.
    key_watermarks: KeyWatermarks,
    /// Watermarks on the condition's time columns (interval joins).
    interval_watermarks: IntervalWatermarks,
}

fn converter(types: &[DataType]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        types.iter().map(|t| SortField::new(t.clone())).collect(),
    )?)
}

impl StreamSpec for HashJoinSpec {
    fn kind(&self) -> &'static str {
        "HashJoin"
    }

    fn describe(&self) -> String {
        let condition = self
            .filter
            .as_ref()
            .map(|f| format!(" condition={f}"))
            .unwrap_or_default();
        let (mode, state) = if self.lookup {
            (
                "lookup ",
                "StateTable(key_group, join key -> table rows), the right side only".to_string(),
            )
        } else {
            let intervals = if self.interval_bounds.is_empty() {
                String::new()
            } else {
                format!(" and {} interval bounds", self.interval_bounds.len())
            };
            ("", format!("StateTable(key_group, join key -> rows with match counts) per side, cleaned behind watermarks on keys{intervals}"))
        };
        format!(
            "HashJoin: {mode}{} keys={}{condition} uid={} state={state}",
            self.kind.name(),
            self.key_types.len(),
            self.uid,
        )
    }

    fn uid(&self) -> Option<&str> {
        Some(&self.uid)
    }

    fn uid_mut(&mut self) -> Option<&mut String> {
        Some(&mut self.uid)
    }

    fn state_layouts(&self) -> Vec<(String, String)> {
        (0..2)
            .map(|s| (self.side_uid(s), self.side_state_schema(s)))
            .collect()
    }

    /// A new row of an inner join only ever adds matches (and cleaning by watermark
    /// drops state without retracting output); other kinds may retract.
    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        self.append_only_inputs = input_append_only;
        input_append_only && self.kind == JoinKind::Inner
    }

    /// A lookup join needs a left input that only inserts (it keeps no left rows to
    /// retract), and then only inserts itself: table changes emit nothing.
    fn mark_append_only_inputs(&mut self, inputs: &[bool]) -> Result<bool> {
        if !self.lookup {
            return Ok(self.mark_append_only(inputs.iter().all(|a| *a)));
        }
        if !inputs.first().copied().unwrap_or(false) {
            return Err(ExecError::Unsupported(
                "the left side of a join FOR SYSTEM_TIME AS OF PROCTIME() must only insert \
                 (a source, or a view of one without retracting operators): a lookup join \
                 keeps no left rows, so it could not retract what a deleted row matched"
                    .into(),
            ));
        }
        self.append_only_inputs = false;
        Ok(true)
    }

    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Stops
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(HashJoinOperator::new(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

impl HashJoinOperator {
    /// `restore.reemit` does not apply: a join's output is never rebuilt from its state.
    pub fn new(
        spec: HashJoinSpec,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> Result<Self> {
        let StateRestore {
            max_parallelism,
            key_groups,
            restored,
            track_changes,
            ..
        } = restore;
        let key_converter = if spec.key_types.is_empty() {
            None
        } else {
            Some(converter(&spec.key_types)?)
        };
        let converters = [
            converter(&spec.side_types[0])?,
            converter(&spec.side_types[1])?,
        ];
        let null_row = |s: usize| -> Result<Vec<u8>> {
            let cols: Vec<ArrayRef> = spec.side_types[s]
                .iter()
                .map(|t| arrow::array::new_null_array(t, 1))
                .collect();
            if cols.is_empty() {
                return Ok(Vec::new());
            }
            Ok(converters[s]
                .convert_columns(&cols)?
                .row(0)
                .as_ref()
                .to_vec())
        };
        let null_rows = [null_row(0)?, null_row(1)?];
        let mut states = [0, 1].map(|s| {
            let mut t = StateTable::new(&spec.side_uid(s), max_parallelism, backend.clone());
            t.set_track_changes(track_changes);
            t
        });
        if restored {
            for t in &mut states {
                t.load(key_groups.start, key_groups.end)?;
            }
        }
        let fields: Vec<Field> = spec
            .side_types
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
            .collect();
        let key_watermarks = KeyWatermarks::new(
            spec.key_sources.clone(),
            [spec.side_types[0].len(), spec.side_types[1].len()],
            spec.key_types.clone(),
        );
        let interval_watermarks = IntervalWatermarks::new(spec.interval_bounds.clone(), restored);
        Ok(Self {
            filter_schema: Arc::new(Schema::new(fields)),
            key_watermarks,
            interval_watermarks,
            spec,
            key_converter,
            converters,
            null_rows,
            states,
        })
    }

    /// Join key bytes per row (the state key, which is also what the exchange routed
    /// on) and whether the row can match at all (a NULL in an `=` key cannot).
    fn keys(&self, chunk: &StreamChunk, width: usize) -> Result<Vec<(Vec<u8>, bool)>> {
        let n = chunk.len();
        let Some(conv) = &self.key_converter else {
            return Ok(vec![(Vec::new(), true); n]);
        };
        let key_cols = &chunk.columns()[width..];
        let rows = conv.convert_columns(key_cols)?;
        Ok((0..n)
            .map(|i| {
                let matchable =
                    self.spec.null_equals_null || key_cols.iter().all(|c| c.is_valid(i));
                (rows.row(i).as_ref().to_vec(), matchable)
            })
            .collect())
    }

    /// Drops both sides' rows whose key `k` is below `below`, for any of `moved`'s
    /// `(k, below)` (one pass over the state: `window_start` and `window_end` keys
    /// usually move together).
    fn clean_below(&mut self, moved: &[(usize, ScalarValue)]) -> Result<()> {
        let Some(conv) = &self.key_converter else {
            return Ok(());
        };
        let mut dropped = 0u64;
        for state in &mut self.states {
            let keys: Vec<Vec<u8>> = state.keys().map(<[u8]>::to_vec).collect();
            if keys.is_empty() {
                continue;
            }
            let parser = conv.parser();
            let cols = conv.convert_rows(keys.iter().map(|key| parser.parse(key)))?;
            let mut late = crate::chunk::below_mask(&cols[moved[0].0], &moved[0].1)?;
            for (k, below) in &moved[1..] {
                let more = crate::chunk::below_mask(&cols[*k], below)?;
                late = arrow::compute::or(&late, &more)?;
            }
            for (i, key) in keys.iter().enumerate() {
                if late.value(i) {
                    state.remove(key);
                    dropped += 1;
                }
            }
        }
        crate::metrics::metrics()
            .state_keys_cleaned
            .with_label_values(&[&self.spec.uid])
            .inc_by(dropped);
        Ok(())
    }

    /// Drops side `s`'s rows whose payload column `col` is below `ms` (interval joins),
    /// in the buckets bound `bound`'s index has due, and indexes each bucket again at
    /// its oldest survivor.
    fn clean_rows_below(&mut self, bound: usize, s: usize, col: usize, ms: i64) -> Result<()> {
        let below = threshold_value(ms, &self.spec.side_types[s][col])?;
        let keys: Vec<Vec<u8>> = match self.interval_watermarks.due(bound, ms) {
            DueKeys::All => self.states[s].keys().map(<[u8]>::to_vec).collect(),
            DueKeys::Some(keys) => keys,
        };
        let in_place = crate::row_below::RowBelow::new(&self.spec.side_types[s], col, &below)?;
        let bit = IntervalWatermarks::mark_bit(bound);
        let mut dropped = 0u64;
        let mut dead = Vec::new();
        for key in keys {
            let Some(bucket) = self.states[s].get(&key) else {
                continue;
            };
            let oldest = self.dead_rows(s, col, &below, in_place.as_ref(), bucket, &mut dead)?;
            let dead_count = dead.iter().filter(|d| **d).count();
            dropped += dead_count as u64;
            if dead_count == dead.len() {
                // Every row is behind the bound (as at the end of the input): the
                // bucket goes in one piece, with no row copied and no index entry.
                self.states[s].remove(&key);
                continue;
            }
            let bucket = if dead_count > 0 {
                let bucket = self.states[s].get_or_insert_with(&key, Bucket::default);
                bucket.retain(|i| !dead[i]);
                bucket
            } else {
                // The index marks are not stored: changing them dirties nothing.
                self.states[s].get_mut_unstored(&key).expect("present")
            };
            bucket.marks &= !bit;
            if let Some(t) = oldest {
                self.interval_watermarks
                    .note(bound, t, &key, &mut bucket.marks);
            }
        }
        crate::metrics::metrics()
            .state_keys_cleaned
            .with_label_values(&[&self.spec.uid])
            .inc_by(dropped);
        Ok(())
    }

    /// Fills `dead` with which of `bucket`'s rows (of side `s`) have column `col`
    /// below `below`, and returns the time in ms of the oldest of the others (None: no
    /// survivor has a time). `dead` is the caller's, reused from bucket to bucket.
    fn dead_rows(
        &self,
        s: usize,
        col: usize,
        below: &ScalarValue,
        in_place: Option<&crate::row_below::RowBelow>,
        bucket: &Bucket,
        dead: &mut Vec<bool>,
    ) -> Result<Option<i64>> {
        dead.clear();
        if let Some(test) = in_place {
            let mut oldest: Option<&[u8]> = None;
            for row in bucket.rows() {
                let is_dead = test.test(row);
                dead.push(is_dead);
                if let Some(field) = test.field(row).filter(|_| !is_dead) {
                    oldest = Some(oldest.map_or(field, |o| o.min(field)));
                }
            }
            return match oldest {
                Some(field) => Ok(millis_of(&test.decode(field)?)?[0]),
                None => Ok(None),
            };
        }
        let rows: Vec<&[u8]> = bucket.rows().collect();
        let cols = self.columns_of(s, &rows)?;
        let mask = crate::chunk::below_mask(&cols[col], below)?;
        dead.extend(mask.values().iter());
        Ok(millis_of(&cols[col])?
            .into_iter()
            .zip(dead.iter())
            .filter(|(_, d)| !**d)
            .filter_map(|(t, _)| t)
            .min())
    }

    /// Decodes encoded rows of side `s` into columns.
    fn columns_of(&self, s: usize, rows: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let types = &self.spec.side_types[s];
        if rows.is_empty() || types.is_empty() {
            return Ok(types
                .iter()
                .map(|t| arrow::array::new_null_array(t, rows.len()))
                .collect());
        }
        let parser = self.converters[s].parser();
        Ok(self.converters[s].convert_rows(rows.iter().map(|r| parser.parse(r)))?)
    }

    /// For every candidate pair (input row `i`, entry `j` of the other side's bucket
    /// under row `i`'s key), whether the non-equi condition holds.
    fn evaluate_filter(
        &self,
        s: usize,
        chunk: &StreamChunk,
        keys: &[(Vec<u8>, bool)],
        candidates: &[(usize, usize)],
    ) -> Result<Option<BooleanArray>> {
        let Some(filter) = &self.spec.filter else {
            return Ok(None);
        };
        let o = 1 - s;
        let width = self.spec.side_types[s].len();
        let idx =
            arrow::array::UInt32Array::from_iter_values(candidates.iter().map(|(i, _)| *i as u32));
        let this_cols = chunk.columns()[..width]
            .iter()
            .map(|c| arrow::compute::take(c.as_ref(), &idx, None))
            .collect::<arrow::error::Result<Vec<_>>>()?;
        let other_rows: Vec<&[u8]> = candidates
            .iter()
            .map(|(i, j)| {
                self.states[o]
                    .get(&keys[*i].0)
                    .map(|b| b.row(*j))
                    .unwrap_or_default()
            })
            .collect();
        let other_cols = self.columns_of(o, &other_rows)?;
        // The condition reads `left payload ++ right payload`.
        let (mut cols, rest) = if s == 0 {
            (this_cols, other_cols)
        } else {
            (other_cols, this_cols)
        };
        cols.extend(rest);
        let batch = RecordBatch::try_new_with_options(
            self.filter_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(candidates.len())),
        )?;
        let mask = filter.evaluate(&batch)?.into_array(candidates.len())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| ExecError::Internal("join condition is not boolean".into()))?
            .clone();
        Ok(Some(mask))
    }

    fn process_side(
        &mut self,
        s: usize,
        chunk: StreamChunk,
        out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        let o = 1 - s;
        let kind = self.spec.kind;
        let width = self.spec.side_types[s].len();
        let mut chunk = if self.key_watermarks.cleaning() {
            self.key_watermarks.drop_late(s, chunk)?
        } else {
            chunk
        };
        for (col, ms) in self.interval_watermarks.late_below(s) {
            let below = threshold_value(ms, &self.spec.side_types[s][col])?;
            chunk = chunk.without_rows_below(col, &below)?;
        }
        if chunk.is_empty() {
            return Ok(());
        }
        let keys = self.keys(&chunk, width)?;
        // Times of this side's rows for the interval bounds that clean it.
        let timed: Vec<(usize, Vec<Option<i64>>)> = self
            .interval_watermarks
            .bounds_on(s)
            .into_iter()
            .map(|(b, col)| Ok((b, millis_of(&chunk.columns()[col])?)))
            .collect::<Result<_>>()?;
        let rows: Vec<Vec<u8>> = if width == 0 {
            vec![Vec::new(); chunk.len()]
        } else {
            let r = self.converters[s].convert_columns(&chunk.columns()[..width])?;
            (0..chunk.len())
                .map(|i| r.row(i).as_ref().to_vec())
                .collect()
        };
        // Candidate pairs: (input row, entry index in the other side's bucket under the
        // row's key). The other side does not change while this chunk is applied (only
        // degrees do), so the indices stay valid.
        let mut candidates: Vec<(usize, usize)> = Vec::new();
        let mut first_candidate = Vec::with_capacity(chunk.len() + 1);
        for (i, (k, matchable)) in keys.iter().enumerate() {
            first_candidate.push(candidates.len());
            if let Some(b) = self.states[o].get(k).filter(|_| *matchable) {
                candidates.extend(b.ids().map(|j| (i, j)));
            }
        }
        first_candidate.push(candidates.len());
        let mask = self.evaluate_filter(s, &chunk, &keys, &candidates)?;
        let matches = |c: usize| mask.as_ref().is_none_or(|m| m.is_valid(c) && m.value(c));

        // The output is a function of both sides' multisets: pairs `count(l) *
        // count(r)` for every match, and each row alone `count * [degree == 0]` (outer,
        // anti) or `count * [degree != 0]` (semi). Each input row emits the change of
        // that function, so any order of inserts and deletes ends at the same output.
        // This side's output rows are the input rows themselves (index `i`); the other
        // side's are copied in only when one is emitted.
        let mut em = Emitted::default();
        em.rows[s] = rows;
        let other_alone = kind.alone_when_unmatched(o)
            || kind.alone_when_matched(o)
            || (kind == JoinKind::LeftMark && o == 0);
        for (i, op) in chunk.ops.iter().enumerate() {
            let sign = op.sign();
            let key = &keys[i].0;
            let mut m = 0i64;
            let range = first_candidate[i]..first_candidate[i + 1];
            for (c, (_, j)) in candidates[range.clone()].iter().enumerate() {
                if !matches(range.start + c) {
                    continue;
                }
                let bucket = self.states[o].get_or_insert_with(key, Bucket::default);
                let count = bucket.count(*j);
                m += count;
                let before = bucket.degree(*j);
                let after = before + sign;
                bucket.set_degree(*j, after);
                let flip = i64::from(after == 0) - i64::from(before == 0);
                let pairs = kind.pairs() && count != 0;
                if !(pairs || other_alone && flip != 0) {
                    continue;
                }
                let other_row = em.push_row(o, bucket.row(*j));
                if pairs {
                    let pair = if s == 0 {
                        OutRow::Pair(i, other_row)
                    } else {
                        OutRow::Pair(other_row, i)
                    };
                    em.emit(sign * count, pair);
                }
                if kind == JoinKind::LeftMark && o == 0 && flip != 0 {
                    em.emit(-count, OutRow::Marked(other_row, before != 0));
                    em.emit(count, OutRow::Marked(other_row, after != 0));
                }
                if kind.alone_when_unmatched(o) {
                    em.emit(count * flip, OutRow::Alone(o, other_row));
                }
                if kind.alone_when_matched(o) {
                    em.emit(-count * flip, OutRow::Alone(o, other_row));
                }
            }
            if kind == JoinKind::LeftMark && s == 0 {
                em.emit(sign, OutRow::Marked(i, m != 0));
            }
            if kind.alone_when_unmatched(s) && m == 0 || kind.alone_when_matched(s) && m != 0 {
                em.emit(sign, OutRow::Alone(s, i));
            }
            let bucket = self.states[s].get_or_insert_with(key, Bucket::default);
            if self.spec.append_only_inputs && sign > 0 {
                bucket.push(&em.rows[s][i], sign, m);
            } else {
                bucket.apply(&em.rows[s][i], sign, m);
            }
            if bucket.is_empty() {
                self.states[s].remove(key);
            } else if sign > 0 {
                for (b, times) in &timed {
                    if let Some(t) = times[i] {
                        self.interval_watermarks.note(*b, t, key, &mut bucket.marks);
                    }
                }
            }
        }
        if !em.out.is_empty() {
            out.push(self.build_output(em)?);
        }
        Ok(())
    }

    fn build_output(&self, em: Emitted) -> Result<StreamChunk> {
        let mut columns = Vec::new();
        for &s in self.spec.kind.output_sides() {
            let rows: Vec<&[u8]> = em
                .out
                .iter()
                .map(|(_, r)| match r {
                    OutRow::Pair(l, r) => em.rows[s][if s == 0 { *l } else { *r }].as_slice(),
                    OutRow::Alone(side, i) if *side == s => em.rows[s][*i].as_slice(),
                    OutRow::Alone(..) => self.null_rows[s].as_slice(),
                    OutRow::Marked(i, _) => em.rows[0][*i].as_slice(),
                })
                .collect();
            columns.extend(self.columns_of(s, &rows)?);
        }
        if self.spec.kind == JoinKind::LeftMark {
            let marks: arrow::array::BooleanArray = em
                .out
                .iter()
                .map(|(_, r)| match r {
                    OutRow::Marked(_, m) => Some(*m),
                    _ => None,
                })
                .collect();
            columns.push(Arc::new(marks));
        }
        let ops = em.out.iter().map(|(op, _)| *op).collect();
        Ok(StreamChunk::from_columns(
            ops,
            self.spec.output_schema.clone(),
            columns,
        )?)
    }
}

impl Operator for HashJoinOperator {
    fn name(&self) -> &str {
        "HashJoin"
    }

    fn process_chunk(&mut self, _chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        Err(ExecError::Internal(
            "a join must be told which input a chunk came from".into(),
        ))
    }

    fn process_chunk_from(
        &mut self,
        side: usize,
        chunk: StreamChunk,
        out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        if side > 1 {
            return Err(ExecError::Internal(format!(
                "join input {side} out of range"
            )));
        }
        if self.spec.lookup {
            return self.lookup_side(side, chunk, out);
        }
        self.process_side(side, chunk, out)
    }

    /// Watermarks are not passed on (output rows below one could still be emitted
    /// until the next barrier cleans state); watermarks on key columns clean state.
    fn process_watermark(
        &mut self,
        _w: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        Ok(vec![])
    }

    fn sides(&self) -> usize {
        2
    }

    fn held_side(&self) -> Option<usize> {
        self.spec.lookup.then_some(0)
    }

    fn process_watermark_from(
        &mut self,
        side: usize,
        w: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        if side < 2 {
            self.key_watermarks.observe(side, &w);
            self.interval_watermarks.observe(side, &w);
        }
        Ok(vec![])
    }

    /// Output goes out as it is computed; a barrier ends the state's changes, after
    /// state behind the key watermarks is dropped.
    fn on_barrier(&mut self, _barrier: &Barrier, out: &mut Vec<StreamChunk>) -> Result<()> {
        let moved = self.key_watermarks.advance();
        if !moved.is_empty() {
            self.clean_below(&moved)?;
        }
        for (bound, s, col, ms) in self.interval_watermarks.advance() {
            self.clean_rows_below(bound, s, col, ms)?;
        }
        self.on_checkpoint_cut(out)
    }

    fn on_checkpoint_cut(&mut self, _out: &mut Vec<StreamChunk>) -> Result<()> {
        for t in &mut self.states {
            t.flush()?;
        }
        Ok(())
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        Ok((0..2)
            .map(|s| StateDelta {
                uid: self.spec.side_uid(s),
                data: self.states[s].take_checkpoint_delta(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::Barrier;
    use arrow::array::{Array, Int64Array};
    use std::collections::BTreeMap;
    use weir_storage::MemoryStateBackend;

    /// A left outer join of `l(id, k)` and `r(id2, k)` on `k`.
    fn spec() -> HashJoinSpec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("id2", DataType::Int64, true),
        ]));
        HashJoinSpec {
            uid: "v.hashjoin.test".into(),
            kind: JoinKind::LeftOuter,
            side_types: [vec![DataType::Int64], vec![DataType::Int64]],
            key_types: vec![DataType::Int64],
            null_equals_null: false,
            filter: None,
            output_schema: schema,
            key_sources: [vec![None], vec![None]],
            interval_bounds: vec![],
            append_only_inputs: false,
            lookup: false,
        }
    }

    /// One side's chunk: payload `id` then key `k`, each row inserted or deleted.
    fn chunk(rows: &[(i64, Option<i64>, bool)]) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("k", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let ops = rows
            .iter()
            .map(|r| if r.2 { Op::Insert } else { Op::Delete })
            .collect();
        StreamChunk::new(ops, batch)
    }

    /// Adds the output changes to a multiset of `(id, id2)` rows.
    fn apply(out: &[StreamChunk], into: &mut BTreeMap<(i64, Option<i64>), i64>) {
        for c in out {
            let id = c
                .batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let id2 = c
                .batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            for (i, op) in c.ops.iter().enumerate() {
                let row = (id.value(i), (!id2.is_null(i)).then(|| id2.value(i)));
                *into.entry(row).or_default() += if *op == Op::Insert { 1 } else { -1 };
            }
        }
        into.retain(|_, n| *n != 0);
    }

    /// The left outer join of the current sides, as a multiset.
    fn oracle(
        left: &[(i64, Option<i64>)],
        right: &[(i64, Option<i64>)],
    ) -> BTreeMap<(i64, Option<i64>), i64> {
        let mut out = BTreeMap::new();
        for (id, k) in left {
            let matches: Vec<i64> = right
                .iter()
                .filter(|(_, rk)| k.is_some() && rk == k)
                .map(|(id2, _)| *id2)
                .collect();
            if matches.is_empty() {
                *out.entry((*id, None)).or_default() += 1;
            }
            for id2 in matches {
                *out.entry((*id, Some(id2))).or_default() += 1;
            }
        }
        out
    }

    /// Random inserts and deletes on both sides, a barrier after each round, and a
    /// restore from a checkpoint half way: after every barrier the emitted changes add
    /// up to the join of what is there (NULL keys match nothing; a left row without
    /// matches is padded, and retracted when its first match arrives).
    #[test]
    fn left_outer_join_changes_add_up_to_the_join_across_a_restore() {
        random_rounds(false);
    }

    /// The same with append-only inputs: no deletes, and repeated rows, which the
    /// join then stores as separate entries.
    #[test]
    fn append_only_inputs_with_repeated_rows_add_up_to_the_join_across_a_restore() {
        random_rounds(true);
    }

    /// Interval cleaning indexes a bucket once, at its oldest row, and again at its
    /// oldest survivor after each cleaning, so rows die as the watermark passes them,
    /// out-of-order ones included (within their bucket's turn).
    #[test]
    fn interval_cleaning_reindexes_each_bucket_at_its_oldest_survivor() {
        // Left rows (time, key) are dead below the right side's watermark on its time.
        let spec = HashJoinSpec {
            kind: JoinKind::Inner,
            interval_bounds: vec![IntervalBound {
                side: 0,
                column: 0,
                other_column: 0,
                offset_ms: 0,
            }],
            append_only_inputs: true,
            lookup: false,
            ..spec()
        };
        let restore = StateRestore::tracked(128);
        let mut join = HashJoinOperator::new(spec, MemoryStateBackend::new(), restore).unwrap();
        let mut out = Vec::new();
        let rows = [(10, 1), (20, 1), (30, 1), (5, 2), (12, 1)].map(|(t, k)| (t, Some(k), true));
        join.process_chunk_from(0, chunk(&rows), &mut out).unwrap();
        let live = |join: &HashJoinOperator, k: i64| -> Vec<i64> {
            let key = join
                .key_converter
                .as_ref()
                .unwrap()
                .convert_columns(&[Arc::new(Int64Array::from(vec![k]))])
                .unwrap()
                .row(0)
                .as_ref()
                .to_vec();
            let Some(b) = join.states[0].get(&key) else {
                return vec![];
            };
            let rows: Vec<&[u8]> = b.rows().collect();
            let cols = join.columns_of(0, &rows).unwrap();
            let mut t: Vec<i64> = cols[0]
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec();
            t.sort();
            t
        };
        let expected: [(i64, Vec<i64>, Vec<i64>); 3] = [
            (15, vec![20, 30], vec![]),
            (25, vec![30], vec![]),
            (40, vec![], vec![]),
        ];
        for (wm, key1, key2) in expected {
            let w = Watermark {
                column: 0,
                value: ScalarValue::TimestampMillisecond(Some(wm), None),
            };
            join.process_watermark_from(1, w, &mut out).unwrap();
            join.on_barrier(&Barrier::plain(wm as u64), &mut out)
                .unwrap();
            assert_eq!(live(&join, 1), key1, "key 1 after watermark {wm}");
            assert_eq!(live(&join, 2), key2, "key 2 after watermark {wm}");
        }
        assert!(join.states[0].is_empty());
    }

    /// A lookup join: each left row meets the table as it is when the row arrives, in
    /// the output for good (table changes retract nothing); left rows are not stored;
    /// the table survives a restore.
    #[test]
    fn lookup_rows_meet_the_table_of_their_arrival_for_good() {
        for kind in [JoinKind::Inner, JoinKind::LeftOuter] {
            let spec = || HashJoinSpec {
                kind,
                lookup: true,
                ..spec()
            };
            let tracked = StateRestore::tracked(128);
            let mut join =
                HashJoinOperator::new(spec(), MemoryStateBackend::new(), tracked).unwrap();
            let mut next = weir_storage::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
            let mut table: Vec<(i64, Option<i64>)> = vec![];
            let (mut seen, mut want) = (BTreeMap::new(), BTreeMap::new());
            let mut id = 0i64;
            for epoch in 1..=40u64 {
                for _ in 0..6 {
                    id += 1;
                    let k = (next(5) != 0).then(|| next(4) as i64);
                    let mut out = Vec::new();
                    if next(2) == 0 {
                        // A left row: what it meets now is in the output for good.
                        for (row, n) in oracle(&[(id, k)], &table) {
                            if kind == JoinKind::LeftOuter || row.1.is_some() {
                                *want.entry(row).or_insert(0) += n;
                            }
                        }
                        join.process_chunk_from(0, chunk(&[(id, k, true)]), &mut out)
                            .unwrap();
                    } else if !table.is_empty() && next(3) == 0 {
                        let (gone, gone_k) = table.remove(next(table.len() as u64) as usize);
                        join.process_chunk_from(1, chunk(&[(gone, gone_k, false)]), &mut out)
                            .unwrap();
                    } else {
                        table.push((id, k));
                        join.process_chunk_from(1, chunk(&[(id, k, true)]), &mut out)
                            .unwrap();
                    }
                    apply(&out, &mut seen);
                }
                let mut out = Vec::new();
                join.on_barrier(&Barrier::plain(epoch), &mut out).unwrap();
                apply(&out, &mut seen);
                assert_eq!(seen, want, "{kind:?} after barrier {epoch}");
                assert!(join.states[0].is_empty(), "left rows are not kept");
                if epoch == 20 {
                    let backend = crate::operators::restored_backend(join.snapshot(epoch).unwrap());
                    let restore = StateRestore {
                        restored: true,
                        ..tracked
                    };
                    join = HashJoinOperator::new(spec(), backend, restore).unwrap();
                }
            }
            assert!(seen.keys().any(|(_, m)| m.is_some()));
            assert_eq!(
                seen.keys().any(|(_, m)| m.is_none()),
                kind == JoinKind::LeftOuter
            );
        }
    }

    fn random_rounds(append_only: bool) {
        let spec = || HashJoinSpec {
            append_only_inputs: append_only,
            lookup: false,
            ..spec()
        };
        let tracked = StateRestore::tracked(128);
        let mut join = HashJoinOperator::new(spec(), MemoryStateBackend::new(), tracked).unwrap();
        let mut next = weir_storage::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
        let mut left: Vec<(i64, Option<i64>)> = vec![];
        let mut right: Vec<(i64, Option<i64>)> = vec![];
        let mut seen = BTreeMap::new();
        let mut id = 0i64;
        for epoch in 1..=40u64 {
            for _ in 0..6 {
                let side = next(2) as usize;
                let rows = if side == 0 { &mut left } else { &mut right };
                let mut batch = Vec::new();
                if append_only && !rows.is_empty() && next(3) == 0 {
                    let again = rows[next(rows.len() as u64) as usize];
                    rows.push(again);
                    batch.push((again.0, again.1, true));
                } else if !rows.is_empty() && next(3) == 0 {
                    let (gone_id, gone_k) = rows.remove(next(rows.len() as u64) as usize);
                    batch.push((gone_id, gone_k, false));
                } else {
                    id += 1;
                    let k = (next(5) != 0).then(|| next(4) as i64);
                    rows.push((id, k));
                    batch.push((id, k, true));
                }
                let mut out = Vec::new();
                join.process_chunk_from(side, chunk(&batch), &mut out)
                    .unwrap();
                apply(&out, &mut seen);
            }
            let mut out = Vec::new();
            join.on_barrier(&Barrier::plain(epoch), &mut out).unwrap();
            apply(&out, &mut seen);
            assert_eq!(seen, oracle(&left, &right), "after barrier {epoch}");
            if epoch == 20 {
                // A checkpoint (the first: everything) restored into a new backend and
                // loaded by a new operator, as deploy does after a restart.
                let backend = crate::operators::restored_backend(join.snapshot(epoch).unwrap());
                let restore = StateRestore {
                    restored: true,
                    ..tracked
                };
                join = HashJoinOperator::new(spec(), backend, restore).unwrap();
            }
        }
        assert!(seen.keys().any(|(_, m)| m.is_none()) && seen.keys().any(|(_, m)| m.is_some()));
        if append_only {
            assert!(seen.values().any(|n| *n > 1), "some rows were repeated");
        }
    }
}
