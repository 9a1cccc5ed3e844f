//! Checkpoint and restart settings, with Flink's key names and defaults (DESIGN.md §8).
//! The server resolves each key's effective value (statement > file > default); the
//! runtime only sees the resolved values.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// `EXACTLY_ONCE`: barriers are aligned.
    ExactlyOnce,
    /// `AT_LEAST_ONCE`: no input is blocked; records after a barrier may be counted in
    /// the snapshot of that barrier and replayed again after a restore.
    AtLeastOnce,
}

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// `execution.checkpointing.interval`; `None` is `off`.
    pub interval: Option<Duration>,
    pub mode: CheckpointMode,
    pub min_pause: Duration,
    pub timeout: Duration,
    pub max_concurrent: usize,
    pub tolerable_failed: u32,
    pub num_retained: usize,
    /// Upload only what changed since the previous checkpoint (changelog deltas,
    /// compacted into a new base file when the deltas outgrow it).
    pub incremental: bool,
    pub unaligned: bool,
    pub aligned_checkpoint_timeout: Duration,
    /// `execution.checkpointing.externalized-checkpoint-retention =
    /// RETAIN_ON_CANCELLATION`: a dropped view's checkpoints are kept (see
    /// [`crate::checkpoint::retained`]).
    pub retain_on_cancellation: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(10)),
            mode: CheckpointMode::ExactlyOnce,
            min_pause: Duration::ZERO,
            timeout: Duration::from_secs(600),
            max_concurrent: 1,
            tolerable_failed: 0,
            num_retained: 1,
            incremental: true,
            unaligned: false,
            aligned_checkpoint_timeout: Duration::ZERO,
            retain_on_cancellation: false,
        }
    }
}

/// `restart-strategy.type` and its sub-keys.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartStrategy {
    None,
    FixedDelay {
        attempts: u32,
        delay: Duration,
    },
    FailureRate {
        max_failures_per_interval: u32,
        interval: Duration,
        delay: Duration,
    },
    ExponentialDelay {
        initial_backoff: Duration,
        max_backoff: Duration,
        multiplier: f64,
        reset_backoff_threshold: Duration,
        jitter_factor: f64,
        attempts_before_reset: u32,
    },
}

impl RestartStrategy {
    /// Flink's defaults for each type.
    pub fn fixed_delay_default() -> Self {
        RestartStrategy::FixedDelay {
            attempts: 1,
            delay: Duration::from_secs(1),
        }
    }
    pub fn failure_rate_default() -> Self {
        RestartStrategy::FailureRate {
            max_failures_per_interval: 1,
            interval: Duration::from_secs(60),
            delay: Duration::from_secs(1),
        }
    }
    pub fn exponential_delay_default() -> Self {
        RestartStrategy::ExponentialDelay {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            multiplier: 1.5,
            reset_backoff_threshold: Duration::from_secs(3600),
            jitter_factor: 0.1,
            // Flink's Integer.MAX_VALUE.
            attempts_before_reset: i32::MAX as u32,
        }
    }
}

/// `jobmanager.execution.failover-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverStrategy {
    /// Only the failed job and the jobs that read it restart.
    Region,
    /// Every view restarts.
    Full,
}

/// Everything a job runs with.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub checkpoint: CheckpointConfig,
    pub restart: RestartStrategy,
    /// Buffer timeout and debloating (see [`crate::buffering`]).
    pub buffering: crate::buffering::Buffering,
}

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            checkpoint: CheckpointConfig::default(),
            // Flink: exponential-delay when checkpointing is on and nothing is set.
            restart: RestartStrategy::exponential_delay_default(),
            buffering: Default::default(),
        }
    }
}
