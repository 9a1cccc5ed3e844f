//! Retractable aggregate functions.
//!
//! Every accumulator supports both insert and delete, because a DELETE or UPDATE on a
//! table retracts rows from every aggregate downstream. `min` and `max` therefore keep a
//! multiset of the values they have seen (ordered by Arrow's memcmp-able row encoding)
//! so that retracting the current minimum exposes the next one.

use crate::bytes::Reader;
use crate::distinct_values::DistinctValues;
use crate::error::{ExecError, Result};
use crate::value_counts::ValueCounts;
use arrow::array::{Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `count(DISTINCT x)`: a count kept beside the group's set of `x` values, which
    /// every `count(DISTINCT x)` of the aggregation shares ([`DistinctValues`]).
    CountDistinct,
    /// `bool_and` / `bool_or`: counts of true values and of non-null values, so that
    /// both stay exact under retraction.
    BoolAnd,
    BoolOr,
    /// `string_agg(value, delimiter [ORDER BY ...])`, `first_value(value ORDER BY ...)`,
    /// `last_value(...)`: ordered aggregates. They keep the multiset of (order keys,
    /// value, delimiter) rows, ordered by Arrow's row encoding with the ORDER BY's
    /// directions, so retracting any row is exact.
    StringAgg,
    /// `array_agg(value [ORDER BY ...])`: NULL values included, as in Postgres; no
    /// rows give NULL.
    ArrayAgg,
    FirstValue,
    LastValue,
    /// `sum(DISTINCT x)` / `avg(DISTINCT x)`: the multiset of values, like
    /// count(DISTINCT); the sum runs over the values present at output time.
    SumDistinct,
    AvgDistinct,
}

impl AggKind {
    pub fn name(self) -> &'static str {
        match self {
            AggKind::CountStar => "count(*)",
            AggKind::Count => "count",
            AggKind::Sum => "sum",
            AggKind::Avg => "avg",
            AggKind::Min => "min",
            AggKind::Max => "max",
            AggKind::CountDistinct => "count(distinct)",
            AggKind::BoolAnd => "bool_and",
            AggKind::BoolOr => "bool_or",
            AggKind::StringAgg => "string_agg",
            AggKind::ArrayAgg => "array_agg",
            AggKind::FirstValue => "first_value",
            AggKind::LastValue => "last_value",
            AggKind::SumDistinct => "sum(distinct)",
            AggKind::AvgDistinct => "avg(distinct)",
        }
    }
}

/// One aggregate call of a hash aggregation, over columns of its input.
#[derive(Debug, Clone)]
pub struct AggCall {
    pub kind: AggKind,
    /// Input column of the argument (none for count(*)).
    pub arg: Option<usize>,
    pub arg_type: Option<DataType>,
    /// Boolean input column of a `FILTER (WHERE ...)` clause.
    pub filter: Option<usize>,
    pub output_type: DataType,
    /// Ordered aggregates: the ORDER BY columns with their directions, and string_agg's
    /// delimiter column. Empty / none for the others.
    pub order: Vec<(usize, DataType, arrow::compute::SortOptions)>,
    pub delimiter: Option<usize>,
    /// The input only ever inserts (see [`crate::append_only`]): `min` / `max` then
    /// keep only the current extreme instead of every value (nothing can retract it).
    /// The state's layout stays the same: a multiset of one value.
    pub append_only: bool,
}

impl AggCall {
    fn is_ordered(&self) -> bool {
        matches!(
            self.kind,
            AggKind::StringAgg | AggKind::ArrayAgg | AggKind::FirstValue | AggKind::LastValue
        )
    }
}

#[derive(Debug, Clone)]
pub enum AccState {
    Count(i64),
    /// Integer or decimal sum (decimals as unscaled values at the input's scale), and
    /// the values summed, while the sum fits in an `i64`.
    SumInt {
        sum: i64,
        n: i64,
    },
    /// The same past an `i64`: all 128 bits, boxed, so that the common case keeps
    /// every accumulator at 24 bytes (there is one per call per group).
    SumWide(Box<WideSum>),
    SumFloat {
        sum: f64,
        n: i64,
    },
    /// Multiset of row-encoded values, for min and max (and sum / avg of distinct
    /// values and the ordered aggregates).
    Extreme(ValueCounts),
    /// The values of one column that the group's `count(DISTINCT)` calls share: kept
    /// after the calls' own states (see [`Aggregates`]). Boxed: every other state
    /// fits in 24 bytes.
    Distinct(Box<DistinctValues>),
}

/// Equal when they hold the same values, whatever the layout (a sum that went wide
/// and came back into range equals one that never left it).
impl PartialEq for AccState {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (AccState::Count(a), AccState::Count(b)) => a == b,
            (AccState::SumFloat { sum: a, n: m }, AccState::SumFloat { sum: b, n: k }) => {
                a == b && m == k
            }
            (AccState::Extreme(a), AccState::Extreme(b)) => a == b,
            (AccState::Distinct(a), AccState::Distinct(b)) => a == b,
            _ => self.int_sum().is_some() && self.int_sum() == other.int_sum(),
        }
    }
}

/// An integer sum past an `i64`, and the values summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WideSum {
    sum: i128,
    n: i64,
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

impl AccState {
    /// An integer sum of `n` values, in the narrow layout where it fits.
    fn int_sum_of(sum: i128, n: i64) -> AccState {
        match i64::try_from(sum) {
            Ok(sum) => AccState::SumInt { sum, n },
            Err(_) => AccState::SumWide(Box::new(WideSum { sum, n })),
        }
    }

    /// An integer sum and the values summed; `None` for other states.
    fn int_sum(&self) -> Option<(i128, i64)> {
        match self {
            AccState::SumInt { sum, n } => Some((*sum as i128, *n)),
            AccState::SumWide(w) => Some((w.sum, w.n)),
            _ => None,
        }
    }

    /// Adds `value` to an integer sum and `values` to its count, widening the sum
    /// when it leaves the `i64` range (it wraps at 128 bits, as it always has).
    fn add_to_int_sum(&mut self, value: i128, values: i64) -> Result<()> {
        match self {
            AccState::SumInt { sum, n } => {
                match i64::try_from(value).ok().and_then(|v| sum.checked_add(v)) {
                    Some(narrow) => {
                        *sum = narrow;
                        *n += values;
                    }
                    None => {
                        let sum = (*sum as i128).wrapping_add(value);
                        *self = AccState::SumWide(Box::new(WideSum {
                            sum,
                            n: *n + values,
                        }));
                    }
                }
            }
            AccState::SumWide(w) => {
                w.sum = w.sum.wrapping_add(value);
                w.n += values;
            }
            _ => return Err(ExecError::Internal("aggregate state mismatch".into())),
        }
        Ok(())
    }

