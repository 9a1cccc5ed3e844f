//! Checkpoints: the coordinator that triggers them, the uploader that writes them to
//! object storage asynchronously, restore from the latest intact one, and the restart
//! strategies that decide when a failed job comes back.
//!
//! - [`config`]: Flink's checkpoint and restart keys, resolved.
//! - [`coordinator`]: triggering, collecting actors' deltas, timeouts, tolerance.
//! - [`uploader`]: per-job upload, compaction, `_metadata`, retention and GC.
//! - [`restore`]: newest intact checkpoint, with fallback.
//! - [`retained`]: a dropped view's checkpoints kept (RETAIN_ON_CANCELLATION).
//! - [`restart`]: restart-strategy decisions.
//! - [`stats`]: the history behind `SHOW CHECKPOINTS`.

pub mod config;
pub mod coordinator;
pub mod restart;
pub mod restore;
pub mod retained;
pub mod stats;
pub mod uploader;

pub use config::{CheckpointConfig, CheckpointMode, FailoverStrategy, JobConfig, RestartStrategy};
pub use coordinator::{BarrierTiming, CheckpointCoordinator, CheckpointPart, CheckpointScope};
pub use restore::JobStart;
