//! SlideWindows: a sliced HOP window's closed slides merged into its windows, the way
//! Flink's slice-shared window aggregation does (`planner::hop_slicing`).
//!
//! Input rows are one aggregation's results per key and slide (the slice
//! aggregation's closed slides, each sent once), keyed like the window aggregation:
//! the group keys with the slide's own window bounds (the latest window that holds
//! the slide), then one partial result per call. The state keeps, per key without
//! its bounds, the slides of that key whose windows are not all emitted. When the
//! watermark closes a window, each key's slides in it are merged (`sum` of sums and
//! counts, `min` of mins, `max` of maxes) and the window is emitted once.
//!
//! Merging at the close instead of copying each slide into its `size / slide`
//! windows and aggregating those copies (the plan it replaces) keeps one state entry
//! per key instead of one per key and window: q5 at 10M events/s held every
//! auction's four open windows for up to 8 s of event time, twice the entries.
//!
//! Each slide records how many of its windows are still to be emitted, so a restored
//! operator emits no window twice without knowing the watermark it last saw.
//! Partial results are bigints (counts, sums and extremes of bigints); the planner
//! keeps the copying plan for any other.

use crate::aggregate::AggKind;
use crate::barrier::{Epoch, Watermark};
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::spec::{BuildContext, StateRestore, StreamSpec, WatermarkFlow};
use crate::watermark;
use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use std::collections::BTreeSet;
use std::sync::Arc;
use weir_storage::state_snapshot::StateDelta;
use weir_storage::state_table::StateValue;
use weir_storage::{StateBackend, StateTable, Visit};

#[derive(Debug, Clone)]
pub struct SlideWindowsSpec {
    pub uid: String,
    /// The group key columns (input and output), window bounds among them.
    pub key_types: Vec<DataType>,
    /// The key columns that are window bounds (timestamps): on input the slide's own
    /// window, on output the window emitted.
    pub bounds: Vec<usize>,
    pub slide_ms: i64,
    /// Windows that hold each slide (size / slide).
    pub copies: usize,
    /// How each partial result (the columns after the keys) merges: `Sum`, `Min`
    /// or `Max`, all of bigints.
    pub merges: Vec<AggKind>,
    pub output_schema: SchemaRef,
}

impl SlideWindowsSpec {
    /// The calls `merges` can hold.
    pub fn merges_bigints(kind: AggKind, partial: &DataType) -> bool {
        matches!(kind, AggKind::Sum | AggKind::Min | AggKind::Max) && *partial == DataType::Int64
    }

    fn state_schema(&self) -> String {
        let keys: Vec<String> = self.key_types.iter().map(|t| t.to_string()).collect();
        let merges: Vec<&str> = self.merges.iter().map(|k| k.name()).collect();
        format!(
            "keys({}) bounds({:?}) slide_ms({}) copies({}) slides([{}] of bigint)",
            keys.join(", "),
            self.bounds,
            self.slide_ms,
            self.copies,
            merges.join(", ")
        )
    }

    /// The key columns that are not window bounds: the state's key.
    pub fn plain_keys(&self) -> Vec<usize> {
        (0..self.key_types.len())
            .filter(|c| !self.bounds.contains(c))
            .collect()
    }
}

