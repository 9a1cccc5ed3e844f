//! Prometheus metrics, with Flink's metric names where Flink has one.
//!
//! Per job (label `job_name`, Flink's, which does not clash with the `job` label
//! Prometheus gives every scraped target): `lastCheckpointDuration`, `lastCheckpointSize`,
//! `lastCheckpointFullSize`, `numberOfCompletedCheckpoints`, `numberOfFailedCheckpoints`,
//! `numberOfInProgressCheckpoints`, `lastCheckpointRestoreTimestamp`, `numRestarts`.
//! Per actor (labels `job_name`, `actor`): `numRecordsIn`, `numRecordsOut`,
//! `numRecordsInPerSecond`, `numRecordsOutPerSecond`, `busyTimeMsPerSecond`,
//! `backPressuredTimeMsPerSecond`, `idleTimeMsPerSecond`, `checkpointAlignmentTime`.
//! The `...PerSecond` gauges are rates over about the last second, published by each
//! actor at barriers. Per source partition (labels `job_name`, `partition`):
//! `pendingRecords` (FLIP-33's name: records behind the partition's end).
//! `docs/grafana/weir.json` is a Grafana dashboard over these.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::collections::HashMap;
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
    pub records_in_per_s: IntGaugeVec,
    pub records_out_per_s: IntGaugeVec,
    pub pending_records: IntGaugeVec,
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
    register(r, g)
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help).namespace("weir"), labels).expect("metric");
    register(r, c)
}

/// Names of every registered metric (a vector without samples yet is not in
/// [`render`]'s output, but dashboards may still name it).
static NAMES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn register<M: prometheus::core::Collector + Clone + 'static>(r: &Registry, m: M) -> M {
    NAMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(m.desc().iter().map(|d| d.fq_name.clone()));
    r.register(Box::new(m.clone())).expect("register");
    m
}

/// The full name (`weir_...`) of every metric this process exports.
pub fn exported_names() -> Vec<String> {
    metrics();
    NAMES.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
        let job = &["job_name"];
        let actor = &["job_name", "actor"];
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
            records_in_per_s: gauge(
                &r,
                "numRecordsInPerSecond",
                "records into the actor per second",
                actor,
            ),
            records_out_per_s: gauge(
                &r,
                "numRecordsOutPerSecond",
                "records out of the actor per second",
                actor,
            ),
            pending_records: gauge(
                &r,
                "pendingRecords",
                "records of a source partition not read yet (its end minus the position)",
                &["job_name", "partition"],
            ),
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

/// One actor's figures as `/metrics` shows them now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActorSample {
    pub records_in: u64,
    pub records_out: u64,
    pub records_in_per_s: i64,
    pub records_out_per_s: i64,
    pub busy_ms_per_s: i64,
    pub backpressured_ms_per_s: i64,
    pub idle_ms_per_s: i64,
}

/// Every actor's figures by (job, actor id), read from the registry's samples (what
/// `/metrics` renders), so that `weir_catalog.operators` and the dashboard show the
/// numbers Prometheus scrapes.
pub fn actor_samples() -> HashMap<(String, u64), ActorSample> {
    type Field = fn(&mut ActorSample, f64);
    let mut out: HashMap<(String, u64), ActorSample> = HashMap::new();
    for family in metrics().registry.gather() {
        let field: Field = match family.name() {
            "weir_numRecordsIn" => |s, v| s.records_in = v as u64,
            "weir_numRecordsOut" => |s, v| s.records_out = v as u64,
            "weir_numRecordsInPerSecond" => |s, v| s.records_in_per_s = v as i64,
            "weir_numRecordsOutPerSecond" => |s, v| s.records_out_per_s = v as i64,
            "weir_busyTimeMsPerSecond" => |s, v| s.busy_ms_per_s = v as i64,
            "weir_backPressuredTimeMsPerSecond" => |s, v| s.backpressured_ms_per_s = v as i64,
            "weir_idleTimeMsPerSecond" => |s, v| s.idle_ms_per_s = v as i64,
            _ => continue,
        };
        for m in family.get_metric() {
            let label = |name: &str| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_string())
            };
            let (Some(job), Some(actor)) = (label("job_name"), label("actor")) else {
                continue;
            };
            let Ok(actor) = actor.parse() else { continue };
            field(
                out.entry((job, actor)).or_default(),
                sample_value(&family, m),
            );
        }
    }
    out
}

/// A per-job metric's value by job (`currentOutputWatermark`, ...); `name` without
/// the `weir_` prefix.
pub fn job_values(name: &str) -> HashMap<String, f64> {
    let full = format!("weir_{name}");
    let mut out = HashMap::new();
    for family in metrics().registry.gather() {
        if family.name() != full {
            continue;
        }
        for m in family.get_metric() {
            if let Some(job) = m.get_label().iter().find(|l| l.name() == "job_name") {
                out.insert(job.value().to_string(), sample_value(&family, m));
            }
        }
    }
    out
}

fn sample_value(family: &prometheus::proto::MetricFamily, m: &prometheus::proto::Metric) -> f64 {
    match family.get_field_type() {
        prometheus::proto::MetricType::COUNTER => m.get_counter().get_value(),
        _ => m.get_gauge().get_value(),
    }
}
