//! TopN: `ORDER BY ... LIMIT n OFFSET m` and `ROW_NUMBER()` / `RANK() OVER (PARTITION
//! BY ... ORDER BY ...)` between bounds, with retraction.
//!
//! Input columns are `[row..., partition keys..., sort keys...]` (a projection before
//! the exchange computes them); rows arrive hash-exchanged on the partition keys (or on
//! one actor without PARTITION BY). Each partition keeps *every* row, ordered by its
//! sort key bytes (Arrow's row format with the ORDER BY's directions, so byte order is
//! the SQL order) and then by the row itself, so ties always break the same way. Keeping
//! all rows is what lets a delete in the top refill from below without re-reading the
//! input.
//!
//! Output is emitted at barriers, like an aggregation's: for each partition changed in
//! the epoch, the difference between the top it last emitted and the top now (with the
//! row number as part of each row when it is selected, so a row whose rank moved is
//! retracted and inserted again).

use crate::barrier::{Barrier, Epoch};
use crate::chunk::{Op, StreamChunk};
use crate::error::Result;
use crate::operator::Operator;
use ahash::AHashMap as HashMap;
use arrow::array::{ArrayRef, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_storage::state_snapshot::{DeltaData, StateDelta};
use weir_storage::state_table::StateValue;
use weir_storage::{KeyGroupRange, StateBackend, StateTable};

#[derive(Debug, Clone)]
pub struct TopNSpec {
    pub uid: String,
    pub row_types: Vec<DataType>,
    pub partition_types: Vec<DataType>,
    pub sort_fields: Vec<(DataType, SortOptions)>,
    pub offset: usize,
    pub limit: usize,
    /// Append the rank (ROW_NUMBER() / RANK() forms); `offset` and `limit` then select
    /// ranks `offset + 1 ..= offset + limit`.
    pub ranking: Option<Ranking>,
    pub output_schema: SchemaRef,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// 1, 2, 3, ... in order (ties broken by the row).
    RowNumber,
    /// 1 + the rows ordered strictly before: ties share a rank, and all of them are in.
    Rank,
}

impl TopNSpec {
    pub fn state_schema(&self) -> String {
        let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
        format!(
            "topn partition({}) order({}) rows({}) {:?}",
            list(&mut self.partition_types.iter().map(|t| t.to_string())),
            list(&mut self.sort_fields.iter().map(|(t, o)| format!("{t} {o:?}"))),
            list(&mut self.row_types.iter().map(|t| t.to_string())),
            self.ranking
        )
    }
}

/// Every row of one partition: (sort key, row) -> copies.
#[derive(Debug, Default)]
pub struct Partition {
    rows: BTreeMap<(Vec<u8>, Vec<u8>), i64>,
}

impl StateValue for Partition {
    fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        buf.extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
        for ((sort, row), n) in &self.rows {
            for part in [sort, row] {
                buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
                buf.extend_from_slice(part);
            }
            buf.extend_from_slice(&n.to_le_bytes());
        }
        buf
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let s = bytes.get(at..at + n)?;
            at += n;
            Some(s)
        };
        let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let mut rows = BTreeMap::new();
        for _ in 0..count {
            let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let sort = take(len)?.to_vec();
            let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let row = take(len)?.to_vec();
            let n = i64::from_le_bytes(take(8)?.try_into().ok()?);
            rows.insert((sort, row), n);
        }
        Some(Partition { rows })
    }
}

pub struct TopNOperator {
    spec: TopNSpec,
    row_converter: RowConverter,
    partition_converter: Option<RowConverter>,
    sort_converter: RowConverter,
    state: StateTable<Partition>,
    /// The top each partition changed in this epoch showed before its first change.
    epoch_before: HashMap<Vec<u8>, Vec<(Vec<u8>, u64)>>,
}

