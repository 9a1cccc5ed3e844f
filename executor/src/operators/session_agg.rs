//! SessionAgg: aggregation over SESSION windows of an append-only input, the way
//! Flink's session window aggregation runs it.
//!
//! `SELECT k, agg(..), window_start, window_end FROM SESSION(t PARTITION BY k, ts, gap)
//! GROUP BY k, window_start, window_end` also runs as the SESSION expansion's three
//! OVER windows and a HashAgg (the planner's choice when the input may retract rows:
//! a deleted row can split a session), but those keep every row and recompute a key's
//! whole partition at each barrier. Over an append-only input a session only ever
//! grows or merges with its neighbours, so this operator keeps, per key, only its
//! sessions, each with the calls' accumulators. A row joins every session whose
//! `[start - gap, last + gap]` holds its time, merging them into one (counts and sums
//! add, multisets unite: [`CallRuntime::merge`]), or starts a session of its own.
//! Rows without a time belong to no session.
//!
//! Input columns are `[keys..., time, arguments and FILTER flags...]`; output columns
//! `[keys..., window_start, window_end, calls...]`, with `window_end = last + gap`.
//!
//! - Updating (the default): at each barrier every session that changed is retracted
//!   as last emitted and inserted as it is now; a session merged into another is
//!   retracted. Nothing is dropped: a row that arrives late still joins its session.
//! - `EMIT ON WINDOW CLOSE`: a session is emitted once, as an insert, when the
//!   watermark on the time column passes its end (no row at or after the watermark
//!   can reach it any more), and is then dropped; rows behind the watermark are late
//!   and dropped, as in Flink. The watermark goes on as one on `window_end`.

use crate::aggregate::{
    accumulators_layout, decode_states, encode_states, AccState, AggCall, Aggregates,
};
use crate::barrier::{Barrier, Epoch, Watermark};
use crate::bytes::Reader;
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::spec::{BuildContext, StateRestore, StreamSpec, WatermarkFlow};
use ahash::AHashSet as HashSet;
use arrow::array::{Array, AsArray, Int64Array};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;
use weir_storage::state_snapshot::StateDelta;
use weir_storage::state_table::StateValue;
use weir_storage::{StateBackend, StateTable};

#[derive(Debug, Clone)]
pub struct SessionAggSpec {
    pub uid: String,
    pub key_types: Vec<DataType>,
    /// The time column's type (a timestamp), right after the keys in the input.
    pub time_type: DataType,
    pub gap_ns: i64,
    pub calls: Vec<AggCall>,
    /// `[keys..., window_start, window_end, calls...]`.
    pub output_schema: SchemaRef,
    pub emit_on_window_close: bool,
    /// Set at deployment: a retraction could split a session, which its accumulators
    /// cannot undo, so the operator refuses to run over an input that may retract.
    pub input_append_only: bool,
}

impl SessionAggSpec {
    fn time_column(&self) -> usize {
        self.key_types.len()
    }

    /// The layout of the state: two specs with equal text read each other's state.
    pub fn state_schema(&self) -> String {
        let keys: Vec<String> = self.key_types.iter().map(|t| t.to_string()).collect();
        format!(
            "sessions keys({}) time({}) gap({}ns) accumulators({})",
            keys.join(", "),
            self.time_type,
            self.gap_ns,
            accumulators_layout(&self.calls)
        )
    }
}

