//! Catalog tables written row by row: a table is a list of typed columns and rows of
//! [`V`] values, turned into one Arrow batch. One row per catalog object reads like
//! the Postgres documentation of that catalog, and the column list doubles as the
//! table's `pg_attribute` / `information_schema.columns` description.

use arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, ListBuilder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
    UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::Arc;
use weir_planner::SqlResult;

/// A catalog column's type (Postgres's name for it in the comment).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Col {
    /// `oid` (and `regproc`, `regclass`, `xid`: numbers naming objects).
    Oid,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// `timestamptz` (microseconds, UTC).
    Timestamp,
    Bool,
    /// `name`, `text`, `char`.
    Text,
    /// `oidvector`, `oid[]`.
    OidList,
    /// `int2vector`, `int2[]`.
    Int2List,
    /// `text[]`, `aclitem[]`.
    TextList,
}

impl Col {
    pub fn arrow(self) -> DataType {
        let item = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        match self {
            Col::Oid => DataType::UInt32,
            Col::Int2 => DataType::Int16,
            Col::Int4 => DataType::Int32,
            Col::Int8 => DataType::Int64,
            Col::Float4 => DataType::Float32,
            Col::Float8 => DataType::Float64,
            Col::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Col::Bool => DataType::Boolean,
            Col::Text => DataType::Utf8,
            Col::OidList => item(DataType::UInt32),
            Col::Int2List => item(DataType::Int16),
            Col::TextList => item(DataType::Utf8),
        }
    }

    /// The Postgres type oid `pg_attribute.atttypid` reports for the column.
    pub fn type_oid(self) -> u32 {
        match self {
            Col::Oid => 26,
            Col::Int2 => 21,
            Col::Int4 => 23,
            Col::Int8 => 20,
            Col::Float4 => 700,
            Col::Float8 => 701,
            Col::Timestamp => 1184,
            Col::Bool => 16,
            Col::Text => 25,
            Col::OidList => 1028,
            Col::Int2List => 1005,
            Col::TextList => 1009,
        }
    }
}

/// One cell.
#[derive(Clone, Debug)]
pub enum V {
    Null,
    Oid(u32),
    I16(i16),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    /// Microseconds since the Unix epoch.
    Ts(i64),
    Bool(bool),
    Text(String),
    Oids(Vec<u32>),
    I16s(Vec<i16>),
    Texts(Vec<String>),
}

impl From<&str> for V {
    fn from(s: &str) -> V {
        V::Text(s.to_string())
    }
}

impl From<String> for V {
    fn from(s: String) -> V {
        V::Text(s)
    }
}

impl From<i64> for V {
    fn from(n: i64) -> V {
        V::I64(n)
    }
}

impl From<Option<i64>> for V {
    fn from(n: Option<i64>) -> V {
        n.map_or(V::Null, V::I64)
    }
}

impl From<bool> for V {
    fn from(b: bool) -> V {
        V::Bool(b)
    }
}

impl From<Option<String>> for V {
    fn from(s: Option<String>) -> V {
        s.map_or(V::Null, V::Text)
    }
}

/// A table's name and columns.
pub struct Spec {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Col)],
}

impl Spec {
    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|(n, c)| Field::new(*n, c.arrow(), true))
                .collect::<Vec<_>>(),
        ))
    }

    /// The batch of `rows`; a value of the wrong type for its column is a bug in
    /// the table's definition, reported as an internal error.
    pub fn batch(&self, rows: &[Vec<V>]) -> SqlResult<RecordBatch> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (i, (name, col)) in self.columns.iter().enumerate() {
            let cells = rows.iter().map(|r| r.get(i).unwrap_or(&V::Null));
            arrays.push(column(*col, cells).map_err(|v| {
                weir_planner::SqlError::internal(format!(
                    "{}.{name}: {v:?} is not a {col:?}",
                    self.name
                ))
            })?);
        }
        Ok(RecordBatch::try_new(self.schema(), arrays)?)
    }
}

fn column<'a>(col: Col, cells: impl Iterator<Item = &'a V>) -> Result<ArrayRef, V> {
    macro_rules! scalar {
        ($builder:ty, $variant:ident) => {{
            let mut b = <$builder>::new();
            for v in cells {
                match v {
                    V::Null => b.append_null(),
                    V::$variant(x) => b.append_value(x.clone()),
                    other => return Err(other.clone()),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    macro_rules! list {
        ($builder:ty, $variant:ident) => {{
            let mut b = ListBuilder::new(<$builder>::new());
            for v in cells {
                match v {
                    V::Null => b.append_null(),
                    V::$variant(xs) => {
                        for x in xs {
                            b.values().append_value(x.clone());
                        }
                        b.append(true);
                    }
                    other => return Err(other.clone()),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    Ok(match col {
        Col::Oid => scalar!(UInt32Builder, Oid),
        Col::Int2 => scalar!(Int16Builder, I16),
        Col::Int4 => scalar!(Int32Builder, I32),
        Col::Int8 => scalar!(Int64Builder, I64),
        Col::Float4 => scalar!(Float32Builder, F32),
        Col::Float8 => scalar!(Float64Builder, F64),
        Col::Timestamp => {
            let mut b = TimestampMicrosecondBuilder::new().with_timezone("UTC");
            for v in cells {
                match v {
                    V::Null => b.append_null(),
                    V::Ts(x) => b.append_value(*x),
                    other => return Err(other.clone()),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }
        Col::Bool => scalar!(BooleanBuilder, Bool),
        Col::Text => scalar!(StringBuilder, Text),
        Col::OidList => list!(UInt32Builder, Oids),
        Col::Int2List => list!(Int16Builder, I16s),
        Col::TextList => list!(StringBuilder, Texts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_typed_columns() {
        const T: Spec = Spec {
            name: "t",
            columns: &[("a", Col::Oid), ("b", Col::Text), ("c", Col::Int2List)],
        };
        let b = T
            .batch(&[
                vec![V::Oid(1), "x".into(), V::I16s(vec![1, 2])],
                vec![V::Null, V::Null, V::Null],
            ])
            .unwrap();
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.schema().field(0).data_type(), &DataType::UInt32);
        assert!(T.batch(&[vec![V::Bool(true)]]).is_err());
    }
}
