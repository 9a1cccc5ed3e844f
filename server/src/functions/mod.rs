//! Functions Weir adds to DataFusion's, or replaces because Postgres defines them
//! differently.
//!
//! - `to_char` / `to_timestamp` / `to_date` with Postgres's template patterns
//!   ([`pg_format`], over [`datetime_format`] and [`numeric_format`]).
//! - `sum` / `avg` with Postgres's result types ([`numeric_aggregates`]).
//! - `lpad` / `rpad` / `repeat` refusing lengths past Postgres's limit (54000) instead
//!   of aborting on the allocation (`bounded_length`).
//!
//! - `PROCTIME()`: processing time, whose column gets watermarks from the clock, and
//!   `__weir_lookup_table()`: the mark of a table read `FOR SYSTEM_TIME AS OF
//!   PROCTIME()` ([`nullary`]).
//!
//! They are registered in every DataFusion context Weir plans with ([`register`], from
//! `query::new_context`), which is also where materialized views are planned: the
//! streaming graph holds the same function objects, so views compute them alike.
//!
//! - `MOD(a, b)`: the remainder of `a / b` (Nexmark q2 is written with it), the sign of
//!   `a` as in Postgres' `%`; both arguments coerced to one numeric type.
//! - `window_bound(ts, size, offset_ms)`: `ts` floored to a multiple of the interval
//!   `size` since the epoch, plus `offset_ms` milliseconds, in `ts`'s own type: what
//!   TUMBLE and HOP compute for `window_start` / `window_end` (see the planner's
//!   `window_tvf`). It is `date_bin(size, ts) + offset` in integer arithmetic: Arrow's
//!   timestamp ± interval goes through calendar conversions, a fifth of Nexmark q5's
//!   time. The executor derives its watermark from the input's (`watermark::window_bound`).

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use std::sync::Arc;

mod bounded_length;
pub mod datetime_format;
mod nullary;
pub mod numeric_aggregates;
pub mod numeric_format;
mod pg_format;

#[derive(Debug, PartialEq, Eq, Hash)]
struct Mod {
    signature: Signature,
}

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [a, b] = arg_types else {
            return plan_err!("mod takes two arguments");
        };
        match comparison_coercion(a, b) {
            Some(t) if t.is_numeric() => Ok(vec![t.clone(), t]),
            _ => plan_err!("mod({a}, {b}): the arguments must be numbers"),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return plan_err!("mod takes two arguments");
        };
        let n = args.number_rows;
        let (a, b) = (a.to_array(n)?, b.to_array(n)?);
        Ok(ColumnarValue::Array(
            datafusion::arrow::compute::kernels::numeric::rem(&a, &b)?,
        ))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowBound {
    signature: Signature,
}

impl ScalarUDFImpl for WindowBound {
    fn name(&self) -> &str {
        "window_bound"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Timestamp(..), DataType::Interval(_), o] if o.is_integer() => Ok(vec![
                arg_types[0].clone(),
                arg_types[1].clone(),
                DataType::Int64,
            ]),
            _ => plan_err!("window_bound takes (timestamp, interval, milliseconds)"),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [ts, ColumnarValue::Scalar(size), ColumnarValue::Scalar(ScalarValue::Int64(Some(offset)))] =
            args.args.as_slice()
        else {
            return plan_err!("window_bound needs a constant size and offset");
        };
        let Some(size_ms) = weir_executor::watermark::fixed_interval_ms(size).filter(|s| *s > 0)
        else {
            return plan_err!("window_bound: the size must be a positive fixed interval");
        };
        let ts = ts.to_array(args.number_rows)?;
        let DataType::Timestamp(unit, _) = ts.data_type() else {
            return plan_err!("window_bound takes a timestamp");
        };
        let per_ms: i64 = match unit {
            TimeUnit::Second => {
                return plan_err!("window_bound needs millisecond or finer timestamps")
            }
            TimeUnit::Millisecond => 1,
            TimeUnit::Microsecond => 1_000,
            TimeUnit::Nanosecond => 1_000_000,
        };
        let (size, offset) = (size_ms * per_ms, offset * per_ms);
        let as_i64 = datafusion::arrow::compute::cast(&ts, &DataType::Int64)?;
        let values: Int64Array = as_i64
            .as_primitive::<Int64Type>()
            .unary(|v| v.div_euclid(size) * size + offset);
        let out: ArrayRef = Arc::new(values);
        Ok(ColumnarValue::Array(datafusion::arrow::compute::cast(
            &out,
            ts.data_type(),
        )?))
    }
}

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(WindowBound {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
    ctx.register_udf(ScalarUDF::new_from_impl(Mod {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
    // Same names as DataFusion's: registering replaces them.
    ctx.register_udf(ScalarUDF::new_from_impl(pg_format::ToChar::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(pg_format::ToTimestamp::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(pg_format::ToDate::default()));
    for f in numeric_aggregates::udafs() {
        ctx.register_udaf(f);
    }
    for f in bounded_length::udfs() {
        ctx.register_udf(f);
    }
    for f in nullary::udfs() {
        ctx.register_udf(f);
    }
}
