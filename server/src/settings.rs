//! Checkpoint and restart settings: Flink's keys, their defaults, and where each
//! effective value came from.
//!
//! Precedence, highest first (DESIGN.md §8): a view's `WITH (...)`, the session's
//! `SET`, `weir.toml`, the built-in default. A view keeps the values it was created
//! with (they are stored in the catalog), so later `SET`s do not change running views.

use crate::config::parse_duration;
use std::collections::BTreeMap;
use std::time::Duration;
use weir_executor::buffering::{BufferTimeout, Buffering, Debloat};
use weir_executor::checkpoint::{
    CheckpointConfig, CheckpointMode, FailoverStrategy, JobConfig, RestartStrategy,
};

/// Per-job keys (settable per view) and their defaults, as Flink spells them.
pub const JOB_KEYS: &[(&str, &str)] = &[
    ("execution.checkpointing.interval", "10s"),
    ("execution.checkpointing.mode", "EXACTLY_ONCE"),
    ("execution.checkpointing.min-pause", "0ms"),
    ("execution.checkpointing.timeout", "10min"),
    ("execution.checkpointing.max-concurrent-checkpoints", "1"),
    ("execution.checkpointing.tolerable-failed-checkpoints", "0"),
    ("execution.checkpointing.num-retained", "1"),
    ("execution.checkpointing.unaligned.enabled", "false"),
    ("execution.checkpointing.aligned-checkpoint-timeout", "0ms"),
    ("execution.checkpointing.incremental", "true"),
    // Flink's default; Weir's checkpoints are always in storage, so a failed job
    // recovers either way: the value decides what a DROP does with them.
    (
        "execution.checkpointing.externalized-checkpoint-retention",
        "NO_EXTERNALIZED_CHECKPOINTS",
    ),
    // Latency against throughput (`weir_executor::buffering`).
    ("execution.buffer-timeout.enabled", "true"),
    ("execution.buffer-timeout.interval", "100ms"),
    ("taskmanager.network.memory.buffer-debloat.enabled", "false"),
    ("taskmanager.network.memory.buffer-debloat.target", "1s"),
    // Flink: exponential-delay when checkpointing is on, none when it is off.
    ("restart-strategy.type", "exponential-delay"),
    ("restart-strategy.fixed-delay.attempts", "1"),
    ("restart-strategy.fixed-delay.delay", "1s"),
    (
        "restart-strategy.failure-rate.max-failures-per-interval",
        "1",
    ),
    (
        "restart-strategy.failure-rate.failure-rate-interval",
        "1min",
    ),
    ("restart-strategy.failure-rate.delay", "1s"),
    ("restart-strategy.exponential-delay.initial-backoff", "1s"),
    ("restart-strategy.exponential-delay.max-backoff", "1min"),
    (
        "restart-strategy.exponential-delay.backoff-multiplier",
        "1.5",
    ),
    (
        "restart-strategy.exponential-delay.reset-backoff-threshold",
        "1h",
    ),
    ("restart-strategy.exponential-delay.jitter-factor", "0.1"),
    (
        "restart-strategy.exponential-delay.attempts-before-reset-backoff",
        "2147483647",
    ),
];

/// Server-wide keys (set in `weir.toml` only).
pub const SERVER_KEYS: &[(&str, &str)] = &[
    ("execution.checkpointing.dir", "<data-dir>"),
    (
        "execution.checkpointing.savepoint-dir",
        "<execution.checkpointing.dir>/savepoints",
    ),
    ("jobmanager.execution.failover-strategy", "region"),
    ("state.backend.type", "hashmap"),
    ("metrics.reporter.prom.port", "9249"),
    // The web dashboard's port (Flink's web UI key; 0 disables it).
    ("rest.port", "8081"),
    ("s3.endpoint", ""),
    ("s3.region", ""),
    ("s3.access-key-id", ""),
    ("s3.secret-access-key", ""),
    ("s3.allow-http", "false"),
    // High availability (`crate::cluster`): Flink's names where they fit.
    ("high-availability.type", "none"),
    ("high-availability.storageDir", ""),
    ("high-availability.cluster-id", "default"),
    ("high-availability.leader-election.lease-duration", "15s"),
    ("high-availability.leader-election.renew-deadline", "15s"),
    ("high-availability.leader-election.retry-period", "5s"),
];

