//! `to_char`, `to_timestamp` and `to_date` as Postgres defines them, replacing
//! DataFusion's functions of the same names (which take chrono-style formats: given a
//! Postgres template they echoed it back).
//!
//! - `to_char(timestamp | timestamptz | date | interval, text)`: the template patterns of
//!   [`super::datetime_format`].
//! - `to_char(smallint | int | bigint | real | double | numeric, text)`: the number
//!   patterns of [`super::numeric_format`].
//! - `to_timestamp(text, text)` → timestamptz, `to_date(text, text)` → date.
//! - `to_timestamp(double precision)` → timestamptz: seconds since the epoch. A text
//!   argument is read as a number, as Postgres reads an untyped literal there.
//!
//! Errors carry Postgres's SQLSTATE (22007, 22008, 0A000) through
//! `DataFusionError::External(SqlError)`, which `SqlError::from` unwraps.

use super::datetime_format::{self as dt, FormatError, Moment, MomentKind, Template};
use super::numeric_format::{self, NumberTemplate};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, StringArray, StringBuilder, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, DurationMicrosecondType, DurationMillisecondType,
    DurationNanosecondType, DurationSecondType, Float64Type, Int64Type, IntervalDayTimeType,
    IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType, TimeUnit,
};
use datafusion::common::{plan_err, DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;
use weir_planner::SqlError;

/// The time zone of `timestamptz` values (Weir's session time zone is UTC).
const UTC: &str = "+00:00";

fn sql_error(e: FormatError) -> DataFusionError {
    DataFusionError::External(Box::new(SqlError::new(e.code, e.message)))
}

/// A call with argument types the function does not take. (DataFusion rewraps errors
/// from `coerce_types` as planning errors, so no SQLSTATE of ours survives here.)
fn no_such_function(message: String) -> DataFusionError {
    DataFusionError::Plan(message)
}

fn is_text(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

fn text_column(v: &ColumnarValue, rows: usize) -> Result<StringArray> {
    let a = v.to_array(rows)?;
    let a = datafusion::arrow::compute::cast(&a, &DataType::Utf8)?;
    Ok(a.as_string::<i32>().clone())
}

/// Parses each row's template once per distinct template text (a constant template is
/// parsed once for the whole column).
struct TemplateCache<T> {
    last: Option<(String, T)>,
    parse: fn(&str) -> std::result::Result<T, FormatError>,
}

impl<T> TemplateCache<T> {
    fn get(&mut self, text: &str) -> Result<&T> {
        if self.last.as_ref().is_none_or(|(t, _)| t != text) {
            let parsed = (self.parse)(text).map_err(sql_error)?;
            self.last = Some((text.to_string(), parsed));
        }
        Ok(&self.last.as_ref().expect("just set").1)
    }
}

fn parse_datetime_template(t: &str) -> std::result::Result<Template, FormatError> {
    Ok(Template::parse(t))
}

fn one_factor(unit: &TimeUnit) -> (i64, i64) {
    // (divide by, multiply by) to get microseconds.
    match unit {
        TimeUnit::Second => (1, 1_000_000),
        TimeUnit::Millisecond => (1, 1_000),
        TimeUnit::Microsecond => (1, 1),
        TimeUnit::Nanosecond => (1_000, 1),
    }
}

/// A timestamp column (`a` of type `Timestamp(unit, tz)`) as microseconds since
/// 1970-01-01 00:00 (floored), and how its moments are shown.
fn timestamp_micros(
    a: &ArrayRef,
    unit: &TimeUnit,
    tz: &Option<Arc<str>>,
) -> Result<(Vec<Option<i64>>, MomentKind)> {
    let kind = if tz.is_some() {
        MomentKind::TimestampTz
    } else {
        MomentKind::Timestamp
    };
    let raw = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
    let (div, mul) = one_factor(unit);
    let micros = raw
        .as_primitive::<Int64Type>()
        .iter()
        .map(|v| v.map(|v| v.div_euclid(div) * mul))
        .collect();
    Ok((micros, kind))
}

/// The moments of a date-time or interval column (None for NULL).
fn moments(a: &ArrayRef) -> Result<Vec<Option<Moment>>> {
    let n = a.len();
    let micros_to_ts = |v: Option<i64>, kind| v.map(|us| Moment::from_micros(us, kind));
    Ok(match a.data_type() {
        DataType::Timestamp(unit, tz) => {
            let (micros, kind) = timestamp_micros(a, unit, tz)?;
            micros.into_iter().map(|v| micros_to_ts(v, kind)).collect()
        }
        DataType::Date32 => a
            .as_primitive::<Date32Type>()
            .iter()
            .map(|d| micros_to_ts(d.map(|d| d as i64 * 86_400_000_000), MomentKind::Timestamp))
            .collect(),
        DataType::Date64 => a
            .as_primitive::<Date64Type>()
            .iter()
            .map(|d| micros_to_ts(d.map(|d| d * 1000), MomentKind::Timestamp))
            .collect(),
        DataType::Interval(IntervalUnit::MonthDayNano) => a
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|v| {
                v.map(|v| {
                    Moment::from_interval(v.months as i64, v.days as i64, v.nanoseconds / 1000)
                })
            })
            .collect(),
        DataType::Interval(IntervalUnit::YearMonth) => a
            .as_primitive::<IntervalYearMonthType>()
            .iter()
            .map(|v| v.map(|m| Moment::from_interval(m as i64, 0, 0)))
            .collect(),
        DataType::Interval(IntervalUnit::DayTime) => a
            .as_primitive::<IntervalDayTimeType>()
            .iter()
            .map(|v| {
                v.map(|v| Moment::from_interval(0, v.days as i64, v.milliseconds as i64 * 1000))
            })
            .collect(),
        DataType::Duration(unit) => {
            let values: Vec<Option<i64>> = match unit {
                TimeUnit::Second => a.as_primitive::<DurationSecondType>().iter().collect(),
                TimeUnit::Millisecond => {
                    a.as_primitive::<DurationMillisecondType>().iter().collect()
                }
                TimeUnit::Microsecond => {
                    a.as_primitive::<DurationMicrosecondType>().iter().collect()
                }
                TimeUnit::Nanosecond => a.as_primitive::<DurationNanosecondType>().iter().collect(),
            };
            let (div, mul) = one_factor(unit);
            values
                .into_iter()
                .map(|v| {
                    // timestamp - timestamp: Postgres justifies whole days out of the hours.
                    v.map(|v| {
                        let us = v / div * mul;
                        Moment::from_interval(0, us / 86_400_000_000, us % 86_400_000_000)
                    })
                })
                .collect()
        }
        DataType::Null => vec![None; n],
        other => return plan_err!("to_char does not take {other}"),
    })
}

/// `to_char(value, template)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToChar {
    signature: Signature,
}

