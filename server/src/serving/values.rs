//! A statement's literals as the values a served plan compares and computes with.
//!
//! Only conversions that agree with Postgres are made: an integer literal into an
//! integer column (in range), a string literal into a text or integer column (as
//! Postgres coerces an untyped literal). Anything else (`id = 1.5`, `name = 5`,
//! overflow, a malformed number in quotes) is left to the ordinary path, which gives
//! Postgres's answer or error.

use super::shape::Literal;
use arrow::array::{ArrayRef, StringArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use std::sync::Arc;

/// Column types whose values a served plan compares.
pub fn served_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Utf8
    )
}

/// The literal as a one-element array of `data_type`; `None` when the conversion is
/// not one Postgres would make the same way.
pub fn key_value(literal: &Literal, negated: bool, data_type: &DataType) -> Option<ArrayRef> {
    let text = match (literal, data_type) {
        (Literal::Number(n), DataType::Int16 | DataType::Int32 | DataType::Int64) => {
            if negated {
                format!("-{n}")
            } else {
                n.clone()
            }
        }
        (Literal::Number(_), _) => return None,
        (Literal::Text(_), _) if negated => return None,
        (Literal::Text(t), _) => t.clone(),
    };
    if matches!(
        data_type,
        DataType::Int16 | DataType::Int32 | DataType::Int64
    ) && !is_integer(&text)
    {
        return None;
    }
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let text: ArrayRef = Arc::new(StringArray::from(vec![text]));
    cast_with_options(&text, data_type, &strict).ok()
}

/// `[-]digits`, as Postgres reads an integer (surrounding spaces aside).
fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The literal as DataFusion's SQL planner types it: an integer as `Int64`, a number
/// with a fraction as a decimal (numeric), with an exponent as a double, a string
/// as text.
pub fn scalar(literal: &Literal) -> Option<ScalarValue> {
    match literal {
        Literal::Text(t) => Some(ScalarValue::Utf8(Some(t.clone()))),
        Literal::Number(n) if is_integer(n) => {
            n.parse::<i64>().ok().map(|v| ScalarValue::Int64(Some(v)))
        }
        Literal::Number(n) if n.contains(['e', 'E']) => {
            n.parse::<f64>().ok().map(|v| ScalarValue::Float64(Some(v)))
        }
        Literal::Number(n) => {
            let (whole, fraction) = n.split_once('.')?;
            let scale = fraction.len();
            let precision = (whole.trim_start_matches('0').len() + scale).max(1);
            if precision > 38 {
                return None;
            }
            let unscaled: i128 = format!("{whole}{fraction}").parse().ok()?;
            Some(ScalarValue::Decimal128(
                Some(unscaled),
                precision as u8,
                scale as i8,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int32Array};

    #[test]
    fn only_postgres_conversions_are_made() {
        let int = |l: Literal, neg: bool| {
            key_value(&l, neg, &DataType::Int32)
                .map(|a| a.as_any().downcast_ref::<Int32Array>().unwrap().value(0))
        };
        assert_eq!(int(Literal::Number("42".into()), false), Some(42));
        assert_eq!(int(Literal::Number("42".into()), true), Some(-42));
        assert_eq!(int(Literal::Text("7".into()), false), Some(7));
        assert_eq!(int(Literal::Number("1.5".into()), false), None);
        assert_eq!(int(Literal::Number("3000000000".into()), false), None);
        assert_eq!(int(Literal::Text("x".into()), false), None);
        assert!(key_value(&Literal::Number("5".into()), false, &DataType::Utf8).is_none());
        let s = key_value(&Literal::Text("a'b".into()), false, &DataType::Utf8).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            scalar(&Literal::Number("1.50".into())),
            Some(ScalarValue::Decimal128(Some(150), 3, 2))
        );
        assert_eq!(
            scalar(&Literal::Number("2".into())),
            Some(ScalarValue::Int64(Some(2)))
        );
    }
}