pub fn is_job_key(key: &str) -> bool {
    JOB_KEYS.iter().any(|(k, _)| *k == key)
}

pub fn is_server_key(key: &str) -> bool {
    SERVER_KEYS.iter().any(|(k, _)| *k == key)
}

pub fn default_of(key: &str) -> Option<&'static str> {
    JOB_KEYS
        .iter()
        .chain(SERVER_KEYS)
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
}

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    ViewOption,
    Session,
    ConfigFile,
    Default,
}

impl Source {
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::ViewOption => "view option",
            Source::Session => "session",
            Source::ConfigFile => "config file",
            Source::Default => "default",
        }
    }
}

fn duration(key: &str, v: &str) -> Result<Duration, String> {
    parse_duration(v).map_err(|e| format!("invalid value for {key}: {e}"))
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("invalid value for {key}: {v}"))
}

fn boolean(key: &str, v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "1" | "yes" => Ok(true),
        "false" | "off" | "0" | "no" => Ok(false),
        _ => Err(format!("invalid value for {key}: {v}")),
    }
}

/// Checks one value without building a whole config (for `SET` and `weir.toml`).
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    let mut probe = BTreeMap::new();
    probe.insert(key.to_string(), value.to_string());
    if is_job_key(key) {
        job_config(&|k| probe.get(k).cloned()).map(|_| ())
    } else if key == "jobmanager.execution.failover-strategy" {
        failover(value).map(|_| ())
    } else if key == "metrics.reporter.prom.port" {
        number::<u16>(key, value).map(|_| ())
    } else if key == "s3.allow-http" {
        boolean(key, value).map(|_| ())
    } else if key.starts_with("high-availability.") {
        crate::cluster::validate(key, value)
    } else if key == "state.backend.type" {
        match value.trim().to_ascii_lowercase().as_str() {
            "hashmap" | "rocksdb" => Ok(()),
            _ => Err(format!(
                "invalid value for state.backend.type: {value} (hashmap or rocksdb)"
            )),
        }
    } else {
        Ok(())
    }
}

pub fn failover(v: &str) -> Result<FailoverStrategy, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "region" => Ok(FailoverStrategy::Region),
        "full" => Ok(FailoverStrategy::Full),
        _ => Err(format!(
            "invalid value for jobmanager.execution.failover-strategy: {v} (region or full)"
        )),
    }
}

/// `execution.checkpointing.externalized-checkpoint-retention`: whether a dropped
/// view's checkpoints are kept (Flink's cancellation is Weir's DROP).
fn retention(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_uppercase().replace('-', "_").as_str() {
        "RETAIN_ON_CANCELLATION" => Ok(true),
        "DELETE_ON_CANCELLATION" | "NO_EXTERNALIZED_CHECKPOINTS" => Ok(false),
        _ => Err(format!(
            "invalid value for execution.checkpointing.externalized-checkpoint-retention: {v} (RETAIN_ON_CANCELLATION, DELETE_ON_CANCELLATION or NO_EXTERNALIZED_CHECKPOINTS)"
        )),
    }
}

