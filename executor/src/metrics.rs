//! Prometheus metrics, with Flink's metric names where Flink has one.
//!
//! Per job (label `job`): `lastCheckpointDuration`, `lastCheckpointSize`,
//! `lastCheckpointFullSize`, `numberOfCompletedCheckpoints`, `numberOfFailedCheckpoints`,
//! `numberOfInProgressCheckpoints`, `lastCheckpointRestoreTimestamp`, `numRestarts`.
//! Per actor (labels `job`, `actor`): `numRecordsIn`, `numRecordsOut`,
//! `busyTimeMsPerSecond`, `backPressuredTimeMsPerSecond`, `idleTimeMsPerSecond`,
//! `checkpointAlignmentTime`. The `...PerSecond` gauges are rates over the last second,
//! computed by a sampler from cumulative counters.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::sync::OnceLock;

pub struct Metrics {
    pub registry: Registry,
    pub last_checkpoint_duration: IntGaugeVec,
    pub last_checkpoint_size: IntGaugeVec,
    pub last_checkpoint_full_size: IntGaugeVec,
    pub completed_checkpoints: IntCounterVec,
    pub failed_checkpoints: IntCounterVec,
    pub in_progress_checkpoints: IntGaugeVec,
    pub last_restore_timestamp: IntGaugeVec,
    pub num_restarts: IntCounterVec,
    pub restore_fallbacks: IntCounterVec,
    pub records_in: IntCounterVec,
    pub records_out: IntCounterVec,
    pub busy_ms_per_s: IntGaugeVec,
    pub backpressured_ms_per_s: IntGaugeVec,
    pub idle_ms_per_s: IntGaugeVec,
    pub alignment_time: IntGaugeVec,
    pub output_watermark: IntGaugeVec,
    pub source_bad_records: IntCounterVec,
    pub sink_records_in: IntCounterVec,
    pub state_keys_cleaned: IntCounterVec,
    /// High availability (no labels): 1 while this member leads.
    pub ha_is_leader: IntGauge,
    pub ha_lease_renewals: IntCounter,
    pub ha_lease_renewal_failures: IntCounter,
    /// Seconds to write one cluster log segment (the acknowledgement's extra latency).
    pub ha_log_upload_seconds: Histogram,
    pub ha_log_records: IntCounter,
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help).namespace("weir"), labels).expect("metric");
    r.register(Box::new(g.clone())).expect("register");
    g
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help).namespace("weir"), labels).expect("metric");
    r.register(Box::new(c.clone())).expect("register");
    c
}

fn register<M: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: M) -> M {
    r.register(Box::new(m.clone())).expect("register");
    m
}

fn plain_counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        r,
        IntCounter::with_opts(Opts::new(name, help).namespace("weir")).expect("metric"),
    )
}

pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let r = Registry::new();
        let job = &["job"];
        let actor = &["job", "actor"];
        Metrics {
            ha_is_leader: register(
                &r,
                IntGauge::with_opts(
                    Opts::new("isLeader", "1 while this member holds the leader lease")
                        .namespace("weir"),
                )
                .expect("metric"),
            ),
            ha_lease_renewals: plain_counter(&r, "leaseRenewals", "leader lease renewals"),
            ha_lease_renewal_failures: plain_counter(
                &r,
                "leaseRenewalFailures",
                "leader lease renewals that failed (store unreachable)",
            ),
            ha_log_upload_seconds: register(
                &r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "clusterLogUploadSeconds",
                        "seconds to commit one cluster log segment",
                    )
                    .namespace("weir")
                    .buckets(vec![
                        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
                    ]),
                )
                .expect("metric"),
            ),
            ha_log_records: plain_counter(
                &r,
                "clusterLogRecords",
                "records committed to the cluster log",
            ),
            source_bad_records: counter(
                &r,
                "sourceBadRecords",
                "records a connector skipped as bad (policy skip)",
                job,
            ),
            last_checkpoint_duration: gauge(
                &r,
                "lastCheckpointDuration",
                "ms of the last completed checkpoint",
                job,
            ),
            last_checkpoint_size: gauge(
                &r,
                "lastCheckpointSize",
                "bytes uploaded by the last completed checkpoint",
                job,
            ),
            last_checkpoint_full_size: gauge(
                &r,
                "lastCheckpointFullSize",
                "bytes referenced by the last completed checkpoint",
                job,
            ),
            completed_checkpoints: counter(
                &r,
                "numberOfCompletedCheckpoints",
                "completed checkpoints",
                job,
            ),
            failed_checkpoints: counter(
                &r,
                "numberOfFailedCheckpoints",
                "failed or expired checkpoints",
                job,
            ),
            in_progress_checkpoints: gauge(
                &r,
                "numberOfInProgressCheckpoints",
                "checkpoints in progress",
                job,
            ),
            last_restore_timestamp: gauge(
                &r,
                "lastCheckpointRestoreTimestamp",
                "ms since epoch of the last restore from a checkpoint",
                job,
            ),
            num_restarts: counter(&r, "numRestarts", "restarts of the job", job),
            restore_fallbacks: counter(
                &r,
                "checkpointRestoreFallbacks",
                "damaged checkpoints skipped on restore",
                job,
            ),
            records_in: counter(&r, "numRecordsIn", "records into the actor", actor),
            records_out: counter(&r, "numRecordsOut", "records out of the actor", actor),
            busy_ms_per_s: gauge(
                &r,
                "busyTimeMsPerSecond",
                "ms per second spent processing",
                actor,
            ),
            backpressured_ms_per_s: gauge(
                &r,
                "backPressuredTimeMsPerSecond",
                "ms per second blocked on output",
                actor,
            ),
            idle_ms_per_s: gauge(
                &r,
                "idleTimeMsPerSecond",
                "ms per second waiting for input",
                actor,
            ),
            alignment_time: gauge(
                &r,
                "checkpointAlignmentTime",
                "ms of the last barrier alignment",
                actor,
            ),
            output_watermark: gauge(
                &r,
                "currentOutputWatermark",
                "ms since epoch of the last watermark that reached the relation's rows",
                job,
            ),
            sink_records_in: counter(
                &r,
                "sinkRecordsIn",
                "changes that reached the sink's connector (Flink: numRecordsOut of the sink)",
                job,
            ),
            state_keys_cleaned: counter(
                &r,
                "stateKeysCleaned",
                "state keys (join keys, aggregation groups) dropped because watermarks passed them",
                &["operator"],
            ),
            registry: r,
        }
    })
}

/// The text exposition of every metric.
pub fn render() -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    let _ = prometheus::TextEncoder::new().encode(&metrics().registry.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}
