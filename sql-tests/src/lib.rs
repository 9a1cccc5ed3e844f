//! Test harness that drives a real `weir` server over the Postgres wire protocol.
//!
//! Module map:
//! - [`clients`]: psql, the pgjdbc programs in `clients/`, the venv's Python.
//! - [`process`]: `WeirProcess`: start a `weir` binary on a free port with its own
//!   data dir, connect, kill it with SIGKILL, restart it.
//! - [`kafka`]: the test Kafka broker: topics, producing, reading a partition.
//! - [`kafka_sink`]: what an exactly-once Kafka sink committed (its commit chain).
//! - [`query`]: small query helpers (rows as text, SQLSTATE of an error, polling).
//! - [`savepoints`]: what the savepoint tests share (table `t`, restore NOTICEs, uids).
//! - [`sinks`]: replaying Debezium change events; the `per_g` oracle of sink tests.
//! - [`s3`]: the test S3 endpoint: buckets and checkpoint configuration.
//! - [`workload`]: the crash workload (acknowledged writes, oracle check) shared by the
//!   kill -9 test and the soak command.
//! - [`slt`]: the sqllogictest `AsyncDB` over tokio-postgres, and record-level runs.
//! - [`conformance`]: runs the third-party files of `../shared/conformance/`, record by
//!   record, with the skip list and its reasons.
//! - [`views_first`]: the conformance files' second mode: views created before loading.
//!
//! Tests live in `tests/` (sqllogictest files in `slt/`, differential and crash tests);
//! the conformance report over `../shared/conformance/` is `src/bin/conformance.rs`.

pub mod clients;
pub mod conformance;
pub mod kafka;
pub mod kafka_sink;
pub mod process;
pub mod query;
pub mod s3;
pub mod savepoints;
pub mod sinks;
pub mod slt;
pub mod views_first;
pub mod workload;

pub use process::WeirProcess;
pub use slt::PgDb;
