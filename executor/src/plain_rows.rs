//! Rows as bytes for operators that keep them as payload: [`RowCodec`].
//!
//! A payload row (a Top-N's or an OVER window's row, beside its sort key) needs
//! equality and *one* fixed order, not SQL's order. Arrow's row format gives SQL's
//! order at a price: strings in 32-byte blocks, each with a continuation byte, so a
//! string is padded to 32 bytes and decoding scans it block by block. At a barrier a
//! Top-N decodes every row it shows differently (q19: 4.4M rows of `url` and `extra`
//! in 10M events), and that decode was half of its barrier work.
//!
//! The plain layout: a null bitmap (one bit per column, set for null, the first
//! column in the highest bit), then each non-null value as it is: fixed-width values
//! in their own bytes, booleans as a byte, strings and binaries as a little-endian
//! `u32` length and their bytes. Encoding is canonical (a null writes nothing,
//! whatever its slot holds), so equal rows have equal bytes, and decoding is one copy
//! per value.
//!
//! [`RowCodec`] picks the plain layout when every column is of a type it knows, and
//! arrow's row format otherwise (nested types), so each type has exactly one layout.

use arrow::array::{make_array, Array, ArrayData, ArrayRef, AsArray, BooleanBufferBuilder};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};

/// How a row's columns are laid out as bytes (see the module docs).
pub enum RowCodec {
    Plain(PlainRows),
    /// Arrow's order-preserving row format, for types the plain layout does not know.
    Ordered(RowConverter),
}

/// Encoded rows: `row(i)` is row `i`'s bytes.
pub enum EncodedRows {
    Plain { data: Vec<u8>, ends: Vec<usize> },
    Ordered(Rows),
}

impl EncodedRows {
    pub fn row(&self, i: usize) -> &[u8] {
        match self {
            EncodedRows::Plain { data, ends } => {
                let start = if i == 0 { 0 } else { ends[i - 1] };
                &data[start..ends[i]]
            }
            EncodedRows::Ordered(rows) => rows.row(i).data(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            EncodedRows::Plain { ends, .. } => ends.len(),
            EncodedRows::Ordered(rows) => rows.num_rows(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Arrow's row converter with each column in ascending order: the layout payload rows
/// had before the plain layout, and the one of types it does not know.
pub fn ordered_converter(types: &[DataType]) -> Result<RowConverter, ArrowError> {
    RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())
}

impl RowCodec {
    pub fn new(types: &[DataType]) -> Result<Self, ArrowError> {
        Ok(match PlainRows::new(types) {
            Some(plain) => RowCodec::Plain(plain),
            None => RowCodec::Ordered(ordered_converter(types)?),
        })
    }

    /// Whether this codec's layout differs from arrow's row format, the layout of
    /// state written before the plain layout (which then needs converting). Rows of
    /// no columns are empty in both.
    pub fn is_plain(&self) -> bool {
        matches!(self, RowCodec::Plain(p) if !p.kinds.is_empty())
    }

    pub fn encode(&self, columns: &[ArrayRef]) -> Result<EncodedRows, ArrowError> {
        match self {
            RowCodec::Plain(p) => p.encode(columns),
            RowCodec::Ordered(c) => Ok(EncodedRows::Ordered(c.convert_columns(columns)?)),
        }
    }

    /// Rows back into columns (none when the rows have no columns).
    pub fn decode<'r>(
        &self,
        rows: impl IntoIterator<Item = &'r [u8]>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        match self {
            RowCodec::Plain(p) => p.decode(rows),
            // (Never of no columns: those have the plain layout, of no bytes.)
            RowCodec::Ordered(c) => {
                let parser = c.parser();
                c.convert_rows(rows.into_iter().map(|r| parser.parse(r)))
            }
        }
    }

    /// Rows written in arrow's row format (state from before the plain layout), in
    /// this codec's layout.
    pub fn convert_ordered<'r>(
        &self,
        rows: impl IntoIterator<Item = &'r [u8]>,
    ) -> Result<EncodedRows, ArrowError> {
        match self {
            RowCodec::Plain(p) if p.kinds.is_empty() => {
                let ends = vec![0; rows.into_iter().count()];
                Ok(EncodedRows::Plain { data: vec![], ends })
            }
            RowCodec::Plain(p) => {
                let columns = crate::chunk::decode_rows(&p.ordered, p.kinds.len(), rows)?;
                p.encode(&columns)
            }
            RowCodec::Ordered(c) => {
                let parser = c.parser();
                let rows: Vec<_> = rows.into_iter().map(|r| parser.parse(r)).collect();
                let mut out = c.empty_rows(rows.len(), 0);
                rows.into_iter().for_each(|r| out.push(r));
                Ok(EncodedRows::Ordered(out))
            }
        }
    }
}

/// How one column is laid out in a plain row.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A primitive of this many bytes (integers, floats, dates, times, decimals...).
    Fixed(usize),
    Bool,
    /// Strings and binaries with `i32` offsets.
    Var32,
    /// Strings and binaries with `i64` offsets.
    Var64,
}

