//! Scalar functions Flink SQL and RisingWave users write that DataFusion lacks.
//!
//! - `MOD(a, b)`: the remainder of `a / b` (Nexmark q2 is written with it), the sign of
//!   `a` as in Postgres' `%`; both arguments coerced to one numeric type.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

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

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(Mod {
        signature: Signature::user_defined(Volatility::Immutable),
    }));
}
