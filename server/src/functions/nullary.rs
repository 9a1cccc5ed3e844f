//! Functions of no arguments whose value is read once per batch, volatile so that no
//! optimizer rule folds or moves them: `PROCTIME()` (the executor's clock,
//! `weir_executor::proctime`, which never goes back) and `__weir_lookup_table()` (the
//! always-true mark the planner's `lookup_join` puts on a table read `FOR SYSTEM_TIME
//! AS OF PROCTIME()`, found on a join's right side by the stream planner).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use weir_executor::proctime;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Nullary {
    Proctime,
    LookupMark,
}

impl Nullary {
    fn value(self) -> ScalarValue {
        match self {
            Nullary::Proctime => proctime::value(proctime::now_ms()),
            Nullary::LookupMark => ScalarValue::Boolean(Some(true)),
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Function {
    name: &'static str,
    value: Nullary,
    signature: Signature,
}

impl ScalarUDFImpl for Function {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.value.value().data_type())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.is_empty() {
            return plan_err!("{}() takes no arguments", self.name);
        }
        Ok(ColumnarValue::Scalar(self.value.value()))
    }
}

pub fn udfs() -> [ScalarUDF; 2] {
    [
        (proctime::NAME, Nullary::Proctime),
        (weir_planner::lookup_join::MARKER, Nullary::LookupMark),
    ]
    .map(|(name, value)| {
        ScalarUDF::new_from_impl(Function {
            name,
            value,
            signature: Signature::nullary(Volatility::Volatile),
        })
    })
}
