//! Indexes over a relation's committed contents, for serving reads without a scan.
//!
//! A `RelationStore` keeps one [`StoreIndex`] per [`IndexSpec`]: a table's primary key,
//! a view's group key, or a `CREATE INDEX`. Each maps the index columns' Arrow
//! row-format bytes (which sort like the values) to the multiset of rows holding them,
//! so an equality lookup is one map probe and a range lookup one ordered walk. Indexes
//! change only when the store commits an epoch, under the store's lock, so a lookup
//! sees exactly the committed epoch a full snapshot would.

use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use ahash::AHashMap as HashMap;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Which columns an index covers (positions in the relation's schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: String,
    pub columns: Vec<usize>,
}

/// What a lookup asks for. Values are one-element arrays of the column's type.
#[derive(Debug, Clone)]
pub enum KeyRange {
    /// Every index column equal to the given value.
    Point(Vec<ArrayRef>),
    /// The (single) index column within bounds; NULLs never match.
    Range {
        lower: Bound<ArrayRef>,
        upper: Bound<ArrayRef>,
    },
}

type RowCounts = HashMap<Arc<[u8]>, i64>;

pub(crate) struct StoreIndex {
    pub spec: IndexSpec,
    keys: RowConverter,
    entries: BTreeMap<Box<[u8]>, RowCounts>,
    /// The encoding of a NULL key (they sort first): range lookups start after it.
    null_key: Box<[u8]>,
}

impl StoreIndex {
    pub fn new(spec: IndexSpec, schema: &SchemaRef) -> Result<StoreIndex> {
        if spec.columns.is_empty() || spec.columns.iter().any(|&c| c >= schema.fields().len()) {
            return Err(ExecError::Internal(format!(
                "index {} has bad columns {:?}",
                spec.name, spec.columns
            )));
        }
        let fields = spec
            .columns
            .iter()
            .map(|&c| SortField::new(schema.field(c).data_type().clone()))
            .collect();
        let keys = RowConverter::new(fields)?;
        let nulls: Vec<ArrayRef> = spec
            .columns
            .iter()
            .map(|&c| arrow::array::new_null_array(schema.field(c).data_type(), 1))
            .collect();
        let null_key = keys.convert_columns(&nulls)?.row(0).as_ref().into();
        Ok(StoreIndex {
            spec,
            keys,
            entries: BTreeMap::new(),
            null_key,
        })
    }

    /// Applies one committed chunk; `rows` are its rows encoded whole.
    pub fn apply(&mut self, chunk: &StreamChunk, rows: &Rows) -> Result<()> {
        let columns: Vec<ArrayRef> = self
            .spec
            .columns
            .iter()
            .map(|&c| chunk.columns()[c].clone())
            .collect();
        let keys = self.keys.convert_columns(&columns)?;
        for (i, op) in chunk.ops.iter().enumerate() {
            let delta = if *op == Op::Insert { 1 } else { -1 };
            let key = keys.row(i);
            let counts = match self.entries.get_mut(key.as_ref()) {
                Some(c) => c,
                None => self.entries.entry(key.as_ref().into()).or_default(),
            };
            let row = rows.row(i);
            let n = match counts.get_mut(row.as_ref()) {
                Some(n) => n,
                None => counts.entry(row.as_ref().into()).or_insert(0),
            };
            *n += delta;
            if *n == 0 {
                counts.remove(row.as_ref());
                if counts.is_empty() {
                    self.entries.remove(key.as_ref());
                }
            }
        }
        Ok(())
    }

    /// The encoded rows matching `range`, each repeated by its multiplicity.
    pub fn lookup(&self, range: &KeyRange) -> Result<Vec<Arc<[u8]>>> {
        let mut out = Vec::new();
        let mut take = |counts: &RowCounts| {
            for (row, n) in counts {
                for _ in 0..(*n).max(0) {
                    out.push(row.clone());
                }
            }
        };
        match range {
            KeyRange::Point(values) => {
                if values.len() != self.spec.columns.len() || values.iter().any(|v| v.is_null(0)) {
                    return Ok(vec![]);
                }
                let key = self.keys.convert_columns(values)?;
                if let Some(counts) = self.entries.get(key.row(0).as_ref()) {
                    take(counts);
                }
            }
            KeyRange::Range { lower, upper } => {
                if self.spec.columns.len() != 1 {
                    return Err(ExecError::Internal(format!(
                        "range lookup on the multi-column index {}",
                        self.spec.name
                    )));
                }
                let lower = match self.bound(lower)? {
                    Bound::Unbounded => Bound::Excluded(self.null_key.clone()),
                    b => b,
                };
                let upper = self.bound(upper)?;
                if !bounds_ordered(&lower, &upper) {
                    return Ok(vec![]);
                }
                let range = (
                    lower.as_ref().map(|b| b.as_ref()),
                    upper.as_ref().map(|b| b.as_ref()),
                );
                for (_, counts) in self.entries.range::<[u8], _>(range) {
                    take(counts);
                }
            }
        }
        Ok(out)
    }

