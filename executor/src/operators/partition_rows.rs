//! The machinery Top-N and OVER windows share: every row of a partition kept in order,
//! and the rows a partition shows recomputed at barriers for the partitions an epoch
//! changed, emitted as the difference from what they showed before.
//!
//! Input columns are `[row..., partition keys..., sort keys...]` (a projection before
//! the exchange computes them); rows arrive hash-exchanged on the partition keys (or on
//! one actor without PARTITION BY). Each partition keeps *every* row, ordered by its
//! sort key bytes (Arrow's row format with the ORDER BY's directions, so byte order is
//! the SQL order) and then by the row itself, so ties always break the same way. Keeping
//! all rows is what lets a delete in a Top-N refill from below, and what a window
//! function over the partition is computed from.
//!
//! What a partition *shows* is up to a [`Shown`]: the rows in the top with their rank
//! (Top-N), or every row with its window functions' values (OVER). Each shown row is a
//! pair (row bytes, extra bytes): the extra columns (rank, window values) in Arrow's row
//! format, so a row whose rank or window value changed is retracted and inserted again.
//!
//! Rows themselves (the payload beside the sort key) are kept in a [`RowCodec`]'s plain
//! layout: they need equality and one fixed order, not SQL's, and decoding them at
//! every barrier is most of what an operator that shows many rows does there.

use crate::barrier::{Barrier, Epoch, Watermark};
use crate::chunk::{Op, StreamChunk};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use crate::operators::spec::{BuildContext, StreamSpec, WatermarkFlow};
use crate::plain_rows::{ordered_converter, EncodedRows, RowCodec};
use crate::row_groups::RowGroups;
use ahash::AHashMap as HashMap;
use arrow::array::{Array, ArrayRef};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use std::sync::Arc;
use weir_storage::state_snapshot::StateDelta;
use weir_storage::{StateBackend, StateTable};

pub use super::partition::Partition;

/// One shown row: (row bytes, extra column bytes).
pub type ShownRow = (Vec<u8>, Vec<u8>);

/// What a partition shows: its rows (row bytes) and, per extra column, one value for
/// each of them.
pub struct Showing {
    pub rows: Vec<Vec<u8>>,
    pub extras: Vec<ArrayRef>,
}

impl Showing {
    fn same_as(&self, other: &Showing) -> bool {
        self.rows == other.rows
            && self.extras.len() == other.extras.len()
            && (self.extras.iter())
                .zip(&other.extras)
                .all(|(a, b)| a.to_data() == b.to_data())
    }
}

/// What a partition shows.
pub trait Shown: Send {
    /// The operator's name in plans and metrics.
    fn name(&self) -> &str;
    /// Types of the extra columns each shown row carries after the row's own.
    fn extra_types(&self) -> Vec<DataType>;
    /// The rows a partition shows; `rows` decodes row bytes.
    fn shown(&self, partition: Option<&Partition>, rows: &RowCodec) -> Result<Showing>;
    /// Over an append-only input, how many leading rows of a partition can ever be
    /// shown (and whether rows tied with the last of them can too): the rest are
    /// dropped. `None`: every row matters (OVER windows).
    fn leading_rows_shown(&self) -> Option<(u64, bool)> {
        None
    }
    /// Over an append-only input, whether a partition shows its first row only (a
    /// Top-1: `ROW_NUMBER() = 1`, `LIMIT 1`), and then the values of the extra columns
    /// shown with it. The operator then follows each partition's first row instead of
    /// imaging whole partitions (see `PartitionedOperator::add_first_rows`).
    fn first_row_only(&self) -> Option<Vec<ScalarValue>> {
        None
    }
}

/// Layout of a partitioned operator's input and state.
#[derive(Debug, Clone)]
pub struct PartitionLayout {
    pub uid: String,
    pub row_types: Vec<DataType>,
    pub partition_types: Vec<DataType>,
    pub sort_fields: Vec<(DataType, SortOptions)>,
    pub output_schema: SchemaRef,
    /// Nothing upstream can delete (`append_only::mark`): a Top-N keeps only the rows
    /// that can ever reach its top, as Flink's `AppendOnlyTopNFunction` does.
    pub append_only_input: bool,
    /// Per row column, where else its value is (empty: nowhere else). The Top-1 path
    /// keeps its rows short, without these columns (see [`ShortRows`]).
    pub row_sources: Vec<RowSource>,
}