impl Kind {
    /// Which types have the plain layout. This is a stored format: partitions say
    /// only that their rows are in [`RowCodec`]'s layout, so a type moved from arrow's
    /// format to a plain one (Utf8View, say) needs a new mark in the state first.
    fn of(t: &DataType) -> Option<Kind> {
        match t {
            DataType::Boolean => Some(Kind::Bool),
            DataType::Utf8 | DataType::Binary => Some(Kind::Var32),
            DataType::LargeUtf8 | DataType::LargeBinary => Some(Kind::Var64),
            DataType::Dictionary(..) => None,
            t if t.is_primitive() => t.primitive_width().map(Kind::Fixed),
            _ => None,
        }
    }
}

/// The plain layout of rows of given column types.
pub struct PlainRows {
    types: Vec<DataType>,
    kinds: Vec<Kind>,
    /// The same types in arrow's row format, to read state written before.
    ordered: RowConverter,
}

impl PlainRows {
    /// `None` when a column's type has no plain layout.
    fn new(types: &[DataType]) -> Option<Self> {
        let kinds = types.iter().map(Kind::of).collect::<Option<Vec<_>>>()?;
        Some(PlainRows {
            types: types.to_vec(),
            kinds,
            ordered: ordered_converter(types).ok()?,
        })
    }

    fn bitmap_len(&self) -> usize {
        self.kinds.len().div_ceil(8)
    }

    fn encode(&self, columns: &[ArrayRef]) -> Result<EncodedRows, ArrowError> {
        let types = columns.iter().map(|c| c.data_type());
        if !types.eq(&self.types) {
            return Err(ArrowError::InvalidArgumentError(format!(
                "rows of {:?} given columns of other types",
                self.types
            )));
        }
        let n = columns.first().map_or(0, |c| c.len());
        let readers: Vec<ColumnReader> = columns
            .iter()
            .zip(&self.kinds)
            .map(|(c, k)| ColumnReader::new(c.as_ref(), *k))
            .collect();
        let bitmap = self.bitmap_len();
        let mut data = Vec::with_capacity(n * (bitmap + readers.len() * 8));
        let mut ends = Vec::with_capacity(n);
        for i in 0..n {
            let start = data.len();
            data.resize(start + bitmap, 0);
            for (c, r) in readers.iter().enumerate() {
                if r.is_null(i) {
                    data[start + c / 8] |= null_bit(c);
                } else {
                    r.append(i, &mut data)?;
                }
            }
            ends.push(data.len());
        }
        Ok(EncodedRows::Plain { data, ends })
    }

    fn decode<'r>(
        &self,
        rows: impl IntoIterator<Item = &'r [u8]>,
    ) -> Result<Vec<ArrayRef>, ArrowError> {
        let mut builders: Vec<ColumnBuilder> =
            self.kinds.iter().map(|k| ColumnBuilder::new(*k)).collect();
        let bitmap = self.bitmap_len();
        for row in rows {
            if row.len() < bitmap {
                return Err(corrupt("shorter than its null bitmap"));
            }
            let (nulls, mut rest) = row.split_at(bitmap);
            for (c, b) in builders.iter_mut().enumerate() {
                let null = nulls[c / 8] & null_bit(c) != 0;
                rest = b.push(null, rest)?;
            }
            if !rest.is_empty() {
                return Err(corrupt("longer than its columns"));
            }
        }
        builders
            .into_iter()
            .zip(&self.types)
            .map(|(b, t)| b.finish(t))
            .collect()
    }
}