impl StreamSpec for SessionAggSpec {
    fn kind(&self) -> &'static str {
        "SessionAgg"
    }

    fn describe(&self) -> String {
        let aggs: Vec<&str> = self.calls.iter().map(|c| c.kind.name()).collect();
        format!(
            "SessionAgg: keys={} gap={}ms aggs=[{}] uid={} state=StateTable(key_group, key -> sessions with accumulators){}",
            self.key_types.len(),
            self.gap_ns / 1_000_000,
            aggs.join(", "),
            self.uid,
            if self.emit_on_window_close {
                " emits closed sessions once"
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

    fn state_layouts(&self) -> Vec<(String, String)> {
        vec![(self.uid.clone(), self.state_schema())]
    }

    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        self.input_append_only = input_append_only;
        for call in &mut self.calls {
            call.append_only = input_append_only;
        }
        input_append_only && self.emit_on_window_close
    }

    /// Updating sessions change older rows (a merge retracts two), so no window after
    /// them could close; closed sessions are final.
    fn watermarks(&self) -> WatermarkFlow {
        if self.emit_on_window_close {
            WatermarkFlow::Passes
        } else {
            WatermarkFlow::Stops
        }
    }

    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        let t = self.time_column();
        if self.emit_on_window_close && input.contains(&t) {
            BTreeSet::from([t + 1])
        } else {
            BTreeSet::new()
        }
    }

    fn close_windows(&mut self, watermarked: &BTreeSet<usize>) -> bool {
        self.emit_on_window_close = watermarked.contains(&self.time_column());
        self.emit_on_window_close
    }

    fn rederives_rows(&self) -> bool {
        !self.emit_on_window_close
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        if !self.input_append_only {
            return Err(ExecError::Internal(format!(
                "session aggregation {} needs an append-only input",
                self.uid
            )));
        }
        Ok(Box::new(SessionAggOperator::new(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

/// Closed sessions emitted per output chunk.
const EMIT_SLICE: usize = 8192;

/// One session of a key: rows with times in `[start, last]`, no two more than the
/// gap apart.
#[derive(Clone)]
struct Session {
    start: i64,
    last: i64,
    rows: i64,
    accs: Vec<AccState>,
    /// Updating mode: the view holds this session as it is now (not stored: at every
    /// barrier, so in every checkpoint, each session is emitted).
    emitted: bool,
}

/// A key's sessions, in time order; more than the gap lies between two.
#[derive(Default, Clone)]
pub struct KeySessions {
    list: Vec<Session>,
    /// `EMIT ON WINDOW CLOSE`: the end under which this key waits in the closing
    /// queue (not stored: rebuilt on restore).
    due: Option<i64>,
}

impl StateValue for KeySessions {
    fn encode_into(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&(self.list.len() as u32).to_le_bytes());
        for s in &self.list {
            buf.extend_from_slice(&s.start.to_le_bytes());
            buf.extend_from_slice(&s.last.to_le_bytes());
            let at = buf.len();
            buf.extend_from_slice(&0u32.to_le_bytes());
            encode_states(s.rows, &s.accs, buf);
            let len = (buf.len() - at - 4) as u32;
            buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let n = r.u32()?;
        let mut list = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let start = r.i64()?;
            let last = r.i64()?;
            let (rows, accs) = decode_states(&r.prefixed()?)?;
            list.push(Session {
                start,
                last,
                rows,
                accs,
                emitted: true,
            });
        }
        Some(KeySessions { list, due: None })
    }
}

/// A session's output row: start, end, each call's value.
type Image = (i64, i64, Vec<ScalarValue>);

fn image(s: &Session, gap: i64, aggs: &Aggregates) -> Result<Image> {
    Ok((s.start, s.last.saturating_add(gap), aggs.outputs(&s.accs)?))
}

/// Puts time `t` into `list`: into the session it reaches, merged with every other one
/// it reaches, or into a new session. Returns the session's index. `retracted`
/// (updating mode) receives the emitted images of the sessions that change.
fn place(
    list: &mut Vec<Session>,
    t: i64,
    gap: i64,
    aggs: &Aggregates,
    retracted: Option<&mut Vec<Image>>,
) -> Result<usize> {
    // Sessions are disjoint and in order, so both bounds rise along the list.
    let i = list.partition_point(|s| s.last.saturating_add(gap) < t);
    let mut j = i;
    while j < list.len() && list[j].start.saturating_sub(gap) <= t {
        j += 1;
    }
    if i == j {
        let accs = aggs.new_states();
        list.insert(
            i,
            Session {
                start: t,
                last: t,
                rows: 0,
                accs,
                emitted: false,
            },
        );
        return Ok(i);
    }
    if let Some(images) = retracted {
        for s in list[i..j].iter_mut().filter(|s| s.emitted) {
            images.push(image(s, gap, aggs)?);
            s.emitted = false;
        }
    }
    let merged: Vec<Session> = list.drain(i + 1..j).collect();
    let into = &mut list[i];
    for s in merged {
        into.last = into.last.max(s.last);
        into.rows += s.rows;
        aggs.merge(&mut into.accs, s.accs)?;
    }
    into.start = into.start.min(t);
    into.last = into.last.max(t);
    Ok(i)
}

pub struct SessionAggOperator {
    spec: SessionAggSpec,
    aggs: Aggregates,
    key_converter: RowConverter,
    state: StateTable<KeySessions>,
    /// The gap in the time column's unit.
    gap: i64,
    /// `EMIT ON WINDOW CLOSE`: the last watermark; earlier rows are late.
    closed_below: Option<i64>,
    /// `EMIT ON WINDOW CLOSE`: (end of its first session, key) for every key with
    /// sessions, the earliest first; entries a key has since left are skipped.
    closing: BinaryHeap<Reverse<(i64, Vec<u8>)>>,
    /// Updating mode: keys with sessions not yet emitted as they are, and the rows to
    /// retract (key, image).
    touched: HashSet<Vec<u8>>,
    retracted: Vec<(Vec<u8>, Image)>,
}

impl SessionAggOperator {
    pub fn new(
        spec: SessionAggSpec,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> Result<Self> {
        let DataType::Timestamp(unit, _) = &spec.time_type else {
            return Err(ExecError::Internal(format!(
                "session windows over {} (a timestamp is needed)",
                spec.time_type
            )));
        };
        let gap = crate::watermark::nanos_in_unit(unit, spec.gap_ns);
        let aggs = Aggregates::new(&spec.calls)?;
        let key_converter = RowConverter::new(
            spec.key_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect(),
        )?;
        let mut state = StateTable::new(&spec.uid, restore.max_parallelism, backend);
        state.set_track_changes(restore.track_changes);
        let mut op = Self {
            spec,
            aggs,
            key_converter,
            state,
            gap,
            closed_below: None,
            closing: BinaryHeap::new(),
            touched: HashSet::default(),
            retracted: Vec::new(),
        };
        if restore.restored {
            op.state
                .load(restore.key_groups.start, restore.key_groups.end)?;
            let aggs = &op.aggs;
            op.state.try_for_each_unstored(|_, ks| {
                ks.list
                    .iter_mut()
                    .try_for_each(|s| aggs.upgrade(&mut s.accs))
            })?;
            op.after_restore(restore.reemit);
        }
        Ok(op)
    }

    /// Rebuilds what is not stored: the closing queue, or (when the view's rows are
    /// rebuilt from this state) the sessions to emit again.
    fn after_restore(&mut self, reemit: bool) {
        let keys: Vec<Vec<u8>> = self.state.keys().map(<[u8]>::to_vec).collect();
        for key in keys {
            let Some(ks) = self.state.get_mut_unstored(&key) else {
                continue;
            };
            if self.spec.emit_on_window_close {
                if let Some(first) = ks.list.first() {
                    let end = first.last.saturating_add(self.gap);
                    ks.due = Some(end);
                    self.closing.push(Reverse((end, key)));
                }
            } else if reemit {
                ks.list.iter_mut().for_each(|s| s.emitted = false);
                self.touched.insert(key);
            }
        }
    }

    /// An output chunk of `rows` (key, image), all with `op`.
    fn build_output(&self, rows: &[(Vec<u8>, Image)], op: Op) -> Result<StreamChunk> {
        let mut columns = crate::chunk::decode_rows(
            &self.key_converter,
            self.spec.key_types.len(),
            rows.iter().map(|(k, _)| k.as_slice()),
        )?;
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, (start, _, _))| *start),
        )));
        columns.push(Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, (_, end, _))| *end),
        )));
        for (j, call) in self.spec.calls.iter().enumerate() {
            columns.push(if rows.is_empty() {
                arrow::array::new_empty_array(&call.output_type)
            } else {
                ScalarValue::iter_to_array(rows.iter().map(|(_, (_, _, v))| v[j].clone()))?
            });
        }
        Ok(StreamChunk::from_columns(
            vec![op; rows.len()],
            self.spec.output_schema.clone(),
            columns,
        )?)
    }

    /// `EMIT ON WINDOW CLOSE`: emits, once, every session that ends before `below`,
    /// and drops it.
    fn emit_closed(&mut self, below: i64, out: &mut Vec<StreamChunk>) -> Result<()> {
        let mut closed: Vec<(Vec<u8>, Image)> = Vec::new();
        while self
            .closing
            .peek()
            .is_some_and(|Reverse((end, _))| *end < below)
        {
            let Some(Reverse((end, key))) = self.closing.pop() else {
                break;
            };
            // An entry the key has left (a session before it started since) is stale.
            if self.state.get(&key).is_none_or(|ks| ks.due != Some(end)) {
                continue;
            }
            let gap = self.gap;
            let ks = self.state.get_or_insert_with(&key, KeySessions::default);
            let n = ks
                .list
                .partition_point(|s| s.last.saturating_add(gap) < below);
            let done: Vec<Session> = ks.list.drain(..n).collect();
            ks.due = ks.list.first().map(|s| s.last.saturating_add(gap));
            if let Some(next) = ks.due {
                self.closing.push(Reverse((next, key.clone())));
            } else {
                self.state.remove(&key);
            }
            for s in done.iter().filter(|s| s.rows > 0) {
                closed.push((key.clone(), image(s, gap, &self.aggs)?));
            }
            if closed.len() >= EMIT_SLICE {
                out.push(self.build_output(&closed, Op::Insert)?);
                closed.clear();
            }
        }
        if !closed.is_empty() {
            out.push(self.build_output(&closed, Op::Insert)?);
        }
        Ok(())
    }

    /// Updating mode: retracts what changed as last emitted and inserts it as it is.
    fn emit_changes(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        if self.spec.emit_on_window_close {
            return Ok(());
        }
        let retracted = std::mem::take(&mut self.retracted);
        if !retracted.is_empty() {
            out.push(self.build_output(&retracted, Op::Delete)?);
        }
        let mut inserted = Vec::new();
        let gap = self.gap;
        for key in std::mem::take(&mut self.touched) {
            let Some(ks) = self.state.get_mut_unstored(&key) else {
                continue;
            };
            for s in ks.list.iter_mut().filter(|s| !s.emitted) {
                s.emitted = true;
                inserted.push((key.clone(), image(s, gap, &self.aggs)?));
            }
        }
        for part in inserted.chunks(EMIT_SLICE) {
            out.push(self.build_output(part, Op::Insert)?);
        }
        Ok(())
    }
}