    pub fn new(call: &AggCall) -> Result<AccState> {
        Ok(match call.kind {
            AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => AccState::Count(0),
            AggKind::Sum | AggKind::Avg => {
                let t = call.arg_type.as_ref().expect("sum has an argument");
                if is_float(t) {
                    AccState::SumFloat { sum: 0.0, n: 0 }
                } else if t.is_integer() || matches!(t, DataType::Decimal128(..)) {
                    AccState::SumInt { sum: 0, n: 0 }
                } else {
                    return Err(ExecError::Internal(format!(
                        "{} over {t} is not supported in materialized views",
                        call.kind.name()
                    )));
                }
            }
            AggKind::Min
            | AggKind::Max
            | AggKind::StringAgg
            | AggKind::ArrayAgg
            | AggKind::FirstValue
            | AggKind::LastValue
            | AggKind::SumDistinct
            | AggKind::AvgDistinct => AccState::Extreme(ValueCounts::default()),
            AggKind::BoolAnd | AggKind::BoolOr => AccState::SumInt { sum: 0, n: 0 },
        })
    }
}

/// A chunk's argument column prepared once for fast per-row access.
pub enum PreparedArg {
    None,
    Nulls(ArrayRef),
    Int(Int64Array),
    Decimal(Decimal128Array),
    Float(Float64Array),
    Rows(Rows),
}

/// Per-call helpers that do not change between chunks.
pub struct CallRuntime {
    pub call: AggCall,
    /// Row converter for min/max values.
    converter: Option<RowConverter>,
}

impl CallRuntime {
    pub fn new(call: AggCall) -> Result<Self> {
        let converter = match call.kind {
            AggKind::Min
            | AggKind::Max
            | AggKind::CountDistinct
            | AggKind::SumDistinct
            | AggKind::AvgDistinct => Some(RowConverter::new(vec![SortField::new(
                call.arg_type.clone().expect("min/max has an argument"),
            )])?),
            // (order keys..., value, [delimiter]) rows.
            _ if call.is_ordered() => {
                let mut fields: Vec<SortField> = call
                    .order
                    .iter()
                    .map(|(_, t, o)| SortField::new_with_options(t.clone(), *o))
                    .collect();
                fields.push(SortField::new(
                    call.arg_type
                        .clone()
                        .expect("ordered aggregate has an argument"),
                ));
                if call.delimiter.is_some() {
                    fields.push(SortField::new(DataType::Utf8));
                }
                Some(RowConverter::new(fields)?)
            }
            _ => None,
        };
        Ok(Self { call, converter })
    }

