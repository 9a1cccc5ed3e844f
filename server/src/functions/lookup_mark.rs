//! `__weir_lookup_table()`: the mark the planner's `lookup_join` puts on a table read
//! `FOR SYSTEM_TIME AS OF PROCTIME()`. Always true; volatile, so that no optimizer
//! rule folds it away or pushes it into the scan, where the stream planner would not
//! find it.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use weir_planner::lookup_join::MARKER;

#[derive(Debug, PartialEq, Eq, Hash)]
struct LookupMark {
    signature: Signature,
}

impl ScalarUDFImpl for LookupMark {
    fn name(&self) -> &str {
        MARKER
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.is_empty() {
            return plan_err!("{MARKER} takes no arguments");
        }
        Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))
    }
}

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(LookupMark {
        signature: Signature::nullary(Volatility::Volatile),
    })
}