/// Where a row column's value is besides the row: a PARTITION BY or ORDER BY that is
/// the column itself holds it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowSource {
    Row,
    Partition(usize),
    Sort(usize),
}

impl PartitionLayout {
    pub fn describe_types(&self) -> String {
        let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
        format!(
            "partition({}) order({}) rows({})",
            list(&mut self.partition_types.iter().map(|t| t.to_string())),
            list(&mut self.sort_fields.iter().map(|(t, o)| format!("{t} {o:?}"))),
            list(&mut self.row_types.iter().map(|t| t.to_string())),
        )
    }
}

pub use crate::operators::spec::StateRestore;

/// The spec of an operator over [`PartitionedOperator`] (Top-N, OVER windows): what
/// differs between them. The rest of [`StreamSpec`] they share: both keep every row
/// of a partition under `layout.uid`, and a new row can change what older rows show,
/// so their output is never append-only, watermarks stop at them, and the rows they
/// show are rebuilt from that state on restore.
pub trait PartitionedSpec {
    fn kind(&self) -> &'static str;
    fn describe(&self) -> String;
    fn layout(&self) -> &PartitionLayout;
    fn layout_mut(&mut self) -> &mut PartitionLayout;
    /// What the state holds (savepoints compare it).
    fn state_schema(&self) -> String;
    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>>;
}

impl<T: PartitionedSpec> StreamSpec for T {
    fn kind(&self) -> &'static str {
        PartitionedSpec::kind(self)
    }

    fn describe(&self) -> String {
        PartitionedSpec::describe(self)
    }

    fn uid(&self) -> Option<&str> {
        Some(&self.layout().uid)
    }

    fn uid_mut(&mut self) -> Option<&mut String> {
        Some(&mut self.layout_mut().uid)
    }

    fn state_layouts(&self) -> Vec<(String, String)> {
        vec![(self.layout().uid.clone(), self.state_schema())]
    }

    fn mark_append_only(&mut self, input_append_only: bool) -> bool {
        self.layout_mut().append_only_input = input_append_only;
        false
    }

    fn watermarks(&self) -> WatermarkFlow {
        WatermarkFlow::Stops
    }

    fn rederives_rows(&self) -> bool {
        true
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        PartitionedSpec::build(self, ctx)
    }
}

pub struct PartitionedOperator<S: Shown> {
    layout: PartitionLayout,
    shown: S,
    row_codec: RowCodec,
    partition_converter: Option<RowConverter>,
    sort_converter: RowConverter,
    extra_converter: Option<RowConverter>,
    state: StateTable<Partition>,
    /// What each partition changed in this epoch showed before its first change.
    epoch_before: HashMap<Vec<u8>, Vec<ShownRow>>,
    /// The Top-1 path's `epoch_before`: each changed partition as it was before its
    /// first change, moved out of the state (its row is retracted at the barrier).
    /// A list, not a map: the state table says which change is a key's first since
    /// the last barrier, so each key is here once without a lookup.
    first_before: Vec<(Vec<u8>, Option<Partition>)>,
    /// The Top-1 path restored with its output not checkpointed: the next barrier
    /// emits every partition's first row, and retracts nothing.
    first_reemit: bool,
    /// [`Shown::first_row_only`] over an append-only input: the extra columns' values.
    first_only: Option<Vec<ScalarValue>>,
    /// How rows are kept short, when the layout allows it; the Top-1 path keeps them
    /// so (`first_only`), the general path reads restored short rows back whole.
    short: Option<ShortRows>,
}

/// A row without the columns its partition key and sort key already hold. q18's
/// dedup (`PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC, extra
/// DESC`) kept five of a bid's seven columns twice, `extra` the longest: a third of
/// its state and of its checkpoints.
struct ShortRows {
    /// The row columns a short row keeps, in order.
    kept: Vec<usize>,
    codec: RowCodec,
    sources: Vec<RowSource>,
}

impl ShortRows {
    /// `None` when every column is kept (no PARTITION BY or ORDER BY is a column).
    fn new(layout: &PartitionLayout) -> Result<Option<Self>> {
        let sources = &layout.row_sources;
        if sources.iter().all(|s| *s == RowSource::Row) {
            return Ok(None);
        }
        let kept: Vec<usize> = (0..sources.len())
            .filter(|&c| sources[c] == RowSource::Row)
            .collect();
        let types: Vec<DataType> = kept.iter().map(|&c| layout.row_types[c].clone()).collect();
        Ok(Some(Self {
            kept,
            codec: RowCodec::new(&types)?,
            sources: sources.clone(),
        }))
    }

