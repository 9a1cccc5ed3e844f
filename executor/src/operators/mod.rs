//! Operators, one per file. Each implements [`crate::operator::Operator`]; none of them
//! knows about channels or barrier alignment. Each compute operator's file also holds
//! its plan-time spec, implementing [`spec::StreamSpec`].
//!
//! - [`spec`]: what the graph needs to know about an operator, and how it is built.
//! - [`filter`]: keeps rows whose predicate is true (WHERE, HAVING).
//! - [`project`]: evaluates scalar expressions (DataFusion physical expressions).
//! - [`expand`]: several projections of each row in one pass (HOP windows).
//! - [`hash_agg`]: keyed aggregation with retraction, emitting changes at barriers.
//! - [`hash_join`]: symmetric hash join (inner, outer, semi, anti) with retraction.
//! - [`join_cleaning`]: join state dropped behind both inputs' watermarks on a key.
//! - [`partition_rows`]: every row of each partition in order, with what it shows
//!   recomputed for changed partitions at barriers (shared by Top-N and OVER).
//! - [`top_n`]: ORDER BY ... LIMIT and ROW_NUMBER() <= n per partition, with refill.
//! - [`over_window`]: window functions (lag, sum OVER, ...) kept up to date per partition.
//! - [`materialize`]: stages each epoch's changes into a relation store and passes them on.
//! - [`blackhole`]: the end of a blackhole sink: takes every change, keeps nothing.
//! - [`kafka_sink`]: the end of a Kafka sink: every change as a JSON record, at least
//!   once (flushed per barrier) or exactly once (through [`two_phase`]).
//! - [`kafka_sink_txn`]: the exactly-once Kafka target: one transaction per completed
//!   checkpoint, with a commit marker that recovery reads.
//! - [`two_phase`]: two-phase commit for exactly-once sinks: batches staged in the
//!   sink's state at checkpoint barriers, committed when the checkpoint completes.
//! - [`file_sink`]: the end of a file sink: JSON lines or Parquet files on object
//!   storage, exactly once (pending files renamed when a checkpoint completes).
//! - [`sink_format`]: PLAIN / UPSERT / DEBEZIUM records, and their checkpointed bytes.
//!
//! Test them through the SQL suites in `sql-tests/` and the unit tests in each file.

pub mod blackhole;
pub mod expand;
pub mod file_sink;
pub mod filter;
pub mod hash_agg;
pub mod hash_join;
pub mod join_cleaning;
pub mod kafka_sink;
pub mod kafka_sink_txn;
pub mod materialize;
pub mod over_window;
pub mod partition_rows;
pub mod project;
pub mod sink_format;
pub mod spec;
pub mod top_n;
pub mod two_phase;