impl StreamSpec for SlideWindowsSpec {
    fn kind(&self) -> &'static str {
        "SlideWindows"
    }

    fn describe(&self) -> String {
        let merges: Vec<&str> = self.merges.iter().map(|k| k.name()).collect();
        format!(
            "SlideWindows: each key's closed slides merged into its {} windows at their close merges=[{}] uid={} state=StateTable(key_group, key -> open slides)",
            self.copies,
            merges.join(", "),
            self.uid
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

    /// Each window is emitted once, as an insert.
    fn mark_append_only(&mut self, _input_append_only: bool) -> bool {
        true
    }

    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Passes
    }

    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        input
            .iter()
            .copied()
            .filter(|c| *c < self.key_types.len())
            .collect()
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(SlideWindowsOperator::new(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

/// Windows emitted per output chunk.
const EMIT_SLICE: usize = 8192;

/// One key's open slides, flat: per slide its own window's bounds (one per bound
/// column, in the column's unit), how many of its windows are still to be emitted,
/// a mask of its null partials, and its partials.
#[derive(Debug, Clone, PartialEq)]
pub struct Slides {
    stride: usize,
    data: Vec<i64>,
}

impl Slides {
    fn new(bounds: usize, partials: usize) -> Self {
        Slides {
            stride: bounds + 2 + partials,
            data: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.data.len() / self.stride
    }

    fn slide(&self, i: usize) -> &[i64] {
        &self.data[i * self.stride..(i + 1) * self.stride]
    }
}

impl StateValue for Slides {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.stride as i64).to_le_bytes());
        for v in &self.data {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut words = bytes
            .chunks_exact(8)
            .map(|w| i64::from_le_bytes(w.try_into().expect("eight bytes")));
        let stride = usize::try_from(words.next()?).ok().filter(|s| *s > 0)?;
        let data: Vec<i64> = words.collect();
        (bytes.len().is_multiple_of(8) && data.len().is_multiple_of(stride))
            .then_some(Slides { stride, data })
    }
}

/// The slide's fields in [`Slides`]' flat layout.
struct Layout {
    bounds: usize,
    partials: usize,
}

impl Layout {
    fn left(&self) -> usize {
        self.bounds
    }
    fn nulls(&self) -> usize {
        self.bounds + 1
    }
    fn partial(&self, j: usize) -> usize {
        self.bounds + 2 + j
    }
}

pub struct SlideWindowsOperator {
    spec: SlideWindowsSpec,
    layout: Layout,
    /// Row encoding of the key columns that are not bounds.
    key_converter: RowConverter,
    plain_keys: Vec<usize>,
    /// The slide in each bound column's unit.
    slide: Vec<i64>,
    state: StateTable<Slides>,
    /// The bound column (position in `spec.bounds`) whose watermark closes windows
    /// and the output watermark on it: windows whose bound there is below it closed.
    closed_below: Option<(usize, i64)>,
}

impl SlideWindowsOperator {
    pub fn new(
        spec: SlideWindowsSpec,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> Result<Self> {
        if spec.copies == 0 || spec.copies > u8::MAX as usize || spec.merges.len() > 63 {
            return Err(ExecError::Internal(format!(
                "slide windows {}: {} windows per slide, {} calls",
                spec.uid,
                spec.copies,
                spec.merges.len()
            )));
        }
        let plain_keys = spec.plain_keys();
        let key_converter = RowConverter::new(
            plain_keys
                .iter()
                .map(|&c| SortField::new(spec.key_types[c].clone()))
                .collect(),
        )?;
        let slide = spec
            .bounds
            .iter()
            .map(|&c| in_unit(&spec.key_types[c], spec.slide_ms))
            .collect::<Result<Vec<_>>>()?;
        let mut state = StateTable::new(&spec.uid, restore.max_parallelism, backend);
        state.set_track_changes(restore.track_changes);
        if restore.restored {
            state.load(restore.key_groups.start, restore.key_groups.end)?;
        }
        Ok(Self {
            layout: Layout {
                bounds: spec.bounds.len(),
                partials: spec.merges.len(),
            },
            key_converter,
            plain_keys,
            slide,
            state,
            closed_below: None,
            spec,
        })
    }

    /// Adds a chunk of slide rows to their keys' open slides.
    fn add_slides(&mut self, chunk: &StreamChunk) -> Result<()> {
        if chunk.ops.iter().any(|op| *op != Op::Insert) {
            return Err(ExecError::Internal(format!(
                "slide windows {}: a closed slide was retracted",
                self.spec.uid
            )));
        }
        let cols = chunk.columns();
        let plain: Vec<ArrayRef> = self.plain_keys.iter().map(|&c| cols[c].clone()).collect();
        let keys = self.key_converter.convert_columns(&plain)?;
        let bounds = self
            .spec
            .bounds
            .iter()
            .map(|&c| timestamps(&cols[c]))
            .collect::<Result<Vec<_>>>()?;
        let k = self.spec.key_types.len();
        let partials: Vec<&Int64Array> = (0..self.layout.partials)
            .map(|j| cols[k + j].as_primitive_opt::<Int64Type>())
            .collect::<Option<_>>()
            .ok_or_else(|| ExecError::Internal("slide partials are not bigints".into()))?;
        let (nb, np) = (self.layout.bounds, self.layout.partials);
        let mut slide = vec![0i64; nb + 2 + np];
        for i in 0..chunk.len() {
            // A NULL window bound (a NULL event time) is in no window that closes.
            if bounds.iter().any(|b| b.is_null(i)) {
                continue;
            }
            for (b, col) in bounds.iter().enumerate() {
                slide[b] = col.value(i);
            }
            let left = self.open_windows(&slide[..nb]);
            if left == 0 {
                continue; // every window of the slide closed: late
            }
            slide[nb] = left as i64;
            slide[nb + 1] = 0;
            for (j, p) in partials.iter().enumerate() {
                if p.is_null(i) {
                    slide[nb + 1] |= 1 << j;
                }
                slide[nb + 2 + j] = p.value(i);
            }
            let merges = &self.spec.merges;
            let slides = self
                .state
                .get_or_insert_with(keys.row(i).as_ref(), || Slides::new(nb, np));
            add_slide(slides, &slide, merges, &self.layout)?;
        }
        Ok(())
    }

    /// How many of the windows of a slide with these own bounds are still open.
    fn open_windows(&self, own: &[i64]) -> usize {
        let Some((b, below)) = self.closed_below else {
            return self.spec.copies;
        };
        (0..self.spec.copies)
            .filter(|&back| own[b] - back as i64 * self.slide[b] >= below)
            .count()
    }

    /// Emits every window the watermark `below` on bound `b` closes, and drops the
    /// slides whose last window it closed.
    fn close_windows(&mut self, b: usize, below: i64, out: &mut Vec<StreamChunk>) -> Result<()> {
        let mut closing = Closing {
            b,
            below,
            slide: &self.slide,
            copies: self.spec.copies as i64,
            merges: &self.spec.merges,
            layout: &self.layout,
            closed: ClosedWindows::new(self.layout.bounds, self.layout.partials),
            windows: Vec::new(),
            merged: Merged::new(self.layout.partials),
        };
        let mut failure = None;
        self.state
            .update_all(|key, slides| match closing.key(key, slides) {
                Ok(false) => Visit::Kept,
                Ok(true) if slides.data.is_empty() => Visit::Removed,
                Ok(true) => Visit::Changed,
                Err(e) => {
                    failure.get_or_insert(e);
                    Visit::Kept
                }
            });
        if let Some(e) = failure {
            return Err(e);
        }
        let closed = closing.closed;
        self.emit(closed, out)
    }

    fn emit(&self, closed: ClosedWindows, out: &mut Vec<StreamChunk>) -> Result<()> {
        let n = closed.ends.len();
        let mut start = 0;
        while start < n {
            let end = (start + EMIT_SLICE).min(n);
            out.push(self.chunk(&closed, start..end)?);
            start = end;
        }
        Ok(())
    }

    /// Output rows `rows` of `closed`: the keys in their places, then the merges.
    fn chunk(&self, closed: &ClosedWindows, rows: std::ops::Range<usize>) -> Result<StreamChunk> {
        let parser = self.key_converter.parser();
        let key_at = |i: usize| {
            let from = if i == 0 { 0 } else { closed.ends[i - 1] };
            parser.parse(&closed.keys[from..closed.ends[i]])
        };
        let plain = self.key_converter.convert_rows(rows.clone().map(key_at))?;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.output_schema.fields().len());
        let mut plain = plain.into_iter();
        for (c, t) in self.spec.key_types.iter().enumerate() {
            match self.spec.bounds.iter().position(|&b| b == c) {
                Some(b) => {
                    let values = Int64Array::from(closed.bounds[b][rows.clone()].to_vec());
                    columns.push(arrow::compute::cast(&values, t)?);
                }
                None => columns.push(plain.next().expect("a column per plain key")),
            }
        }
        for merged in &closed.partials {
            columns.push(Arc::new(Int64Array::from(merged[rows.clone()].to_vec())));
        }
        Ok(StreamChunk::from_columns(
            vec![Op::Insert; rows.len()],
            self.spec.output_schema.clone(),
            columns,
        )?)
    }
}

/// Adds one slide to a key's slides; a second row for a slide the key has merges
/// into it (one slice aggregation sends one, but nothing here depends on that).
fn add_slide(slides: &mut Slides, slide: &[i64], merges: &[AggKind], l: &Layout) -> Result<()> {
    let same = (0..slides.len()).find(|&s| slides.slide(s)[..l.bounds] == slide[..l.bounds]);
    let Some(s) = same else {
        slides.data.extend_from_slice(slide);
        return Ok(());
    };
    let at = s * slides.stride;
    let row = &mut slides.data[at..at + slides.stride];
    let mut merged = Merged::new(l.partials);
    merged.add(row, merges, l)?;
    merged.add(slide, merges, l)?;
    merged.store(row, l);
    Ok(())
}

/// The windows one watermark closed, column by column.
struct ClosedWindows {
    /// The plain keys' row encodings, end to end, and where each ends.
    keys: Vec<u8>,
    ends: Vec<usize>,
    bounds: Vec<Vec<i64>>,
    partials: Vec<Vec<Option<i64>>>,
}

impl ClosedWindows {
    fn new(bounds: usize, partials: usize) -> Self {
        ClosedWindows {
            keys: Vec::new(),
            ends: Vec::new(),
            bounds: vec![Vec::new(); bounds],
            partials: vec![Vec::new(); partials],
        }
    }

    fn push(&mut self, key: &[u8], bounds: impl Iterator<Item = i64>, merged: &Merged) {
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len());
        for (col, v) in self.bounds.iter_mut().zip(bounds) {
            col.push(v);
        }
        for (col, v) in self.partials.iter_mut().zip(&merged.values) {
            col.push(*v);
        }
    }
}

/// A window's merge of its slides' partials so far (NULL until a slide has one).
struct Merged {
    values: Vec<Option<i64>>,
}

impl Merged {
    fn new(partials: usize) -> Self {
        Merged {
            values: vec![None; partials],
        }
    }

    fn clear(&mut self) {
        self.values.iter_mut().for_each(|v| *v = None);
    }

    fn add(&mut self, slide: &[i64], merges: &[AggKind], l: &Layout) -> Result<()> {
        for (j, (acc, kind)) in self.values.iter_mut().zip(merges).enumerate() {
            if slide[l.nulls()] & (1 << j) != 0 {
                continue;
            }
            let v = slide[l.partial(j)];
            *acc = Some(match (*acc, kind) {
                (None, _) => v,
                (Some(a), AggKind::Min) => a.min(v),
                (Some(a), AggKind::Max) => a.max(v),
                (Some(a), _) => a
                    .checked_add(v)
                    .ok_or_else(|| ExecError::Overflow("bigint out of range".into()))?,
            });
        }
        Ok(())
    }

    fn store(&self, slide: &mut [i64], l: &Layout) {
        slide[l.nulls()] = 0;
        for (j, v) in self.values.iter().enumerate() {
            match v {
                Some(v) => slide[l.partial(j)] = *v,
                None => slide[l.nulls()] |= 1 << j,
            }
        }
    }
}

/// One watermark's closing of windows: every key's windows whose bound `b` is below
/// `below`, merged into `closed`.
struct Closing<'a> {
    b: usize,
    below: i64,
    /// The slide in each bound column's unit.
    slide: &'a [i64],
    copies: i64,
    merges: &'a [AggKind],
    layout: &'a Layout,
    closed: ClosedWindows,
    /// Per key: each window that closes, by its bound on `b`, with a slide in it and
    /// the steps back from that slide's own window to it (kept between keys).
    windows: Vec<(i64, usize, usize)>,
    merged: Merged,
}