/// Column `c`'s bit in its byte of the null bitmap: the first column the highest, so
/// that comparing bitmaps as bytes compares columns' nulls in column order. A row
/// without some columns (a Top-1's short row) then orders as the whole row does when
/// the columns left out are equal.
fn null_bit(c: usize) -> u8 {
    0x80 >> (c % 8)
}

fn corrupt(what: &str) -> ArrowError {
    ArrowError::InvalidArgumentError(format!("a stored row is corrupt: {what}"))
}

/// One column's values, read for encoding: handles to the array's buffers.
struct ColumnReader {
    nulls: Option<NullBuffer>,
    values: Values,
}

enum Values {
    /// The values' bytes from the array's first slot, and each value's width.
    Fixed(Buffer, usize),
    Bool(BooleanBuffer),
    /// Offsets from the array's first slot (absolute into the values), and values.
    Var32(ScalarBuffer<i32>, Buffer),
    Var64(ScalarBuffer<i64>, Buffer),
}

impl ColumnReader {
    fn new(array: &dyn Array, kind: Kind) -> Self {
        let data = array.to_data();
        let (offset, len) = (data.offset(), data.len());
        let buffer = |i: usize| data.buffers()[i].clone();
        let values = match kind {
            Kind::Fixed(w) => Values::Fixed(buffer(0).slice(offset * w), w),
            Kind::Bool => Values::Bool(array.as_boolean().values().clone()),
            Kind::Var32 => Values::Var32(ScalarBuffer::new(buffer(0), offset, len + 1), buffer(1)),
            Kind::Var64 => Values::Var64(ScalarBuffer::new(buffer(0), offset, len + 1), buffer(1)),
        };
        ColumnReader {
            nulls: data.nulls().cloned(),
            values,
        }
    }

    fn is_null(&self, i: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(i))
    }

    fn append(&self, i: usize, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        match &self.values {
            Values::Fixed(bytes, w) => out.extend_from_slice(&bytes[i * w..(i + 1) * w]),
            Values::Bool(b) => out.push(u8::from(b.value(i))),
            Values::Var32(o, v) => append_var(out, &v[o[i] as usize..o[i + 1] as usize])?,
            Values::Var64(o, v) => append_var(out, &v[o[i] as usize..o[i + 1] as usize])?,
        }
        Ok(())
    }
}

fn append_var(out: &mut Vec<u8>, value: &[u8]) -> Result<(), ArrowError> {
    let len = u32::try_from(value.len()).map_err(|_| {
        ArrowError::InvalidArgumentError(format!("a {} byte value in a stored row", value.len()))
    })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(value);
    Ok(())
}

/// One column being decoded.
struct ColumnBuilder {
    nulls: BooleanBufferBuilder,
    null_count: usize,
    values: Building,
}

enum Building {
    Fixed(MutableBuffer, usize),
    Bool(BooleanBufferBuilder),
    Var32(MutableBuffer, MutableBuffer),
    Var64(MutableBuffer, MutableBuffer),
}

impl ColumnBuilder {
    fn new(kind: Kind) -> Self {
        let first_offset = |width: usize| {
            let mut offsets = MutableBuffer::new(0);
            offsets.extend_zeros(width);
            offsets
        };
        let values = match kind {
            Kind::Fixed(w) => Building::Fixed(MutableBuffer::new(0), w),
            Kind::Bool => Building::Bool(BooleanBufferBuilder::new(0)),
            Kind::Var32 => Building::Var32(first_offset(4), MutableBuffer::new(0)),
            Kind::Var64 => Building::Var64(first_offset(8), MutableBuffer::new(0)),
        };
        ColumnBuilder {
            nulls: BooleanBufferBuilder::new(0),
            null_count: 0,
            values,
        }
    }

