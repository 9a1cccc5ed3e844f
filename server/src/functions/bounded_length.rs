//! `lpad`, `rpad` and `repeat` with Postgres's limit on the length they build.
//!
//! DataFusion's versions allocate the requested length up front, so `lpad('x',
//! 9223372036854775807)` (sqlsmith writes such calls) aborts the connection's task with
//! a capacity overflow, and so does a negative length in a column (cast to an unsigned
//! size) or lengths that add up past what one batch can hold. Postgres refuses results
//! past its allocation limit with 54000 ("requested length too large") and pads to an
//! empty string for a negative length; these wrappers do the same — negative lengths
//! become 0, a value or a batch past the limit is refused — then run DataFusion's
//! function.

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::datatypes::FieldRef;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use std::sync::Arc;
use weir_planner::SqlError;

/// Postgres's MaxAllocSize (1 GB - 1): the longest text a function may build.
const MAX_LENGTH: i64 = (1 << 30) - 1;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct BoundedLength {
    inner: Arc<ScalarUDF>,
    /// The position of the length (or count) argument.
    length_arg: usize,
}

impl BoundedLength {
    pub fn wrapping(inner: Arc<ScalarUDF>, length_arg: usize) -> ScalarUDF {
        ScalarUDF::new_from_impl(BoundedLength { inner, length_arg })
    }
}

fn too_large() -> DataFusionError {
    DataFusionError::External(Box::new(SqlError::new(
        "54000",
        "requested length too large",
    )))
}

/// `arg` with negative lengths as 0, and the largest and the total length it asks
/// for over `rows` rows.
fn non_negative(arg: &ColumnarValue, rows: usize) -> Result<(ColumnarValue, i64, i64)> {
    Ok(match arg {
        ColumnarValue::Scalar(v) => match v.cast_to(&DataType::Int64).ok() {
            Some(ScalarValue::Int64(Some(n))) if n < 0 => {
                let zero = ScalarValue::Int64(Some(0)).cast_to(&v.data_type())?;
                (ColumnarValue::Scalar(zero), 0, 0)
            }
            Some(ScalarValue::Int64(Some(n))) => (arg.clone(), n, n.saturating_mul(rows as i64)),
            _ => (arg.clone(), 0, 0),
        },
        ColumnarValue::Array(a) => {
            let wide = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
            let clamped: Int64Array = wide
                .as_primitive::<Int64Type>()
                .iter()
                .map(|n| n.map(|n| n.max(0)))
                .collect();
            let largest = clamped.iter().flatten().max().unwrap_or(0);
            let total = clamped.iter().flatten().fold(0i64, i64::saturating_add);
            let back = datafusion::arrow::compute::cast(&clamped, a.data_type())?;
            (ColumnarValue::Array(back), largest, total)
        }
    })
}

impl ScalarUDFImpl for BoundedLength {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let Some(arg) = args.args.get(self.length_arg) {
            let (clamped, largest, total) = non_negative(arg, args.number_rows)?;
            // One value past Postgres's limit, or a batch DataFusion would allocate
            // past it in one piece.
            if largest > MAX_LENGTH || total > MAX_LENGTH {
                return Err(too_large());
            }
            args.args[self.length_arg] = clamped;
        }
        self.inner.invoke_with_args(args)
    }
}

/// The wrapped functions, to register over DataFusion's.
pub fn udfs() -> Vec<ScalarUDF> {
    use datafusion::functions::{string, unicode};
    vec![
        BoundedLength::wrapping(unicode::lpad(), 1),
        BoundedLength::wrapping(unicode::rpad(), 1),
        BoundedLength::wrapping(string::repeat(), 1),
    ]
}