/// Builds a job's configuration from a lookup that already applies precedence
/// (returns `None` for keys left at their default).
pub fn job_config(get: &dyn Fn(&str) -> Option<String>) -> Result<JobConfig, String> {
    let val = |k: &str| get(k).unwrap_or_else(|| default_of(k).unwrap_or("").to_string());
    let interval_text = val("execution.checkpointing.interval");
    let interval = match interval_text.trim().to_ascii_lowercase().as_str() {
        "off" | "none" | "disabled" | "0" | "0ms" | "0s" => None,
        _ => Some(duration(
            "execution.checkpointing.interval",
            &interval_text,
        )?),
    };
    let mode = match val("execution.checkpointing.mode")
        .trim()
        .to_ascii_uppercase()
        .replace('-', "_")
        .as_str()
    {
        "EXACTLY_ONCE" => CheckpointMode::ExactlyOnce,
        "AT_LEAST_ONCE" => CheckpointMode::AtLeastOnce,
        other => {
            return Err(format!(
                "invalid value for execution.checkpointing.mode: {other} (EXACTLY_ONCE or AT_LEAST_ONCE)"
            ))
        }
    };
    let k = "execution.checkpointing.unaligned.enabled";
    let unaligned = boolean(k, &val(k))?;
    if unaligned && mode != CheckpointMode::ExactlyOnce {
        // As in Flink: unaligned checkpoints are a variant of exactly-once.
        return Err(
            "execution.checkpointing.unaligned.enabled = true needs execution.checkpointing.mode = EXACTLY_ONCE"
                .into(),
        );
    }
    let checkpoint = CheckpointConfig {
        interval,
        mode,
        min_pause: duration("min-pause", &val("execution.checkpointing.min-pause"))?,
        timeout: duration("timeout", &val("execution.checkpointing.timeout"))?,
        max_concurrent: number(
            "execution.checkpointing.max-concurrent-checkpoints",
            &val("execution.checkpointing.max-concurrent-checkpoints"),
        )?,
        tolerable_failed: number(
            "execution.checkpointing.tolerable-failed-checkpoints",
            &val("execution.checkpointing.tolerable-failed-checkpoints"),
        )?,
        num_retained: number(
            "execution.checkpointing.num-retained",
            &val("execution.checkpointing.num-retained"),
        )?,
        incremental: boolean(
            "execution.checkpointing.incremental",
            &val("execution.checkpointing.incremental"),
        )?,
        unaligned,
        aligned_checkpoint_timeout: duration(
            "aligned-checkpoint-timeout",
            &val("execution.checkpointing.aligned-checkpoint-timeout"),
        )?,
        retain_on_cancellation: retention(&val(
            "execution.checkpointing.externalized-checkpoint-retention",
        ))?,
    };
    if checkpoint.unaligned && checkpoint.max_concurrent > 1 {
        // As in Flink: one unaligned checkpoint at a time.
        return Err(
            "unaligned checkpoints need execution.checkpointing.max-concurrent-checkpoints = 1"
                .into(),
        );
    }
    if checkpoint.num_retained == 0 {
        return Err("execution.checkpointing.num-retained must be at least 1".into());
    }
    if checkpoint.timeout.is_zero() {
        return Err("execution.checkpointing.timeout must be positive".into());
    }
    let type_key = "restart-strategy.type";
    let kind = match get(type_key) {
        Some(t) => t,
        None if interval.is_none() => "none".into(),
        None => val(type_key),
    };
    let d = |k: &str| duration(k, &val(k));
    let restart = match kind.trim().to_ascii_lowercase().replace('_', "-").as_str() {
        "none" | "off" | "disable" | "no-restart" => RestartStrategy::None,
        "fixed-delay" | "fixeddelay" => RestartStrategy::FixedDelay {
            attempts: number(
                "restart-strategy.fixed-delay.attempts",
                &val("restart-strategy.fixed-delay.attempts"),
            )?,
            delay: d("restart-strategy.fixed-delay.delay")?,
        },
        "failure-rate" | "failurerate" => RestartStrategy::FailureRate {
            max_failures_per_interval: number(
                "restart-strategy.failure-rate.max-failures-per-interval",
                &val("restart-strategy.failure-rate.max-failures-per-interval"),
            )?,
            interval: d("restart-strategy.failure-rate.failure-rate-interval")?,
            delay: d("restart-strategy.failure-rate.delay")?,
        },
        "exponential-delay" | "exponentialdelay" => RestartStrategy::ExponentialDelay {
            initial_backoff: d("restart-strategy.exponential-delay.initial-backoff")?,
            max_backoff: d("restart-strategy.exponential-delay.max-backoff")?,
            multiplier: number(
                "restart-strategy.exponential-delay.backoff-multiplier",
                &val("restart-strategy.exponential-delay.backoff-multiplier"),
            )?,
            reset_backoff_threshold: d(
                "restart-strategy.exponential-delay.reset-backoff-threshold",
            )?,
            jitter_factor: number(
                "restart-strategy.exponential-delay.jitter-factor",
                &val("restart-strategy.exponential-delay.jitter-factor"),
            )?,
            attempts_before_reset: number(
                "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                &val("restart-strategy.exponential-delay.attempts-before-reset-backoff"),
            )?,
        },
        other => {
            return Err(format!(
                "invalid value for restart-strategy.type: {other} (none, fixed-delay, failure-rate or exponential-delay)"
            ))
        }
    };
    Ok(JobConfig {
        checkpoint,
        restart,
        buffering: buffering(&val)?,
    })
}

