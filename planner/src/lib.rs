//! Weir planner: SQL to dataflow.
//!
//! Module map:
//! - [`statement`]: Weir's dialect: statement splitting, Weir statements, sqlparser.
//! - [`connector_ddl`]: RisingWave's CREATE SOURCE / FORMAT ... ENCODE, rewritten.
//! - [`window_tvf`]: TUMBLE / HOP windows (Flink's and RisingWave's syntax) as SQL.
//! - [`stream_plan`]: DataFusion logical plan → `StreamGraph` (fragments, exchanges, uids).
//! - `stream_join`: a logical Join → two keyed inputs and a `HashJoin` fragment.
//! - [`lookup_join`]: `JOIN t FOR SYSTEM_TIME AS OF PROCTIME()` → a marked table, planned
//!   as a lookup join (only the table kept, nothing retracted).
//! - `not_in`: `NOT IN (subquery)` as a plain anti join plus the subquery's NULL and
//!   row counts (no null-aware join in a stream).
//! - `grouping_sets`: GROUPING SETS / ROLLUP / CUBE as a union of aggregations.
//! - `join_bounds`: an interval join condition's time bounds (state cleaning).
//! - `stream_top_n`: ORDER BY ... LIMIT and ROW_NUMBER() filters → a `TopN` fragment.
//! - `stream_session`: a SESSION window aggregation over an append-only input → a
//!   `SessionAgg` fragment.
//! - `stream_over`: other window functions (lag, sum OVER, ...) → an `OverWindow` fragment.
//! - `hop_slicing`: a HOP window aggregation that emits on window close, aggregated
//!   per slide and merged per window (Flink's slicing).
//! - `regex_match_test`: `regexp_match(s, 'p')[k] IS NOT NULL` as a match test when
//!   every group of `p` takes part in every match (no capture pass).
//! - `output_names`: unique internal names for select items Postgres names alike
//!   (`SELECT a, a`, two subqueries), which DataFusion would refuse.
//! - [`explain`]: `EXPLAIN CREATE MATERIALIZED VIEW` output.
//! - [`naming`]: Postgres-style output column names.
//! - [`error`]: `SqlError` with SQLSTATE codes, and the mapping from engine errors.
//!
//! API: `parse_statement`, `split_statements`, `plan_view`, `explain_graph`, `SqlError`.

pub mod connector_ddl;
pub mod error;
pub mod explain;
mod grouping_sets;
mod hop_slicing;
mod join_bounds;
pub mod lookup_join;
pub mod naming;
mod not_in;
mod output_names;
mod regex_match_test;
pub mod statement;
mod stream_join;
mod stream_over;
pub mod stream_plan;
mod stream_session;
mod stream_top_n;
pub mod window_tvf;

pub use error::{sqlstate, SqlError, SqlResult};
pub use explain::explain_graph;
pub use statement::{parse_statement, split_statements, WeirStatement};
pub use stream_plan::{nullable_schema, plan_view, PlannedView};
