//! End-to-end latency as a sink sees it: for each row, the wall clock at the sink
//! minus the time the row could first have been produced, read from one of its
//! timestamp columns plus a fixed offset (`blackhole.latency.column`,
//! `blackhole.latency.offset`).
//!
//! Meant for inputs whose event time runs with the wall clock: a Nexmark generator
//! with `nexmark.base.time` = its start and `nexmark.event.rate` =
//! `nexmark.max.events.per.second` makes each event's `date_time` the moment it is
//! due, and never writes it earlier. Then `date_time` of a pass-through row is its
//! ingest time, and `window_end` plus the watermark delay is when the event that
//! closes a window was ingested.

use crate::chunk::StreamChunk;
use crate::error::{ExecError, Result};
use arrow::array::TimestampMillisecondArray;
use arrow::datatypes::{DataType, Schema, TimeUnit};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Sub-buckets per power of two of microseconds: values are kept within ~2%.
const SUB_BUCKETS: usize = 32;
const BUCKETS: usize = 64 * SUB_BUCKETS;

/// Latencies in microseconds, in log-linear buckets.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    /// Rows whose time was still ahead of the sink's clock: not in the quantiles (a
    /// window that the end of a bounded input closed before its time).
    early: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            early: 0,
        }
    }
}

impl LatencyHistogram {
    pub fn record(&mut self, micros: i64) {
        if micros < 0 {
            self.early += 1;
            return;
        }
        self.counts[bucket(micros as u64)] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn early(&self) -> u64 {
        self.early
    }

    /// The latency (ms) below which fraction `q` of the rows fall; `None` when empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper_micros(b) as f64 / 1000.0);
            }
        }
        None
    }
}

/// Values below `SUB_BUCKETS` get a bucket each; above, each power of two is split
/// into `SUB_BUCKETS` equal parts.
fn bucket(v: u64) -> usize {
    if v < SUB_BUCKETS as u64 {
        return v as usize;
    }
    let power = 63 - v.leading_zeros() as usize; // v in [2^power, 2^(power+1))
    let shift = power - SUB_BUCKETS.trailing_zeros() as usize;
    let sub = ((v >> shift) as usize) - SUB_BUCKETS;
    ((power - SUB_BUCKETS.trailing_zeros() as usize + 1) * SUB_BUCKETS + sub).min(BUCKETS - 1)
}

/// The largest value of bucket `b`.
fn upper_micros(b: usize) -> u64 {
    if b < SUB_BUCKETS {
        return b as u64;
    }
    let group = b / SUB_BUCKETS; // >= 1
    let sub = (b % SUB_BUCKETS) as u64;
    let shift = group - 1;
    ((SUB_BUCKETS as u64 + sub + 1) << shift) - 1
}

/// Each latency-measuring sink's histogram, by sink name: its parallel instances (and
/// redeployments) add into one.
static HISTOGRAMS: LazyLock<Mutex<HashMap<String, Arc<Mutex<LatencyHistogram>>>>> =
    LazyLock::new(Default::default);

/// What sink `sink` measured in this process so far.
pub fn measured(sink: &str) -> Option<LatencyHistogram> {
    let all = HISTOGRAMS.lock().unwrap_or_else(|e| e.into_inner());
    let h = all.get(sink)?;
    let h = h.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Some(h)
}

/// One sink instance's measurement.
pub struct LatencyProbe {
    column: usize,
    offset_ms: i64,
    shared: Arc<Mutex<LatencyHistogram>>,
}

impl LatencyProbe {
    /// The index of `column`, which must be a timestamp of the sink's rows.
    pub fn column_of(schema: &Schema, column: &str) -> Result<usize> {
        let (i, field) = schema.column_with_name(column).ok_or_else(|| {
            ExecError::InvalidParameter(format!(
                "blackhole.latency.column: the sink has no column \"{column}\""
            ))
        })?;
        if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
            return Err(ExecError::InvalidParameter(format!(
                "blackhole.latency.column: \"{column}\" is {}, not a timestamp",
                field.data_type()
            )));
        }
        Ok(i)
    }

    /// Sink `sink`'s probe on its column `column` (see [`LatencyProbe::column_of`]).
    pub fn new(sink: &str, column: usize, offset_ms: i64) -> Self {
        let mut all = HISTOGRAMS.lock().unwrap_or_else(|e| e.into_inner());
        Self {
            column,
            offset_ms,
            shared: all.entry(sink.to_string()).or_default().clone(),
        }
    }

    /// Records every row of `chunk` against the clock now.
    pub fn observe(&self, chunk: &StreamChunk) {
        let as_ms = DataType::Timestamp(TimeUnit::Millisecond, None);
        let Ok(column) = arrow::compute::cast(&chunk.columns()[self.column], &as_ms) else {
            return;
        };
        let Some(times) = column.as_any().downcast_ref::<TimestampMillisecondArray>() else {
            return;
        };
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        for t in times.iter().flatten() {
            shared.record(now_us - (t + self.offset_ms) * 1000);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_values_within_a_few_percent() {
        for v in [
            0u64, 1, 31, 32, 33, 100, 999, 1_000, 12_345, 1_000_000, 60_000_000,
        ] {
            let b = bucket(v);
            let upper = upper_micros(b);
            assert!(upper >= v, "{v} above its bucket's top {upper}");
            assert!(
                upper as f64 <= v as f64 * 1.04 + 1.0,
                "{v} in a bucket up to {upper}"
            );
            if b > 0 {
                assert!(upper_micros(b - 1) < v, "{v} also fits bucket {}", b - 1);
            }
        }
    }

    #[test]
    fn quantiles_of_known_values() {
        let mut h = LatencyHistogram::default();
        for ms in 1..=100 {
            h.record(ms * 1000);
        }
        h.record(-5);
        let p50 = h.quantile_ms(0.5).unwrap();
        let p99 = h.quantile_ms(0.99).unwrap();
        assert!((49.0..=52.0).contains(&p50), "p50 {p50}");
        assert!((98.0..=102.0).contains(&p99), "p99 {p99}");
        assert_eq!(h.count(), 100);
        assert_eq!(h.early(), 1);
        assert_eq!(LatencyHistogram::default().quantile_ms(0.5), None);
    }
}
