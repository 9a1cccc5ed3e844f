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

use crate::error::{ExecError, Result};
use crate::runtime::Runtime;
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
    pub table: String,
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

/// Starts generating into `spec.table` (see [`crate::source::generated`]).
pub fn spawn(rt: &Arc<Runtime>, spec: DatagenSpec) -> Result<()> {
    let run = crate::source::generated::Run {
        table: spec.table.clone(),
        total: spec.total(),
        batch: BATCH_ROWS.min(
            spec.rows_per_second
                .map_or(BATCH_ROWS, |r| (r as i64).max(1)),
        ),
        max_per_second: spec.rows_per_second,
        splits: 1,
    };
    crate::source::generated::spawn(rt, run, generated_rows(&spec))
}

/// The spec's rows function, for generating and for regenerating an unstored source.
pub fn generated_rows(spec: &DatagenSpec) -> crate::source::generated::GeneratedRows {
    let spec = spec.clone();
    crate::source::generated::GeneratedRows {
        rows: Arc::new(move |schema, from, to| rows(&spec, schema, from, to)),
        position_key: POSITION_KEY,
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
            table: "t".into(),
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
