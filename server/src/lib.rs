//! The `weir` server.
//!
//! Module map:
//! - [`config`]: `weir.toml` and defaults.
//! - [`cluster`]: high-availability settings (`high-availability.*`).
//! - [`member`]: this process as a high-availability member: standby, takeover,
//!   leader, deposed; `SHOW CLUSTER`.
//! - [`database`]: `Database`: recovery at startup; statements go to [`statements`].
//! - [`statements`]: the statement router, and one file per newer statement kind
//!   (plain views, SQL functions, COPY, DEALLOCATE / DISCARD / RESET, transactions).
//! - [`sink`]: CREATE / DROP / SHOW SINKS (the blackhole sink).
//! - [`connector`]: a table's connector options (`WITH (connector = 'kafka', ...)`).
//! - [`catalog`]: the persisted catalog of tables and views.
//! - [`ddl`], [`dml`], [`query`], [`show`]: statement execution by kind.
//! - [`pg_catalog`]: the system tables psql and drivers query.
//! - [`weir_catalog`]: what the dataflow is doing as SQL tables (jobs, operators,
//!   exchanges, checkpoints, savepoints, sources, settings, progress).
//! - [`web`]: the web dashboard over `weir_catalog` (`rest.port`, default 8081).
//! - [`index`]: CREATE / DROP INDEX (maintained in the stores, used by [`serving`]).
//! - [`serving`]: statements answered without planning (point reads and writes by
//!   key through indexes), the shared plan cache, read-after-write.
//! - [`subplan`]: correlated subqueries run per outer row in SELECTs (Postgres' SubPlan).
//! - [`functions`]: scalar functions DataFusion lacks (`MOD`).
//! - [`pg`]: the Postgres wire protocol (pgwire): auth, handlers, encoding.
//! - [`server`]: the TCP listener.
//! - [`bench`], [`bench_kafka`], [`bench_nexmark`]: `weir bench` subcommands.
//! - [`savepoint_cli`]: `weir savepoint create|list|restore|drop` against a running
//!   server (operators, CI/CD).
//! - [`settings`]: checkpoint / restart keys, defaults and provenance.
//! - [`metrics_http`]: the Prometheus `/metrics` endpoint.
//! - [`session`], [`output`]: per-connection state and statement results.

pub mod bench;
pub mod bench_kafka;
pub mod bench_nexmark;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod connector;
pub mod database;
pub mod ddl;
pub mod dml;
pub mod functions;
pub mod index;
pub mod member;
pub mod metrics_http;
pub mod output;
pub mod pg;
pub mod pg_catalog;
pub mod query;
pub mod savepoint_cli;
pub mod server;
pub mod serving;
pub mod session;
pub mod settings;
pub mod show;
pub mod sink;
pub mod statements;
pub mod subplan;
pub mod web;
pub mod weir_catalog;

pub use config::Config;
pub use database::Database;
