//! HOP windows sliced, as Flink's window aggregations do. A HOP row is in
//! `size / slide` windows, and an aggregation over the Expand that copies it into each
//! of them updates every copy (Nexmark q5: five counts per bid). When the aggregation
//! emits on window close and every call merges exactly (count, sum of integers or
//! decimals, min, max), it runs in two steps instead:
//!
//! 1. `<uid>.slices`: the same aggregation over each row's own slide only (the
//!    Expand's latest copy): one update per row, one group per key and slide;
//! 2. the closed slides are merged into windows, in one of two ways:
//!    - `<uid>.slide_windows` (a SlideWindows operator), when every partial result
//!      is a bigint and some group key is not a window bound: each key keeps its open
//!      slides, and a window's slides are merged when the watermark closes it, as
//!      Flink's slice-shared windows do (one state entry per key, not per key and
//!      window: q5 at 100M events and 10M events/s went from 0.8M to 1.4M events/s);
//!    - otherwise each closed slide's row is copied into the windows that hold it
//!      (the window bounds in its group key shifted back one slide per copy), and
//!      `<uid>.windows` merges those rows per window (counts and sums summed, min of
//!      mins, max of maxes) and emits each window once when the watermark closes it.
//!
//! The last slide of a window closes with the same watermark as the window, and a
//! closing aggregation sends what it closes ahead of the watermark, so every slide of
//! a window is merged before the window is emitted. A row behind the watermark of its
//! own slide is late and dropped, as in Flink's sliced windows (unsliced, it still
//! counted in those of its windows that were open).

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeSet;
use std::sync::Arc;
use weir_executor::aggregate::{AggCall, AggKind};
use weir_executor::exchange::ExchangeKind;
use weir_executor::operators::expand::{ExpandShape, ExpandSpec, HopWindows};
use weir_executor::operators::hash_agg::HashAggSpec;
use weir_executor::operators::project::ProjectSpec;
use weir_executor::operators::slide_windows::SlideWindowsSpec;
use weir_executor::{FragmentInput, FragmentSpec, OperatorSpec, StreamGraph};

/// Slices every HOP window aggregation of `graph` that closes windows and merges.
pub(crate) fn slice_hop_windows(graph: &mut StreamGraph) {
    let mut i = 0;
    while i < graph.fragments.len() {
        if let Some(plan) = sliceable(graph, i) {
            apply(graph, i, plan);
            // The inserted fragment took position `i`; the aggregation is at `i + 1`.
            i += 1;
        }
        i += 1;
    }
}

/// What slicing the aggregation of fragment `agg_at` takes.
struct Slicing {
    /// Position of the fragment whose Expand feeds the aggregation, and the Expand's
    /// position in its chain.
    expand_at: (usize, usize),
    hop: HopWindows,
    copies: usize,
    /// Group key columns that are window bounds.
    bound_keys: BTreeSet<usize>,
    /// Per call: (over one slide, merging slides).
    calls: Vec<(AggCall, AggCall)>,
}

fn sliceable(graph: &StreamGraph, agg_at: usize) -> Option<Slicing> {
    let f = &graph.fragments[agg_at];
    let Some(OperatorSpec::HashAgg(agg)) = f.chain.first() else {
        return None;
    };
    let [FragmentInput::Fragment { id, .. }] = f.inputs.as_slice() else {
        return None;
    };
    if !agg.emit_on_window_close {
        return None;
    }
    // The Expand's fragment feeds this aggregation alone.
    let readers = graph
        .fragments
        .iter()
        .flat_map(|g| &g.inputs)
        .filter(|i| matches!(i, FragmentInput::Fragment { id: r, .. } if r == id))
        .count();
    let from = graph.fragments.iter().position(|g| g.id == *id)?;
    if readers != 1 {
        return None;
    }
    let chain = &graph.fragments[from].chain;
    let e = chain
        .iter()
        .rposition(|op| matches!(op, OperatorSpec::Expand(_)))?;
    let OperatorSpec::Expand(ExpandSpec {
        shape: ExpandShape::Hop(hop),
        projections,
        ..
    }) = &chain[e]
    else {
        return None;
    };
    let bound_keys = bounds_after(hop, &chain[e + 1..])?;
    let k = agg.group_types.len();
    if bound_keys.is_empty()
        || bound_keys
            .iter()
            .any(|&c| c >= k || !matches!(agg.group_types[c], DataType::Timestamp(..)))
    {
        return None;
    }
    let calls = agg
        .calls
        .iter()
        .enumerate()
        .map(|(j, c)| split_call(c, k + j))
        .collect::<Option<Vec<_>>>()?;
    Some(Slicing {
        expand_at: (from, e),
        hop: hop.clone(),
        copies: projections.len(),
        bound_keys,
        calls,
    })
}

