//! "Is this column of an encoded row below the watermark?" without decoding the row.
//!
//! State keys and join rows are in Arrow's row format. When every column up to the
//! watermarked one has a fixed-width encoding (a validity byte and the value's bytes:
//! a `window_start` after an `auction` bigint, a bid's `date_time` after its numbers),
//! that column sits at one offset in every row, and the row format orders its bytes
//! as the values order, so it compares with the watermark encoded alone. Cleaning
//! state behind a watermark then reads a few bytes per row instead of decoding every
//! row into columns.

use crate::error::Result;
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;

/// The test for one column and one bound, prepared once.
pub struct RowBelow {
    offset: usize,
    width: usize,
    /// The bound's encoding; `None` for a NULL bound (nothing is below it).
    bound: Option<Vec<u8>>,
    /// Encodes and decodes the column's values alone.
    one: RowConverter,
}

impl RowBelow {
    /// `None` when the layout of `types` (ascending sort fields) does not allow it.
    pub fn new(types: &[DataType], col: usize, below: &ScalarValue) -> Result<Option<Self>> {
        let widths: Option<Vec<usize>> = types[..=col].iter().map(fixed_width).collect();
        let Some(widths) = widths else {
            return Ok(None);
        };
        let (offset, width) = (widths[..col].iter().sum::<usize>(), widths[col]);
        let Ok(value) = below.cast_to(&types[col]) else {
            return Ok(None);
        };
        let one = RowConverter::new(vec![SortField::new(types[col].clone())])?;
        if value.is_null() {
            return Ok(Some(Self {
                offset,
                width,
                bound: None,
                one,
            }));
        }
        let encoded = one.convert_columns(&[value.to_array()?])?;
        let bound = encoded.row(0).as_ref().to_vec();
        if bound.len() != width {
            return Ok(None);
        }
        Ok(Some(Self {
            offset,
            width,
            bound: Some(bound),
            one,
        }))
    }

    /// The column's encoding in `row` when it is not NULL. Encodings order as their
    /// values do, so the smallest is the oldest time.
    pub fn field<'a>(&self, row: &'a [u8]) -> Option<&'a [u8]> {
        let field = row.get(self.offset..self.offset + self.width)?;
        // A non-NULL value's validity byte (ascending sort, as `new` encodes).
        (field[0] == 1).then_some(field)
    }

    /// The value `field` (from [`Self::field`]) encodes, as a one-row array.
    pub fn decode(&self, field: &[u8]) -> Result<arrow::array::ArrayRef> {
        let parser = self.one.parser();
        let mut cols = self.one.convert_rows([parser.parse(field)])?;
        Ok(cols.remove(0))
    }

    /// Whether the row's column is below the bound. A NULL value has another validity
    /// byte and is never below (as in `chunk::below_mask`).
    pub fn test(&self, row: &[u8]) -> bool {
        let Some(bound) = &self.bound else {
            return false;
        };
        row.get(self.offset..self.offset + bound.len())
            .is_some_and(|v| v[0] == bound[0] && v < bound.as_slice())
    }
}

/// The row-format width of a fixed-width value: a validity byte and its bytes.
fn fixed_width(t: &DataType) -> Option<usize> {
    match t {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Date64
        | DataType::Timestamp(..)
        | DataType::Decimal128(..) => t.primitive_width().map(|w| w + 1),
        _ => None,
    }
}
