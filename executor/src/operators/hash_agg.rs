//! HashAgg: keyed aggregation with retraction.
//!
//! Input columns are `[group keys..., aggregate arguments and FILTER flags...]`
//! (a projection before the exchange computes them). State per group lives in a
//! [`StateTable`] keyed by the group key's row encoding. Changes are emitted at the
//! barrier, once per group that changed in the epoch: a delete of the value last emitted
//! and an insert of the new one. Emitting at barriers keeps the operator's output
//! independent of the order in which its parallel inputs interleave within an epoch.
//!
//! A global aggregate (no GROUP BY) always has exactly one row, as in Postgres: it is
//! emitted at the first barrier even for an empty input (`count = 0`, `sum = NULL`).

use crate::aggregate::{
    accumulators_layout, decode_states, encode_states, AccState, AggCall, Aggregates,
};
use crate::barrier::{Barrier, Epoch, Watermark};
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::distinct_entries::{self, DistinctEntries};
use crate::operators::spec::{BuildContext, StateRestore, StreamSpec, WatermarkFlow};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use std::collections::BTreeSet;
use std::sync::Arc;
use weir_storage::state_snapshot::{DeltaData, StateDelta};
use weir_storage::state_table::StateValue;
use weir_storage::{StateBackend, StateTable};

#[derive(Debug, Clone)]
pub struct HashAggSpec {
    pub uid: String,
    pub group_types: Vec<DataType>,
    pub calls: Vec<AggCall>,
    pub output_schema: SchemaRef,
    /// `EMIT ON WINDOW CLOSE`: a group is emitted once, as an insert, when the
    /// watermark on one of its key columns (a window bound) passes it, and then
    /// dropped from the state; rows of closed windows that still arrive are late and
    /// dropped, as in Flink's window aggregations.
    pub emit_on_window_close: bool,
    /// Drop groups (without emitting anything) once a watermark on a key column passes
    /// them, and drop later rows for them as late: their rows downstream are final.
    /// Set for aggregations whose output a later operator keeps (not a view's last
    /// aggregation, whose rows are rebuilt from this state on restore).
    pub clean_by_watermark: bool,
}

impl HashAggSpec {
    fn has_distinct_sets(&self) -> bool {
        self.calls
            .iter()
            .any(|c| crate::aggregate::distinct_set_column(c).is_some())
    }

    /// The layout of this aggregation's state: group key types, then each call's
    /// accumulator with its argument type. Two specs with equal text read each
    /// other's state.
    pub fn state_schema(&self) -> String {
        let keys = self
            .group_types
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let calls = accumulators_layout(&self.calls);
        format!("keys({keys}) accumulators({calls})")
    }
}

/// Closed windows emitted per output chunk.
const EMIT_SLICE: usize = 8192;

#[derive(Clone)]
pub struct GroupState {
    rows: i64,
    /// Boxed, not a `Vec`: the capacity word would take 8 more bytes in every slot
    /// of the state's hash table.
    pub(crate) accs: Box<[AccState]>,
    /// The emission round in which the group last joined [`EpochChanges`] (not
    /// stored: 0 after a restore). Kept with the group, so that a chunk's rows find
    /// out with the lookup they make anyway whether the group changed before in this
    /// epoch; a map of the epoch's changed keys beside the state had cost a probe per
    /// group per chunk and a key copy per group per epoch. Not the state table's
    /// dirty flag (what the Top-1 path asks `replace_with`): that follows flushes,
    /// and a restore that re-emits must count every restored group as changed
    /// without marking it dirty.
    round: u64,
}

impl StateValue for GroupState {
    fn encode_into(&self, buf: &mut Vec<u8>) {
        encode_states(self.rows, &self.accs, buf);
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        let (rows, accs) = decode_states(bytes)?;
        Some(GroupState {
            rows,
            accs: accs.into_boxed_slice(),
            round: 0,
        })
    }
}

/// A group with no rows yet.
fn empty_group(aggs: &Aggregates) -> GroupState {
    GroupState {
        rows: 0,
        accs: aggs.new_states().into_boxed_slice(),
        round: 0,
    }
}

/// The groups changed since the last emission, in the order they first changed,
/// each with the calls' values it last emitted (`None`: it emitted no row). The
/// keys share one buffer.
#[derive(Default)]
struct EpochChanges {
    keys: Vec<u8>,
    ends: Vec<usize>,
    before: Vec<Option<Vec<ScalarValue>>>,
}

impl EpochChanges {
    fn push(&mut self, key: &[u8], before: Option<Vec<ScalarValue>>) {
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len());
        self.before.push(before);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }
}

pub struct HashAggOperator {
    spec: HashAggSpec,
    aggs: Aggregates,
    key_converter: RowConverter,
    state: StateTable<GroupState>,
    /// Where the groups' distinct sets are stored, one entry per value (`None`: the
    /// aggregation has none, or never checkpoints and stores each set whole).
    distinct: Option<DistinctEntries>,
    /// The groups changed in this epoch, with the rows they last emitted.
    changes: EpochChanges,
    /// Emissions so far, plus one: the round a group changed in now carries.
    round: u64,
    global_emitted: bool,
    /// Groups whose key column `.0` is below `.1` are closed (`EMIT ON WINDOW CLOSE`) or
    /// cleaned (`clean_by_watermark`): rows for them are late and dropped.
    closed_below: Option<(usize, ScalarValue)>,
    /// `clean_by_watermark`: the watermark to clean below at the next barrier.
    clean_pending: Option<(usize, ScalarValue)>,
}

