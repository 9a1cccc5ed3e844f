//! Arrow values to Postgres wire values: type OIDs and text/binary encodings.
//!
//! Each column is first cast to one canonical Arrow type per Postgres type (for
//! example every timestamp to microseconds, since Postgres has microsecond precision),
//! then encoded with the Rust type whose wire encoding matches that Postgres type
//! exactly (binary encodings are not checked by pgwire, so the pairing matters).

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, IntervalMonthDayNanoType, IntervalUnit, TimeUnit, TimestampMicrosecondType,
};
use chrono::{DateTime, NaiveDate, Utc};
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use rust_decimal::Decimal;
use std::sync::Arc;

pub fn pg_type(t: &DataType) -> Type {
    match t {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => Type::INT8,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Decimal128(..) | DataType::Decimal256(..) => Type::NUMERIC,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Interval(_) | DataType::Duration(_) => Type::INTERVAL,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Type::BYTEA,
        DataType::List(f) | DataType::LargeList(f) => array_type(&pg_type(f.data_type())),
        _ => Type::TEXT,
    }
}

/// The Postgres array type of an element type (text[] for the rest, whose elements
/// are sent as text).
fn array_type(element: &Type) -> Type {
    match *element {
        Type::BOOL => Type::BOOL_ARRAY,
        Type::INT2 => Type::INT2_ARRAY,
        Type::INT4 => Type::INT4_ARRAY,
        Type::INT8 => Type::INT8_ARRAY,
        Type::FLOAT4 => Type::FLOAT4_ARRAY,
        Type::FLOAT8 => Type::FLOAT8_ARRAY,
        Type::NUMERIC => Type::NUMERIC_ARRAY,
        Type::DATE => Type::DATE_ARRAY,
        Type::TIMESTAMP => Type::TIMESTAMP_ARRAY,
        Type::TIMESTAMPTZ => Type::TIMESTAMPTZ_ARRAY,
        Type::BYTEA => Type::BYTEA_ARRAY,
        _ => Type::TEXT_ARRAY,
    }
}

fn canonical(t: &DataType) -> DataType {
    match t {
        DataType::Int8 | DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Float16 => DataType::Float32,
        DataType::Date64 => DataType::Date32,
        DataType::Decimal256(p, s) => DataType::Decimal128((*p).min(38), *s),
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        // timestamp - timestamp is a Duration in Arrow, an interval in Postgres.
        DataType::Interval(_) | DataType::Duration(_) => {
            DataType::Interval(IntervalUnit::MonthDayNano)
        }
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        other => other.clone(),
    }
}

pub fn field_infos(
    schema: &arrow::datatypes::Schema,
    format: impl Fn(usize) -> FieldFormat,
) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                pg_type(f.data_type()),
                format(i),
            )
        })
        .collect()
}

fn encode_err(e: impl std::fmt::Display) -> PgWireError {
    PgWireError::ApiError(Box::new(std::io::Error::other(e.to_string())))
}

/// The scale an unconstrained `NUMERIC` column is stored with.
const UNCONSTRAINED_NUMERIC_SCALE: i8 = 10;

/// Decimal from an unscaled Arrow value; values beyond rust_decimal's 96-bit mantissa
/// are rounded to fit (Postgres clients then see the closest representable value).
fn decimal(v: i128, scale: i8) -> PgWireResult<Decimal> {
    if scale < 0 {
        let factor = 10i128
            .checked_pow((-scale) as u32)
            .ok_or_else(|| encode_err("decimal scale"))?;
        return Decimal::try_from_i128_with_scale(v * factor, 0).map_err(encode_err);
    }
    let mut v = v;
    let mut s = scale as u32;
    loop {
        match Decimal::try_from_i128_with_scale(v, s) {
            Ok(d) => return Ok(d),
            Err(_) if s > 0 => {
                v /= 10;
                s -= 1;
            }
            Err(e) => return Err(encode_err(e)),
        }
    }
}

/// Encodes every row of `batches` against `fields`.
pub fn encode_rows(
    batches: &[RecordBatch],
    fields: Arc<Vec<FieldInfo>>,
) -> PgWireResult<Vec<DataRow>> {
    let mut rows = Vec::new();
    let mut enc = DataRowEncoder::new(fields.clone());
    for batch in batches {
        let cols: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| {
                let t = canonical(c.data_type());
                if &t == c.data_type() {
                    Ok(c.clone())
                } else {
                    cast(c, &t).map_err(encode_err)
                }
            })
            .collect::<PgWireResult<_>>()?;
        for r in 0..batch.num_rows() {
            for (i, col) in cols.iter().enumerate() {
                if fields[i].format() == FieldFormat::Text {
                    if let Some(text) = postgres_text(col, r) {
                        enc.encode_field_with_type_and_format(
                            &text,
                            fields[i].datatype(),
                            FieldFormat::Text,
                            &Default::default(),
                        )?;
                        continue;
                    }
                }
                encode_value(&mut enc, col, r, fields[i].format())?;
            }
            rows.push(enc.take_row());
        }
    }
    Ok(rows)
}

