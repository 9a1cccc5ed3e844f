//! Weir executor: the dataflow runtime.
//!
//! Module map:
//! - [`chunk`]: `StreamChunk` (Arrow batch + op per row) and `Op`.
//! - [`barrier`]: `Barrier`, `Epoch`, `Watermark` and the `Message` enum on every channel.
//! - [`operator`]: the `Operator` trait (data only; the runtime owns barriers).
//! - [`actor`]: the actor run loop: alignment, barrier forwarding, acks, job health.
//! - [`exchange`]: hash / round-robin / single exchanges between fragments.
//! - [`hub`]: `RelationHub`, where views subscribe to a table's or view's changes.
//! - [`store`]: `RelationStore`, the committed, readable contents of tables and views.
//! - [`store_index`]: indexes over a store's committed rows (point and range reads).
//! - [`coordinator`]: `BarrierCoordinator`: acks, epoch commit, consistent reads.
//! - [`table_writer`]: constraint checks, the durable table log, the table's source.
//! - [`graph`]: `StreamGraph`, the plan the planner hands over.
//! - [`deploy`]: turning a graph into actors and channels, with backfill.
//! - [`runtime`]: `Runtime`, which owns all of the above.
//! - [`checkpoint`]: checkpoint coordinator, asynchronous upload, restore, restart
//!   strategies.
//! - [`savepoint`]: SAVEPOINT / RESTORE: named, portable copies of views' state.
//! - [`watermark`]: watermark generation on tables and combining across inputs.
//! - [`proctime`]: `PROCTIME()`'s clock, and where its watermarks begin.
//! - [`source`]: connectors feeding tables (Kafka), positions logged with the rows.
//! - [`buffering`]: the buffer timeout of sources and debloated channels (latency
//!   against throughput).
//! - [`supervisor`]: restarts failed jobs' regions per their restart strategy.
//! - [`metrics`]: Prometheus metrics with Flink's names.
//! - [`aggregate`] and [`operators`]: the operators; [`bytes`]: reading their encoded state;
//!   [`value_counts`]: the multisets aggregates keep (small ones as sorted vectors);
//!   [`distinct_values`]: the value sets `count(DISTINCT)` calls over a column share,
//!   their entries packed in pages ([`packed_set`]).
//! - [`sinks`]: the last operator of a sink job, one connector per file.
//! - [`jobs`]: the job registry: status, restarts and failures that outlive a
//!   deployment, connectors' bad records.
//! - [`connector_options`]: `WITH (...)` options that sources and sinks parse beside
//!   their code.
//! - [`append_only`]: which fragments only insert (their min / max keep one value).
//! - [`digest`]: order-independent digests of changelogs (output checks).
//! - [`row_below`]: testing an encoded row's column against a watermark in place.
//! - [`row_groups`]: a chunk's rows grouped by key, for keyed operators.
//! - [`plain_rows`]: payload rows as bytes in a plain layout (a copy per value to
//!   decode), where no SQL order is needed.
//! - [`topology`]: a running job's fragments, operators and exchanges (the dashboard's
//!   job graph, `weir_catalog.operators`).
//! - [`progress`]: long work (backfill, SAVEPOINT, RESTORE, recovery) reporting how far
//!   it got.
//!
//! API for the layers above: `Runtime`, `RuntimeConfig`, `StreamGraph` and its specs,
//! `StreamChunk`, `Op`, `ExecError` (re-exported here). The modules the server and
//! planner never name (actor, barrier, chunk, coordinator, graph, hub, operator,
//! runtime, store, table_writer, ...) are `pub(crate)`: internals.

pub(crate) mod actor;
pub mod aggregate;
pub(crate) mod append_only;
pub(crate) mod barrier;
pub mod buffering;
pub(crate) mod bytes;
pub mod checkpoint;
pub(crate) mod chunk;
pub mod connector_options;
pub(crate) mod coordinator;
mod deploy;
pub mod digest;
pub mod distinct_values;
pub(crate) mod error;
pub mod exchange;
pub(crate) mod graph;
pub(crate) mod hub;
pub mod jobs;
pub mod metrics;
pub(crate) mod operator;
pub mod operators;
pub mod packed_set;
pub(crate) mod plain_rows;
pub mod proctime;
pub mod progress;
pub(crate) mod row_below;
pub(crate) mod row_groups;
pub(crate) mod runtime;
pub mod savepoint;
pub mod sinks;
pub mod source;
pub(crate) mod store;
pub mod store_index;
pub mod supervisor;
pub(crate) mod table_writer;
pub mod topology;
pub(crate) mod value_counts;
pub mod watermark;

pub use barrier::Epoch;
pub use chunk::{Op, StreamChunk};
pub use deploy::Restore;
pub use error::{ExecError, Result};
pub use graph::{FragmentInput, FragmentSpec, OperatorSpec, SinkSpec, StreamGraph};
pub use jobs::JobStatus;
pub use runtime::{Runtime, RuntimeConfig, ViewSpec, WriteState};