impl StreamSpec for HashAggSpec {
    fn kind(&self) -> &'static str {
        "HashAgg"
    }

    fn describe(&self) -> String {
        let aggs: Vec<&str> = self.calls.iter().map(|c| c.kind.name()).collect();
        format!(
            "HashAgg: groups={} aggs=[{}] uid={} state=StateTable(key_group, group key -> accumulators){}",
            self.group_types.len(),
            aggs.join(", "),
            self.uid,
            if self.emit_on_window_close {
                " emits closed windows once"
            } else if self.clean_by_watermark {
                " cleaned behind watermarks on group keys"
            } else {
                ""
            }
        )
    }

    fn uid(&self) -> Option<&str> {
        Some(&self.uid)
    }

    fn uid_mut(&mut self) -> Option<&mut String> {
        Some(&mut self.uid)
    }

    /// The groups, and the values of their `count(DISTINCT)` sets, one entry each.
    fn state_layouts(&self) -> Vec<(String, String)> {
        let schema = self.state_schema();
        let mut layouts = vec![(self.uid.clone(), schema.clone())];
        if self.has_distinct_sets() {
            let entries = format!("distinct values of {schema}");
            layouts.push((distinct_entries::uid_of(&self.uid), entries));
        }
        layouts
    }

    /// `min` / `max` over an append-only input keep one value per group; the output
    /// is append-only only when each window is emitted once.
    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        for call in &mut self.calls {
            call.append_only = input_append_only;
        }
        input_append_only && self.emit_on_window_close
    }

    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Passes
    }

    /// Group keys come first in both input and output and keep their watermarks.
    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        input
            .iter()
            .copied()
            .filter(|c| *c < self.group_types.len())
            .collect()
    }

    /// A window bound among the group keys closes its groups.
    fn close_windows(&mut self, watermarked: &BTreeSet<usize>) -> bool {
        let keys = self.group_types.len();
        if watermarked.iter().any(|c| *c < keys) {
            self.emit_on_window_close = true;
        }
        self.emit_on_window_close
    }

    /// An EMIT ON WINDOW CLOSE aggregation drops what it emitted: its rows are stored.
    fn rederives_rows(&self) -> bool {
        !self.emit_on_window_close
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(HashAggOperator::new(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

impl HashAggOperator {
    /// `restore.restored`: the backend holds this uid's state from a checkpoint; the
    /// operator loads the key groups of `restore.key_groups` (its share at the current
    /// parallelism). `restore.reemit`: the view's rows were not checkpointed (they are
    /// a function of this state), so the first barrier emits every restored group's
    /// row again.
    pub fn new(
        spec: HashAggSpec,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> Result<Self> {
        let StateRestore {
            max_parallelism,
            key_groups,
            restored,
            reemit,
            track_changes,
        } = restore;
        let aggs = Aggregates::new(&spec.calls)?;
        let mut distinct = (track_changes && aggs.has_distinct_sets())
            .then(|| DistinctEntries::new(&spec.uid, max_parallelism, aggs.first_set()));
        let key_converter = RowConverter::new(
            spec.group_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect(),
        )?;
        let mut state: StateTable<GroupState> =
            StateTable::new(&spec.uid, max_parallelism, backend.clone());
        state.set_track_changes(track_changes);
        if restored {
            state.load(key_groups.start, key_groups.end)?;
            state.try_for_each_unstored(|_, g| {
                let mut accs = std::mem::take(&mut g.accs).into_vec();
                aggs.upgrade(&mut accs)?;
                g.accs = accs.into_boxed_slice();
                Ok::<_, ExecError>(())
            })?;
            if let Some(d) = &mut distinct {
                let kg = (key_groups.start, key_groups.end);
                d.load(&*backend, kg, &mut state)?;
            }
        }
        let mut changes = EpochChanges::default();
        let round = 1;
        if restored && reemit {
            state.try_for_each_unstored(|k, g| -> Result<()> {
                g.round = round;
                changes.push(k, None);
                Ok(())
            })?;
        }
        Ok(Self {
            spec,
            aggs,
            key_converter,
            state,
            distinct,
            changes,
            round,
            // A restored global aggregate already emitted its row (unless it re-emits).
            global_emitted: restored && !reemit,
            closed_below: None,
            clean_pending: None,
        })
    }

    fn is_global(&self) -> bool {
        self.spec.group_types.is_empty()
    }

    fn visible(&self, g: &GroupState) -> bool {
        self.is_global() || g.rows > 0
    }

    fn new_group(&self) -> GroupState {
        empty_group(&self.aggs)
    }

    fn build_output(
        &self,
        keys: Vec<&[u8]>,
        ops: Vec<Op>,
        values: Vec<Vec<ScalarValue>>,
    ) -> Result<StreamChunk> {
        let n = ops.len();
        let mut columns =
            crate::chunk::decode_rows(&self.key_converter, self.spec.group_types.len(), keys)?;
        for (j, call) in self.spec.calls.iter().enumerate() {
            let col = values.iter().map(|v| v[j].clone());
            let arr = if n == 0 {
                arrow::array::new_empty_array(&call.output_type)
            } else {
                ScalarValue::iter_to_array(col)?
            };
            columns.push(arr);
        }
        Ok(StreamChunk::from_columns(
            ops,
            self.spec.output_schema.clone(),
            columns,
        )?)
    }
}

impl Operator for HashAggOperator {
    fn name(&self) -> &str {
        "HashAgg"
    }

    /// Group keys come first in both input and output: a watermark on a key column
    /// stays at its position; one on any other column ends here. Windows close, or
    /// groups are cleaned, by the watermark of the first key column that has one
    /// (`window_start` before `window_end`): each alone is a valid bound.
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        if w.column >= self.spec.group_types.len() {
            return Ok(vec![]);
        }
        let closing = self.closed_below.as_ref().or(self.clean_pending.as_ref());
        if closing.is_some_and(|(c, _)| *c < w.column) {
            return Ok(vec![w]);
        }
        if self.spec.emit_on_window_close {
            // The windows it closes go out ahead of it (see `Operator::process_watermark`).
            let advanced = !self
                .closed_below
                .as_ref()
                .is_some_and(|(_, v)| v.partial_cmp(&w.value).is_some_and(|o| o.is_ge()));
            self.closed_below = Some((w.column, w.value.clone()));
            if advanced {
                self.emit_closed(out)?;
            }
        } else if self.spec.clean_by_watermark {
            self.clean_pending = Some((w.column, w.value.clone()));
        }
        Ok(vec![w])
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let chunk = match &self.closed_below {
            Some((col, below)) => chunk.without_rows_below(*col, below)?,
            None => chunk,
        };
        let k = self.spec.group_types.len();
        let cols = chunk.columns();
        // A global aggregate has no key columns: every row is in the one group, whose
        // key is empty (a zero-column row batch would report zero rows).
        let keys = if k == 0 {
            None
        } else {
            Some(self.key_converter.convert_columns(&cols[..k])?)
        };
        let prepared = self.aggs.prepare(cols)?;
        let n = chunk.len();
        let key_of = |i: usize| -> &[u8] { keys.as_ref().map(|k| k.row(i).data()).unwrap_or(&[]) };
        let groups = crate::row_groups::RowGroups::new(n, key_of);
        // A window emitted once at its close needs no image of its row before the epoch.
        let track_before = !self.spec.emit_on_window_close;
        // The global group emitted its row once it emitted anything; another group
        // while it has rows (a new one has none).
        let global = self.is_global().then_some(self.global_emitted);
        for (g, &first) in groups.first_row.iter().enumerate() {
            let key = key_of(first);
            let aggs = &self.aggs;
            let group = self.state.get_or_insert_with(key, || empty_group(aggs));
            if track_before && group.round != self.round {
                group.round = self.round;
                let before = match global {
                    Some(emitted) => emitted,
                    None => group.rows > 0,
                };
                let before = before.then(|| aggs.outputs(&group.accs)).transpose()?;
                self.changes.push(key, before);
            }
            let was_clean = self
                .distinct
                .as_ref()
                .is_some_and(|d| !d.has_changes(&group.accs));
            for &i in groups.rows(g) {
                let sign = chunk.ops[i].sign();
                group.rows += sign;
                prepared.update(&mut group.accs, i, sign)?;
            }
            if let Some(d) = &mut self.distinct {
                d.note_changes(key, was_clean, &mut group.accs);
            }
        }
        Ok(())
    }

    fn on_barrier(&mut self, _barrier: &Barrier, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn on_checkpoint_cut(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        let mut deltas = vec![StateDelta {
            uid: self.spec.uid.clone(),
            data: self.state.take_checkpoint_delta(),
        }];
        if let Some(d) = &mut self.distinct {
            deltas.push(StateDelta {
                uid: d.uid().to_string(),
                data: DeltaData::Keyed(d.take_delta(&mut self.state)),
            });
        }
        Ok(deltas)
    }
}

impl HashAggOperator {
    /// `EMIT ON WINDOW CLOSE`: emits every group the watermark closed, once, as an
    /// insert, and drops it.
    fn emit_closed(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        let Some((col, below)) = self.closed_below.clone() else {
            return Ok(());
        };
        let closed = match crate::row_below::RowBelow::new(&self.spec.group_types, col, &below)? {
            Some(test) => self.state.take_where(|k| test.test(k)),
            None => {
                let keys = self.keys_below_decoded(col, &below)?;
                keys.into_iter()
                    .filter_map(|k| self.state.remove(&k).map(|g| (k, g)))
                    .collect()
            }
        };
        if let Some(d) = &mut self.distinct {
            for (key, g) in &closed {
                d.retire(key, &g.accs);
            }
        }
        // In slices: the end of input closes every window at once, and one row of
        // ScalarValues per group for all of them at once held more than the state did.
        let closed: Vec<_> = closed.into_iter().filter(|(_, g)| g.rows > 0).collect();
        for slice in closed.chunks(EMIT_SLICE) {
            let keys = slice.iter().map(|(k, _)| k.as_slice());
            let states = slice.iter().map(|(_, g)| &g.accs[..]);
            let rows = self.rows_of(keys, states)?;
            out.push(rows.all(Op::Insert)?);
        }
        Ok(())
    }

    /// Group keys whose column `col` is below `below`.
    fn keys_below(&self, col: usize, below: &ScalarValue) -> Result<Vec<Vec<u8>>> {
        if let Some(dead) = self.keys_below_at_offset(col, below)? {
            return Ok(dead);
        }
        self.keys_below_decoded(col, below)
    }

    /// [`Self::keys_below`] by decoding every key (any key layout).
    fn keys_below_decoded(&self, col: usize, below: &ScalarValue) -> Result<Vec<Vec<u8>>> {
        let keys: Vec<Vec<u8>> = self.state.keys().map(<[u8]>::to_vec).collect();
        if keys.is_empty() {
            return Ok(keys);
        }
        let parser = self.key_converter.parser();
        let columns = self
            .key_converter
            .convert_rows(keys.iter().map(|k| parser.parse(k)))?;
        let late = crate::chunk::below_mask(&columns[col], below)?;
        Ok(keys
            .into_iter()
            .enumerate()
            .filter(|(i, _)| late.value(*i))
            .map(|(_, k)| k)
            .collect())
    }

    /// [`Self::keys_below`] without decoding any key, when the key layout allows it
    /// (see [`crate::row_below`]). `None` when it does not.
    fn keys_below_at_offset(
        &self,
        col: usize,
        below: &ScalarValue,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(test) = crate::row_below::RowBelow::new(&self.spec.group_types, col, below)?
        else {
            return Ok(None);
        };
        Ok(Some(
            self.state
                .keys()
                .filter(|k| test.test(k))
                .map(<[u8]>::to_vec)
                .collect(),
        ))
    }

    /// Drops a group, and the values its distinct sets stored.
    fn remove_group(&mut self, key: &[u8]) {
        let removed = self.state.remove(key);
        if let (Some(d), Some(g)) = (&mut self.distinct, removed) {
            d.retire(key, &g.accs);
        }
    }

    /// `clean_by_watermark`: drops the groups below the watermark seen (their last
    /// output stands) and treats later rows for them as late.
    fn clean_below_watermark(&mut self) -> Result<()> {
        let Some((col, below)) = self.clean_pending.take() else {
            return Ok(());
        };
        let keys = self.keys_below(col, &below)?;
        for key in &keys {
            self.remove_group(key);
        }
        crate::metrics::metrics()
            .state_keys_cleaned
            .with_label_values(&[&self.spec.uid])
            .inc_by(keys.len() as u64);
        self.closed_below = Some((col, below));
        Ok(())
    }

    /// Emits, for every group changed since the last emission, a delete of the row
    /// last emitted and an insert of the current one, and flushes the state table.
    /// The deletes go first in the chunk, then the inserts: the same changes as a
    /// delete and an insert per group, with the current rows built column by column.
    fn emit_changes(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        if self.spec.emit_on_window_close {
            // Closed windows went out with the watermark that closed them.
            self.state.flush()?;
            return Ok(());
        }
        if self.is_global() && !self.global_emitted && self.changes.is_empty() {
            // Postgres returns one row for a global aggregate over no rows.
            self.changes.push(&[], None);
        }
        let mut changes = std::mem::take(&mut self.changes);
        self.round += 1;
        let (visible, gone, after) = self.current_rows(&changes)?;
        let mut befores = std::mem::take(&mut changes.before);
        let mut deleted = (Vec::new(), Vec::new());
        let mut inserted = Vec::new();
        for (row, &i) in visible.iter().enumerate() {
            if let Some(b) = befores[i].take() {
                if row_equals(&b, &after, row)? {
                    continue;
                }
                deleted.0.push(changes.key(i));
                deleted.1.push(b);
            }
            inserted.push(row as u32);
        }
        for &i in &gone {
            self.remove_group(changes.key(i));
            if let Some(b) = befores[i].take() {
                deleted.0.push(changes.key(i));
                deleted.1.push(b);
            }
        }
        if self.is_global() {
            self.global_emitted = true;
        }
        self.clean_below_watermark()?;
        self.state.flush()?;
        let (keys, values) = deleted;
        let ops = vec![Op::Delete; values.len()];
        let deletes = self.build_output(keys, ops, values)?;
        let inserts = after.all(Op::Insert)?.take(&inserted)?;
        let changes = match (deletes.is_empty(), inserts.is_empty()) {
            (_, true) => deletes,
            (true, false) => inserts,
            // One chunk: an update's delete and insert go downstream together.
            (false, false) => StreamChunk::concat(&deletes, &inserts)?,
        };
        if !changes.is_empty() {
            out.push(changes);
        }
        Ok(())
    }

    /// The changed groups that have a row now (the global aggregate always has one)
    /// and those that have none, as indexes of `changes`, and the current rows of
    /// the first, in their order: one state lookup per group.
    fn current_rows(&self, changes: &EpochChanges) -> Result<(Vec<usize>, Vec<usize>, Rows)> {
        let empty = self.new_group();
        let (mut visible, mut gone, mut states) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..changes.len() {
            let shows = match self.state.get(changes.key(i)) {
                Some(g) if g.rows < 0 => {
                    return Err(ExecError::Internal(format!(
                        "negative row count in aggregation {}",
                        self.spec.uid
                    )))
                }
                Some(g) if self.visible(g) => Some(&g.accs[..]),
                None if self.is_global() => Some(&empty.accs[..]),
                _ => None,
            };
            match shows {
                Some(accs) => {
                    visible.push(i);
                    states.push(accs);
                }
                None => gone.push(i),
            }
        }
        let keys = visible.iter().map(|&i| changes.key(i));
        let rows = self.rows_of(keys, states.into_iter())?;
        Ok((visible, gone, rows))
    }

    /// The rows of groups given by their keys and states, in that order.
    fn rows_of<'k, 's>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
        states: impl Iterator<Item = &'s [AccState]>,
    ) -> Result<Rows> {
        let states: Vec<&[AccState]> = states.collect();
        let mut columns =
            crate::chunk::decode_rows(&self.key_converter, self.spec.group_types.len(), keys)?;
        columns.extend(self.aggs.output_columns(&states)?);
        Ok(Rows {
            schema: self.spec.output_schema.clone(),
            columns,
        })
    }
}

/// Rows of an aggregation's output, column by column.
struct Rows {
    schema: SchemaRef,
    columns: Vec<arrow::array::ArrayRef>,
}

impl Rows {
    /// Every row, as changes of kind `op`.
    fn all(self, op: Op) -> Result<StreamChunk> {
        let n = self.columns.first().map_or(0, |c| c.len());
        Ok(StreamChunk::from_columns(
            vec![op; n],
            self.schema,
            self.columns,
        )?)
    }
}

/// Whether `values`, the calls' values a group last emitted, are those of row `i`
/// of `rows` (whose columns after the keys are the calls').
fn row_equals(values: &[ScalarValue], rows: &Rows, i: usize) -> Result<bool> {
    let calls = &rows.columns[rows.columns.len() - values.len()..];
    for (v, column) in values.iter().zip(calls) {
        if *v != ScalarValue::try_from_array(column, i)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::AggKind;
    use arrow::array::{AsArray, Int64Array, RecordBatch, TimestampMillisecondArray};
    use arrow::datatypes::Int64Type;
    use arrow::datatypes::{Field, Schema, TimeUnit};
    use std::collections::BTreeMap;
    use weir_storage::MemoryStateBackend;

    /// One per group in the state's hash table, with millions of groups: its
    /// accumulators live behind one thin box.
    #[test]
    fn a_group_takes_32_bytes_beside_its_accumulators() {
        assert_eq!(std::mem::size_of::<GroupState>(), 32);
        assert_eq!(std::mem::size_of::<Option<GroupState>>(), 32);
    }

    #[test]
    fn keys_below_compare_in_place_as_when_decoded() {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let spec = HashAggSpec {
            uid: "v.hashagg.test".into(),
            group_types: vec![DataType::Int64, ts.clone()],
            calls: vec![AggCall {
                kind: AggKind::CountStar,
                arg: None,
                arg_type: None,
                filter: None,
                output_type: DataType::Int64,
                order: vec![],
                delimiter: None,
                append_only: false,
            }],
            output_schema: Arc::new(Schema::new(vec![
                Field::new("auction", DataType::Int64, true),
                Field::new("window_start", ts.clone(), true),
                Field::new("n", DataType::Int64, true),
            ])),
            emit_on_window_close: false,
            clean_by_watermark: true,
        };
        let mut agg =
            HashAggOperator::new(spec, MemoryStateBackend::new(), StateRestore::fresh(128))
                .unwrap();
        let input = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("window_start", ts, true),
        ]));
        let batch = RecordBatch::try_new(
            input,
            vec![
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    Some(-2),
                    None,
                    Some(4),
                    Some(5),
                ])),
                Arc::new(TimestampMillisecondArray::from(vec![
                    Some(1_000),
                    Some(-5_000),
                    Some(2_000),
                    None,
                    Some(9_000),
                ])),
            ],
        )
        .unwrap();
        agg.process_chunk(StreamChunk::inserts(batch), &mut Vec::new())
            .unwrap();
        for below in [-6_000, 1_000, 1_001, 3_000, 10_000] {
            let w = ScalarValue::TimestampMillisecond(Some(below), None);
            let mut fast = agg
                .keys_below_at_offset(1, &w)
                .unwrap()
                .expect("fixed layout");
            let mut slow = agg.keys_below_decoded(1, &w).unwrap();
            fast.sort();
            slow.sort();
            assert_eq!(fast, slow, "below {below}");
        }
        let w = ScalarValue::TimestampMillisecond(Some(3_000), None);
        assert_eq!(
            agg.keys_below(1, &w).unwrap().len(),
            3,
            "NULL is never below"
        );
    }

    /// count(*), count(DISTINCT v), count(DISTINCT v) FILTER (WHERE f) and
    /// count(DISTINCT w) per g, over input columns (g, v, w, f); `only_inserts`: the
    /// input is append-only (the sets keep marks).
    fn distinct_agg(
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
        only_inserts: bool,
        apart_at: usize,
    ) -> HashAggOperator {
        let count = |kind, arg: Option<usize>, filter| AggCall {
            kind,
            arg,
            arg_type: arg.map(|_| DataType::Int64),
            filter,
            output_type: DataType::Int64,
            order: vec![],
            delimiter: None,
            append_only: only_inserts,
        };
        let int = |n: &str| Field::new(n, DataType::Int64, true);
        let spec = HashAggSpec {
            uid: "v.hashagg.distinct".into(),
            group_types: vec![DataType::Int64],
            calls: vec![
                count(AggKind::CountStar, None, None),
                count(AggKind::CountDistinct, Some(1), None),
                count(AggKind::CountDistinct, Some(1), Some(3)),
                count(AggKind::CountDistinct, Some(2), None),
            ],
            output_schema: Arc::new(Schema::new(
                ["g", "n", "dv", "dv_f", "dw"].map(int).to_vec(),
            )),
            emit_on_window_close: false,
            clean_by_watermark: false,
        };
        let mut op = HashAggOperator::new(spec, backend, restore).unwrap();
        if let Some(d) = &mut op.distinct {
            d.set_apart_at(apart_at);
        }
        op
    }

    type Row = (i64, i64, i64, bool);

    /// Epochs of signed rows: inserts, and (`deletes`) deletes of rows inserted
    /// before (groups empty out and come back, values leave and return).
    fn distinct_script(epochs: usize, deletes: bool) -> Vec<Vec<(Op, Row)>> {
        let mut x = 17i64;
        let mut live: Vec<Row> = Vec::new();
        (0..epochs)
            .map(|e| {
                // Every fourth epoch empties a group, which gets no row that epoch.
                let gone = (deletes && e % 4 == 3).then_some((e as i64 / 4) % 4);
                let emptied = live.iter().filter(|r| Some(r.0) == gone);
                let mut rows: Vec<(Op, Row)> = emptied.map(|r| (Op::Delete, *r)).collect();
                live.retain(|r| !rows.iter().any(|(_, d)| d == r));
                rows.extend((0..40).map(|_| {
                    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
                    if deletes && x % 5 < 2 && !live.is_empty() {
                        let gone = live.swap_remove((x / 5) as usize % live.len());
                        (Op::Delete, gone)
                    } else {
                        let g = if Some(x % 4) == gone {
                            (x + 1) % 4
                        } else {
                            x % 4
                        };
                        let row = (g, (x / 4) % 30, (x / 120) % 7, x % 3 == 0);
                        live.push(row);
                        (Op::Insert, row)
                    }
                }));
                rows
            })
            .collect()
    }

    fn signed_chunk(rows: &[(Op, Row)]) -> StreamChunk {
        let int = |f: fn(&Row) -> i64| {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|(_, r)| f(r))))
                as arrow::array::ArrayRef
        };
        let flags = arrow::array::BooleanArray::from_iter(rows.iter().map(|(_, r)| Some(r.3)));
        let schema = Schema::new(vec![
            Field::new("g", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("w", DataType::Int64, true),
            Field::new("f", DataType::Boolean, true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![int(|r| r.0), int(|r| r.1), int(|r| r.2), Arc::new(flags)],
        )
        .unwrap();
        StreamChunk::new(rows.iter().map(|(op, _)| *op).collect(), batch)
    }

    /// One epoch: the rows, then a barrier; the output as sorted (sign, g, counts...).
    fn epoch(op: &mut HashAggOperator, rows: &[(Op, Row)], e: u64) -> Vec<[i64; 6]> {
        let mut out = Vec::new();
        op.process_chunk(signed_chunk(rows), &mut out).unwrap();
        op.on_barrier(&Barrier::plain(e), &mut out).unwrap();
        let mut seen = Vec::new();
        for c in &out {
            let cols = c.columns();
            for i in 0..c.len() {
                let int = |j: usize| cols[j].as_primitive::<Int64Type>().value(i);
                seen.push([c.ops[i].sign(), int(0), int(1), int(2), int(3), int(4)]);
            }
        }
        seen.sort();
        seen
    }

    /// A barrier's changes are one chunk, the deletes first: an update's delete and
    /// insert never reach a sink in different chunks (its commit could fall between).
    #[test]
    fn a_barrier_emits_its_updates_in_one_chunk_deletes_first() {
        let mut op = distinct_agg(
            MemoryStateBackend::new(),
            StateRestore::fresh(128),
            false,
            8,
        );
        let ins = |g: i64, v: i64| (Op::Insert, (g, v, 0, true));
        let rows = [ins(0, 1), ins(1, 2), ins(2, 3)];
        op.process_chunk(signed_chunk(&rows), &mut Vec::new())
            .unwrap();
        op.on_barrier(&Barrier::plain(1), &mut Vec::new()).unwrap();
        // Groups 0 and 1 change, group 3 is new, group 2 is left alone.
        let rows = [ins(0, 5), ins(1, 6), ins(3, 7)];
        op.process_chunk(signed_chunk(&rows), &mut Vec::new())
            .unwrap();
        let mut out = Vec::new();
        op.on_barrier(&Barrier::plain(2), &mut out).unwrap();
        assert_eq!(out.len(), 1, "one chunk");
        let signs: Vec<i64> = out[0].ops.iter().map(|o| o.sign()).collect();
        assert_eq!(signs, [-1, -1, 1, 1, 1]);
        let mut out = Vec::new();
        op.on_barrier(&Barrier::plain(3), &mut out).unwrap();
        assert!(out.is_empty(), "nothing changed");
    }

    /// A group changed by several chunks of one epoch emits one update, from the row
    /// it emitted at the barrier before; a group that lost all its rows, a delete.
    #[test]
    fn an_epochs_update_starts_from_the_row_last_emitted() {
        let mut op = distinct_agg(
            MemoryStateBackend::new(),
            StateRestore::fresh(128),
            false,
            8,
        );
        let ins = |g: i64, v: i64| (Op::Insert, (g, v, 0, true));
        let del = |g: i64, v: i64| (Op::Delete, (g, v, 0, true));
        assert_eq!(
            epoch(&mut op, &[ins(0, 1), ins(1, 1)], 1),
            [[1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
        );
        for rows in [[ins(0, 2)], [ins(0, 3)], [del(1, 1)]] {
            op.process_chunk(signed_chunk(&rows), &mut Vec::new())
                .unwrap();
        }
        assert_eq!(
            epoch(&mut op, &[ins(0, 3)], 2),
            [[-1, 0, 1, 1, 1, 1], [-1, 1, 1, 1, 1, 1], [1, 0, 4, 3, 3, 1]]
        );
        assert_eq!(epoch(&mut op, &[ins(1, 5)], 3), [[1, 1, 1, 1, 1, 1]]);
        assert!(epoch(&mut op, &[], 4).is_empty(), "nothing changed");
    }

    /// Checkpoints applied in order, as the uploader's chain of deltas merges them.
    /// One uid's entries: (key group, key) -> value.
    type Entries = BTreeMap<(u32, Vec<u8>), Vec<u8>>;

    #[derive(Default)]
    struct Checkpoints(BTreeMap<String, Entries>, bool, usize);

    impl Checkpoints {
        fn take(&mut self, op: &mut HashAggOperator) -> Vec<(String, usize)> {
            let mut sizes = Vec::new();
            for delta in op.snapshot(0).unwrap() {
                assert!(!matches!(delta.data, DeltaData::Rows(_)), "keyed state");
                let entries = delta.data.into_keyed();
                let uid = self.0.entry(delta.uid.clone()).or_default();
                for (kg, key, value) in entries.iter() {
                    match value {
                        Some(v) => uid.insert((kg, key.to_vec()), v.to_vec()),
                        None => uid.remove(&(kg, key.to_vec())),
                    };
                }
                sizes.push((delta.uid, entries.len()));
            }
            sizes
        }

        /// The operator restored on the key groups `kg` of 128.
        fn restore(&self, kg: std::ops::Range<u32>) -> HashAggOperator {
            let backend = MemoryStateBackend::new();
            let mut batch = weir_storage::WriteBatch::default();
            for (uid, entries) in &self.0 {
                for ((g, key), value) in entries {
                    let key = weir_storage::StateKey {
                        uid: uid.as_str().into(),
                        key_group: weir_storage::KeyGroup(*g),
                        key: key.clone(),
                    };
                    batch.put(key, value.clone());
                }
            }
            weir_storage::StateBackend::write(&*backend, batch).unwrap();
            let restore = StateRestore {
                restored: true,
                key_groups: weir_storage::KeyGroupRange {
                    start: kg.start,
                    end: kg.end,
                },
                ..StateRestore::tracked(128)
            };
            distinct_agg(backend, restore, self.1, self.2)
        }
    }

    /// Whether every distinct set of every group keeps marks (or every one counts).
    fn sets_keep_marks(op: &HashAggOperator, marks: bool) -> bool {
        op.state.keys().all(|k| {
            op.state.get(k).unwrap().accs.iter().all(|a| match a {
                AccState::Distinct(s) => s.keeps_marks() == marks,
                _ => true,
            })
        })
    }

    /// How many distinct sets are stored whole and how many apart.
    fn set_forms(op: &HashAggOperator) -> (usize, usize) {
        let sets = op.state.keys().flat_map(|k| {
            let accs = &op.state.get(k).unwrap().accs;
            accs.iter().filter_map(|a| match a {
                AccState::Distinct(s) => Some(s.is_stored_apart()),
                _ => None,
            })
        });
        sets.fold((0, 0), |(w, a), apart| {
            (w + usize::from(!apart), a + usize::from(apart))
        })
    }

    /// Every group of `whole` is in exactly one of `parts`, with equal states.
    fn assert_same_groups(whole: &HashAggOperator, parts: &[&HashAggOperator], when: &str) {
        let held: usize = parts.iter().map(|p| p.state.len()).sum();
        assert_eq!(held, whole.state.len(), "{when}: groups");
        for key in whole.state.keys() {
            let want = &whole.state.get(key).unwrap().accs;
            let got = parts.iter().find_map(|p| p.state.get(key));
            assert_eq!(got.map(|g| &g.accs), Some(want), "{when}: group {key:?}");
        }
    }

    /// A run restarted from its checkpoints every few epochs (once split across two
    /// actors by key group) emits what a run never stopped does, and holds the same
    /// sets; each checkpoint carries the values that changed, not whole sets.
    #[test]
    fn distinct_values_restored_from_their_changes_agree_with_a_run_never_stopped() {
        restarts_agree(false, 0);
        restarts_agree(true, 0);
        // Sets of `v` grow past 10 values and move apart; sets of `w` (7) stay whole.
        restarts_agree(false, 10);
    }

    /// See above; `only_inserts`: over an append-only input, the sets' marks;
    /// `apart_at`: sets larger than this are stored apart.
    fn restarts_agree(only_inserts: bool, apart_at: usize) {
        let script = distinct_script(30, !only_inserts);
        let agg = || {
            distinct_agg(
                MemoryStateBackend::new(),
                StateRestore::tracked(128),
                only_inserts,
                apart_at,
            )
        };
        let (mut reference, mut op) = (agg(), agg());
        let mut checkpoints = Checkpoints(BTreeMap::new(), only_inserts, apart_at);
        let mut tombstones_seen = false;
        for (e, rows) in script.iter().enumerate() {
            let e = e as u64 + 1;
            assert_eq!(
                epoch(&mut op, rows, e),
                epoch(&mut reference, rows, e),
                "epoch {e}"
            );
            if e.is_multiple_of(3) {
                let before: BTreeMap<_, _> = checkpoints
                    .0
                    .get("v.hashagg.distinct.distinct")
                    .cloned()
                    .unwrap_or_default();
                checkpoints.take(&mut op);
                let after = &checkpoints.0["v.hashagg.distinct.distinct"];
                tombstones_seen |= before.keys().any(|k| !after.contains_key(k));
                op = checkpoints.restore(0..128);
                assert_same_groups(&reference, &[&op], &format!("restored after epoch {e}"));
                assert!(
                    sets_keep_marks(&op, only_inserts) && sets_keep_marks(&reference, only_inserts)
                );
            }
            if e == 15 {
                let (a, b) = (checkpoints.restore(0..64), checkpoints.restore(64..128));
                assert!(
                    !a.state.is_empty() && !b.state.is_empty(),
                    "both actors hold groups"
                );
                assert_same_groups(&reference, &[&a, &b], "split in two");
            }
        }
        assert_eq!(
            tombstones_seen, !only_inserts,
            "values and groups went away between checkpoints"
        );
        let (whole, apart) = set_forms(&op);
        assert_eq!(
            (whole > 0, apart > 0),
            (apart_at > 0, true),
            "sets whole / apart"
        );
        if apart_at > 0 {
            return;
        }
        // One new value per set in group 1: two entries, and a group value that holds
        // no set.
        checkpoints.take(&mut op);
        let row = (Op::Insert, (1, 999, 999, false));
        epoch(&mut op, &[row], 100);
        let sizes = checkpoints.take(&mut op);
        assert_eq!(
            sizes,
            vec![
                ("v.hashagg.distinct".to_string(), 1),
                ("v.hashagg.distinct.distinct".to_string(), 2)
            ]
        );
        let group = checkpoints.0["v.hashagg.distinct"]
            .values()
            .map(Vec::len)
            .max()
            .unwrap();
        assert!(group < 100, "a group's value holds no set: {group} bytes");
    }

    /// State of an earlier version, whose groups held their sets whole, restores;
    /// the sets move apart when rows next change them, and later restores agree.
    #[test]
    fn sets_stored_whole_by_an_earlier_version_are_stored_apart() {
        let script = distinct_script(12, true);
        let mut reference = distinct_agg(
            MemoryStateBackend::new(),
            StateRestore::tracked(128),
            false,
            0,
        );
        let mut old = distinct_agg(
            MemoryStateBackend::new(),
            StateRestore::tracked(128),
            false,
            0,
        );
        old.distinct = None;
        for (e, rows) in script[..6].iter().enumerate() {
            let e = e as u64 + 1;
            assert_eq!(epoch(&mut old, rows, e), epoch(&mut reference, rows, e));
        }
        let mut checkpoints = Checkpoints(BTreeMap::new(), false, 0);
        let sizes = checkpoints.take(&mut old);
        assert_eq!(sizes.len(), 1, "no distinct entries then");
        let mut op = checkpoints.restore(0..128);
        assert_same_groups(&reference, &[&op], "upgraded");
        assert_eq!(set_forms(&op).1, 0, "restored whole");
        for (e, rows) in script[6..].iter().enumerate() {
            let e = e as u64 + 7;
            assert_eq!(epoch(&mut op, rows, e), epoch(&mut reference, rows, e));
            checkpoints.take(&mut op);
            op = checkpoints.restore(0..128);
        }
        assert_same_groups(&reference, &[&op], "at the end");
        assert_eq!(
            set_forms(&op).0,
            0,
            "every set changed since, and moved apart"
        );
        assert!(!checkpoints.0["v.hashagg.distinct.distinct"].is_empty());
    }
}
