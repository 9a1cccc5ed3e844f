//! Watermarks: event-time progress declared on a table (`WATERMARK FOR ts AS ts -
//! INTERVAL '5' SECOND`), generated where rows enter (the table writer) and carried
//! with the data through every operator that keeps the column.
//!
//! A watermark `w` on column `c` says: no row with `c < w` is expected any more. The
//! generator is Flink's bounded-out-of-orderness strategy: the largest `c` inserted so
//! far minus the declared delay, emitted after the chunk that raised it. An actor with
//! several inputs passes on the minimum over its inputs, per column (each input's
//! own watermark only grows); a projection passes it to every output column that keeps
//! the column or is a window bound of it. `EMIT ON WINDOW CLOSE` aggregations close
//! windows by it, joins and intermediate aggregations clean state by it, and each
//! relation shows it as its `currentOutputWatermark` metric.

use crate::barrier::Watermark;
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use arrow::array::AsArray;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use std::sync::Arc;
use std::time::Duration;

/// The declared watermark of a table: a TIMESTAMP column and the allowed lateness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkSpec {
    pub column: usize,
    pub delay: Duration,
}

/// Generates a table's watermarks from the rows it inserts.
#[derive(Debug)]
pub struct WatermarkGenerator {
    spec: WatermarkSpec,
    unit: TimeUnit,
    tz: Option<std::sync::Arc<str>>,
    /// The last watermark emitted, in the column's unit.
    current: Option<i64>,
}

impl WatermarkGenerator {
    /// Errors unless the column is a TIMESTAMP.
    pub fn new(spec: WatermarkSpec, column_type: &DataType) -> Result<Self> {
        let DataType::Timestamp(unit, tz) = column_type else {
            return Err(ExecError::Internal(format!(
                "a watermark column must be a TIMESTAMP, not {column_type}"
            )));
        };
        Ok(Self {
            spec,
            unit: *unit,
            tz: tz.clone(),
            current: None,
        })
    }

    fn delay_in_unit(&self) -> i64 {
        let d = self.spec.delay;
        match self.unit {
            TimeUnit::Second => d.as_secs() as i64,
            TimeUnit::Millisecond => d.as_millis() as i64,
            TimeUnit::Microsecond => d.as_micros() as i64,
            TimeUnit::Nanosecond => d.as_nanos() as i64,
        }
    }

    /// The watermark at the end of a bounded input (a generator that wrote its last
    /// row): past every row, so that every window closes and every state behind
    /// watermarks is cleaned, as Flink's end of input does. Half of `i64::MAX` in
    /// the column's unit, so that window bounds computed from it cannot overflow.
    pub fn end_of_input(&mut self) -> Option<Watermark> {
        self.advance_to(i64::MAX / 2)
    }

    /// The watermark at `next` (in the column's unit), if that advances it.
    fn advance_to(&mut self, next: i64) -> Option<Watermark> {
        if self.current.is_some_and(|c| c >= next) {
            return None;
        }
        self.current = Some(next);
        let tz = self.tz.clone();
        let value = match self.unit {
            TimeUnit::Second => ScalarValue::TimestampSecond(Some(next), tz),
            TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(Some(next), tz),
            TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(next), tz),
            TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(Some(next), tz),
        };
        Some(Watermark {
            column: self.spec.column,
            value,
        })
    }

    /// The new watermark after `chunk`, if it advanced.
    pub fn observe(&mut self, chunk: &StreamChunk) -> Result<Option<Watermark>> {
        let col = arrow::compute::cast(chunk.batch.column(self.spec.column), &DataType::Int64)?;
        let values = col.as_primitive::<Int64Type>();
        let max = values
            .iter()
            .zip(chunk.ops.iter())
            .filter(|(_, op)| **op == Op::Insert)
            .filter_map(|(v, _)| v)
            .max();
        let Some(max) = max else { return Ok(None) };
        Ok(self.advance_to(max.saturating_sub(self.delay_in_unit())))
    }
}

/// A timestamp watermark in milliseconds since the epoch (for the metric).
pub fn millis(w: &Watermark) -> Option<i64> {
    Some(match &w.value {
        ScalarValue::TimestampSecond(Some(v), _) => v * 1000,
        ScalarValue::TimestampMillisecond(Some(v), _) => *v,
        ScalarValue::TimestampMicrosecond(Some(v), _) => v / 1000,
        ScalarValue::TimestampNanosecond(Some(v), _) => v / 1_000_000,
        _ => return None,
    })
}