impl Default for ToChar {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn is_datetime(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Timestamp(..)
            | DataType::Date32
            | DataType::Date64
            | DataType::Interval(_)
            | DataType::Duration(_)
    )
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [value, template] = arg_types else {
            return Err(no_such_function(
                "function to_char takes two arguments (value, text)".into(),
            ));
        };
        if !is_text(template) {
            return Err(no_such_function(format!(
                "function to_char({value}, {template}) does not exist: the template must be text"
            )));
        }
        let value = match value {
            v if is_datetime(v) || v.is_integer() || v.is_floating() => v.clone(),
            DataType::Decimal128(..) => value.clone(),
            DataType::Decimal256(p, s) => DataType::Decimal128((*p).min(38), *s),
            DataType::Null => DataType::Null,
            other => {
                return Err(no_such_function(format!(
                    "function to_char({other}, text) does not exist"
                )))
            }
        };
        Ok(vec![value, DataType::Utf8])
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value, template] = args.args.as_slice() else {
            return plan_err!("to_char takes two arguments");
        };
        let rows = args.number_rows;
        let scalar = matches!(
            (value, template),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let rows = if scalar { 1 } else { rows };
        let values = value.to_array(rows)?;
        if let (ColumnarValue::Scalar(t), DataType::Timestamp(..)) = (template, values.data_type())
        {
            if let Some(Some(t)) = t.try_as_str() {
                let out = format_timestamps(&values, &Template::parse(t))?;
                return Ok(if scalar {
                    ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
                } else {
                    ColumnarValue::Array(Arc::new(out))
                });
            }
        }
        let templates = text_column(template, rows)?;
        let out: StringArray =
            if is_datetime(values.data_type()) || *values.data_type() == DataType::Null {
                format_datetimes(&values, &templates)?
            } else {
                format_numbers(&values, &templates)?
            };
        let out: ArrayRef = Arc::new(out);
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

fn format_datetimes(values: &ArrayRef, templates: &StringArray) -> Result<StringArray> {
    let moments = moments(values)?;
    let mut cache = TemplateCache {
        last: None,
        parse: parse_datetime_template,
    };
    let mut out = Vec::with_capacity(moments.len());
    for (i, m) in moments.iter().enumerate() {
        if templates.is_null(i) {
            out.push(None);
            continue;
        }
        let Some(m) = m else {
            out.push(None);
            continue;
        };
        let t = cache.get(templates.value(i))?;
        out.push(Some(dt::format(m, t).map_err(sql_error)?));
    }
    Ok(StringArray::from(out))
}

/// A timestamp column under one template: formatted once per span of time the
/// template cannot tell apart (a day for `YYYY-MM-DD`), which a stream's consecutive
/// rows mostly share, so most rows copy the previous row's text.
fn format_timestamps(values: &ArrayRef, template: &Template) -> Result<StringArray> {
    let DataType::Timestamp(unit, tz) = values.data_type() else {
        return plan_err!("to_char: {} is not a timestamp", values.data_type());
    };
    let (all_micros, kind) = timestamp_micros(values, unit, tz)?;
    let span = template.timestamp_span_micros();
    let mut out = StringBuilder::with_capacity(all_micros.len(), all_micros.len() * 8);
    let mut last: Option<(i64, String)> = None;
    for micros in all_micros {
        let Some(micros) = micros else {
            out.append_null();
            continue;
        };
        let at = micros.div_euclid(span);
        let text = match &last {
            Some((s, text)) if *s == at => text,
            _ => {
                let m = Moment::from_micros(micros, kind);
                let text = dt::format(&m, template).map_err(sql_error)?;
                &last.insert((at, text)).1
            }
        };
        out.append_value(text);
    }
    Ok(out.finish())
}

fn format_numbers(values: &ArrayRef, templates: &StringArray) -> Result<StringArray> {
    let numbers = numeric_format::numbers(values)?;
    let mut cache = TemplateCache {
        last: None,
        parse: NumberTemplate::parse,
    };
    let mut out = Vec::with_capacity(numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        if templates.is_null(i) || n.is_none() {
            out.push(None);
            continue;
        }
        let t = cache.get(templates.value(i))?;
        out.push(Some(
            numeric_format::format(n.as_ref().expect("checked"), t).map_err(sql_error)?,
        ));
    }
    Ok(StringArray::from(out))
}

/// `to_timestamp(text, text)` and `to_timestamp(double precision)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToTimestamp {
    signature: Signature,
}