    /// The short rows of a chunk's rows.
    fn of_columns(&self, row_columns: &[ArrayRef]) -> Result<Option<EncodedRows>> {
        if self.kept.is_empty() {
            return Ok(None);
        }
        let kept: Vec<ArrayRef> = self.kept.iter().map(|&c| row_columns[c].clone()).collect();
        Ok(Some(self.codec.encode(&kept)?))
    }

    /// Whole rows as columns, from each row's (partition key, sort key, short row).
    fn columns(
        &self,
        converters: (Option<&RowConverter>, &RowConverter),
        entries: &[(&[u8], &[u8], &[u8])],
    ) -> Result<Vec<ArrayRef>> {
        let (partition, sort) = converters;
        let decode = |c: &RowConverter, rows: &mut dyn Iterator<Item = &[u8]>| {
            let parser = c.parser();
            c.convert_rows(rows.map(|r| parser.parse(r)))
        };
        let partition = partition
            .map(|c| decode(c, &mut entries.iter().map(|e| e.0)))
            .transpose()?;
        let sort = decode(sort, &mut entries.iter().map(|e| e.1))?;
        let kept = self.codec.decode(entries.iter().map(|e| e.2))?;
        let mut kept = kept.into_iter();
        self.sources
            .iter()
            .map(|s| match s {
                RowSource::Row => kept.next(),
                RowSource::Partition(j) => partition.as_ref().map(|p| p[*j].clone()),
                RowSource::Sort(k) => Some(sort[*k].clone()),
            })
            .map(|c| c.ok_or_else(|| ExecError::Internal("a short row's column is missing".into())))
            .collect()
    }

    /// A partition's first row, whole (`whole` encodes it), as a short one.
    fn shorten(&self, whole: &RowCodec, sort: &[u8], row: &[u8]) -> Result<Partition> {
        let columns = whole.decode([row])?;
        let kept = self.of_columns(&columns)?;
        let row = kept.as_ref().map(|r| r.row(0)).unwrap_or_default();
        Ok(Partition::first(sort, row))
    }

    /// A short first row made whole again, from its partition's key.
    fn lengthen(
        &self,
        converters: (Option<&RowConverter>, &RowConverter),
        whole: &RowCodec,
        (key, sort, row): (&[u8], &[u8], &[u8]),
    ) -> Result<Partition> {
        let columns = self.columns(converters, &[(key, sort, row)])?;
        let row = whole.encode(&columns)?;
        Ok(Partition::only(sort, row.row(0)))
    }
}

fn fields(types: &[DataType]) -> Vec<SortField> {
    types.iter().map(|t| SortField::new(t.clone())).collect()
}