impl Operator for SessionAggOperator {
    fn name(&self) -> &str {
        "SessionAgg"
    }

    /// Closes sessions by the watermark on the time column (`EMIT ON WINDOW CLOSE`)
    /// and passes it on as one on `window_end`; every other watermark ends here.
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        let t = self.spec.time_column();
        if !self.spec.emit_on_window_close || w.column != t {
            return Ok(vec![]);
        }
        let Some(below) = crate::watermark::raw_time(&w.value) else {
            return Ok(vec![]);
        };
        if self.closed_below.is_none_or(|c| below > c) {
            self.closed_below = Some(below);
            self.emit_closed(below, out)?;
        }
        Ok(vec![Watermark {
            column: t + 1,
            value: w.value,
        }])
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(ExecError::Internal(format!(
                "session aggregation {} received a retraction",
                self.spec.uid
            )));
        }
        let k = self.spec.key_types.len();
        let cols = chunk.columns();
        let times = arrow::compute::cast(&cols[k], &DataType::Int64)?;
        let times = times.as_primitive::<Int64Type>();
        let keys = if k == 0 {
            None
        } else {
            Some(self.key_converter.convert_columns(&cols[..k])?)
        };
        let prepared = self.aggs.prepare(cols)?;
        let key_of = |i: usize| -> &[u8] { keys.as_ref().map(|k| k.row(i).data()).unwrap_or(&[]) };
        let groups = crate::row_groups::RowGroups::new(chunk.len(), key_of);
        let eowc = self.spec.emit_on_window_close;
        let (gap, closed_below) = (self.gap, self.closed_below);
        let mut images = Vec::new();
        // Rows without a time belong to no session; in EOWC mode rows behind the
        // watermark are late.
        let counts =
            |i: usize| times.is_valid(i) && closed_below.is_none_or(|w| times.value(i) >= w);
        for (g, &first) in groups.first_row.iter().enumerate() {
            let rows = groups.rows(g);
            if !rows.iter().any(|&i| counts(i)) {
                continue;
            }
            let key = key_of(first);
            let ks = self.state.get_or_insert_with(key, KeySessions::default);
            for &i in rows.iter().filter(|&&i| counts(i)) {
                let tracked = (!eowc).then_some(&mut images);
                let s = place(&mut ks.list, times.value(i), gap, &self.aggs, tracked)?;
                let session = &mut ks.list[s];
                session.rows += 1;
                prepared.update(&mut session.accs, i, 1)?;
            }
            if eowc {
                let first_end = ks.list.first().map(|s| s.last.saturating_add(gap));
                if let Some(end) = first_end.filter(|e| ks.due.is_none_or(|d| *e < d)) {
                    ks.due = Some(end);
                    self.closing.push(Reverse((end, key.to_vec())));
                }
            } else {
                if !self.touched.contains(key) {
                    self.touched.insert(key.to_vec());
                }
                self.retracted
                    .extend(images.drain(..).map(|img| (key.to_vec(), img)));
            }
        }
        Ok(())
    }

    fn on_barrier(&mut self, _barrier: &Barrier, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)?;
        self.state.flush()?;
        Ok(())
    }

    fn on_checkpoint_cut(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)?;
        self.state.flush()?;
        Ok(())
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        Ok(vec![StateDelta {
            uid: self.spec.uid.clone(),
            data: self.state.take_checkpoint_delta(),
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::AggKind;
    use arrow::array::{ArrayRef, RecordBatch, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};
    use weir_storage::MemoryStateBackend;

    const GAP_MS: i64 = 10_000;

    fn ts() -> DataType {
        DataType::Timestamp(TimeUnit::Millisecond, None)
    }

    /// Sessions per `k` of `(k, t, x)` rows: count(*), min(x), max(x).
    fn operator(eowc: bool) -> SessionAggOperator {
        let call = |kind, arg: Option<usize>| AggCall {
            kind,
            arg,
            arg_type: arg.map(|_| DataType::Int64),
            filter: None,
            output_type: DataType::Int64,
            order: vec![],
            delimiter: None,
            append_only: true,
        };
        let field = |n: &str, t: DataType| Field::new(n, t, true);
        let spec = SessionAggSpec {
            uid: "v.session.test".into(),
            key_types: vec![DataType::Int64],
            time_type: ts(),
            gap_ns: GAP_MS * 1_000_000,
            calls: vec![
                call(AggKind::CountStar, None),
                call(AggKind::Min, Some(2)),
                call(AggKind::Max, Some(2)),
            ],
            output_schema: Arc::new(Schema::new(vec![
                field("k", DataType::Int64),
                field("window_start", ts()),
                field("window_end", ts()),
                field("n", DataType::Int64),
                field("lo", DataType::Int64),
                field("hi", DataType::Int64),
            ])),
            emit_on_window_close: eowc,
            input_append_only: true,
        };
        SessionAggOperator::new(spec, MemoryStateBackend::new(), StateRestore::fresh(128)).unwrap()
    }

    fn rows(rows: &[(i64, i64, i64)]) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("t", ts(), true),
            Field::new("x", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        StreamChunk::inserts(batch)
    }

    /// Output rows as (sign, k, start, end, count, min, max), sorted.
    fn seen(out: &[StreamChunk]) -> Vec<(i64, Vec<i64>)> {
        let mut all = Vec::new();
        for c in out {
            let cols: Vec<ArrayRef> = c
                .columns()
                .iter()
                .map(|a| arrow::compute::cast(a, &DataType::Int64).unwrap())
                .collect();
            for i in 0..c.len() {
                let row = cols.iter().map(|a| a.as_primitive::<Int64Type>().value(i));
                all.push((c.ops[i].sign(), row.collect()));
            }
        }
        all.sort();
        all
    }

    fn barrier(op: &mut SessionAggOperator) -> Vec<(i64, Vec<i64>)> {
        let mut out = Vec::new();
        op.on_barrier(&Barrier::plain(1), &mut out).unwrap();
        seen(&out)
    }

    #[test]
    fn a_row_between_two_sessions_merges_them() {
        let mut op = operator(false);
        let mut out = Vec::new();
        op.process_chunk(rows(&[(1, 0, 5), (1, 20_000, 7), (2, 0, 1)]), &mut out)
            .unwrap();
        assert_eq!(
            barrier(&mut op),
            vec![
                (1, vec![1, 0, 10_000, 1, 5, 5]),
                (1, vec![1, 20_000, 30_000, 1, 7, 7]),
                (1, vec![2, 0, 10_000, 1, 1, 1]),
            ]
        );
        // 10 s reaches both (touching counts, as in Flink's merging of windows).
        op.process_chunk(rows(&[(1, 10_000, 3)]), &mut out).unwrap();
        assert_eq!(
            barrier(&mut op),
            vec![
                (-1, vec![1, 0, 10_000, 1, 5, 5]),
                (-1, vec![1, 20_000, 30_000, 1, 7, 7]),
                (1, vec![1, 0, 30_000, 3, 3, 7]),
            ]
        );
        // An unchanged key emits nothing; a row just past the gap starts a session.
        op.process_chunk(rows(&[(2, 10_001, 4)]), &mut out).unwrap();
        assert_eq!(
            barrier(&mut op),
            vec![(1, vec![2, 10_001, 20_001, 1, 4, 4])]
        );
    }

    #[test]
    fn closed_sessions_go_out_once_ahead_of_their_watermark() {
        let mut op = operator(true);
        let mut out = Vec::new();
        op.process_chunk(rows(&[(1, 0, 5), (1, 5_000, 9), (2, 1_000, 2)]), &mut out)
            .unwrap();
        assert_eq!(barrier(&mut op), vec![], "nothing before a watermark");
        let w = |t| Watermark {
            column: 1,
            value: ScalarValue::TimestampMillisecond(Some(t), None),
        };
        let passed = op.process_watermark(w(12_000), &mut out).unwrap();
        assert_eq!(seen(&out), vec![(1, vec![2, 1_000, 11_000, 1, 2, 2])]);
        assert_eq!(passed.len(), 1);
        assert_eq!(
            passed[0].column, 2,
            "passed on as a watermark on window_end"
        );
        out.clear();
        // Late (behind the watermark): dropped. On time: extends key 1's session.
        op.process_chunk(rows(&[(2, 11_500, 1), (1, 14_000, 1)]), &mut out)
            .unwrap();
        op.process_watermark(w(20_000), &mut out).unwrap();
        assert_eq!(seen(&out), vec![]);
        op.process_watermark(w(24_001), &mut out).unwrap();
        assert_eq!(seen(&out), vec![(1, vec![1, 0, 24_000, 3, 1, 9])]);
        assert!(op.state.is_empty(), "closed sessions leave the state");
    }

    #[test]
    fn sessions_survive_their_encoding() {
        let mut op = operator(false);
        op.process_chunk(
            rows(&[(1, 0, 5), (1, 50_000, 7), (1, 55_000, 2)]),
            &mut Vec::new(),
        )
        .unwrap();
        let key = op.state.keys().next().unwrap().to_vec();
        let ks = op.state.get(&key).unwrap();
        let back = KeySessions::decode(&ks.encode()).unwrap();
        let gap = op.gap;
        let images = |k: &KeySessions| -> Vec<Image> {
            k.list
                .iter()
                .map(|s| image(s, gap, &op.aggs).unwrap())
                .collect()
        };
        assert_eq!(images(&back), images(ks));
        assert_eq!(back.list.len(), 2);
    }
}