    fn bound(&self, b: &Bound<ArrayRef>) -> Result<Bound<Box<[u8]>>> {
        let encode = |v: &ArrayRef| -> Result<Box<[u8]>> {
            Ok(self
                .keys
                .convert_columns(std::slice::from_ref(v))?
                .row(0)
                .as_ref()
                .into())
        };
        Ok(match b {
            Bound::Included(v) => Bound::Included(encode(v)?),
            Bound::Excluded(v) => Bound::Excluded(encode(v)?),
            Bound::Unbounded => Bound::Unbounded,
        })
    }
}

/// False when the range is empty (BTreeMap::range panics on an inverted range).
fn bounds_ordered(lower: &Bound<Box<[u8]>>, upper: &Bound<Box<[u8]>>) -> bool {
    match (lower, upper) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        (Bound::Included(l), Bound::Included(u)) => l <= u,
        (Bound::Included(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u))
        | (Bound::Excluded(l), Bound::Excluded(u)) => l < u,
    }
}

/// Decodes rows encoded by `codec` into a batch of `schema`.
pub(crate) fn decode_rows(
    codec: &RowConverter,
    schema: &SchemaRef,
    rows: &[Arc<[u8]>],
) -> Result<RecordBatch> {
    let parser = codec.parser();
    let columns = codec.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]))
    }

    fn chunk(ops: Vec<Op>, k: Vec<Option<i64>>, s: Vec<&str>) -> StreamChunk {
        let b = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(k)),
                Arc::new(StringArray::from(s)),
            ],
        )
        .unwrap();
        StreamChunk::new(ops, b)
    }

    fn int(v: i64) -> ArrayRef {
        Arc::new(Int64Array::from(vec![v]))
    }

    fn codec() -> RowConverter {
        RowConverter::new(vec![
            SortField::new(DataType::Int64),
            SortField::new(DataType::Utf8),
        ])
        .unwrap()
    }

    fn apply(index: &mut StoreIndex, c: &StreamChunk) {
        let rows = codec().convert_columns(c.columns()).unwrap();
        index.apply(c, &rows).unwrap();
    }

    fn keys_of(index: &StoreIndex, range: KeyRange) -> Vec<i64> {
        let rows = index.lookup(&range).unwrap();
        let batch = decode_rows(&codec(), &schema(), &rows).unwrap();
        let mut k: Vec<i64> = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec();
        k.sort();
        k
    }

    #[test]
    fn points_and_ranges_follow_inserts_and_deletes() {
        let spec = IndexSpec {
            name: "i".into(),
            columns: vec![0],
        };
        let mut index = StoreIndex::new(spec, &schema()).unwrap();
        let ins = vec![Op::Insert; 5];
        apply(
            &mut index,
            &chunk(
                ins,
                vec![Some(-5), Some(1), Some(1), Some(7), None],
                vec!["a", "b", "b", "c", "n"],
            ),
        );
        assert_eq!(keys_of(&index, KeyRange::Point(vec![int(1)])), vec![1, 1]);
        assert_eq!(
            keys_of(&index, KeyRange::Point(vec![int(2)])),
            Vec::<i64>::new()
        );
        let below_2 = KeyRange::Range {
            lower: Bound::Unbounded,
            upper: Bound::Excluded(int(2)),
        };
        // NULL keys never satisfy a comparison; negative numbers sort below positive.
        assert_eq!(keys_of(&index, below_2.clone()), vec![-5, 1, 1]);
        let from_1 = KeyRange::Range {
            lower: Bound::Included(int(1)),
            upper: Bound::Unbounded,
        };
        assert_eq!(keys_of(&index, from_1.clone()), vec![1, 1, 7]);
        let inverted = KeyRange::Range {
            lower: Bound::Included(int(9)),
            upper: Bound::Included(int(3)),
        };
        assert_eq!(keys_of(&index, inverted), Vec::<i64>::new());
        apply(
            &mut index,
            &chunk(
                vec![Op::Delete, Op::Delete],
                vec![Some(1), Some(7)],
                vec!["b", "c"],
            ),
        );
        assert_eq!(keys_of(&index, KeyRange::Point(vec![int(1)])), vec![1]);
        assert_eq!(keys_of(&index, from_1), vec![1]);
        assert_eq!(keys_of(&index, below_2), vec![-5, 1]);
    }
}
