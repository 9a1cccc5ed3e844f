//! `PROCTIME()` (Flink's): the time a row is projected, from the executor's clock
//! (`weir_executor::proctime`, which never goes back), as a TIMESTAMP with
//! millisecond values. Volatile: each batch reads the clock anew. A projection that
//! computes it gives its column watermarks, so a TUMBLE / HOP over it closes windows
//! by wall-clock time (Nexmark q12).

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use weir_executor::proctime;

#[derive(Debug, PartialEq, Eq, Hash)]
struct Proctime {
    signature: Signature,
}

impl ScalarUDFImpl for Proctime {
    fn name(&self) -> &str {
        proctime::NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Nanosecond, None))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.is_empty() {
            return plan_err!("proctime() takes no arguments");
        }
        Ok(ColumnarValue::Scalar(proctime::value(proctime::now_ms())))
    }
}

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Proctime {
        signature: Signature::nullary(Volatility::Volatile),
    })
}