    /// Appends the value at the start of `row` (or a null), returning the rest.
    fn push<'r>(&mut self, null: bool, row: &'r [u8]) -> Result<&'r [u8], ArrowError> {
        self.nulls.append(!null);
        self.null_count += usize::from(null);
        match &mut self.values {
            Building::Fixed(values, w) if null => {
                values.extend_zeros(*w);
                Ok(row)
            }
            Building::Fixed(values, w) => {
                let (value, rest) = take(row, *w)?;
                values.extend_from_slice(value);
                Ok(rest)
            }
            Building::Bool(values) => {
                let (value, rest) = if null { (&[0][..], row) } else { take(row, 1)? };
                values.append(value[0] != 0);
                Ok(rest)
            }
            Building::Var32(offsets, values) => push_var::<i32>(offsets, values, null, row),
            Building::Var64(offsets, values) => push_var::<i64>(offsets, values, null, row),
        }
    }

    fn finish(mut self, t: &DataType) -> Result<ArrayRef, ArrowError> {
        let len = self.nulls.len();
        let nulls = (self.null_count > 0).then(|| NullBuffer::new(self.nulls.finish()));
        let buffers: Vec<Buffer> = match self.values {
            Building::Fixed(values, _) => vec![values.into()],
            Building::Bool(mut values) => vec![values.finish().into_inner()],
            Building::Var32(offsets, values) | Building::Var64(offsets, values) => {
                vec![offsets.into(), values.into()]
            }
        };
        let data = ArrayData::builder(t.clone())
            .len(len)
            .nulls(nulls)
            .buffers(buffers)
            .build()?;
        Ok(make_array(data))
    }
}

/// The first `n` bytes of `row` and the rest.
fn take(row: &[u8], n: usize) -> Result<(&[u8], &[u8]), ArrowError> {
    row.split_at_checked(n)
        .ok_or_else(|| corrupt("a value runs past its end"))
}