/// Text forms where Postgres prints differently from the Rust types' defaults:
/// timestamps without trailing zero fractions, floats as `Infinity`/`NaN`.
fn postgres_text(col: &ArrayRef, r: usize) -> Option<String> {
    if col.is_null(r) {
        return None;
    }
    match col.data_type() {
        DataType::Timestamp(_, tz) => {
            let micros = col.as_primitive::<TimestampMicrosecondType>().value(r);
            let dt = DateTime::<Utc>::from_timestamp_micros(micros)?;
            let mut s = dt.format("%Y-%m-%d %H:%M:%S").to_string();
            let frac = micros.rem_euclid(1_000_000);
            if frac != 0 {
                let f = format!(".{frac:06}");
                s.push_str(f.trim_end_matches('0'));
            }
            if tz.is_some() {
                s.push_str("+00");
            }
            Some(s)
        }
        DataType::Float64 => Some(float_text(col.as_primitive::<Float64Type>().value(r))),
        DataType::Float32 => {
            let v = col.as_primitive::<Float32Type>().value(r);
            Some(if v.is_finite() {
                format!("{v}")
            } else {
                float_text(v as f64)
            })
        }
        _ => None,
    }
}

fn float_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{v}")
    }
}

fn encode_value(
    enc: &mut DataRowEncoder,
    col: &ArrayRef,
    r: usize,
    format: FieldFormat,
) -> PgWireResult<()> {
    let null = col.is_null(r);
    macro_rules! prim {
        ($t:ty) => {{
            let a = col.as_primitive::<$t>();
            enc.encode_field(&(!null).then(|| a.value(r)))
        }};
    }
    match col.data_type() {
        DataType::Boolean => enc.encode_field(&(!null).then(|| col.as_boolean().value(r))),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Decimal128(_, s) => {
            let v = if null {
                None
            } else {
                let d = decimal(col.as_primitive::<Decimal128Type>().value(r), *s)?;
                // Unconstrained NUMERIC is stored with scale 10 (and arithmetic on it
                // widens the scale): Postgres shows such a value with its own digits,
                // not 10 or 20 trailing zeros. Declared scales below 10 print as declared,
                // and so does avg's scale: Postgres shows an average with its 16 digits.
                Some(
                    if *s >= UNCONSTRAINED_NUMERIC_SCALE
                        && *s != crate::functions::numeric_aggregates::AVG_SCALE
                    {
                        d.normalize()
                    } else {
                        d
                    },
                )
            };
            enc.encode_field(&v)
        }
        DataType::Utf8 => enc.encode_field(&(!null).then(|| col.as_string::<i32>().value(r))),
        DataType::Binary => enc.encode_field(&(!null).then(|| col.as_binary::<i32>().value(r))),
        DataType::Date32 => {
            let v = if null {
                None
            } else {
                let days = col.as_primitive::<Date32Type>().value(r);
                NaiveDate::from_ymd_opt(1970, 1, 1)
                    .and_then(|d| d.checked_add_signed(chrono::Duration::days(days as i64)))
            };
            enc.encode_field(&v)
        }
        DataType::Timestamp(_, tz) => {
            let micros = (!null).then(|| col.as_primitive::<TimestampMicrosecondType>().value(r));
            let dt = micros.and_then(DateTime::<Utc>::from_timestamp_micros);
            if tz.is_some() {
                enc.encode_field(&dt)
            } else {
                enc.encode_field(&dt.map(|d| d.naive_utc()))
            }
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = (!null).then(|| {
                let i = col.as_primitive::<IntervalMonthDayNanoType>().value(r);
                pg_interval::Interval::new(i.months, i.days, i.nanoseconds / 1000)
            });
            enc.encode_field(&v)
        }
        DataType::List(_) => {
            encode_array(enc, (!null).then(|| col.as_list::<i32>().value(r)), format)
        }
        DataType::LargeList(_) => {
            encode_array(enc, (!null).then(|| col.as_list::<i64>().value(r)), format)
        }
        _ => {
            let v = if null {
                None
            } else {
                Some(arrow::util::display::array_value_to_string(col, r).map_err(encode_err)?)
            };
            enc.encode_field(&v)
        }
    }
}

