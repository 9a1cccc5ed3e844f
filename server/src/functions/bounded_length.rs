//! `lpad`, `rpad` and `repeat` with Postgres's limit on the length they build.
//!
//! DataFusion's versions allocate the requested length up front, so `lpad('x',
//! 9223372036854775807)` (sqlsmith writes such calls) aborts the connection's task with
//! a capacity overflow. Postgres refuses results past its allocation limit with 54000
//! ("requested length too large"); these wrappers check the length argument the same
//! way, then run DataFusion's function.

use datafusion::arrow::array::{Array, AsArray};
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

/// The largest length (or count) `arg` asks for in any row.
fn largest(arg: &ColumnarValue) -> Result<Option<i64>> {
    let as_i64 = |v: &ScalarValue| v.cast_to(&DataType::Int64).ok();
    Ok(match arg {
        ColumnarValue::Scalar(v) => match as_i64(v) {
            Some(ScalarValue::Int64(n)) => n,
            _ => None,
        },
        ColumnarValue::Array(a) => {
            let a = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
            let a = a.as_primitive::<Int64Type>();
            (0..a.len())
                .filter(|&i| a.is_valid(i))
                .map(|i| a.value(i))
                .max()
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
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let Some(arg) = args.args.get(self.length_arg) {
            if largest(arg)?.is_some_and(|n| n > MAX_LENGTH) {
                return Err(too_large());
            }
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