    pub fn prepare(&self, columns: &[ArrayRef]) -> Result<(PreparedArg, Option<BooleanArray>)> {
        let filter = match self.call.filter {
            Some(f) => Some(
                columns[f]
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| ExecError::Internal("FILTER is not boolean".into()))?
                    .clone(),
            ),
            None => None,
        };
        let arg = match (self.call.kind, self.call.arg) {
            // count(DISTINCT) reads its column through the shared set.
            (AggKind::CountStar | AggKind::CountDistinct, _) | (_, None) => PreparedArg::None,
            (AggKind::Count, Some(a)) => PreparedArg::Nulls(columns[a].clone()),
            (AggKind::BoolAnd | AggKind::BoolOr, Some(a)) => {
                // true → 1, false → 0: the sum counts true values.
                let c = cast(&columns[a], &DataType::Int64)?;
                PreparedArg::Int(c.as_any().downcast_ref::<Int64Array>().unwrap().clone())
            }
            (AggKind::Sum | AggKind::Avg, Some(a)) => {
                let t = columns[a].data_type().clone();
                if is_float(&t) {
                    let c = cast(&columns[a], &DataType::Float64)?;
                    PreparedArg::Float(c.as_any().downcast_ref::<Float64Array>().unwrap().clone())
                } else if let DataType::Decimal128(_, s) = t {
                    let c = cast(&columns[a], &DataType::Decimal128(38, s))?;
                    PreparedArg::Decimal(
                        c.as_any()
                            .downcast_ref::<Decimal128Array>()
                            .unwrap()
                            .clone(),
                    )
                } else {
                    let c = cast(&columns[a], &DataType::Int64)?;
                    PreparedArg::Int(c.as_any().downcast_ref::<Int64Array>().unwrap().clone())
                }
            }
            (
                AggKind::StringAgg | AggKind::ArrayAgg | AggKind::FirstValue | AggKind::LastValue,
                Some(a),
            ) => {
                let mut cols: Vec<ArrayRef> = self
                    .call
                    .order
                    .iter()
                    .map(|(c, _, _)| columns[*c].clone())
                    .collect();
                cols.push(columns[a].clone());
                if let Some(d) = self.call.delimiter {
                    cols.push(cast(&columns[d], &DataType::Utf8)?);
                }
                PreparedArg::Rows(self.converter.as_ref().unwrap().convert_columns(&cols)?)
            }
            (
                AggKind::Min | AggKind::Max | AggKind::SumDistinct | AggKind::AvgDistinct,
                Some(a),
            ) => {
                let rows = self
                    .converter
                    .as_ref()
                    .unwrap()
                    .convert_columns(&[columns[a].clone()])?;
                PreparedArg::Rows(rows)
            }
        };
        Ok((arg, filter))
    }

    /// Applies row `i` with multiplicity `sign` (+1 insert, -1 delete).
    pub fn update(
        &self,
        state: &mut AccState,
        arg: &PreparedArg,
        nulls: Option<&ArrayRef>,
        filter: Option<&BooleanArray>,
        i: usize,
        sign: i64,
    ) -> Result<()> {
        if let Some(f) = filter {
            if !(f.is_valid(i) && f.value(i)) {
                return Ok(());
            }
        }
        match (state, arg) {
            (AccState::Count(n), PreparedArg::None) => *n += sign,
            (AccState::Count(n), PreparedArg::Nulls(a)) => {
                if a.is_valid(i) {
                    *n += sign
                }
            }
            (state @ (AccState::SumInt { .. } | AccState::SumWide(_)), PreparedArg::Int(a)) => {
                if a.is_valid(i) {
                    state.add_to_int_sum(a.value(i) as i128 * sign as i128, sign)?;
                }
            }
            (state @ (AccState::SumInt { .. } | AccState::SumWide(_)), PreparedArg::Decimal(a)) => {
                if a.is_valid(i) {
                    state.add_to_int_sum(a.value(i) * sign as i128, sign)?;
                }
            }
            (AccState::SumFloat { sum, n }, PreparedArg::Float(a)) => {
                if a.is_valid(i) {
                    *sum += a.value(i) * sign as f64;
                    *n += sign;
                }
            }
            (AccState::Extreme(values), PreparedArg::Rows(rows)) => {
                // first_value / last_value keep NULL values (they can be first), and
                // array_agg shows them.
                let keeps_nulls = matches!(
                    self.call.kind,
                    AggKind::FirstValue | AggKind::LastValue | AggKind::ArrayAgg
                );
                let null = !keeps_nulls && nulls.map(|c| c.is_null(i)).unwrap_or(false);
                if !null && self.keeps_extreme_only() {
                    if sign < 0 {
                        return Err(ExecError::Internal(format!(
                            "{} over an append-only input received a retraction",
                            self.call.kind.name()
                        )));
                    }
                    // Only the extreme is kept: a new value replaces it or is dropped.
                    let row = rows.row(i);
                    let key = row.as_ref();
                    // (State restored from a retractable run may hold more values:
                    // the extreme is its first or last.)
                    let better = if self.call.kind == AggKind::Min {
                        values.first().is_none_or(|cur| key < cur)
                    } else {
                        values.last().is_none_or(|cur| key > cur)
                    };
                    if better {
                        values.replace_with(key);
                    }
                } else if !null {
                    values.add(rows.row(i).as_ref(), sign);
                }
            }
            _ => return Err(ExecError::Internal("aggregate state mismatch".into())),
        }
        Ok(())
    }

    /// Folds `from`, this call's state over other rows, into `into`: the state over
    /// both sets of rows (two sessions that a row joins into one). Exact for every
    /// state: counts and sums add, multisets unite. `min` / `max` over an append-only
    /// input then keep only the extreme again.
    pub fn merge(&self, into: &mut AccState, from: AccState) -> Result<()> {
        // Integer sums of either layout (a mismatched `into` is refused there).
        if let Some((sum, n)) = from.int_sum() {
            return into.add_to_int_sum(sum, n);
        }
        match (into, from) {
            (AccState::Count(a), AccState::Count(b)) => *a += b,
            (AccState::SumFloat { sum, n }, AccState::SumFloat { sum: s, n: m }) => {
                *sum += s;
                *n += m;
            }
            (AccState::Extreme(values), AccState::Extreme(other)) => {
                values.merge(other);
                if self.keeps_extreme_only() && values.len() > 1 {
                    values.keep_one_end(self.call.kind == AggKind::Min);
                }
            }
            _ => return Err(ExecError::Internal("aggregate state mismatch".into())),
        }
        Ok(())
    }

    /// The aggregate's current value.
    pub fn output(&self, state: &AccState) -> Result<ScalarValue> {
        let out = &self.call.output_type;
        Ok(match state {
            AccState::Count(n) => ScalarValue::Int64(Some(*n)),
            AccState::SumInt { .. } | AccState::SumWide(_) => {
                let (sum, n) = state.int_sum().expect("an integer sum");
                if n == 0 {
                    ScalarValue::try_from(out)?
                } else if self.call.kind == AggKind::BoolAnd {
                    ScalarValue::Boolean(Some(sum == n as i128))
                } else if self.call.kind == AggKind::BoolOr {
                    ScalarValue::Boolean(Some(sum > 0))
                } else if self.call.kind == AggKind::Avg {
                    avg_of_int(sum, n, self.call.arg_type.as_ref(), out)?
                } else {
                    match out {
                        DataType::Int64 => ScalarValue::Int64(Some(
                            i64::try_from(sum)
                                .map_err(|_| ExecError::Overflow("bigint out of range".into()))?,
                        )),
                        DataType::Decimal128(p, s) => ScalarValue::Decimal128(Some(sum), *p, *s),
                        other => ScalarValue::Int64(Some(sum as i64)).cast_to(other)?,
                    }
                }
            }
            AccState::SumFloat { sum, n } => {
                if *n == 0 {
                    ScalarValue::try_from(out)?
                } else if self.call.kind == AggKind::Avg {
                    ScalarValue::Float64(Some(sum / *n as f64)).cast_to(out)?
                } else {
                    ScalarValue::Float64(Some(*sum)).cast_to(out)?
                }
            }
            AccState::Extreme(values) if self.call.is_ordered() => self.ordered_output(values)?,
            AccState::Extreme(values)
                if matches!(self.call.kind, AggKind::SumDistinct | AggKind::AvgDistinct) =>
            {
                self.distinct_sum_output(values)?
            }
            AccState::Distinct(_) => {
                return Err(ExecError::Internal(
                    "a shared distinct set is not a call's state".into(),
                ))
            }
            AccState::Extreme(values) => {
                let picked = match self.call.kind {
                    AggKind::Min => values.iter().find(|(_, c)| *c > 0),
                    _ => values.iter().rev().find(|(_, c)| *c > 0),
                };
                match picked {
                    None => ScalarValue::try_from(out)?,
                    Some((bytes, _)) => {
                        let conv = self.converter.as_ref().unwrap();
                        let parser = conv.parser();
                        let cols = conv.convert_rows(std::iter::once(parser.parse(bytes)))?;
                        ScalarValue::try_from_array(&cols[0], 0)?
                    }
                }
            }
        })
    }
}

impl CallRuntime {
    /// `min` / `max` over an append-only input.
    /// The aggregate's value over many groups' states, as one column: what
    /// [`Self::output`] gives group by group, without a `ScalarValue` per group.
    /// Row by row, decoding each group's min or max through the row converter alone
    /// was most of an aggregation's emit cost (q17); here one conversion decodes them
    /// all. Kinds without a column path take the row-by-row one.
    pub fn output_column(&self, states: &[&AccState]) -> Result<ArrayRef> {
        if let Some(column) = self.fast_output_column(states)? {
            return Ok(column);
        }
        if states.is_empty() {
            return Ok(arrow::array::new_empty_array(&self.call.output_type));
        }
        let values = states
            .iter()
            .map(|s| self.output(s))
            .collect::<Result<Vec<_>>>()?;
        Ok(ScalarValue::iter_to_array(values)?)
    }