impl Default for ToTimestamp {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToTimestamp {
    fn name(&self) -> &str {
        "to_timestamp"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [t] if t.is_numeric() || is_text(t) => Ok(vec![DataType::Float64]),
            [a, b] if is_text(a) && is_text(b) => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => Err(no_such_function(format!(
                "function to_timestamp({}) does not exist: it takes (text, text) or (double precision)",
                arg_types.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into())))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { rows };
        let nanos: Vec<Option<i64>> = match args.args.as_slice() {
            [seconds] => epoch_nanos(&seconds.to_array(rows)?)?,
            [input, template] => {
                let (inputs, templates) = (text_column(input, rows)?, text_column(template, rows)?);
                parse_each(&inputs, &templates, |s, t| {
                    let us = dt::parse_timestamp(s, t)?;
                    us.checked_mul(1000).ok_or_else(|| FormatError {
                        code: dt::DATETIME_FIELD_OVERFLOW,
                        message: "timestamp out of range".into(),
                    })
                })?
            }
            _ => return plan_err!("to_timestamp takes one or two arguments"),
        };
        let out: ArrayRef = Arc::new(TimestampNanosecondArray::from(nanos).with_timezone(UTC));
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Seconds since the epoch (fractions kept to the microsecond, as Postgres rounds).
fn epoch_nanos(seconds: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let f = datafusion::arrow::compute::cast(seconds, &DataType::Float64).map_err(|_| {
        sql_error(FormatError {
            code: "22P02",
            message: "invalid input syntax for type double precision".into(),
        })
    })?;
    if f.null_count() > seconds.null_count() {
        return Err(sql_error(FormatError {
            code: "22P02",
            message: "invalid input syntax for type double precision".into(),
        }));
    }
    f.as_primitive::<Float64Type>()
        .iter()
        .map(|v| {
            v.map(|s| {
                let us = (s * 1_000_000.0).round();
                if !us.is_finite() || us.abs() >= 9.2e15 {
                    Err(sql_error(FormatError {
                        code: dt::DATETIME_FIELD_OVERFLOW,
                        message: format!("timestamp out of range: \"{s}\""),
                    }))
                } else {
                    Ok(us as i64 * 1000)
                }
            })
            .transpose()
        })
        .collect()
}

fn parse_each(
    inputs: &StringArray,
    templates: &StringArray,
    parse: impl Fn(&str, &Template) -> std::result::Result<i64, FormatError>,
) -> Result<Vec<Option<i64>>> {
    let mut cache = TemplateCache {
        last: None,
        parse: parse_datetime_template,
    };
    let mut out = Vec::with_capacity(inputs.len());
    for i in 0..inputs.len() {
        if inputs.is_null(i) || templates.is_null(i) {
            out.push(None);
            continue;
        }
        let t = cache.get(templates.value(i))?;
        out.push(Some(parse(inputs.value(i), t).map_err(sql_error)?));
    }
    Ok(out)
}

/// `to_date(text, text)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToDate {
    signature: Signature,
}

impl Default for ToDate {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToDate {
    fn name(&self) -> &str {
        "to_date"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [a, b] if is_text(a) && is_text(b) => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => Err(no_such_function(format!(
                "function to_date({}) does not exist: it takes (text, text)",
                arg_types
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Date32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [input, template] = args.args.as_slice() else {
            return plan_err!("to_date takes two arguments");
        };
        let scalar = matches!(
            (input, template),
            (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_))
        );
        let rows = if scalar { 1 } else { args.number_rows };
        let (inputs, templates) = (text_column(input, rows)?, text_column(template, rows)?);
        let days = parse_each(&inputs, &templates, |s, t| {
            let d = dt::parse_date(s, t)?;
            i32::try_from(d).map(|d| d as i64).map_err(|_| FormatError {
                code: dt::DATETIME_FIELD_OVERFLOW,
                message: format!("date out of range: \"{s}\""),
            })
        })?;
        let out: ArrayRef = Arc::new(Date32Array::from(
            days.into_iter()
                .map(|d| d.map(|d| d as i32))
                .collect::<Vec<_>>(),
        ));
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampMillisecondArray;

    /// Formatting once per span equals formatting every row, for every kind of field,
    /// over times on both sides of 1970 that cross seconds, minutes, hours and days.
    #[test]
    fn once_per_span_equals_every_row() {
        let mut times: Vec<Option<i64>> = Vec::new();
        let mut t: i64 = -86_400_000 * 3 - 1;
        for i in 0..4000i64 {
            times.push((i % 97 != 0).then_some(t));
            t += [1, 7, 999, 59_999, 3_599_999, 86_399_999][(i % 6) as usize];
        }
        for tz in [None, Some("+00:00")] {
            let values: ArrayRef =
                Arc::new(TimestampMillisecondArray::from(times.clone()).with_timezone_opt(tz));
            for template in [
                "YYYY-MM-DD",
                "HH24:MI",
                "HH12 AM",
                "SS SSSS",
                "MS US FF3",
                "Day DY Mon J Q IW",
                "TZ OF",
                "\"literal\"",
            ] {
                let every_row =
                    format_datetimes(&values, &StringArray::from(vec![template; values.len()]))
                        .unwrap();
                let per_span = format_timestamps(&values, &Template::parse(template)).unwrap();
                assert_eq!(per_span, every_row, "{template} {tz:?}");
            }
        }
    }
}