impl<S: Shown> PartitionedOperator<S> {
    pub fn new(
        layout: PartitionLayout,
        shown: S,
        backend: Arc<dyn StateBackend>,
        restore: StateRestore,
    ) -> Result<Self> {
        let row_codec = RowCodec::new(&layout.row_types)?;
        let partition_converter = if layout.partition_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(fields(&layout.partition_types))?)
        };
        let sort_converter = RowConverter::new(
            layout
                .sort_fields
                .iter()
                .map(|(t, o)| SortField::new_with_options(t.clone(), *o))
                .collect(),
        )?;
        let extra = shown.extra_types();
        let extra_converter = if extra.is_empty() {
            None
        } else {
            Some(RowConverter::new(fields(&extra))?)
        };
        let mut state = StateTable::new(&layout.uid, restore.max_parallelism, backend);
        state.set_track_changes(restore.track_changes);
        let first_only = shown.first_row_only().filter(|_| layout.append_only_input);
        let reemit = restore.restored && restore.reemit;
        let mut op = Self {
            first_reemit: reemit && first_only.is_some(),
            first_only,
            short: ShortRows::new(&layout)?,
            layout,
            shown,
            row_codec,
            partition_converter,
            sort_converter,
            extra_converter,
            state,
            epoch_before: HashMap::new(),
            first_before: Vec::new(),
        };
        if restore.restored {
            op.load_restored(&restore)?;
        }
        Ok(op)
    }

    /// Loads this actor's partitions, each in the row layout this operator keeps.
    fn load_restored(&mut self, restore: &StateRestore) -> Result<()> {
        // Downstream kept what partitions showed when the view's rows were checkpointed
        // with this state (no re-emit). Ties in state converted from arrow's row format
        // order by other bytes now, so such a partition may show other rows.
        let reshown = !restore.reemit && self.first_only.is_none() && self.row_codec.is_plain();
        let arrow_rows = reshown
            .then(|| ordered_converter(&self.layout.row_types))
            .transpose()?
            .map(RowCodec::Ordered);
        let (whole, short, shown) = (&self.row_codec, self.short.as_ref(), &self.shown);
        let mut showed_otherwise = Vec::new();
        let groups = &restore.key_groups;
        self.state
            .load_with(groups.start, groups.end, |key, bytes| -> Result<_> {
                let Some((partition, converted_from)) = stored_partition(bytes, whole, short)?
                else {
                    return Ok(None);
                };
                // (A short partition is one row: no ties to order.)
                let old = converted_from.filter(|old| !old.is_short());
                if let (Some(old), Some(arrow_rows)) = (old, &arrow_rows) {
                    let showed = shown.shown(Some(&old), arrow_rows)?;
                    let showed = Showing {
                        rows: converted(whole, showed.rows.iter().map(Vec::as_slice))?,
                        extras: showed.extras,
                    };
                    if !showed.same_as(&shown.shown(Some(&partition), whole)?) {
                        showed_otherwise.push((key.to_vec(), showed));
                    }
                }
                Ok(Some(partition))
            })?;
        if restore.reemit && self.first_only.is_none() {
            let keys: Vec<Vec<u8>> = self.state.keys().map(|k| k.to_vec()).collect();
            self.epoch_before = keys.into_iter().map(|k| (k, Vec::new())).collect();
        }
        self.correct_at_first_barrier(showed_otherwise)?;
        self.reform_restored()
    }

    /// Partitions that showed other rows before their state was converted: the first
    /// barrier emits the difference, as for a change. They are marked changed too, so
    /// the next checkpoint stores them converted: a later restore must not take what
    /// arrow's order shows for what downstream holds, once the barrier corrected it.
    fn correct_at_first_barrier(&mut self, showed: Vec<(Vec<u8>, Showing)>) -> Result<()> {
        let (keys, showings): (Vec<_>, Vec<_>) = showed.into_iter().unzip();
        for (key, before) in keys.into_iter().zip(self.with_extras(showings)?) {
            self.state.get_or_insert_with(&key, Partition::default);
            self.epoch_before.insert(key, before);
        }
        Ok(())
    }

    /// How rows are kept short, on the Top-1 path when the layout allows it.
    fn short_rows_kept(&self) -> Option<&ShortRows> {
        self.short.as_ref().filter(|_| self.first_only.is_some())
    }

    /// Restored partitions into the form this operator keeps: short first rows on the
    /// Top-1 path, whole rows otherwise. A view whose input stopped or started being
    /// append-only, or state from before short rows, reads the other form.
    fn reform_restored(&mut self) -> Result<()> {
        let keep_short = self.short_rows_kept().is_some();
        let whole = &self.row_codec;
        let keys = (self.partition_converter.as_ref(), &self.sort_converter);
        let short = self.short.as_ref();
        self.state.try_for_each_unstored(|key, partition| {
            if partition.is_short() == keep_short {
                return Ok(());
            }
            let Some((sort, row)) = partition.present().next() else {
                return Ok(());
            };
            let short = short
                .ok_or_else(|| ExecError::Internal("a short row without a layout for it".into()))?;
            *partition = match keep_short {
                true => short.shorten(whole, sort, row)?,
                false => short.lengthen(keys, whole, (key, sort, row))?,
            };
            Ok(())
        })
    }

    /// What each partition shows, each row paired with its extra columns' encoding.
    /// The extra columns of all the partitions are encoded in one conversion (one
    /// per partition cost more than the rest of a small partition's work).
    fn shown_rows<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Vec<ShownRow>>> {
        let showings = keys
            .iter()
            .map(|k| {
                self.shown
                    .shown(self.state.get(k.as_ref()), &self.row_codec)
            })
            .collect::<Result<Vec<_>>>()?;
        self.with_extras(showings)
    }

    /// Each showing's rows paired with their extra columns' encoding.
    fn with_extras(&self, showings: Vec<Showing>) -> Result<Vec<Vec<ShownRow>>> {
        let total: usize = showings.iter().map(|s| s.rows.len()).sum();
        let Some(c) = self.extra_converter.as_ref().filter(|_| total > 0) else {
            return Ok(showings
                .into_iter()
                .map(|s| s.rows.into_iter().map(|r| (r, Vec::new())).collect())
                .collect());
        };
        let columns = (0..self.shown.extra_types().len())
            .map(|j| {
                let parts: Vec<&dyn Array> = showings
                    .iter()
                    .filter(|s| !s.rows.is_empty())
                    .map(|s| s.extras[j].as_ref())
                    .collect();
                arrow::compute::concat(&parts)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let encoded = c.convert_columns(&columns)?;
        let mut next = 0;
        Ok(showings
            .into_iter()
            .map(|s| {
                s.rows
                    .into_iter()
                    .map(|r| {
                        next += 1;
                        (r, encoded.row(next - 1).as_ref().to_vec())
                    })
                    .collect()
            })
            .collect())
    }

    /// Rows (row bytes) as the output's row columns.
    fn row_columns<'r>(&self, rows: impl IntoIterator<Item = &'r [u8]>) -> Result<Vec<ArrayRef>> {
        Ok(self.row_codec.decode(rows)?)
    }

    /// Whether the Top-1 path keeps its rows short ([`ShortRows`]).
    #[cfg(test)]
    pub(crate) fn keeps_short_rows(&self) -> bool {
        self.short_rows_kept().is_some()
    }

    /// Whether the Top-1 path ([`Self::add_first_rows`]) is taken.
    #[cfg(test)]
    pub(crate) fn follows_first_rows(&self) -> bool {
        self.first_only.is_some()
    }

    /// Top-1 over an append-only input: a row that does not beat its partition's
    /// first row can never show and is dropped; one that does replaces it, and the
    /// partition's first row before the epoch is kept (once) to retract.
    fn add_first_rows(
        &mut self,
        keys: &[&[u8]],
        groups: &RowGroups,
        sorts: &Rows,
        rows: Option<&EncodedRows>,
    ) {
        let row_of = |i: usize| -> &[u8] { rows.map(|r| r.row(i)).unwrap_or_default() };
        let entry = |i: usize| (sorts.row(i).data(), row_of(i));
        // A short row leaves out the partition key (equal within a partition) and the
        // sort key (compared first): whole and short rows order a partition alike.
        let keep = match self.short_rows_kept().is_some() {
            true => Partition::first,
            false => Partition::only,
        };
        for (g, key) in keys.iter().enumerate() {
            // One lookup for the whole group: its best row against the partition's.
            let best = groups.rows(g).iter().copied().min_by_key(|&i| entry(i));
            let Some(best) = best else {
                continue;
            };
            let replaced = self.state.replace_with(key, |partition| {
                let beats = first_row(partition).is_none_or(|first| entry(best) < first);
                beats.then(|| keep(sorts.row(best).data(), row_of(best)))
            });
            if let Some(replaced) = replaced.filter(|r| r.first_since_flush) {
                self.first_before.push((key.to_vec(), replaced.before));
            }
        }
    }

    /// [`Self::add_first_rows`]' barrier: each changed partition's first row before the
    /// epoch retracted, its first row now inserted.
    fn emit_first_rows(
        &mut self,
        extras: &[ScalarValue],
        out: &mut Vec<StreamChunk>,
    ) -> Result<()> {
        // Taken and given back: its allocation serves the next epoch.
        let mut changed = std::mem::take(&mut self.first_before);
        let mut ops = Vec::new();
        // (partition key, sort key, row) of each change.
        let mut rows: Vec<(&[u8], &[u8], &[u8])> = Vec::new();
        if std::mem::take(&mut self.first_reemit) {
            // Nothing downstream saw the restored rows (nor the images of this epoch's
            // changes): every first row is new to it.
            changed.clear();
            for key in self.state.keys() {
                if let Some((sort, row)) = first_row(self.state.get(key)) {
                    ops.push(Op::Insert);
                    rows.push((key, sort, row));
                }
            }
        }
        for (key, before) in &changed {
            let before = first_row(before.as_ref());
            let after = first_row(self.state.get(key));
            if before == after {
                continue;
            }
            if let Some((sort, row)) = before {
                ops.push(Op::Delete);
                rows.push((key, sort, row));
            }
            if let Some((sort, row)) = after {
                ops.push(Op::Insert);
                rows.push((key, sort, row));
            }
        }
        if !ops.is_empty() {
            let mut columns = match self.short_rows_kept() {
                Some(short) => short.columns(
                    (self.partition_converter.as_ref(), &self.sort_converter),
                    &rows,
                )?,
                None => self.row_columns(rows.iter().map(|(_, _, row)| *row))?,
            };
            for v in extras {
                columns.push(v.to_array_of_size(ops.len())?);
            }
            out.push(StreamChunk::from_columns(
                ops,
                self.layout.output_schema.clone(),
                columns,
            )?);
        }
        changed.clear();
        self.first_before = changed;
        self.state.flush()?;
        Ok(())
    }

    fn emit_changes(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        if let Some(extras) = self.first_only.clone() {
            return self.emit_first_rows(&extras, out);
        }
        let mut ops = Vec::new();
        let mut rows: Vec<Vec<u8>> = Vec::new();
        let mut extras: Vec<Vec<u8>> = Vec::new();
        let mut changed: Vec<_> = self.epoch_before.drain().collect();
        // In slices: what all changed partitions show at once would be a peak of
        // memory that only lives for the diff.
        for slice in changed.chunks_mut(1024) {
            let afters = {
                let keys: Vec<&[u8]> = slice.iter().map(|(k, _)| k.as_slice()).collect();
                self.shown_rows(&keys)?
            };
            for ((key, before), after) in slice.iter_mut().zip(afters) {
                if self.state.get(key).is_some_and(|p| p.is_empty()) {
                    self.state.remove(key);
                }
                for (op, (row, extra)) in multiset_diff(std::mem::take(before), after) {
                    ops.push(op);
                    rows.push(row);
                    extras.push(extra);
                }
            }
        }
        self.state.flush()?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut columns = self.row_columns(rows.iter().map(|r| r.as_slice()))?;
        if let Some(c) = &self.extra_converter {
            let parser = c.parser();
            columns.extend(c.convert_rows(extras.iter().map(|r| parser.parse(r)))?);
        }
        out.push(StreamChunk::from_columns(
            ops,
            self.layout.output_schema.clone(),
            columns,
        )?);
        Ok(())
    }
}