    /// [`Self::output_column`] for counts, bigint sums, float averages and min / max
    /// whose value keeps its type; `None` for every other case. Each arm computes what
    /// [`Self::output`] does for its states, value for value.
    fn fast_output_column(&self, states: &[&AccState]) -> Result<Option<ArrayRef>> {
        let out = &self.call.output_type;
        let kind = self.call.kind;
        let column: ArrayRef = match kind {
            AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => {
                let counts: Option<Vec<i64>> = states
                    .iter()
                    .map(|s| match s {
                        AccState::Count(n) => Some(*n),
                        _ => None,
                    })
                    .collect();
                let Some(counts) = counts else {
                    return Ok(None);
                };
                Arc::new(Int64Array::from(counts))
            }
            AggKind::Sum if *out == DataType::Int64 => {
                let mut sums = Vec::with_capacity(states.len());
                for s in states {
                    let Some((sum, n)) = s.int_sum() else {
                        return Ok(None);
                    };
                    sums.push(match n {
                        0 => None,
                        _ => Some(
                            i64::try_from(sum)
                                .map_err(|_| ExecError::Overflow("bigint out of range".into()))?,
                        ),
                    });
                }
                Arc::new(Int64Array::from(sums))
            }
            AggKind::Avg if *out == DataType::Float64 => {
                let decimal = matches!(self.call.arg_type, Some(DataType::Decimal128(..)));
                let mut avgs = Vec::with_capacity(states.len());
                for s in states {
                    avgs.push(match (s, s.int_sum()) {
                        (AccState::SumFloat { n: 0, .. }, _) | (_, Some((_, 0))) => None,
                        (AccState::SumFloat { sum, n }, _) => Some(sum / *n as f64),
                        (_, Some((sum, n))) if !decimal => Some(sum as f64 / n as f64),
                        _ => return Ok(None),
                    });
                }
                Arc::new(Float64Array::from(avgs))
            }
            AggKind::Min | AggKind::Max => match self.extreme_column(states)? {
                Some(column) => column,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        Ok(Some(column))
    }

    /// min / max of many groups: each group's end value, decoded in one conversion,
    /// NULL where a group has none. `None` when a state is not a multiset or the
    /// values' type is not the output's.
    fn extreme_column(&self, states: &[&AccState]) -> Result<Option<ArrayRef>> {
        let conv = self.converter.as_ref().expect("min/max has a converter");
        if self.call.arg_type.as_ref() != Some(&self.call.output_type) {
            return Ok(None);
        }
        let parser = conv.parser();
        let mut picked = Vec::new();
        let mut at = Vec::with_capacity(states.len());
        for s in states {
            let AccState::Extreme(values) = s else {
                return Ok(None);
            };
            let end = match self.call.kind {
                AggKind::Min => values.iter().find(|(_, c)| *c > 0),
                _ => values.iter().rev().find(|(_, c)| *c > 0),
            };
            at.push(end.map(|(bytes, _)| {
                picked.push(parser.parse(bytes));
                picked.len() as u32 - 1
            }));
        }
        let decoded = conv.convert_rows(picked)?.remove(0);
        let at = arrow::array::UInt32Array::from(at);
        Ok(Some(arrow::compute::take(&decoded, &at, None)?))
    }

    fn keeps_extreme_only(&self) -> bool {
        self.call.append_only && matches!(self.call.kind, AggKind::Min | AggKind::Max)
    }

    /// sum(DISTINCT) / avg(DISTINCT): over the values present once each.
    fn distinct_sum_output(&self, values: &ValueCounts) -> Result<ScalarValue> {
        let out = &self.call.output_type;
        let avg = self.call.kind == AggKind::AvgDistinct;
        let conv = self.converter.as_ref().expect("distinct converter");
        let parser = conv.parser();
        let present: Vec<&[u8]> = values
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(k, _)| k)
            .collect();
        if present.is_empty() {
            return Ok(ScalarValue::try_from(out)?);
        }
        let col = conv
            .convert_rows(present.iter().map(|k| parser.parse(k)))?
            .remove(0);
        let n = (col.len() - col.null_count()) as i64;
        if n == 0 {
            return Ok(ScalarValue::try_from(out)?);
        }
        let t = col.data_type().clone();
        if is_float(&t) {
            let c = cast(&col, &DataType::Float64)?;
            let c = c.as_any().downcast_ref::<Float64Array>().unwrap();
            let sum: f64 = c.iter().flatten().sum();
            let v = if avg { sum / n as f64 } else { sum };
            return Ok(ScalarValue::Float64(Some(v)).cast_to(out)?);
        }
        let sum: i128 = if let DataType::Decimal128(_, sc) = t {
            let c = cast(&col, &DataType::Decimal128(38, sc))?;
            c.as_any()
                .downcast_ref::<Decimal128Array>()
                .unwrap()
                .iter()
                .flatten()
                .sum()
        } else {
            let c = cast(&col, &DataType::Int64)?;
            c.as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .iter()
                .flatten()
                .map(|v| v as i128)
                .sum()
        };
        if avg {
            return avg_of_int(sum, n, self.call.arg_type.as_ref(), out);
        }
        Ok(match out {
            DataType::Decimal128(p, s) => ScalarValue::Decimal128(Some(sum), *p, *s),
            DataType::Int64 => ScalarValue::Int64(Some(
                i64::try_from(sum)
                    .map_err(|_| ExecError::Overflow("bigint out of range".into()))?,
            )),
            other => ScalarValue::Int64(Some(sum as i64)).cast_to(other)?,
        })
    }

    /// string_agg / array_agg / first_value / last_value over the ordered multiset.
    fn ordered_output(&self, values: &ValueCounts) -> Result<ScalarValue> {
        let out = &self.call.output_type;
        let conv = self
            .converter
            .as_ref()
            .expect("ordered aggregate converter");
        let parser = conv.parser();
        let value_col = self.call.order.len();
        let mut present = values.iter().filter(|(_, c)| *c > 0);
        let picked: Vec<(&[u8], i64)> = match self.call.kind {
            AggKind::FirstValue => present.take(1).collect(),
            AggKind::LastValue => present.next_back().into_iter().collect(),
            _ => present.collect(),
        };
        if picked.is_empty() {
            return Ok(ScalarValue::try_from(out)?);
        }
        let cols = conv.convert_rows(picked.iter().map(|(k, _)| parser.parse(k)))?;
        if self.call.kind == AggKind::ArrayAgg {
            // Each value as many times as it is present, in order.
            let indices: arrow::array::UInt32Array = picked
                .iter()
                .enumerate()
                .flat_map(|(r, (_, copies))| std::iter::repeat_n(r as u32, *copies as usize))
                .collect();
            let values = arrow::compute::take(&cols[value_col], &indices, None)?;
            let list = datafusion::common::utils::SingleRowListArrayBuilder::new(values)
                .with_nullable(true)
                .build_list_scalar();
            return Ok(list.cast_to(out)?);
        }
        if self.call.kind != AggKind::StringAgg {
            return Ok(ScalarValue::try_from_array(&cols[value_col], 0)?.cast_to(out)?);
        }
        let text = cast(&cols[value_col], &DataType::Utf8)?;
        let text = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap();
        let delims = cols.get(value_col + 1).map(|d| {
            d.as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .expect("delimiter is text")
                .clone()
        });
        // Postgres: each value but the first is preceded by its own row's delimiter.
        let mut s = String::new();
        let mut first = true;
        for (r, (_, copies)) in picked.iter().enumerate() {
            for _ in 0..*copies {
                if !first {
                    if let Some(d) = delims.as_ref().filter(|d| d.is_valid(r)) {
                        s.push_str(d.value(r));
                    }
                }
                s.push_str(text.value(r));
                first = false;
            }
        }
        Ok(ScalarValue::Utf8(Some(s)).cast_to(out)?)
    }
}

fn avg_of_int(
    sum: i128,
    n: i64,
    arg_type: Option<&DataType>,
    out: &DataType,
) -> Result<ScalarValue> {
    match (arg_type, out) {
        (Some(DataType::Decimal128(_, s_in)), DataType::Decimal128(p, s_out)) => {
            let shift = (*s_out as i32 - *s_in as i32).max(0) as u32;
            let scaled = sum * 10i128.pow(shift);
            let n = n as i128;
            // Round half away from zero, as Postgres does for numeric.
            let q = scaled / n;
            let r = scaled % n;
            let q = if (r.abs() * 2) >= n.abs() {
                q + scaled.signum() * n.signum()
            } else {
                q
            };
            Ok(ScalarValue::Decimal128(Some(q), *p, *s_out))
        }
        (Some(DataType::Decimal128(_, s_in)), _) => {
            let v = sum as f64 / 10f64.powi(*s_in as i32) / n as f64;
            Ok(ScalarValue::Float64(Some(v)).cast_to(out)?)
        }
        _ => Ok(ScalarValue::Float64(Some(sum as f64 / n as f64)).cast_to(out)?),
    }
}

/// What a list of calls keeps, as state layouts spell it (savepoints compare the
/// text): each call's kind with its argument type.
pub fn accumulators_layout(calls: &[AggCall]) -> String {
    calls
        .iter()
        .map(|c| match &c.arg_type {
            Some(t) => format!("{}({t})", c.kind.name()),
            None => c.kind.name().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The input column whose set of values call `c` reads, if it is a `count(DISTINCT)`.
pub fn distinct_set_column(c: &AggCall) -> Option<usize> {
    (c.kind == AggKind::CountDistinct)
        .then_some(c.arg)
        .flatten()
}

/// The `count(DISTINCT)` calls over one input column, which share one set of values.
struct DistinctColumn {
    arg: usize,
    /// The calls, in order: member `m` of the set is call `members[m]`.
    members: Vec<usize>,
}

/// Every call of one aggregation. A group's states are one per call, then one
/// [`DistinctValues`] per column that `count(DISTINCT)` calls read (q15's eight calls
/// over two columns keep two sets). A `count(DISTINCT)` call's own state is the count
/// of values present for it, kept up to date as its set changes.
pub struct Aggregates {
    calls: Vec<CallRuntime>,
    distinct: Vec<DistinctColumn>,
}

impl Aggregates {
    /// Checks that every call can run here and groups the distinct calls by column.
    pub fn new(calls: &[AggCall]) -> Result<Self> {
        for c in calls {
            AccState::new(c)?;
        }
        let mut distinct: Vec<DistinctColumn> = Vec::new();
        for (j, c) in calls.iter().enumerate() {
            let Some(arg) = distinct_set_column(c) else {
                continue;
            };
            match distinct.iter_mut().find(|d| d.arg == arg) {
                Some(d) => d.members.push(j),
                None => distinct.push(DistinctColumn {
                    arg,
                    members: vec![j],
                }),
            }
        }
        let calls = calls
            .iter()
            .cloned()
            .map(CallRuntime::new)
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { calls, distinct })
    }

    /// Whether a distinct column's input only ever inserts: its set then keeps a mark
    /// per call, not a count (`mark_append_only` sets every call's flag alike).
    fn only_inserts(&self, d: &DistinctColumn) -> bool {
        self.calls[d.members[0]].call.append_only
    }

    /// Whether a group's states end with distinct sets.
    pub fn has_distinct_sets(&self) -> bool {
        !self.distinct.is_empty()
    }

    /// Where a group's distinct sets start among its states.
    pub fn first_set(&self) -> usize {
        self.calls.len()
    }

    /// A group's states before any row.
    pub fn new_states(&self) -> Vec<AccState> {
        let calls = self
            .calls
            .iter()
            .map(|c| AccState::new(&c.call).expect("checked in new"));
        let sets = self.distinct.iter().map(|d| {
            let m = d.members.len();
            let mut set = DistinctValues::new(m);
            if self.only_inserts(d) {
                set.keep_marks();
            }
            AccState::Distinct(Box::new(set))
        });
        calls.chain(sets).collect()
    }

    /// Every call's current value over one group's states.
    pub fn outputs(&self, accs: &[AccState]) -> Result<Vec<ScalarValue>> {
        self.calls
            .iter()
            .zip(accs)
            .map(|(c, a)| c.output(a))
            .collect()
    }

    /// Every call's value over many groups' states (each a group's states, as
    /// [`Self::outputs`] reads them), one column per call.
    pub fn output_columns(&self, groups: &[&[AccState]]) -> Result<Vec<ArrayRef>> {
        let mut states = Vec::with_capacity(groups.len());
        self.calls
            .iter()
            .enumerate()
            .map(|(j, c)| {
                states.clear();
                states.extend(groups.iter().map(|g| &g[j]));
                c.output_column(&states)
            })
            .collect()
    }

    pub fn prepare<'a>(&'a self, columns: &'a [ArrayRef]) -> Result<PreparedCalls<'a>> {
        PreparedCalls::new(self, columns)
    }

    /// Folds `from`, the states over other rows, into `into` (two sessions that a row
    /// joins into one): each call's state merges, each distinct set unites, and the
    /// distinct calls count their values again.
    pub fn merge(&self, into: &mut [AccState], mut from: Vec<AccState>) -> Result<()> {
        let n = self.calls.len();
        let sets = from.split_off(n.min(from.len()));
        for ((c, a), b) in self.calls.iter().zip(into.iter_mut()).zip(from) {
            if c.call.kind != AggKind::CountDistinct {
                c.merge(a, b)?;
            }
        }
        for (d, (col, other)) in self.distinct.iter().zip(sets).enumerate() {
            let (AccState::Distinct(set), AccState::Distinct(other)) = (&mut into[n + d], other)
            else {
                return Err(ExecError::Internal("aggregate state mismatch".into()));
            };
            set.merge(&other);
            let counts: Vec<i64> = (0..col.members.len()).map(|m| set.present(m)).collect();
            for (&call, count) in col.members.iter().zip(counts) {
                into[call] = AccState::Count(count);
            }
        }
        Ok(())
    }

    /// Brings states stored by an earlier version to this layout: there, each
    /// `count(DISTINCT)` call kept its own multiset and no set followed the calls.
    /// A restored set still empty (its values stored apart, loaded next) takes this
    /// plan's form: marks for an input that only inserts.
    pub fn upgrade(&self, accs: &mut Vec<AccState>) -> Result<()> {
        let n = self.calls.len();
        if accs.len() == n + self.distinct.len() {
            for (d, acc) in self.distinct.iter().zip(&mut accs[n..]) {
                if let AccState::Distinct(set) = acc {
                    if self.only_inserts(d) && set.is_empty() {
                        set.keep_marks();
                    }
                }
            }
            return Ok(());
        }
        if accs.len() != n {
            return Err(ExecError::Internal(format!(
                "stored aggregate state has {} parts for {n} calls",
                accs.len()
            )));
        }
        for col in &self.distinct {
            let mut set = DistinctValues::new(col.members.len());
            for (m, &call) in col.members.iter().enumerate() {
                let AccState::Extreme(values) = &accs[call] else {
                    return Err(ExecError::Internal("aggregate state mismatch".into()));
                };
                for (value, count) in values.iter() {
                    set.set(value, m, count);
                }
                accs[call] = AccState::Count(set.present(m));
            }
            accs.push(AccState::Distinct(Box::new(set)));
        }
        Ok(())
    }
}

/// A chunk's columns prepared once for every call of an aggregation, so that each
/// row then updates a group's accumulators without looking at types again.
pub struct PreparedCalls<'a> {
    aggs: &'a Aggregates,
    args: Vec<(PreparedArg, Option<BooleanArray>)>,
    nulls: Vec<Option<&'a ArrayRef>>,
    /// Per distinct column: its values' row encoding, and the column (for nulls).
    distinct: Vec<(Rows, &'a ArrayRef)>,
}

impl<'a> PreparedCalls<'a> {
    fn new(aggs: &'a Aggregates, columns: &'a [ArrayRef]) -> Result<Self> {
        let calls = &aggs.calls;
        let distinct = aggs
            .distinct
            .iter()
            .map(|d| {
                let converter = calls[d.members[0]].converter.as_ref();
                let converter = converter.expect("count(DISTINCT) has a converter");
                let column = &columns[d.arg];
                Ok((
                    converter.convert_columns(std::slice::from_ref(column))?,
                    column,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            aggs,
            args: calls
                .iter()
                .map(|c| c.prepare(columns))
                .collect::<Result<Vec<_>>>()?,
            nulls: calls
                .iter()
                .map(|c| c.call.arg.map(|a| &columns[a]))
                .collect(),
            distinct,
        })
    }

    /// Whether row `i` passes call `j`'s FILTER (calls without one take every row).
    fn passes(&self, j: usize, i: usize) -> bool {
        self.args[j]
            .1
            .as_ref()
            .is_none_or(|f| f.is_valid(i) && f.value(i))
    }

    /// Applies row `i` with multiplicity `sign` to one group's accumulators.
    pub fn update(&self, accs: &mut [AccState], i: usize, sign: i64) -> Result<()> {
        let calls = &self.aggs.calls;
        for (j, c) in calls.iter().enumerate() {
            // A count(DISTINCT) changes with its set, below.
            if c.call.kind != AggKind::CountDistinct {
                let (arg, filter) = &self.args[j];
                c.update(&mut accs[j], arg, self.nulls[j], filter.as_ref(), i, sign)?;
            }
        }
        let (own, sets) = accs.split_at_mut(calls.len());
        for ((col, (rows, column)), set) in self.aggs.distinct.iter().zip(&self.distinct).zip(sets)
        {
            let AccState::Distinct(set) = set else {
                return Err(ExecError::Internal("aggregate state mismatch".into()));
            };
            if column.is_null(i) {
                continue;
            }
            let members = &col.members;
            set.add(
                rows.row(i).as_ref(),
                |m| if self.passes(members[m], i) { sign } else { 0 },
                |m, change| {
                    if let AccState::Count(n) = &mut own[members[m]] {
                        *n += change;
                    }
                },
            );
        }
        Ok(())
    }
}

// --- compact binary encoding of accumulator states for the state table ---

pub fn encode_states(rows: i64, states: &[AccState], buf: &mut Vec<u8>) {
    buf.extend_from_slice(&rows.to_le_bytes());
    for s in states {
        match s {
            AccState::Count(n) => {
                buf.push(0);
                buf.extend_from_slice(&n.to_le_bytes());
            }
            AccState::SumInt { .. } | AccState::SumWide(_) => {
                let (sum, n) = s.int_sum().expect("an integer sum");
                buf.push(1);
                buf.extend_from_slice(&sum.to_le_bytes());
                buf.extend_from_slice(&n.to_le_bytes());
            }
            AccState::SumFloat { sum, n } => {
                buf.push(2);
                buf.extend_from_slice(&sum.to_le_bytes());
                buf.extend_from_slice(&n.to_le_bytes());
            }
            AccState::Extreme(values) => {
                buf.push(3);
                buf.extend_from_slice(&(values.len() as u32).to_le_bytes());
                for (k, c) in values.iter() {
                    buf.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    buf.extend_from_slice(k);
                    buf.extend_from_slice(&c.to_le_bytes());
                }
            }
            // Its values are stored apart, one entry each (the aggregation's
            // `.distinct` state): the group's value keeps only the set's shape.
            AccState::Distinct(set) if set.is_stored_apart() => {
                buf.push(5);
                buf.extend_from_slice(&(set.members() as u32).to_le_bytes());
            }
            AccState::Distinct(set) => {
                buf.push(4);
                set.encode_into(buf);
            }
        }
    }
}

pub fn decode_states(bytes: &[u8]) -> Option<(i64, Vec<AccState>)> {
    let mut r = Reader(bytes);
    let rows = r.i64()?;
    let mut states = Vec::new();
    while !r.is_empty() {
        let tag = r.take(1)?[0];
        states.push(match tag {
            0 => AccState::Count(r.i64()?),
            1 => {
                let sum = i128::from_le_bytes(r.take(16)?.try_into().ok()?);
                AccState::int_sum_of(sum, r.i64()?)
            }
            2 => {
                let sum = f64::from_le_bytes(r.take(8)?.try_into().ok()?);
                AccState::SumFloat { sum, n: r.i64()? }
            }
            3 => {
                let len = r.u32()?;
                let mut m = ValueCounts::default();
                for _ in 0..len {
                    let k = r.prefixed()?;
                    m.push_sorted(k, r.i64()?);
                }
                AccState::Extreme(m)
            }
            4 => AccState::Distinct(Box::new(DistinctValues::decode(&mut r)?)),
            5 => AccState::Distinct(Box::new(DistinctValues::stored_apart(r.u32()? as usize))),
            _ => return None,
        });
    }
    Some((rows, states))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use std::sync::Arc;

    fn call(kind: AggKind, out: DataType) -> CallRuntime {
        CallRuntime::new(AggCall {
            kind,
            arg: Some(0),
            arg_type: Some(DataType::Int32),
            filter: None,
            output_type: out,
            order: vec![],
            delimiter: None,
            append_only: false,
        })
        .unwrap()
    }

    #[test]
    fn min_survives_retraction_of_current_minimum() {
        let c = call(AggKind::Min, DataType::Int32);
        let mut s = AccState::new(&c.call).unwrap();
        let col: ArrayRef = Arc::new(Int32Array::from(vec![Some(5), Some(3), None, Some(3)]));
        let (arg, _) = c.prepare(std::slice::from_ref(&col)).unwrap();
        for i in 0..4 {
            c.update(&mut s, &arg, Some(&col), None, i, 1).unwrap();
        }
        assert_eq!(c.output(&s).unwrap(), ScalarValue::Int32(Some(3)));
        c.update(&mut s, &arg, Some(&col), None, 1, -1).unwrap();
        assert_eq!(c.output(&s).unwrap(), ScalarValue::Int32(Some(3)));
        c.update(&mut s, &arg, Some(&col), None, 3, -1).unwrap();
        assert_eq!(c.output(&s).unwrap(), ScalarValue::Int32(Some(5)));
        c.update(&mut s, &arg, Some(&col), None, 0, -1).unwrap();
        assert_eq!(c.output(&s).unwrap(), ScalarValue::Int32(None));
    }

    #[test]
    fn append_only_max_keeps_one_value_and_refuses_retractions() {
        let mut c = call(AggKind::Max, DataType::Int32);
        c.call.append_only = true;
        let mut s = AccState::new(&c.call).unwrap();
        let col: ArrayRef = Arc::new(Int32Array::from(vec![Some(5), Some(9), None, Some(7)]));
        let (arg, _) = c.prepare(std::slice::from_ref(&col)).unwrap();
        for i in 0..4 {
            c.update(&mut s, &arg, Some(&col), None, i, 1).unwrap();
        }
        assert_eq!(c.output(&s).unwrap(), ScalarValue::Int32(Some(9)));
        let AccState::Extreme(values) = &s else {
            panic!("max keeps a multiset")
        };
        assert_eq!(values.len(), 1, "only the maximum is kept");
        assert!(c.update(&mut s, &arg, Some(&col), None, 1, -1).is_err());
    }

    /// One accumulator per call per group: millions of groups make its size count.
    /// A sum leaves the narrow layout past an `i64` and still keeps all 128 bits
    /// through updates, merges and the stored encoding.
    #[test]
    fn an_accumulator_takes_24_bytes_and_sums_keep_all_128_bits() {
        assert_eq!(std::mem::size_of::<AccState>(), 24);
        for v in [
            0i128,
            -1,
            i64::MAX as i128,
            i64::MIN as i128 - 1,
            i128::MAX,
            i128::MIN,
            (1 << 64) + 5,
            -(1 << 70) - 3,
        ] {
            let s = AccState::int_sum_of(v, 3);
            assert_eq!(s.int_sum(), Some((v, 3)));
            assert_eq!(
                matches!(s, AccState::SumInt { .. }),
                i64::try_from(v).is_ok()
            );
            let mut buf = Vec::new();
            encode_states(1, std::slice::from_ref(&s), &mut buf);
            assert_eq!(decode_states(&buf), Some((1, vec![s])));
        }
        let mut s = AccState::int_sum_of(i64::MAX as i128, 1);
        s.add_to_int_sum(1, 1).unwrap();
        assert_eq!(s.int_sum(), Some((1i128 << 63, 2)));
        assert!(matches!(s, AccState::SumWide(_)), "widened past an i64");
        s.add_to_int_sum(-(1i128 << 65), 1).unwrap();
        assert_eq!(s.int_sum(), Some((-(3i128 << 63), 3)));
        s.add_to_int_sum(3i128 << 63, -3).unwrap();
        assert!(matches!(s, AccState::SumWide(_)));
        assert_eq!(s, AccState::int_sum_of(0, 0), "equal whatever the layout");
        assert_ne!(s, AccState::Count(0));

        let sum = call(AggKind::Sum, DataType::Decimal128(38, 0));
        let mut into = AccState::int_sum_of(5, 1);
        sum.merge(&mut into, AccState::int_sum_of(i128::MAX - 5, 2))
            .unwrap();
        assert_eq!(into.int_sum(), Some((i128::MAX, 3)));
        assert_eq!(
            sum.output(&into).unwrap(),
            ScalarValue::Decimal128(Some(i128::MAX), 38, 0)
        );
        assert!(sum.merge(&mut into, AccState::Count(1)).is_err());
    }

    /// Two `count(DISTINCT x)` calls (one with a FILTER) share a set; states stored
    /// with a multiset per call (earlier versions) read into the same states.
    #[test]
    fn distinct_calls_share_a_set_and_read_the_older_layout() {
        let mut filtered = call(AggKind::CountDistinct, DataType::Int64).call;
        filtered.filter = Some(1);
        let calls = [
            call(AggKind::CountDistinct, DataType::Int64).call,
            filtered,
            call(AggKind::CountStar, DataType::Int64).call,
        ];
        let aggs = Aggregates::new(&calls).unwrap();
        let values: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(1),
            Some(2),
            Some(2),
            None,
            Some(3),
            Some(1),
        ]));
        let keep: ArrayRef = Arc::new(BooleanArray::from(vec![
            true, false, true, true, false, false,
        ]));
        let columns = [values, keep];
        let prepared = aggs.prepare(&columns).unwrap();
        let mut accs = aggs.new_states();
        // Row 5 retracts a 1 that row 0 inserted (the filtered call never saw row 5).
        let signs = [1, 1, 1, 1, 1, -1];
        for (i, sign) in signs.iter().enumerate() {
            prepared.update(&mut accs, i, *sign).unwrap();
        }
        let out = aggs.outputs(&accs).unwrap();
        let want = [2, 2, 4].map(|n| ScalarValue::Int64(Some(n)));
        assert_eq!(out, want, "distinct 2 and 3; filtered 1 and 2; rows");
        assert_eq!(accs.len(), 4, "one set after the three calls");

        let mut older = vec![
            AccState::Extreme(ValueCounts::default()),
            AccState::Extreme(ValueCounts::default()),
            AccState::Count(4),
        ];
        let conv = aggs.calls[0].converter.as_ref().unwrap();
        let rows = conv.convert_columns(&columns[..1]).unwrap();
        for (i, sign) in signs.iter().enumerate() {
            for (j, acc) in older.iter_mut().enumerate().take(2) {
                if columns[0].is_valid(i)
                    && (j == 0
                        || columns[1]
                            .as_any()
                            .downcast_ref::<BooleanArray>()
                            .unwrap()
                            .value(i))
                {
                    let AccState::Extreme(v) = acc else {
                        unreachable!()
                    };
                    v.add(rows.row(i).as_ref(), *sign);
                }
            }
        }
        aggs.upgrade(&mut older).unwrap();
        assert_eq!(older, accs);
        let mut buf = Vec::new();
        encode_states(5, &accs, &mut buf);
        assert_eq!(decode_states(&buf), Some((5, accs)));
        assert!(aggs.upgrade(&mut vec![AccState::Count(1)]).is_err());
    }

    #[test]
    fn sum_and_avg_retract_and_round_trip_through_encoding() {
        let sum = call(AggKind::Sum, DataType::Int64);
        let avg = call(AggKind::Avg, DataType::Float64);
        let mut s1 = AccState::new(&sum.call).unwrap();
        let mut s2 = AccState::new(&avg.call).unwrap();
        let col: ArrayRef = Arc::new(Int32Array::from(vec![1, 2, 6]));
        let (a1, _) = sum.prepare(std::slice::from_ref(&col)).unwrap();
        let (a2, _) = avg.prepare(std::slice::from_ref(&col)).unwrap();
        for i in 0..3 {
            sum.update(&mut s1, &a1, None, None, i, 1).unwrap();
            avg.update(&mut s2, &a2, None, None, i, 1).unwrap();
        }
        sum.update(&mut s1, &a1, None, None, 0, -1).unwrap();
        avg.update(&mut s2, &a2, None, None, 0, -1).unwrap();
        assert_eq!(sum.output(&s1).unwrap(), ScalarValue::Int64(Some(8)));
        assert_eq!(avg.output(&s2).unwrap(), ScalarValue::Float64(Some(4.0)));
        let mut buf = Vec::new();
        encode_states(2, &[s1.clone(), s2.clone()], &mut buf);
        assert_eq!(decode_states(&buf), Some((2, vec![s1, s2])));
    }

    /// The column path of outputs computes what `output` does group by group, for
    /// every kind it serves (counts, bigint sums, float averages, min / max of
    /// numbers and text) and for the kinds it hands back to the row path: over
    /// groups whose rows were all retracted (NULL sums and extremes) and groups
    /// whose current minimum was retracted.
    #[test]
    fn output_columns_equal_the_outputs_group_by_group() {
        use arrow::array::{Decimal128Array, Float64Array, StringArray};
        let n = 300;
        let mut x = 11u64;
        let mut next = move || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 33
        };
        let draws: Vec<u64> = (0..n).map(|_| next()).collect();
        let ints = Int64Array::from_iter(
            draws
                .iter()
                .map(|d| (d % 7 != 0).then_some(*d as i64 % 1000 - 300)),
        );
        let floats = Float64Array::from_iter(
            draws
                .iter()
                .map(|d| (d % 5 != 0).then_some(*d as f64 / 7.0)),
        );
        let texts = StringArray::from_iter(
            draws
                .iter()
                .map(|d| (d % 3 != 0).then(|| format!("t{}", d % 97))),
        );
        let decimals = Decimal128Array::from_iter(
            draws
                .iter()
                .map(|d| (d % 4 != 0).then_some(*d as i128 % 10_000)),
        )
        .with_precision_and_scale(10, 2)
        .unwrap();
        let flags = BooleanArray::from_iter(draws.iter().map(|d| Some(d % 2 == 0)));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(ints),
            Arc::new(floats),
            Arc::new(texts),
            Arc::new(decimals),
            Arc::new(flags),
        ];
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let call = |kind, arg: Option<usize>, filter, out: DataType| AggCall {
            kind,
            arg,
            arg_type: arg.map(|a| types[a].clone()),
            filter,
            output_type: out,
            order: vec![],
            delimiter: None,
            append_only: false,
        };
        use AggKind::*;
        let calls = vec![
            call(CountStar, None, None, DataType::Int64),
            call(Count, Some(0), None, DataType::Int64),
            call(CountStar, None, Some(4), DataType::Int64),
            call(Sum, Some(0), None, DataType::Int64),
            call(Avg, Some(0), None, DataType::Float64),
            call(Avg, Some(1), None, DataType::Float64),
            call(Min, Some(0), None, DataType::Int64),
            call(Max, Some(0), Some(4), DataType::Int64),
            call(Min, Some(2), None, DataType::Utf8),
            call(Max, Some(2), None, DataType::Utf8),
            // The row path: a float sum, a decimal average, bool_and.
            call(Sum, Some(1), None, DataType::Float64),
            call(Avg, Some(3), None, DataType::Decimal128(14, 6)),
            call(BoolAnd, Some(4), None, DataType::Boolean),
        ];
        let fast = 10;
        let aggs = Aggregates::new(&calls).unwrap();
        let prepared = aggs.prepare(&columns).unwrap();
        let groups = 6;
        let mut states: Vec<Vec<AccState>> = (0..groups).map(|_| aggs.new_states()).collect();
        for (i, d) in draws.iter().enumerate() {
            prepared.update(&mut states[i % groups], i, 1).unwrap();
            // Retract every row of group 5 and a third of the others' rows.
            if i % groups == 5 || d % 3 == 1 {
                prepared.update(&mut states[i % groups], i, -1).unwrap();
            }
        }
        let refs: Vec<&[AccState]> = states.iter().map(|s| &s[..]).collect();
        let columns = aggs.output_columns(&refs).unwrap();
        let rows: Vec<Vec<ScalarValue>> = states.iter().map(|s| aggs.outputs(s).unwrap()).collect();
        for (j, column) in columns.iter().enumerate() {
            let want = ScalarValue::iter_to_array(rows.iter().map(|r| r[j].clone())).unwrap();
            assert_eq!(
                column.as_ref(),
                want.as_ref(),
                "call {j} ({:?})",
                calls[j].kind
            );
            let by_columns: Vec<&AccState> = states.iter().map(|s| &s[j]).collect();
            let served = aggs.calls[j].fast_output_column(&by_columns).unwrap();
            assert_eq!(served.is_some(), j < fast, "call {j} on the column path");
        }
        assert!(
            rows[5][3].is_null() && rows[5][6].is_null(),
            "an emptied group"
        );
        assert!(rows[0][6] != rows[0][7], "min and max differ");
        let empty = aggs.output_columns(&[]).unwrap();
        assert!(empty.iter().all(|c| c.is_empty()));
    }
}
