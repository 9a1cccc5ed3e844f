//! The `datagen` connector (Flink's and RisingWave's): `CREATE TABLE t (id bigint, v
//! double precision, s text) WITH (connector = 'datagen', fields.id.kind = 'sequence',
//! fields.id.start = '1', fields.id.end = '1000', fields.v.min = '0', fields.v.max =
//! '10', rows-per-second = '100')`.
//!
//! Every column is a `sequence` (start, start + 1, ... end; the table ends with its
//! shortest sequence) or `random` (the default): integers and floats uniform in
//! `[min, max]`, text of `length` letters, booleans, timestamps `min`..`max` ms after
//! 2024-01-01 00:00:00 UTC. Random values are a hash of the row index and the column,
//! so a row is the same whenever it is generated: after a crash the table resumes at
//! its logged position and regenerates exactly the rows after it.

use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::source::generated::GeneratedRows;
use crate::source::{ConnectorTable, SourceConnector, SourceContext, SourceSpec};
use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use std::sync::Arc;

const POSITION_KEY: &str = "datagen:next_row";
const BATCH_ROWS: i64 = 10_000;
const BASE_TIME_MS: i64 = 1_704_067_200_000;

#[derive(Debug, Clone, PartialEq)]
pub enum FieldGen {
    Sequence { start: i64, end: i64 },
    Random { min: f64, max: f64, length: usize },
}

#[derive(Debug, Clone)]
pub struct DatagenSpec {
    /// One generator per column, in column order.
    pub fields: Vec<FieldGen>,
    /// `number-of-rows`; the shortest sequence bounds it too. `None`: unbounded.
    pub rows: Option<i64>,
    /// `rows-per-second` (wall clock); `None`: as fast as possible.
    pub rows_per_second: Option<f64>,
}

impl DatagenSpec {
    /// Rows in total: `number-of-rows` and every sequence's length, the least.
    pub fn total(&self) -> Option<i64> {
        self.fields
            .iter()
            .filter_map(|f| match f {
                FieldGen::Sequence { start, end } => Some((end - start + 1).max(0)),
                FieldGen::Random { .. } => None,
            })
            .chain(self.rows)
            .min()
    }
}