/// A stored partition with its rows in the layout this operator keeps them in, and,
/// when it was converted, the partition as stored. State written before the plain
/// layout has its rows in arrow's row format; it is converted on every restore until a
/// checkpoint rewrites the partition (when it changes).
fn stored_partition(
    bytes: &[u8],
    whole: &RowCodec,
    short: Option<&ShortRows>,
) -> Result<Option<(Partition, Option<Partition>)>> {
    let Some((partition, ordered_rows)) = Partition::decode_stored(bytes) else {
        return Ok(None);
    };
    let codec = match (partition.is_short(), short) {
        (false, _) => whole,
        (true, Some(short)) => &short.codec,
        (true, None) => {
            return Err(ExecError::Internal(
                "a short row without a layout for it".into(),
            ))
        }
    };
    if !ordered_rows || !codec.is_plain() {
        return Ok(Some((partition, None)));
    }
    let now = partition.map_rows(|rows| converted(codec, rows))?;
    Ok(Some((now, Some(partition))))
}

/// Rows in arrow's row format, in `codec`'s layout.
fn converted<'r>(
    codec: &RowCodec,
    rows: impl IntoIterator<Item = &'r [u8]>,
) -> Result<Vec<Vec<u8>>> {
    let rows = codec.convert_ordered(rows)?;
    Ok((0..rows.len()).map(|i| rows.row(i).to_vec()).collect())
}