impl TopNOperator {
    pub fn new(
        spec: TopNSpec,
        backend: Arc<dyn StateBackend>,
        max_parallelism: u32,
        key_groups: KeyGroupRange,
        restored: bool,
        reemit: bool,
        track_changes: bool,
    ) -> Result<Self> {
        let fields = |types: &[DataType]| types.iter().map(|t| SortField::new(t.clone())).collect();
        let row_converter = RowConverter::new(fields(&spec.row_types))?;
        let partition_converter = if spec.partition_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(fields(&spec.partition_types))?)
        };
        let sort_converter = RowConverter::new(
            spec.sort_fields
                .iter()
                .map(|(t, o)| SortField::new_with_options(t.clone(), *o))
                .collect(),
        )?;
        let mut state = StateTable::new(&spec.uid, max_parallelism, backend);
        state.set_track_changes(track_changes);
        if restored {
            state.load(key_groups.start, key_groups.end)?;
        }
        let mut epoch_before = HashMap::new();
        if restored && reemit {
            for k in state.keys() {
                epoch_before.insert(k.clone(), Vec::new());
            }
        }
        Ok(Self {
            spec,
            row_converter,
            partition_converter,
            sort_converter,
            state,
            epoch_before,
        })
    }

    /// The rows shown for a partition, with their rank (0 when the output has none).
    fn top(&self, partition: Option<&Partition>) -> Vec<(Vec<u8>, u64)> {
        let Some(p) = partition else {
            return Vec::new();
        };
        let first = self.spec.offset as u64 + 1;
        let last = first.saturating_add(self.spec.limit as u64) - 1;
        let mut out = Vec::new();
        let mut position = 0u64;
        let mut rank = 0u64;
        let mut previous_sort: Option<&[u8]> = None;
        for ((sort, row), n) in &p.rows {
            for _ in 0..(*n).max(0) {
                position += 1;
                let r = match self.spec.ranking {
                    Some(Ranking::Rank) => {
                        if previous_sort != Some(sort.as_slice()) {
                            rank = position;
                        }
                        rank
                    }
                    _ => position,
                };
                previous_sort = Some(sort);
                if r > last {
                    return out;
                }
                if r >= first {
                    let tag = if self.spec.ranking.is_some() { r } else { 0 };
                    out.push((row.clone(), tag));
                }
            }
        }
        out
    }

    fn emit_changes(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        let mut ops = Vec::new();
        let mut rows: Vec<Vec<u8>> = Vec::new();
        let mut numbers: Vec<u64> = Vec::new();
        let changed: Vec<_> = self.epoch_before.drain().collect();
        for (key, before) in changed {
            // Rows with a negative count (a delete ahead of its insert, possible across
            // a barrier in at-least-once mode) are not shown until the insert arrives.
            let after = self.top(self.state.get(&key));
            if self.state.get(&key).is_some_and(|p| p.rows.is_empty()) {
                self.state.remove(&key);
            }
            // With a rank column, a row is (row, rank); without, rows are a multiset.
            let (mut before, mut after) = (before, after);
            before.sort();
            after.sort();
            let (mut i, mut j) = (0, 0);
            while i < before.len() || j < after.len() {
                let ord = match (before.get(i), after.get(j)) {
                    (Some(b), Some(a)) => b.cmp(a),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    _ => std::cmp::Ordering::Greater,
                };
                match ord {
                    std::cmp::Ordering::Equal => {
                        i += 1;
                        j += 1;
                    }
                    std::cmp::Ordering::Less => {
                        ops.push(Op::Delete);
                        rows.push(before[i].0.clone());
                        numbers.push(before[i].1);
                        i += 1;
                    }
                    std::cmp::Ordering::Greater => {
                        ops.push(Op::Insert);
                        rows.push(after[j].0.clone());
                        numbers.push(after[j].1);
                        j += 1;
                    }
                }
            }
        }
        self.state.flush()?;
        if ops.is_empty() {
            return Ok(());
        }
        let parser = self.row_converter.parser();
        let mut columns: Vec<ArrayRef> = if self.spec.row_types.is_empty() {
            vec![]
        } else {
            self.row_converter
                .convert_rows(rows.iter().map(|r| parser.parse(r)))?
        };
        if self.spec.ranking.is_some() {
            columns.push(Arc::new(UInt64Array::from(numbers)));
        }
        out.push(StreamChunk::from_columns(
            ops,
            self.spec.output_schema.clone(),
            columns,
        )?);
        Ok(())
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> &str {
        "TopN"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let w = self.spec.row_types.len();
        let p = self.spec.partition_types.len();
        let cols = chunk.columns();
        let rows = (w > 0)
            .then(|| self.row_converter.convert_columns(&cols[..w]))
            .transpose()?;
        let parts = self
            .partition_converter
            .as_ref()
            .map(|c| c.convert_columns(&cols[w..w + p]))
            .transpose()?;
        let sorts = self.sort_converter.convert_columns(&cols[w + p..])?;
        for (i, op) in chunk.ops.iter().enumerate() {
            let key: Vec<u8> = parts
                .as_ref()
                .map(|r| r.row(i).as_ref().to_vec())
                .unwrap_or_default();
            if !self.epoch_before.contains_key(&key) {
                let before = self.top(self.state.get(&key));
                self.epoch_before.insert(key.clone(), before);
            }
            let row = rows
                .as_ref()
                .map(|r| r.row(i).as_ref().to_vec())
                .unwrap_or_default();
            let entry_key = (sorts.row(i).as_ref().to_vec(), row);
            let partition = self.state.get_or_insert_with(&key, Partition::default);
            // A row's delete may arrive before its insert (through another upstream
            // actor, within the epoch): the count is negative until the insert comes.
            match partition.rows.entry(entry_key) {
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    *e.get_mut() += op.sign();
                    if *e.get() == 0 {
                        e.remove();
                    }
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(op.sign());
                }
            }
        }
        Ok(())
    }

    fn on_barrier(&mut self, _barrier: &Barrier, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn on_checkpoint_cut(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        Ok(vec![StateDelta {
            uid: self.spec.uid.clone(),
            data: DeltaData::Keyed(self.state.take_checkpoint_delta()),
        }])
    }
}
