//! `sum` and `avg` typed as Postgres types them, replacing DataFusion's:
//!
//! | argument             | sum                  | avg                              |
//! |----------------------|----------------------|----------------------------------|
//! | smallint, integer    | bigint               | numeric, scale 16                |
//! | bigint               | bigint (Postgres: numeric) | numeric, scale 16          |
//! | numeric(p, s)        | numeric, scale s     | numeric, scale max(16, s)        |
//! | real, double         | double               | double                           |
//!
//! Postgres's `avg` scale depends on the value (`select_div_scale`: 16 significant
//! digits, so 20 decimals for an average below 1, 16 for 1 to 9999, 12 from 10000 on);
//! an Arrow column has one scale, so Weir always uses 16 (or the argument's larger
//! scale): `avg` of 1 and 2 is `1.5000000000000000` as in Postgres, while an average of
//! 0.75 shows 16 decimals where Postgres shows 20. The value is rounded half away from
//! zero, as Postgres rounds numeric.
//!
//! Both delegate to DataFusion's implementations over the argument cast to `numeric`
//! (integers become `Decimal128(20, 0)`); `avg` asks DataFusion for one decimal more and
//! rounds it away, since DataFusion truncates. The streaming aggregation
//! (`weir_executor::aggregate`) keys on the names `sum` / `avg` and reads the types from
//! the plan, so materialized views get the same types.

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, ReversedUDAF,
    Signature, Volatility,
};
use std::sync::Arc;

/// Decimals of `avg` over integers (Postgres's 16 significant digits for averages from 1
/// to 9999).
pub const AVG_SCALE: i8 = 16;

/// `numeric` for integer arguments: wide enough for any 64-bit integer.
const INTEGER_AS_NUMERIC: DataType = DataType::Decimal128(20, 0);

fn numeric_argument(t: &DataType, name: &str) -> Result<DataType> {
    Ok(match t {
        // Every integer sums as bigint (Postgres: numeric for a bigint argument). The
        // cast is applied again whenever a plan is re-coerced (a view's optimized plan
        // is): bigint must map to itself, or a second pass would turn `sum(int)`'s
        // already-cast argument into numeric.
        t if t.is_integer() && name == "sum" => DataType::Int64,
        t if t.is_integer() => INTEGER_AS_NUMERIC,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
        DataType::Decimal128(..) => t.clone(),
        DataType::Decimal256(p, s) => DataType::Decimal128((*p).min(38), *s),
        DataType::Null => DataType::Float64,
        DataType::Duration(_) | DataType::Interval(_) if name == "sum" => t.clone(),
        DataType::Duration(_) if name == "avg" => t.clone(),
        other => return plan_err!("function {name}({other}) does not exist"),
    })
}

/// `sum`, Postgres-typed.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSum {
    signature: Signature,
}

fn inner_sum() -> Arc<AggregateUDF> {
    datafusion::functions_aggregate::sum::sum_udaf()
}

fn inner_avg() -> Arc<AggregateUDF> {
    datafusion::functions_aggregate::average::avg_udaf()
}

impl AggregateUDFImpl for PgSum {
    fn name(&self) -> &str {
        "sum"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [t] = arg_types else {
            return plan_err!("sum takes one argument");
        };
        Ok(vec![numeric_argument(t, "sum")?])
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        inner_sum().return_type(arg_types)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        inner_sum().inner().accumulator(args)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        inner_sum().inner().state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        inner_sum().inner().groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        inner_sum().inner().create_groups_accumulator(args)
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        inner_sum().inner().create_sliding_accumulator(args)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }
}

/// `avg`, Postgres-typed.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgAvg {
    signature: Signature,
}

/// The scale `avg` shows, and the one it asks DataFusion for (one more, to round).
fn avg_scales(ret: &DataType) -> Option<(i8, i8)> {
    match ret {
        DataType::Decimal128(_, s) => Some((*s, *s + 1)),
        _ => None,
    }
}

/// The accumulator arguments with DataFusion's avg asked for one more decimal.
fn one_more_decimal<'a>(args: &AccumulatorArgs<'a>, scale: i8) -> AccumulatorArgs<'a> {
    let field = Field::new(
        args.return_field.name(),
        DataType::Decimal128(38, scale),
        true,
    );
    AccumulatorArgs {
        return_field: Arc::new(field),
        ..args.clone()
    }
}