/// A partition's first row: (sort key, row).
fn first_row(p: Option<&Partition>) -> Option<(&[u8], &[u8])> {
    p.and_then(|p| p.present().next())
}

/// The changes from multiset `before` to multiset `after`.
fn multiset_diff(mut before: Vec<ShownRow>, mut after: Vec<ShownRow>) -> Vec<(Op, ShownRow)> {
    before.sort_unstable();
    after.sort_unstable();
    let mut out = Vec::new();
    let (mut b, mut a) = (before.into_iter().peekable(), after.into_iter().peekable());
    loop {
        let ord = match (b.peek(), a.peek()) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => return out,
        };
        match ord {
            std::cmp::Ordering::Equal => {
                b.next();
                a.next();
            }
            std::cmp::Ordering::Less => out.push((Op::Delete, b.next().expect("peeked"))),
            std::cmp::Ordering::Greater => out.push((Op::Insert, a.next().expect("peeked"))),
        }
    }
}

impl<S: Shown> Operator for PartitionedOperator<S> {
    fn name(&self) -> &str {
        self.shown.name()
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let w = self.layout.row_types.len();
        let p = self.layout.partition_types.len();
        let cols = chunk.columns();
        let rows = match self.short_rows_kept() {
            Some(short) => short.of_columns(&cols[..w])?,
            None => (w > 0)
                .then(|| self.row_codec.encode(&cols[..w]))
                .transpose()?,
        };
        let parts = self
            .partition_converter
            .as_ref()
            .map(|c| c.convert_columns(&cols[w..w + p]))
            .transpose()?;
        let sorts = self.sort_converter.convert_columns(&cols[w + p..])?;
        let kept = self
            .shown
            .leading_rows_shown()
            .filter(|_| self.layout.append_only_input);
        if kept.is_some() && chunk.ops.iter().any(|op| *op != Op::Insert) {
            return Err(ExecError::Internal(format!(
                "{} {} was planned over an append-only input and got a retraction",
                self.shown.name(),
                self.layout.uid
            )));
        }
        let key_of = |i: usize| -> &[u8] { parts.as_ref().map(|r| r.row(i).data()).unwrap_or(&[]) };
        let groups = RowGroups::new(chunk.len(), key_of);
        if self.first_only.is_some() {
            let keys: Vec<&[u8]> = groups.first_row.iter().map(|&i| key_of(i)).collect();
            self.add_first_rows(&keys, &groups, &sorts, rows.as_ref());
            return Ok(());
        }
        // What the partitions first changed in this epoch showed before, in one batch.
        let fresh: Vec<&[u8]> = groups
            .first_row
            .iter()
            .map(|&i| key_of(i))
            .filter(|k| !self.epoch_before.contains_key(*k))
            .collect();
        let befores = self.shown_rows(&fresh)?;
        for (key, before) in fresh.into_iter().zip(befores) {
            self.epoch_before.insert(key.to_vec(), before);
        }
        for (g, &first) in groups.first_row.iter().enumerate() {
            let partition = self
                .state
                .get_or_insert_with(key_of(first), Partition::default);
            for &i in groups.rows(g) {
                let row: &[u8] = rows.as_ref().map(|r| r.row(i)).unwrap_or_default();
                partition.add(sorts.row(i).data(), row, chunk.ops[i].sign());
                if let Some((rows, ties)) = kept {
                    partition.keep_leading(rows, ties);
                }
            }
        }
        Ok(())
    }