impl Closing<'_> {
    /// Closes one key's windows: pushes each closed window's merge, counts the closed
    /// windows off its slides and drops the slides with none left. Returns whether
    /// the slides changed.
    fn key(&mut self, key: &[u8], slides: &mut Slides) -> Result<bool> {
        let (b, l) = (self.b, self.layout);
        let n = slides.len();
        self.windows.clear();
        for s in 0..n {
            let row = slides.slide(s);
            for back in 0..row[l.left()] as usize {
                let bound = row[b] - back as i64 * self.slide[b];
                if bound < self.below {
                    self.windows.push((bound, s, back));
                }
            }
        }
        if self.windows.is_empty() {
            return Ok(false);
        }
        self.windows.sort_unstable();
        self.windows.dedup_by_key(|w| w.0);
        for w in 0..self.windows.len() {
            let (bound, s, back) = self.windows[w];
            self.merged.clear();
            for t in 0..n {
                let row = slides.slide(t);
                let steps = row[b] - bound;
                if steps >= 0 && steps % self.slide[b] == 0 && steps / self.slide[b] < self.copies {
                    self.merged.add(row, self.merges, l)?;
                }
            }
            let own = slides.slide(s);
            let bounds = (0..l.bounds).map(|c| own[c] - back as i64 * self.slide[c]);
            self.closed.push(key, bounds, &self.merged);
        }
        // A slide's windows close earliest first: those left are the ones still open.
        let stride = slides.stride;
        let mut kept = 0;
        for s in 0..n {
            let at = s * stride;
            let own = slides.data[at + b];
            let left = slides.data[at + l.left()];
            let open = (0..left)
                .filter(|back| own - back * self.slide[b] >= self.below)
                .count();
            if open > 0 {
                slides.data.copy_within(at..at + stride, kept * stride);
                slides.data[kept * stride + l.left()] = open as i64;
                kept += 1;
            }
        }
        slides.data.truncate(kept * stride);
        Ok(true)
    }
}