/// Appends a string or binary (or a null: an empty one) to offsets of type `O`.
fn push_var<'r, O: arrow::datatypes::ArrowNativeType + TryFrom<usize>>(
    offsets: &mut MutableBuffer,
    values: &mut MutableBuffer,
    null: bool,
    row: &'r [u8],
) -> Result<&'r [u8], ArrowError> {
    let rest = if null {
        row
    } else {
        let (len, rest) = take(row, 4)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (value, rest) = take(rest, len)?;
        values.extend_from_slice(value);
        rest
    };
    let end =
        O::try_from(values.len()).map_err(|_| ArrowError::OffsetOverflowError(values.len()))?;
    offsets.push(end);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int32Array, Int64Array,
        LargeStringArray, ListArray, StringArray, TimestampMillisecondArray,
    };
    use arrow::datatypes::Int32Type;
    use std::sync::Arc;

    fn columns() -> Vec<ArrayRef> {
        vec![
            Arc::new(Int64Array::from(vec![
                Some(1),
                None,
                Some(-3),
                Some(i64::MAX),
            ])),
            Arc::new(StringArray::from(vec![
                Some("a"),
                Some(""),
                None,
                Some("ü".repeat(40).as_str()),
            ])),
            Arc::new(BooleanArray::from(vec![
                Some(true),
                None,
                Some(false),
                Some(true),
            ])),
            Arc::new(Float64Array::from(vec![0.5, -0.0, f64::NAN, 1e300])),
            Arc::new(TimestampMillisecondArray::from(vec![
                Some(5),
                Some(6),
                None,
                Some(8),
            ])),
            Arc::new(
                Decimal128Array::from(vec![Some(12345), None, Some(-1), Some(0)])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(LargeStringArray::from(vec![
                None,
                Some("x"),
                Some("yz"),
                None,
            ])),
            Arc::new(BinaryArray::from(vec![
                Some(&b"\0\xff"[..]),
                None,
                Some(&b""[..]),
                Some(&b"b"[..]),
            ])),
            Arc::new(Int32Array::from(vec![None, None, None, None])),
        ]
    }

    fn types(columns: &[ArrayRef]) -> Vec<DataType> {
        columns.iter().map(|c| c.data_type().clone()).collect()
    }

    fn rows(encoded: &EncodedRows) -> Vec<&[u8]> {
        (0..encoded.len()).map(|i| encoded.row(i)).collect()
    }

    #[test]
    fn plain_rows_round_trip_every_type_they_know() {
        let columns = columns();
        let codec = RowCodec::new(&types(&columns)).unwrap();
        assert!(codec.is_plain());
        let encoded = codec.encode(&columns).unwrap();
        assert_eq!(encoded.len(), 4);
        let back = codec.decode(rows(&encoded)).unwrap();
        assert_eq!(back.len(), columns.len());
        for (b, c) in back.iter().zip(&columns) {
            assert_eq!(b.to_data(), c.to_data(), "{}", c.data_type());
        }
        // Sliced columns encode as the same rows as the slice's own.
        let sliced: Vec<ArrayRef> = columns.iter().map(|c| c.slice(1, 2)).collect();
        let encoded_slice = codec.encode(&sliced).unwrap();
        assert_eq!(rows(&encoded_slice), rows(&encoded)[1..3].to_vec());
    }

    /// A null writes nothing of its slot, so rows equal in SQL have equal bytes.
    #[test]
    fn a_null_encodes_the_same_whatever_its_slot_holds() {
        let a: ArrayRef = Arc::new(Int64Array::new(
            vec![7, 9].into(),
            Some(vec![false, false].into()),
        ));
        let codec = RowCodec::new(&[DataType::Int64]).unwrap();
        let encoded = codec.encode(&[a]).unwrap();
        assert_eq!(encoded.row(0), encoded.row(1));
        assert_eq!(encoded.row(0), &[0x80]);
    }

    /// The types that keep arrow's row format are part of the stored format (see
    /// `Kind::of`): this pins them.
    #[test]
    fn which_types_keep_arrow_s_row_format_is_fixed() {
        use arrow::datatypes::{Field, TimeUnit};
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        for t in [
            DataType::List(item.clone()),
            DataType::LargeList(item),
            DataType::Struct(vec![Field::new("a", DataType::Int32, true)].into()),
            DataType::Utf8View,
            DataType::BinaryView,
            DataType::FixedSizeBinary(4),
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            DataType::Null,
        ] {
            assert!(Kind::of(&t).is_none(), "{t} keeps arrow's format");
        }
        for t in [
            DataType::Int8,
            DataType::UInt64,
            DataType::Float16,
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Decimal128(38, 10),
            DataType::Boolean,
            DataType::Utf8,
            DataType::LargeBinary,
        ] {
            assert!(Kind::of(&t).is_some(), "{t} has the plain layout");
        }
    }

    #[test]
    fn nested_types_keep_arrow_s_row_format() {
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            None,
        ]));
        let codec = RowCodec::new(&types(std::slice::from_ref(&list))).unwrap();
        assert!(!codec.is_plain());
        let encoded = codec.encode(std::slice::from_ref(&list)).unwrap();
        let back = codec.decode(rows(&encoded)).unwrap();
        assert_eq!(back[0].to_data(), list.to_data());
    }

    /// State written in arrow's row format (before the plain layout) reads back as the
    /// same values.
    #[test]
    fn rows_in_arrow_s_format_convert_to_the_plain_layout() {
        let columns = columns();
        let codec = RowCodec::new(&types(&columns)).unwrap();
        let old = ordered_converter(&types(&columns))
            .unwrap()
            .convert_columns(&columns)
            .unwrap();
        let converted = codec
            .convert_ordered((0..old.num_rows()).map(|i| old.row(i).data()))
            .unwrap();
        assert_eq!(rows(&converted), rows(&codec.encode(&columns).unwrap()));
    }

    #[test]
    fn corrupt_rows_are_an_error_not_a_panic() {
        let columns = columns();
        let codec = RowCodec::new(&types(&columns)).unwrap();
        let encoded = codec.encode(&columns).unwrap();
        let row = encoded.row(3);
        for cut in 0..row.len() {
            assert!(codec.decode([&row[..cut]]).is_err(), "cut at {cut}");
        }
        let mut long = row.to_vec();
        long.push(0);
        assert!(codec.decode([long.as_slice()]).is_err());
    }
}