    /// Watermarks stop here: a delete can refill a top, or change a window value, with
    /// rows older than any watermark.
    fn process_watermark(
        &mut self,
        _w: Watermark,
        _out: &mut Vec<StreamChunk>,
    ) -> Result<Vec<Watermark>> {
        Ok(vec![])
    }

    fn on_barrier(&mut self, _barrier: &Barrier, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn on_checkpoint_cut(&mut self, out: &mut Vec<StreamChunk>) -> Result<()> {
        self.emit_changes(out)
    }

    fn snapshot(&mut self, _epoch: Epoch) -> Result<Vec<StateDelta>> {
        Ok(vec![StateDelta {
            uid: self.layout.uid.clone(),
            data: self.state.take_checkpoint_delta(),
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_is_the_multiset_difference() {
        let r = |s: &str, e: u8| (s.as_bytes().to_vec(), vec![e]);
        let d = multiset_diff(
            vec![r("a", 1), r("a", 1), r("b", 2)],
            vec![r("a", 1), r("b", 3), r("c", 1)],
        );
        assert_eq!(
            d,
            vec![
                (Op::Delete, r("a", 1)),
                (Op::Delete, r("b", 2)),
                (Op::Insert, r("b", 3)),
                (Op::Insert, r("c", 1)),
            ]
        );
    }
}