/// `execution.buffer-timeout.*` and `taskmanager.network.memory.buffer-debloat.*`.
fn buffering(val: &dyn Fn(&str) -> String) -> Result<Buffering, String> {
    let k = "execution.buffer-timeout.enabled";
    let enabled = boolean(k, &val(k))?;
    let k = "execution.buffer-timeout.interval";
    let text = val(k);
    let timeout = match text.trim() {
        _ if !enabled => BufferTimeout::FullOnly,
        "-1" => BufferTimeout::FullOnly,
        t => match duration(k, t)? {
            d if d.is_zero() => BufferTimeout::Immediate,
            d => BufferTimeout::After(d),
        },
    };
    let k = "taskmanager.network.memory.buffer-debloat.enabled";
    let debloat_on = boolean(k, &val(k))?;
    let k = "taskmanager.network.memory.buffer-debloat.target";
    let target = duration(k, &val(k))?;
    if target.is_zero() {
        return Err(format!("{k} must be positive"));
    }
    Ok(Buffering {
        timeout,
        debloat: Debloat {
            enabled: debloat_on,
            target,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_flink() {
        let c = job_config(&|_| None).unwrap();
        assert_eq!(c.checkpoint.interval, Some(Duration::from_secs(10)));
        assert_eq!(c.checkpoint.mode, CheckpointMode::ExactlyOnce);
        assert_eq!(c.restart, RestartStrategy::exponential_delay_default());
        let off =
            job_config(&|k| (k == "execution.checkpointing.interval").then(|| "off".to_string()))
                .unwrap();
        assert_eq!(off.checkpoint.interval, None);
        assert_eq!(off.restart, RestartStrategy::None);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(validate("execution.checkpointing.mode", "SOMETIMES").is_err());
        assert!(validate("execution.checkpointing.interval", "ten").is_err());
        assert!(validate("restart-strategy.type", "pray").is_err());
        assert!(validate("execution.checkpointing.num-retained", "0").is_err());
        assert!(validate("jobmanager.execution.failover-strategy", "all").is_err());
        assert!(validate("restart-strategy.fixed-delay.attempts", "3").is_ok());
        assert!(validate("execution.buffer-timeout.interval", "soon").is_err());
        assert!(validate("taskmanager.network.memory.buffer-debloat.target", "0ms").is_err());
    }

    #[test]
    fn buffer_timeout_follows_flink() {
        let timeout = |v: &str| {
            job_config(&|k| (k == "execution.buffer-timeout.interval").then(|| v.to_string()))
                .unwrap()
                .buffering
                .timeout
        };
        assert_eq!(
            timeout("100ms"),
            BufferTimeout::After(Duration::from_millis(100))
        );
        assert_eq!(timeout("0"), BufferTimeout::Immediate);
        assert_eq!(timeout("0ms"), BufferTimeout::Immediate);
        assert_eq!(timeout("-1"), BufferTimeout::FullOnly);
        let off =
            job_config(&|k| (k == "execution.buffer-timeout.enabled").then(|| "false".into()))
                .unwrap();
        assert_eq!(off.buffering.timeout, BufferTimeout::FullOnly);
        let defaults = job_config(&|_| None).unwrap().buffering;
        assert_eq!(
            defaults.timeout,
            BufferTimeout::After(Duration::from_millis(100))
        );
        assert!(!defaults.debloat.enabled);
        assert_eq!(defaults.debloat.target, Duration::from_secs(1));
    }
}