/// `ns` nanoseconds in a timestamp column's unit (truncated).
pub fn nanos_in_unit(unit: &TimeUnit, ns: i64) -> i64 {
    match unit {
        TimeUnit::Second => ns / 1_000_000_000,
        TimeUnit::Millisecond => ns / 1_000_000,
        TimeUnit::Microsecond => ns / 1_000,
        TimeUnit::Nanosecond => ns,
    }
}

/// A timestamp watermark's time as the column's raw value (in its unit).
pub fn raw_time(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::TimestampSecond(t, _)
        | ScalarValue::TimestampMillisecond(t, _)
        | ScalarValue::TimestampMicrosecond(t, _)
        | ScalarValue::TimestampNanosecond(t, _) => *t,
        _ => None,
    }
}

/// A fixed interval in milliseconds (no months: their length varies).
pub fn fixed_interval_ms(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        _ => None,
    }
}

/// A fixed interval literal in milliseconds.
fn interval_ms(e: &Arc<dyn PhysicalExpr>) -> Option<i64> {
    fixed_interval_ms(e.downcast_ref::<Literal>()?.value())
}

/// `f(value, units per millisecond)` on a timestamp watermark, same type.
pub fn map_units(value: &ScalarValue, f: impl Fn(i64, i64) -> i64) -> Option<ScalarValue> {
    Some(match value {
        ScalarValue::TimestampSecond(Some(v), tz) => {
            ScalarValue::TimestampSecond(Some(f(v * 1000, 1).div_euclid(1000)), tz.clone())
        }
        ScalarValue::TimestampMillisecond(Some(v), tz) => {
            ScalarValue::TimestampMillisecond(Some(f(*v, 1)), tz.clone())
        }
        ScalarValue::TimestampMicrosecond(Some(v), tz) => {
            ScalarValue::TimestampMicrosecond(Some(f(*v, 1000)), tz.clone())
        }
        ScalarValue::TimestampNanosecond(Some(v), tz) => {
            ScalarValue::TimestampNanosecond(Some(f(*v, 1_000_000)), tz.clone())
        }
        _ => return None,
    })
}

/// If `expr` is a window bound of the watermark's column — `date_bin(size, col)` or
/// `window_bound(col, size, offset_ms)`, optionally `± interval` — or the column
/// itself `± interval` (a sliced HOP window's later windows), the watermark of that
/// output: the same expression at the watermark. These are non-decreasing in `col`,
/// so no later row can produce a smaller bound.
pub fn window_bound(expr: &Arc<dyn PhysicalExpr>, w: &Watermark) -> Option<ScalarValue> {
    if let Some(b) = expr.downcast_ref::<BinaryExpr>() {
        let shift = interval_ms(b.right())?;
        let shift = match b.op() {
            Operator::Plus => shift,
            Operator::Minus => -shift,
            _ => return None,
        };
        let inner = match b.left().downcast_ref::<Column>() {
            Some(c) if c.index() == w.column => w.value.clone(),
            _ => window_bound(b.left(), w)?,
        };
        return map_units(&inner, |v, per_ms| v + shift * per_ms);
    }
    let f = expr.downcast_ref::<ScalarFunctionExpr>()?;
    // date_bin(size, col), or Weir's window_bound(col, size, offset_ms).
    let (size, col, offset) = match (f.name(), f.args()) {
        ("date_bin", [size, col]) => (size, col, 0),
        ("window_bound", [col, size, offset]) => {
            let offset = match offset.downcast_ref::<Literal>()?.value() {
                ScalarValue::Int64(Some(o)) => *o,
                _ => return None,
            };
            (size, col, offset)
        }
        _ => return None,
    };
    let size = interval_ms(size).filter(|s| *s > 0)?;
    let col = col.downcast_ref::<Column>()?;
    if col.index() != w.column {
        return None;
    }
    map_units(&w.value, |v, per_ms| {
        v.div_euclid(size * per_ms) * size * per_ms + offset * per_ms
    })
}

/// Combines the watermarks of an actor's inputs, per column: the minimum over the
/// inputs that are still open, once each of them has sent one for that column.
#[derive(Debug)]
pub struct InputWatermarks {
    inputs: usize,
    columns: std::collections::BTreeMap<usize, ColumnWatermarks>,
}

