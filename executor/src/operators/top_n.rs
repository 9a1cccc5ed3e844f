//! TopN: `ORDER BY ... LIMIT n OFFSET m` and `ROW_NUMBER()` / `RANK() OVER (PARTITION
//! BY ... ORDER BY ...)` between bounds, with retraction.
//!
//! A [`PartitionedOperator`] (every row of each partition kept in order, the difference
//! emitted at barriers) whose partitions show their top rows: with the rank as an extra
//! column in the ROW_NUMBER() / RANK() forms, so a row whose rank moved is retracted
//! and inserted again.

use crate::error::Result;
use crate::operator::Operator;
use crate::operators::partition_rows::{
    Partition, PartitionLayout, PartitionedOperator, PartitionedSpec, Showing, Shown, StateRestore,
};
use crate::operators::spec::BuildContext;
use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::DataType;
use arrow::row::RowConverter;
use std::sync::Arc;
use weir_storage::StateBackend;

#[derive(Debug, Clone)]
pub struct TopNSpec {
    pub layout: PartitionLayout,
    pub offset: usize,
    pub limit: usize,
    /// Append the rank (ROW_NUMBER() / RANK() forms); `offset` and `limit` then select
    /// ranks `offset + 1 ..= offset + limit`.
    pub ranking: Option<Ranking>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// 1, 2, 3, ... in order (ties broken by the row).
    RowNumber,
    /// 1 + the rows ordered strictly before: ties share a rank, and all of them are in.
    Rank,
}

impl PartitionedSpec for TopNSpec {
    fn kind(&self) -> &'static str {
        "TopN"
    }

    fn describe(&self) -> String {
        format!(
            "TopN: partition keys={} order keys={} offset={} limit={}{} uid={} state=StateTable(key_group, partition -> every row in order)",
            self.layout.partition_types.len(),
            self.layout.sort_fields.len(),
            self.offset,
            self.limit,
            self.ranking
                .map(|r| format!(" with {r:?}"))
                .unwrap_or_default(),
            self.layout.uid
        )
    }

    fn layout(&self) -> &PartitionLayout {
        &self.layout
    }

    fn layout_mut(&mut self) -> &mut PartitionLayout {
        &mut self.layout
    }

    fn state_schema(&self) -> String {
        format!("topn {} {:?}", self.layout.describe_types(), self.ranking)
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(top_n_operator(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

/// The top of a partition.
pub struct Top {
    first: u64,
    last: u64,
    ranking: Option<Ranking>,
}

impl Shown for Top {
    fn name(&self) -> &str {
        "TopN"
    }

    fn extra_types(&self) -> Vec<DataType> {
        self.ranking.map(|_| DataType::UInt64).into_iter().collect()
    }

    fn leading_rows_shown(&self) -> Option<(u64, bool)> {
        Some((self.last, self.ranking == Some(Ranking::Rank)))
    }

    fn shown(&self, partition: Option<&Partition>, _rows: &RowConverter) -> Result<Showing> {
        let mut rows = Vec::new();
        let mut ranks = Vec::new();
        let mut position = 0u64;
        let mut rank = 0u64;
        let mut previous_sort: Option<&[u8]> = None;
        for (sort, row) in partition.into_iter().flat_map(|p| p.present()) {
            position += 1;
            let r = match self.ranking {
                Some(Ranking::Rank) => {
                    if previous_sort != Some(sort) {
                        rank = position;
                    }
                    rank
                }
                _ => position,
            };
            previous_sort = Some(sort);
            if r > self.last {
                break;
            }
            if r >= self.first {
                rows.push(row.to_vec());
                ranks.push(r);
            }
        }
        let extras: Vec<ArrayRef> = match self.ranking {
            Some(_) => vec![Arc::new(UInt64Array::from(ranks))],
            None => vec![],
        };
        Ok(Showing { rows, extras })
    }
}

pub type TopNOperator = PartitionedOperator<Top>;

pub fn top_n_operator(
    spec: TopNSpec,
    backend: Arc<dyn StateBackend>,
    restore: StateRestore,
) -> Result<TopNOperator> {
    let first = spec.offset as u64 + 1;
    let top = Top {
        first,
        last: first.saturating_add(spec.limit as u64) - 1,
        ranking: spec.ranking,
    };
    PartitionedOperator::new(spec.layout, top, backend, restore)
}