/// The output columns of `after` (the projections that follow the Expand) that are
/// window bounds passed through unchanged; `None` when anything else reads a bound
/// (a filter, an expression): a slide's row could not stand for its windows there.
fn bounds_after(hop: &HopWindows, after: &[OperatorSpec]) -> Option<BTreeSet<usize>> {
    let mut bounds: BTreeSet<usize> = hop.bounds.iter().copied().collect();
    for op in after {
        let OperatorSpec::Project(p) = op else {
            return None;
        };
        let mut next = BTreeSet::new();
        for (o, e) in p.exprs.iter().enumerate() {
            match e.downcast_ref::<Column>() {
                Some(c) if bounds.contains(&c.index()) => {
                    next.insert(o);
                }
                _ if collect_columns(e)
                    .iter()
                    .any(|c| bounds.contains(&c.index())) =>
                {
                    return None
                }
                _ => {}
            }
        }
        bounds = next;
    }
    Some(bounds)
}

/// `call` as (its aggregation over one slide, the merge of those per window, reading
/// the slide's result at `partial`); `None` when merging would not be exact
/// (floating-point sums depend on the order of additions) or is not known.
fn split_call(call: &AggCall, partial: usize) -> Option<(AggCall, AggCall)> {
    if !call.order.is_empty() || call.delimiter.is_some() {
        return None;
    }
    let merge = match call.kind {
        AggKind::CountStar | AggKind::Count => AggKind::Sum,
        AggKind::Sum if call.arg_type.as_ref().is_some_and(|t| !t.is_floating()) => AggKind::Sum,
        AggKind::Min | AggKind::Max => call.kind,
        _ => return None,
    };
    let merging = AggCall {
        kind: merge,
        arg: Some(partial),
        arg_type: Some(call.output_type.clone()),
        filter: None,
        output_type: call.output_type.clone(),
        order: vec![],
        delimiter: None,
        append_only: call.append_only,
    };
    Some((call.clone(), merging))
}

