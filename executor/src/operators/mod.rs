//! Operators, one per file. Each implements [`crate::operator::Operator`]; none of them
//! knows about channels or barrier alignment. Each compute operator's file also holds
//! its plan-time spec, implementing [`spec::StreamSpec`]. Sinks live in
//! [`crate::sinks`].
//!
//! - [`spec`]: what the graph needs to know about an operator, and how it is built.
//! - [`filter`]: keeps rows whose predicate is true (WHERE, HAVING).
//! - [`project`]: evaluates scalar expressions (DataFusion physical expressions).
//! - [`expand`]: several projections of each row in one pass (HOP windows).
//! - [`hash_agg`]: keyed aggregation with retraction, emitting changes at barriers.
//! - [`distinct_entries`]: an aggregation's `count(DISTINCT)` values stored one entry
//!   each, apart from its groups.
//! - [`hash_join`]: symmetric hash join (inner, outer, semi, anti) with retraction.
//! - [`session_agg`]: aggregation over SESSION windows of an append-only input.
//! - [`slide_windows`]: a sliced HOP window's closed slides merged into its windows.
//! - [`join_cleaning`]: join state dropped behind both inputs' watermarks on a key.
//! - [`partition`]: one partition's rows in order (a sorted vector, a B-tree when large).
//! - [`partition_rows`]: every row of each partition in order, with what it shows
//!   recomputed for changed partitions at barriers (shared by Top-N and OVER).
//! - [`top_n`]: ORDER BY ... LIMIT and ROW_NUMBER() <= n per partition, with refill.
//! - [`over_window`]: window functions (lag, sum OVER, ...) kept up to date per partition.
//! - [`materialize`]: stages each epoch's changes into a relation store and passes them on.
//!
//! Test them through the SQL suites in `sql-tests/` and the unit tests in each file.

pub mod distinct_entries;
pub mod expand;
pub mod filter;
pub mod hash_agg;
pub mod hash_join;
pub mod join_cleaning;
pub mod materialize;
pub mod over_window;
pub mod partition;
pub mod partition_rows;
pub mod project;
pub mod session_agg;
pub mod slide_windows;
pub mod spec;
pub mod top_n;

/// A new backend holding an operator's first checkpoint, loaded as deploy loads one
/// after a restart (the operators' restore tests).
#[cfg(test)]
pub(crate) fn restored_backend(
    deltas: Vec<weir_storage::state_snapshot::StateDelta>,
) -> std::sync::Arc<weir_storage::MemoryStateBackend> {
    use weir_storage::state_snapshot::DeltaData;
    use weir_storage::StateBackend as _;
    let backend = weir_storage::MemoryStateBackend::new();
    for delta in deltas {
        assert!(!matches!(delta.data, DeltaData::Rows(_)), "keyed state");
        let entries = delta.data.into_keyed();
        assert!(
            entries.iter().all(|(_, _, v)| v.is_some()),
            "a first checkpoint has no tombstones"
        );
        backend
            .write(weir_storage::WriteBatch::restoring(&delta.uid, &entries))
            .unwrap();
    }
    backend
}