#[derive(Debug)]
struct ColumnWatermarks {
    per_input: Vec<Option<ScalarValue>>,
    emitted: Option<ScalarValue>,
}

impl InputWatermarks {
    pub fn new(inputs: usize) -> Self {
        Self {
            inputs,
            columns: Default::default(),
        }
    }

    /// Records `w` from input `i`; returns the combined watermark of its column if it
    /// advanced.
    pub fn observe(&mut self, i: usize, w: Watermark, open: &[bool]) -> Option<Watermark> {
        let inputs = self.inputs;
        let column = w.column;
        let c = self
            .columns
            .entry(column)
            .or_insert_with(|| ColumnWatermarks {
                per_input: vec![None; inputs],
                emitted: None,
            });
        c.observe(i, w.value, open)
            .map(|value| Watermark { column, value })
    }
}

impl ColumnWatermarks {
    fn observe(&mut self, i: usize, value: ScalarValue, open: &[bool]) -> Option<ScalarValue> {
        let slot = &mut self.per_input[i];
        if slot.as_ref().is_none_or(|old| value > *old) {
            *slot = Some(value);
        }
        let mut min: Option<&ScalarValue> = None;
        for (k, v) in self.per_input.iter().enumerate() {
            if !open.get(k).copied().unwrap_or(false) && k != i {
                continue;
            }
            let v = v.as_ref()?;
            if min.is_none_or(|m| v < m) {
                min = Some(v);
            }
        }
        let min = min?.clone();
        if self.emitted.as_ref().is_some_and(|e| min <= *e) {
            return None;
        }
        self.emitted = Some(min.clone());
        Some(min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{RecordBatch, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn chunk(ops: Vec<Op>, ts: Vec<i64>) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(TimestampMicrosecondArray::from(ts))])
                .unwrap();
        StreamChunk::new(ops, batch)
    }

    #[test]
    fn bounded_out_of_orderness_only_advances_on_inserts() {
        let spec = WatermarkSpec {
            column: 0,
            delay: Duration::from_secs(5),
        };
        let mut g =
            WatermarkGenerator::new(spec, &DataType::Timestamp(TimeUnit::Microsecond, None))
                .unwrap();
        let w = g
            .observe(&chunk(
                vec![Op::Insert, Op::Insert],
                vec![10_000_000, 7_000_000],
            ))
            .unwrap()
            .unwrap();
        assert_eq!(millis(&w), Some(5_000));
        // A late row and a delete of a newer row do not move it.
        assert!(g
            .observe(&chunk(vec![Op::Insert, Op::Delete], vec![1, 99_000_000]))
            .unwrap()
            .is_none());
        assert!(WatermarkGenerator::new(
            WatermarkSpec {
                column: 0,
                delay: Duration::ZERO
            },
            &DataType::Int64
        )
        .is_err());
    }

    #[test]
    fn inputs_combine_to_their_minimum() {
        let w = |v: i64| Watermark {
            column: 0,
            value: ScalarValue::Int64(Some(v)),
        };
        let open = [true, true];
        let mut c = InputWatermarks::new(2);
        assert!(c.observe(0, w(10), &open).is_none(), "input 1 has none yet");
        assert_eq!(
            c.observe(1, w(7), &open).unwrap().value,
            ScalarValue::Int64(Some(7))
        );
        assert!(c.observe(1, w(20), &open).unwrap().value == ScalarValue::Int64(Some(10)));
        assert!(
            c.observe(1, w(30), &open).is_none(),
            "input 0 holds it at 10"
        );
    }

    #[test]
    fn columns_combine_separately() {
        let w = |column: usize, v: i64| Watermark {
            column,
            value: ScalarValue::Int64(Some(v)),
        };
        let open = [true, true];
        let mut c = InputWatermarks::new(2);
        assert!(c.observe(0, w(0, 10), &open).is_none());
        assert!(
            c.observe(1, w(1, 50), &open).is_none(),
            "column 1: input 0 has none"
        );
        assert_eq!(c.observe(1, w(0, 20), &open).unwrap(), w(0, 10));
        assert_eq!(c.observe(0, w(1, 60), &open).unwrap(), w(1, 50));
    }
}