fn apply(graph: &mut StreamGraph, agg_at: usize, s: Slicing) {
    let (from, e) = s.expand_at;
    // The Expand keeps only the row's own slide.
    let own = match &graph.fragments[from].chain[e] {
        OperatorSpec::Expand(x) => ProjectSpec {
            exprs: x.projections[s.hop.own].clone(),
            schema: x.schema.clone(),
        },
        _ => unreachable!("sliceable found an Expand here"),
    };
    graph.fragments[from].chain[e] = OperatorSpec::Project(own);

    let OperatorSpec::HashAgg(agg) = &graph.fragments[agg_at].chain[0] else {
        unreachable!("sliceable found a HashAgg here")
    };
    let agg = agg.clone();
    let k = agg.group_types.len();
    let slices = HashAggSpec {
        uid: format!("{}.slices", agg.uid),
        group_types: agg.group_types.clone(),
        calls: s.calls.iter().map(|(one, _)| one.clone()).collect(),
        output_schema: slice_schema(&agg.output_schema, k),
        emit_on_window_close: true,
        clean_by_watermark: false,
    };
    let (merge, exchange_keys, after_slices) = match slide_windows(&agg, &s) {
        // Slides merged into windows at their close, per key without bounds.
        Some(merge) => {
            let keys = merge.plain_keys();
            (OperatorSpec::SlideWindows(merge), keys, None)
        }
        // Each slide copied into its windows, merged by a second aggregation.
        None => {
            let into_windows = ExpandSpec {
                projections: (0..s.copies as i64)
                    .map(|back| {
                        shifted(&slices.output_schema, &s.bound_keys, back * s.hop.slide_ms)
                    })
                    .collect(),
                schema: slices.output_schema.clone(),
                shape: ExpandShape::SlidesIntoWindows,
            };
            let windows = HashAggSpec {
                uid: format!("{}.windows", agg.uid),
                calls: s.calls.iter().map(|(_, merge)| merge.clone()).collect(),
                ..agg.clone()
            };
            (
                OperatorSpec::HashAgg(windows),
                (0..k).collect(),
                Some(OperatorSpec::Expand(into_windows)),
            )
        }
    };
    let id = graph.fragments.iter().map(|g| g.id).max().unwrap_or(0) + 1;
    let f = &mut graph.fragments[agg_at];
    f.chain[0] = merge;
    let sliced = FragmentSpec {
        id,
        single: f.single,
        inputs: std::mem::replace(
            &mut f.inputs,
            vec![FragmentInput::Fragment {
                id,
                exchange: ExchangeKind::Hash {
                    keys: exchange_keys,
                },
            }],
        ),
        output_schema: slices.output_schema.clone(),
        chain: std::iter::once(OperatorSpec::HashAgg(slices))
            .chain(after_slices)
            .collect(),
    };
    graph.fragments.insert(agg_at, sliced);
}

/// The operator that merges slides into windows at their close, when every partial
/// is a bigint and some key is not a window bound (the state's key, and what the
/// slides are sent by).
fn slide_windows(agg: &HashAggSpec, s: &Slicing) -> Option<SlideWindowsSpec> {
    let merges = s
        .calls
        .iter()
        .map(|(_, m)| {
            let partial = m.arg_type.as_ref()?;
            (SlideWindowsSpec::merges_bigints(m.kind, partial) && m.output_type == *partial)
                .then_some(m.kind)
        })
        .collect::<Option<Vec<_>>>()?;
    let spec = SlideWindowsSpec {
        uid: format!("{}.slide_windows", agg.uid),
        key_types: agg.group_types.clone(),
        bounds: s.bound_keys.iter().copied().collect(),
        slide_ms: s.hop.slide_ms,
        copies: s.copies,
        merges,
        output_schema: agg.output_schema.clone(),
    };
    (!spec.plain_keys().is_empty()).then_some(spec)
}

/// A slide's row: the group keys, then each call's result over the slide.
fn slice_schema(output: &SchemaRef, keys: usize) -> SchemaRef {
    let fields = output.fields().iter().enumerate().map(|(i, f)| {
        if i < keys {
            f.as_ref().clone()
        } else {
            Field::new(format!("_slice{}", i - keys), f.data_type().clone(), true)
        }
    });
    Arc::new(Schema::new(fields.collect::<Vec<_>>()))
}

/// Every column of `schema`, the window bounds moved `back_ms` earlier.
fn shifted(
    schema: &SchemaRef,
    bounds: &BTreeSet<usize>,
    back_ms: i64,
) -> Vec<Arc<dyn PhysicalExpr>> {
    let back = ScalarValue::new_interval_mdn(0, 0, back_ms * 1_000_000);
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let column = Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>;
            if back_ms == 0 || !bounds.contains(&i) {
                return column;
            }
            Arc::new(BinaryExpr::new(
                column,
                Operator::Minus,
                Arc::new(Literal::new(back.clone())),
            )) as Arc<dyn PhysicalExpr>
        })
        .collect()
}
