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
use crate::plain_rows::RowCodec;
use arrow::array::{ArrayRef, UInt64Array};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
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

    /// The top row alone, ranked 1 (RANK's ties at 1 all show).
    fn first_row_only(&self) -> Option<Vec<ScalarValue>> {
        match (self.first, self.last, self.ranking) {
            (1, 1, None) => Some(vec![]),
            (1, 1, Some(Ranking::RowNumber)) => Some(vec![ScalarValue::UInt64(Some(1))]),
            _ => None,
        }
    }

    fn shown(&self, partition: Option<&Partition>, _rows: &RowCodec) -> Result<Showing> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::Barrier;
    use crate::chunk::StreamChunk;
    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use arrow::compute::SortOptions;
    use arrow::datatypes::{Field, Int64Type, Schema, UInt64Type};
    use weir_storage::MemoryStateBackend;

    /// `ROW_NUMBER() OVER (PARTITION BY k ORDER BY t DESC) = 1` over rows `(k, t, v)`.
    fn top_one(append_only_input: bool) -> TopNOperator {
        top_one_on(
            append_only_input,
            MemoryStateBackend::new(),
            StateRestore::fresh(128),
        )
    }

    /// Its Top-1 path keeps short rows: `k` is the partition key, `t` the sort key.
    fn top_one_on(
        append_only_input: bool,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> TopNOperator {
        use crate::operators::partition_rows::RowSource;
        let sources = vec![RowSource::Partition(0), RowSource::Sort(0), RowSource::Row];
        top_one_with(append_only_input, sources, backend, restore)
    }

    /// `sources` empty: rows kept whole on every path, as before short rows.
    fn top_one_with(
        append_only_input: bool,
        row_sources: Vec<crate::operators::partition_rows::RowSource>,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> TopNOperator {
        let int = |n: &str| Field::new(n, DataType::Int64, true);
        let layout = PartitionLayout {
            uid: "v.topn.test".into(),
            row_types: vec![DataType::Int64; 3],
            partition_types: vec![DataType::Int64],
            sort_fields: vec![(
                DataType::Int64,
                SortOptions {
                    descending: true,
                    nulls_first: false,
                },
            )],
            output_schema: Arc::new(Schema::new(vec![
                int("k"),
                int("t"),
                int("v"),
                Field::new("rn", DataType::UInt64, true),
            ])),
            append_only_input,
            row_sources,
        };
        let spec = TopNSpec {
            layout,
            offset: 0,
            limit: 1,
            ranking: Some(Ranking::RowNumber),
        };
        top_n_operator(spec, backend, restore).unwrap()
    }

    fn chunk(rows: &[(i64, i64, i64)]) -> StreamChunk {
        let col = |f: fn(&(i64, i64, i64)) -> i64| {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(f))) as ArrayRef
        };
        let fields = ["k", "t", "v", "pk", "st"].map(|n| Field::new(n, DataType::Int64, true));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(fields.to_vec())),
            vec![
                col(|r| r.0),
                col(|r| r.1),
                col(|r| r.2),
                col(|r| r.0),
                col(|r| r.1),
            ],
        )
        .unwrap();
        StreamChunk::inserts(batch)
    }

    /// Each barrier's output as sorted (sign, k, t, v, rn).
    fn run(op: &mut TopNOperator, input: &[Vec<(i64, i64, i64)>]) -> Vec<Vec<[i64; 5]>> {
        let mut epochs = Vec::new();
        for (e, rows) in input.iter().enumerate() {
            let mut out = Vec::new();
            op.process_chunk(chunk(rows), &mut out).unwrap();
            op.on_barrier(&Barrier::plain(e as u64 + 1), &mut out)
                .unwrap();
            let mut seen = Vec::new();
            for c in &out {
                let cols = c.columns();
                for i in 0..c.len() {
                    let int = |j: usize| cols[j].as_primitive::<Int64Type>().value(i);
                    let rn = cols[3].as_primitive::<UInt64Type>().value(i) as i64;
                    seen.push([c.ops[i].sign(), int(0), int(1), int(2), rn]);
                }
            }
            seen.sort();
            epochs.push(seen);
        }
        epochs
    }

    /// Epochs of rows (k, t, v): times mostly rising per key, some older and some
    /// tied (broken by the row).
    fn epochs(seed: i64, count: i64) -> Vec<Vec<(i64, i64, i64)>> {
        let mut x = seed;
        (0..count)
            .map(|e| {
                (0..50)
                    .map(|i| {
                        x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
                        (x % 13, e * 10 + (x / 13) % 15, (x / 195) % 4 + i % 2)
                    })
                    .collect()
            })
            .collect()
    }

    /// The operator restored from its own checkpoint, its view's rows to be emitted
    /// again (`reemit`: they were not checkpointed).
    fn restored_to_reemit(op: &mut TopNOperator, append_only_input: bool) -> TopNOperator {
        let backend = crate::operators::restored_backend(op.snapshot(1).unwrap());
        top_one_on(append_only_input, backend, reemitting())
    }

    fn reemitting() -> StateRestore {
        StateRestore {
            restored: true,
            reemit: true,
            ..StateRestore::tracked(128)
        }
    }

    /// State kept whole (the general path, or the Top-1 path before short rows) reads
    /// back into short rows, and short rows back into whole ones: after the restore,
    /// every pairing emits what the general path restored from itself does.
    #[test]
    fn state_moves_between_whole_and_short_rows() {
        let (before, after) = (epochs(5, 6), epochs(9, 6));
        let tracked = StateRestore::tracked(128);
        let written_by = |append_only: bool, sources| {
            let mut op = top_one_with(append_only, sources, MemoryStateBackend::new(), tracked);
            run(&mut op, &before);
            crate::operators::restored_backend(op.snapshot(1).unwrap())
        };
        use crate::operators::partition_rows::RowSource;
        let short = vec![RowSource::Partition(0), RowSource::Sort(0), RowSource::Row];
        let reference = run(
            &mut top_one_on(false, written_by(false, short.clone()), reemitting()),
            &after,
        );
        for (writer_append_only, writer_sources, reader_append_only) in [
            (false, short.clone(), true),
            (true, vec![], true),
            (true, short.clone(), false),
            (true, short.clone(), true),
        ] {
            let backend = written_by(writer_append_only, writer_sources.clone());
            let mut reader = top_one_on(reader_append_only, backend, reemitting());
            assert_eq!(reader.keeps_short_rows(), reader_append_only);
            assert_eq!(
                run(&mut reader, &after),
                reference,
                "written append-only {writer_append_only} with sources {writer_sources:?}, \
                 read append-only {reader_append_only}"
            );
        }
        let mut short_writer = top_one(true);
        run(&mut short_writer, &before);
        assert!(short_writer.keeps_short_rows());
        assert!(!top_one_with(true, vec![], MemoryStateBackend::new(), tracked).keeps_short_rows());
    }

    /// The backend as a build before the plain row layout wrote it: each partition's
    /// rows (whole: three columns, short: one) in arrow's row format.
    fn as_written_before_plain_rows(
        deltas: Vec<weir_storage::state_snapshot::StateDelta>,
    ) -> Arc<MemoryStateBackend> {
        use crate::plain_rows::ordered_converter;
        use weir_storage::keyed_entries::KeyedEntries;
        use weir_storage::StateBackend as _;
        let to_arrow_rows = |bytes: &[u8]| {
            let (p, ordered) = Partition::decode_stored(bytes).unwrap();
            assert!(!ordered, "written in the plain layout");
            let types = vec![DataType::Int64; if p.is_short() { 1 } else { 3 }];
            let (plain, arrow) = (
                RowCodec::new(&types).unwrap(),
                ordered_converter(&types).unwrap(),
            );
            let old = p
                .map_rows(|rows| {
                    let rows = arrow.convert_columns(&plain.decode(rows)?)?;
                    let rows = (0..rows.num_rows()).map(|i| rows.row(i).data().to_vec());
                    Ok(rows.collect())
                })
                .unwrap();
            old.encode_as_before_codec_rows()
        };
        let backend = MemoryStateBackend::new();
        for delta in deltas {
            let entries = delta.data.into_keyed();
            let old = KeyedEntries::from_entries(
                entries
                    .iter()
                    .map(|(kg, k, v)| (kg, k.to_vec(), v.map(to_arrow_rows))),
            );
            backend
                .write(weir_storage::WriteBatch::restoring(&delta.uid, &old))
                .unwrap();
        }
        backend
    }

    /// Partitions written before the plain row layout (rows in arrow's row format)
    /// restore to what the same state in the plain layout does, on the general path
    /// and on the Top-1 path with short rows.
    #[test]
    fn state_written_before_plain_rows_restores_the_same() {
        let tracked = StateRestore::tracked(128);
        let (before, after) = (epochs(3, 6), epochs(17, 6));
        for append_only in [false, true] {
            let mut op = top_one_on(append_only, MemoryStateBackend::new(), tracked);
            run(&mut op, &before);
            assert_eq!(op.keeps_short_rows(), append_only);
            let now = op.snapshot(1).unwrap();
            let old = as_written_before_plain_rows(now.clone());
            let plain = crate::operators::restored_backend(now);
            let expected = run(&mut top_one_on(append_only, plain, reemitting()), &after);
            let got = run(&mut top_one_on(append_only, old, reemitting()), &after);
            assert_eq!(got, expected, "append-only {append_only}");
            assert_eq!(expected[0].len(), 13, "every key's first row is shown");
        }
    }

    /// State written before the plain row layout, restored where downstream kept the
    /// view's rows (no re-emit). A partition whose tie now breaks the other way is
    /// corrected at the first barrier, every delete of a row downstream holds; it is
    /// checkpointed converted, so a restore from that checkpoint corrects nothing again.
    #[test]
    fn ties_of_state_written_before_plain_rows_are_corrected_downstream() {
        use std::collections::BTreeMap;
        let tracked = StateRestore::tracked(128);
        let kept = StateRestore {
            restored: true,
            reemit: false,
            ..tracked
        };
        let apply = |view: &mut BTreeMap<[i64; 4], i64>, epochs: &[Vec<[i64; 5]>]| {
            for [sign, row @ ..] in epochs.iter().flatten() {
                let n = view.entry(*row).or_insert(0);
                *n += sign;
                assert!(*n >= 0, "{row:?} deleted, downstream does not hold it");
                view.retain(|_, n| *n > 0);
            }
        };
        // Tied on t: arrow's row format orders v = -1 < 1 < 256, their little-endian
        // bytes 256 < 1 < -1.
        let ties = vec![(1, 5, 1), (1, 5, -1), (1, 5, 256), (2, 5, 3)];
        let mut op = top_one_on(false, MemoryStateBackend::new(), tracked);
        run(&mut op, &[ties]);
        let backend = as_written_before_plain_rows(op.snapshot(1).unwrap());
        // What the build before showed: each key's first row in arrow's order.
        let mut view = BTreeMap::from([([1, 5, -1, 1], 1), ([2, 5, 3, 1], 1)]);
        let mut restored = top_one_on(false, backend.clone(), kept);
        apply(&mut view, &run(&mut restored, &[vec![(2, 6, 7)]]));
        let rows: Vec<[i64; 4]> = view.keys().copied().collect();
        assert_eq!(rows, vec![[1, 5, 256, 1], [2, 6, 7, 1]]);
        for delta in restored.snapshot(2).unwrap() {
            let batch = weir_storage::WriteBatch::restoring(&delta.uid, &delta.data.into_keyed());
            weir_storage::StateBackend::write(backend.as_ref(), batch).unwrap();
        }
        let mut again = top_one_on(false, backend, kept);
        let out = run(&mut again, &[vec![(3, 1, 1)]]);
        assert_eq!(out, vec![vec![[1, 3, 1, 1, 1]]], "only the new key");
    }

    #[test]
    fn top_one_restored_to_reemit_emits_what_the_general_top_n_does() {
        let tracked = StateRestore::tracked(128);
        let (before, after) = (epochs(11, 6), epochs(23, 6));
        let mut outputs = Vec::new();
        for append_only in [true, false] {
            let mut op = top_one_on(append_only, MemoryStateBackend::new(), tracked);
            run(&mut op, &before);
            let mut restored = restored_to_reemit(&mut op, append_only);
            assert_eq!(restored.follows_first_rows(), append_only);
            outputs.push(run(&mut restored, &after));
        }
        assert_eq!(outputs[0], outputs[1]);
        let first = &outputs[0][0];
        assert!(first.iter().all(|r| r[0] == 1), "nothing seen is retracted");
        assert_eq!(first.len(), 13, "every key's first row, once");
        assert!(outputs[0][1..].iter().any(|e| e.iter().any(|r| r[0] < 0)));
    }

    #[test]
    fn top_one_over_inserts_emits_what_the_general_top_n_does() {
        let input = epochs(7, 20);
        let fast = run(&mut top_one(true), &input);
        assert!(
            top_one(true).follows_first_rows(),
            "the Top-1 path is taken"
        );
        assert!(!top_one(false).follows_first_rows());
        let general = run(&mut top_one(false), &input);
        assert_eq!(fast, general);
        assert!(
            fast.iter().all(|e| !e.is_empty()),
            "every epoch changes a top"
        );
        assert!(
            fast[1..].iter().any(|e| e.iter().any(|r| r[0] < 0)),
            "tops are replaced"
        );
    }
}