/// A timestamp column's raw values (in its unit).
fn timestamps(col: &ArrayRef) -> Result<Int64Array> {
    match col.data_type() {
        DataType::Timestamp(..) => Ok(arrow::compute::cast(col, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone()),
        other => Err(ExecError::Internal(format!(
            "a window bound of type {other}"
        ))),
    }
}

/// A slide of `ms` milliseconds in the unit of window bounds of type `t`; a whole
/// number of units, or the windows could not be told apart.
fn in_unit(t: &DataType, ms: i64) -> Result<i64> {
    match t {
        DataType::Timestamp(unit, _) => {
            let ns = ms * 1_000_000;
            let unit_ns = 1_000_000_000 / watermark::nanos_in_unit(unit, 1_000_000_000);
            if ns > 0 && ns % unit_ns == 0 {
                return Ok(watermark::nanos_in_unit(unit, ns));
            }
            Err(ExecError::Internal(format!(
                "a {ms} ms slide over window bounds in {unit:?}"
            )))
        }
        other => Err(ExecError::Internal(format!(
            "a {ms} ms slide over window bounds of type {other}"
        ))),
    }
}

impl Operator for SlideWindowsOperator {
    fn name(&self) -> &str {
        "SlideWindows"
    }

    /// A watermark on a slide's own window bound becomes one on the windows: moved
    /// back to the earliest window still open (as the copies it replaces had it).
    /// The first bound column with a watermark closes windows; the windows it closes
    /// go out ahead of it.
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        if w.column >= self.spec.key_types.len() {
            return Ok(vec![]);
        }
        let Some(b) = self.spec.bounds.iter().position(|&c| c == w.column) else {
            return Ok(vec![w]);
        };
        let back_ms = (self.spec.copies as i64 - 1) * self.spec.slide_ms;
        let Some(value) = watermark::map_units(&w.value, |v, per_ms| v - back_ms * per_ms) else {
            return Ok(vec![w]);
        };
        let below = watermark::raw_time(&value).expect("a timestamp maps to a timestamp");
        let shifted = Watermark {
            column: w.column,
            value,
        };
        match self.closed_below {
            Some((closing, _)) if closing < b => return Ok(vec![shifted]),
            Some((closing, was)) if closing == b && was >= below => {
                return Ok(vec![shifted]);
            }
            _ => {}
        }
        self.closed_below = Some((b, below));
        self.close_windows(b, below, out)?;
        Ok(vec![shifted])
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        self.add_slides(&chunk)
    }

    fn on_barrier(
        &mut self,
        _barrier: &crate::barrier::Barrier,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        self.state.flush()?;
        Ok(())
    }

    fn on_checkpoint_cut(&mut self, _out: &mut Vec<StreamChunk>) -> Result<()> {
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
    use crate::barrier::Barrier;
    use arrow::array::TimestampMillisecondArray;
    use arrow::datatypes::{Field, Schema, TimeUnit};
    use datafusion::common::ScalarValue;
    use std::collections::BTreeMap;
    use weir_storage::MemoryStateBackend;

    const SLIDE: i64 = 2_000;
    const COPIES: usize = 5;

    fn spec() -> SlideWindowsSpec {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        SlideWindowsSpec {
            uid: "v.hashagg.test.slide_windows".into(),
            key_types: vec![DataType::Int64, ts.clone(), ts.clone()],
            bounds: vec![1, 2],
            slide_ms: SLIDE,
            copies: COPIES,
            merges: vec![AggKind::Sum, AggKind::Max],
            output_schema: Arc::new(Schema::new(vec![
                Field::new("auction", DataType::Int64, true),
                Field::new("window_start", ts.clone(), true),
                Field::new("window_end", ts, true),
                Field::new("n", DataType::Int64, true),
                Field::new("top", DataType::Int64, true),
            ])),
        }
    }

    /// (key, own window start, count, max) rows as a slide chunk.
    fn slides(rows: &[(i64, i64, i64, Option<i64>)]) -> StreamChunk {
        let spec = spec();
        let batch = arrow::array::RecordBatch::try_new(
            spec.output_schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1 + SLIDE * COPIES as i64),
                )),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        StreamChunk::inserts(batch)
    }

    type Window = (i64, i64, i64, Option<i64>, Option<i64>);

    fn windows(out: &[StreamChunk]) -> Vec<Window> {
        let mut rows = Vec::new();
        for c in out {
            assert!(c.ops.iter().all(|op| *op == Op::Insert));
            let cols = c.columns();
            let key = cols[0].as_primitive::<Int64Type>();
            let start = timestamps(&cols[1]).unwrap();
            let end = timestamps(&cols[2]).unwrap();
            let n = cols[3].as_primitive::<Int64Type>();
            let top = cols[4].as_primitive::<Int64Type>();
            for i in 0..c.len() {
                assert_eq!(end.value(i) - start.value(i), SLIDE * COPIES as i64);
                let opt = |a: &Int64Array| (!a.is_null(i)).then(|| a.value(i));
                rows.push((key.value(i), start.value(i), end.value(i), opt(n), opt(top)));
            }
        }
        rows
    }

    fn restored(op: &mut SlideWindowsOperator) -> SlideWindowsOperator {
        let backend = crate::operators::restored_backend(op.snapshot(1).unwrap());
        let restore = StateRestore {
            restored: true,
            ..StateRestore::tracked(128)
        };
        SlideWindowsOperator::new(spec(), backend, restore).unwrap()
    }

    /// Random slides of random keys, closed slide by slide, with a restore from a
    /// checkpoint in the middle, against each window merged from its slides directly.
    #[test]
    fn windows_are_their_slides_merged_once_across_a_restore() {
        let mut next = weir_storage::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let tracked = StateRestore::tracked(128);
        let mut op = SlideWindowsOperator::new(spec(), MemoryStateBackend::new(), tracked).unwrap();
        let mut all: Vec<(i64, i64, i64, Option<i64>)> = Vec::new();
        let mut out = Vec::new();
        for t in 0..40i64 {
            // The slides that closed at t + 1: a slide row per key that had rows.
            let own = t * SLIDE;
            let mut rows = Vec::new();
            for k in 0..30 {
                if next(3) == 0 {
                    let top = (next(4) != 0).then(|| next(1000) as i64 - 500);
                    rows.push((k, own, next(9) as i64 + 1, top));
                }
            }
            all.extend(&rows);
            op.process_chunk(slides(&rows), &mut out).unwrap();
            let w = Watermark {
                column: 1,
                value: ScalarValue::TimestampMillisecond(Some(own + SLIDE), None),
            };
            let passed = op.process_watermark(w, &mut out).unwrap();
            assert_eq!(
                passed[0].value,
                ScalarValue::TimestampMillisecond(Some(own + SLIDE - 4 * SLIDE), None),
                "the windows' watermark is the earliest open window's start"
            );
            op.on_barrier(&Barrier::plain(t as u64 + 1), &mut out)
                .unwrap();
            if t == 17 {
                op = restored(&mut op);
            }
        }
        // The end of input closes every window.
        let end = Watermark {
            column: 1,
            value: ScalarValue::TimestampMillisecond(Some(i64::MAX / 2), None),
        };
        op.process_watermark(end, &mut out).unwrap();
        let mut got = windows(&out);
        got.sort();
        let mut expected: BTreeMap<(i64, i64), (i64, Option<i64>)> = BTreeMap::new();
        for &(k, own, n, top) in &all {
            for back in 0..COPIES as i64 {
                let e = expected.entry((k, own - back * SLIDE)).or_insert((0, None));
                e.0 += n;
                e.1 = e.1.max(top);
            }
        }
        let expected: Vec<Window> = expected
            .into_iter()
            .map(|((k, s), (n, top))| (k, s, s + SLIDE * COPIES as i64, Some(n), top))
            .collect();
        assert!(
            expected.iter().any(|w| w.4.is_none()),
            "a window of NULL maxima"
        );
        assert_eq!(got, expected);
        assert_eq!(
            op.state.len(),
            0,
            "nothing open after the last window closed"
        );
    }

    #[test]
    fn slides_round_trip_their_encoding() {
        let s = Slides {
            stride: 4,
            data: vec![1, -2, 3, i64::MIN, 5, 6, 7, i64::MAX],
        };
        assert_eq!(Slides::decode(&s.encode()), Some(s));
        assert_eq!(Slides::decode(&[1, 2, 3]), None, "not whole words");
        assert_eq!(Slides::decode(&0i64.to_le_bytes()), None, "no stride");
    }
}