/// SplitMix64 of the row index and column: the value's randomness.
fn mix(row: i64, column: usize, k: u64) -> u64 {
    let mut z = (row as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((column as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(k.wrapping_mul(0x94D0_49BB_1331_11EB));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(row: i64, column: usize) -> f64 {
    (mix(row, column, 0) >> 11) as f64 / (1u64 << 53) as f64
}

fn column(gen: &FieldGen, c: usize, t: &DataType, from: i64, to: i64) -> Result<ArrayRef> {
    let rows = from..to;
    let ints = |f: &dyn Fn(i64) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(rows.clone().map(f)))
    };
    let array: ArrayRef = match (gen, t) {
        (FieldGen::Sequence { start, .. }, DataType::Utf8 | DataType::LargeUtf8) => Arc::new(
            StringArray::from_iter_values(rows.clone().map(|r| (start + r).to_string())),
        ),
        (FieldGen::Sequence { start, .. }, DataType::Timestamp(..)) => {
            ints(&|r| (BASE_TIME_MS + (start + r) * 1000) * 1000)
        }
        (FieldGen::Sequence { start, .. }, _) => ints(&|r| start + r),
        (FieldGen::Random { length, .. }, DataType::Utf8 | DataType::LargeUtf8) => {
            Arc::new(StringArray::from_iter_values(rows.clone().map(|r| {
                (0..*length)
                    .map(|i| (b'a' + (mix(r, c, i as u64 + 1) % 26) as u8) as char)
                    .collect::<String>()
            })))
        }
        (FieldGen::Random { .. }, DataType::Boolean) => Arc::new(BooleanArray::from_iter(
            rows.clone().map(|r| Some(mix(r, c, 0) & 1 == 1)),
        )),
        (
            FieldGen::Random { min, max, .. },
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(..),
        ) => Arc::new(Float64Array::from_iter_values(
            rows.clone().map(|r| min + (max - min) * unit(r, c)),
        )),
        (FieldGen::Random { min, max, .. }, DataType::Timestamp(..)) => {
            let (lo, hi) = (*min as i64, *max as i64);
            ints(&|r| {
                (BASE_TIME_MS + lo + (mix(r, c, 0) % (hi - lo + 1).max(1) as u64) as i64) * 1000
            })
        }
        (FieldGen::Random { min, max, .. }, _) => {
            let (lo, hi) = (*min as i64, *max as i64);
            ints(&|r| lo + (mix(r, c, 0) % ((hi - lo) as u64).saturating_add(1).max(1)) as i64)
        }
    };
    // Timestamps were made in µs; everything is cast to the column's own type.
    let array = match t {
        DataType::Timestamp(..) => arrow::compute::cast(
            &arrow::compute::cast(&array, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
            t,
        )?,
        _ => arrow::compute::cast(&array, t)?,
    };
    Ok(array)
}

/// Rows `from..to` in the table's schema.
pub fn rows(spec: &DatagenSpec, schema: &SchemaRef, from: i64, to: i64) -> Result<RecordBatch> {
    let columns = spec
        .fields
        .iter()
        .zip(schema.fields())
        .enumerate()
        .map(|(c, (g, f))| column(g, c, f.data_type(), from, to))
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| ExecError::Internal(e.to_string()))
}

impl SourceConnector for DatagenSpec {
    /// Generates into the context's table (see [`crate::source::generated`]).
    fn start(&self, ctx: SourceContext) -> Result<()> {
        let run = crate::source::generated::Run {
            total: self.total(),
            batch: BATCH_ROWS.min(
                self.rows_per_second
                    .map_or(BATCH_ROWS, |r| (r as i64).max(1)),
            ),
            max_per_second: self.rows_per_second,
            zero_due_ms: None,
            splits: 1,
        };
        crate::source::generated::spawn(ctx, run, self.generated())
    }

    fn generated_rows(&self) -> Option<GeneratedRows> {
        Some(self.generated())
    }
}

impl DatagenSpec {
    /// The spec's rows function, for generating and for regenerating an unstored source.
    fn generated(&self) -> GeneratedRows {
        let spec = self.clone();
        GeneratedRows {
            rows: Arc::new(move |schema, from, to| rows(&spec, schema, from, to)),
            position_key: POSITION_KEY,
        }
    }
}

/// `connector = 'datagen'` options: `rows-per-second` (default 10,000, Flink's; `0`: as
/// fast as possible; RisingWave's `datagen.rows.per.second` too), `number-of-rows`, and
/// per column `fields.<col>.kind = 'random' | 'sequence'` with `start` / `end`
/// (sequence) or `min` / `max` / `length` (random; defaults 0 / 1000 / 10).
pub(crate) fn parse_options(
    o: &mut ConnectorOptions,
    table: &ConnectorTable<'_>,
) -> Result<SourceSpec> {
    let rate = match o
        .take_number("rows-per-second")?
        .or(o.take_number("datagen.rows.per.second")?)
    {
        None => Some(10_000.0),
        Some(0.0) => None,
        Some(r) if r > 0.0 => Some(r),
        Some(r) => return Err(invalid(format!("invalid rows-per-second: {r}"))),
    };
    let rows = match o.take_number("number-of-rows")? {
        Some(n) if n >= 0.0 => Some(n as i64),
        Some(n) => return Err(invalid(format!("invalid number-of-rows: {n}"))),
        None => None,
    };
    let fields = table
        .columns
        .iter()
        .map(|c| field_options(o, c))
        .collect::<Result<Vec<_>>>()?;
    // `fields.<x>.*` left over names no column (or no setting of one).
    if let Some(k) = o.first_unknown().filter(|k| k.starts_with("fields.")) {
        return Err(ExecError::UndefinedColumn(format!(
            "datagen option \"{k}\": no column \"{}\" or no such setting",
            k["fields.".len()..].split('.').next().unwrap_or_default()
        )));
    }
    Ok(Arc::new(DatagenSpec {
        fields,
        rows,
        rows_per_second: rate,
    }))
}

/// Column `c`'s `fields.<c>.*` options.
fn field_options(o: &mut ConnectorOptions, c: &str) -> Result<FieldGen> {
    let key = |k: &str| format!("fields.{c}.{k}");
    let kind = o.take(&key("kind")).unwrap_or_else(|| "random".into());
    match kind.to_ascii_lowercase().as_str() {
        "sequence" => {
            let start = o.take_number(&key("start"))?;
            let end = o.take_number(&key("end"))?;
            let (Some(start), Some(end)) = (start, end) else {
                return Err(invalid(format!(
                    "a sequence column needs fields.{c}.start and fields.{c}.end"
                )));
            };
            Ok(FieldGen::Sequence {
                start: start as i64,
                end: end as i64,
            })
        }
        "random" => Ok(FieldGen::Random {
            min: o.take_number(&key("min"))?.unwrap_or(0.0),
            max: o.take_number(&key("max"))?.unwrap_or(1000.0),
            length: o
                .take_number(&key("length"))?
                .map_or(10, |n| n.max(0.0) as usize),
        }),
        other => Err(invalid(format!(
            "fields.{c}.kind must be random or sequence, not {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Int64Type, Schema};

    #[test]
    fn sequences_bound_the_table_and_random_values_repeat() {
        let spec = DatagenSpec {
            fields: vec![
                FieldGen::Sequence { start: 5, end: 9 },
                FieldGen::Random {
                    min: -3.0,
                    max: 3.0,
                    length: 4,
                },
                FieldGen::Random {
                    min: 0.0,
                    max: 0.0,
                    length: 4,
                },
            ],
            rows: Some(100),
            rows_per_second: None,
        };
        assert_eq!(spec.total(), Some(5));
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let a = rows(&spec, &schema, 0, 5).unwrap();
        let b = rows(&spec, &schema, 2, 4).unwrap();
        assert_eq!(
            a.column(0).as_primitive::<Int64Type>().values(),
            &[5, 6, 7, 8, 9]
        );
        assert!(a
            .column(1)
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .all(|v| (-3..=3).contains(v)));
        assert_eq!(a.slice(2, 2), b, "row values depend only on the row index");
        assert_eq!(a.column(2).as_string::<i32>().value(0).len(), 4);
    }
}