/// Rounds an unscaled decimal one digit shorter, half away from zero.
fn round_last_digit(v: i128) -> i128 {
    let (q, r) = (v / 10, v % 10);
    if r >= 5 {
        q + 1
    } else if r <= -5 {
        q - 1
    } else {
        q
    }
}

impl AggregateUDFImpl for PgAvg {
    fn name(&self) -> &str {
        "avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [t] = arg_types else {
            return plan_err!("avg takes one argument");
        };
        Ok(vec![numeric_argument(t, "avg")?])
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match &arg_types[0] {
            DataType::Decimal128(_, s) => DataType::Decimal128(38, (*s).clamp(AVG_SCALE, 37)),
            other => inner_avg().return_type(std::slice::from_ref(other))?,
        })
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match avg_scales(args.return_field.data_type()) {
            Some((shown, asked)) => Ok(Box::new(RoundedAvg {
                inner: inner_avg()
                    .inner()
                    .accumulator(one_more_decimal(&args, asked))?,
                scale: shown,
            })),
            None => inner_avg().inner().accumulator(args),
        }
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        inner_avg().inner().state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        inner_avg().inner().groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match avg_scales(args.return_field.data_type()) {
            Some((shown, asked)) => Ok(Box::new(RoundedAvgGroups {
                inner: inner_avg()
                    .inner()
                    .create_groups_accumulator(one_more_decimal(&args, asked))?,
                scale: shown,
            })),
            None => inner_avg().inner().create_groups_accumulator(args),
        }
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }
}

/// DataFusion's decimal average at one more decimal, rounded to `scale`.
#[derive(Debug)]
struct RoundedAvg {
    inner: Box<dyn Accumulator>,
    scale: i8,
}

impl Accumulator for RoundedAvg {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(match self.inner.evaluate()? {
            ScalarValue::Decimal128(v, _, _) => {
                ScalarValue::Decimal128(v.map(round_last_digit), 38, self.scale)
            }
            other => other,
        })
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

struct RoundedAvgGroups {
    inner: Box<dyn GroupsAccumulator>,
    scale: i8,
}

impl GroupsAccumulator for RoundedAvgGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let out = self.inner.evaluate(emit_to)?;
        let rounded = out
            .as_primitive::<Decimal128Type>()
            .unary::<_, Decimal128Type>(round_last_digit)
            .with_precision_and_scale(38, self.scale)?;
        Ok(Arc::new(rounded))
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&datafusion::arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
}

/// The Postgres-typed `sum` and `avg`.
pub fn udafs() -> Vec<AggregateUDF> {
    vec![
        AggregateUDF::new_from_impl(PgSum {
            signature: Signature::user_defined(Volatility::Immutable),
        }),
        AggregateUDF::new_from_impl(PgAvg {
            signature: Signature::user_defined(Volatility::Immutable),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_away_from_zero() {
        assert_eq!(round_last_digit(15), 2);
        assert_eq!(round_last_digit(14), 1);
        assert_eq!(round_last_digit(-15), -2);
        assert_eq!(round_last_digit(-14), -1);
    }

    #[test]
    fn types_follow_postgres() {
        let sum = &udafs()[0];
        let avg = &udafs()[1];
        let t = |f: &AggregateUDF, a: DataType| {
            let c = f.coerce_types(&[a]).unwrap();
            f.return_type(&c).unwrap()
        };
        assert_eq!(t(sum, DataType::Int32), DataType::Int64);
        assert_eq!(t(sum, DataType::Int16), DataType::Int64);
        // Coercing twice (a view's optimized plan is coerced again) keeps the type.
        assert_eq!(t(sum, DataType::Int64), DataType::Int64);
        let once = sum.coerce_types(&[DataType::Int32]).unwrap();
        assert_eq!(sum.coerce_types(&once).unwrap(), once);
        assert_eq!(
            t(sum, DataType::Decimal128(10, 2)),
            DataType::Decimal128(20, 2)
        );
        assert_eq!(t(sum, DataType::Float32), DataType::Float64);
        assert_eq!(t(avg, DataType::Int32), DataType::Decimal128(38, 16));
        assert_eq!(t(avg, DataType::Int64), DataType::Decimal128(38, 16));
        assert_eq!(
            t(avg, DataType::Decimal128(38, 20)),
            DataType::Decimal128(38, 20)
        );
        assert_eq!(t(avg, DataType::Float64), DataType::Float64);
    }
}