/// One array value (`None`: SQL NULL) as a Postgres array of the matching element type
/// (see [`array_type`]); pgwire writes `{1,2,NULL}` in text and the array format in
/// binary.
fn encode_array(
    enc: &mut DataRowEncoder,
    values: Option<ArrayRef>,
    format: FieldFormat,
) -> PgWireResult<()> {
    let Some(values) = values else {
        return enc.encode_field(&None::<Vec<Option<String>>>);
    };
    let t = canonical(values.data_type());
    let values = if &t == values.data_type() {
        values
    } else {
        cast(&values, &t).map_err(encode_err)?
    };
    // In text, elements Postgres prints its own way (timestamps, floats) go as their
    // Postgres text (pgwire quotes them as array elements).
    let as_postgres_text = format == FieldFormat::Text
        && matches!(
            values.data_type(),
            DataType::Timestamp(..) | DataType::Float32 | DataType::Float64
        );
    if as_postgres_text {
        let v: Vec<Option<String>> = (0..values.len())
            .map(|i| postgres_text(&values, i))
            .collect();
        return enc.encode_field(&v);
    }
    macro_rules! prim {
        ($t:ty) => {{
            let v: Vec<_> = values.as_primitive::<$t>().iter().collect();
            enc.encode_field(&v)
        }};
    }
    match values.data_type() {
        DataType::Boolean => enc.encode_field(&values.as_boolean().iter().collect::<Vec<_>>()),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Decimal128(_, s) => {
            let v = values
                .as_primitive::<Decimal128Type>()
                .iter()
                .map(|v| v.map(|v| decimal(v, *s)).transpose())
                .collect::<PgWireResult<Vec<_>>>()?;
            enc.encode_field(&v)
        }
        DataType::Date32 => {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date");
            let v: Vec<Option<NaiveDate>> = values
                .as_primitive::<Date32Type>()
                .iter()
                .map(|d| d.and_then(|d| epoch.checked_add_signed(chrono::Duration::days(d as i64))))
                .collect();
            enc.encode_field(&v)
        }
        DataType::Timestamp(_, tz) => {
            let dts = values
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .map(|m| m.and_then(DateTime::<Utc>::from_timestamp_micros));
            if tz.is_some() {
                enc.encode_field(&dts.collect::<Vec<_>>())
            } else {
                enc.encode_field(&dts.map(|d| d.map(|d| d.naive_utc())).collect::<Vec<_>>())
            }
        }
        DataType::Utf8 => enc.encode_field(&values.as_string::<i32>().iter().collect::<Vec<_>>()),
        DataType::Binary => enc.encode_field(&values.as_binary::<i32>().iter().collect::<Vec<_>>()),
        _ => {
            let v = (0..values.len())
                .map(|i| {
                    (!values.is_null(i))
                        .then(|| arrow::util::display::array_value_to_string(&values, i))
                        .transpose()
                        .map_err(encode_err)
                })
                .collect::<PgWireResult<Vec<Option<String>>>>()?;
            enc.encode_field(&v)
        }
    }
}

/// Every value of `batches` in Postgres's text form (`None`: NULL), as a SELECT
/// would send it: COPY TO writes these.
pub fn text_values(
    schema: &arrow::datatypes::Schema,
    batches: &[RecordBatch],
) -> PgWireResult<Vec<Vec<Option<String>>>> {
    let fields = Arc::new(field_infos(schema, |_| FieldFormat::Text));
    let rows = encode_rows(batches, fields)?;
    rows.iter().map(decode_text_row).collect()
}

/// The fields of an encoded row: each is a 4-byte length (-1 for NULL) and its bytes.
fn decode_text_row(row: &DataRow) -> PgWireResult<Vec<Option<String>>> {
    let mut data: &[u8] = &row.data;
    let mut out = Vec::with_capacity(row.field_count.max(0) as usize);
    for _ in 0..row.field_count {
        let (len, rest) = data
            .split_first_chunk::<4>()
            .ok_or_else(|| encode_err("short data row"))?;
        let len = i32::from_be_bytes(*len);
        if len < 0 {
            out.push(None);
            data = rest;
            continue;
        }
        let (value, rest) = rest
            .split_at_checked(len as usize)
            .ok_or_else(|| encode_err("short data row"))?;
        out.push(Some(String::from_utf8_lossy(value).into_owned()));
        data = rest;
    }
    Ok(out)
}
