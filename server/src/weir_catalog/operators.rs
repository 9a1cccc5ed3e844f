//! `weir_catalog.operators`: one row per operator of every job's fragments, with the
//! fragment's figures (its actors' records and time, summed or averaged: the
//! operators of a fragment run chained in the same actors, as Flink chains operators
//! into one task), the operator's state size in the last completed checkpoint, and
//! the job's output watermark on its last operator.

use super::{int, ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};
use weir_executor::metrics::ActorSample;
use weir_executor::topology::FragmentInfo;

pub const OPERATORS: Table = Table {
    spec: Spec {
        name: "operators",
        columns: &[
            ("job", Text),
            ("fragment_id", Int4),
            ("position", Int4),
            ("operator", Text),
            ("description", Text),
            ("uid", Text),
            ("parallelism", Int4),
            ("records_in", Int8),
            ("records_out", Int8),
            ("records_in_per_s", Int8),
            ("records_out_per_s", Int8),
            ("busy_ms_per_s", Int8),
            ("backpressured_ms_per_s", Int8),
            ("idle_ms_per_s", Int8),
            // Flink's back-pressure level: HIGH above 500 ms/s, LOW above 100, else OK.
            ("backpressure", Text),
            ("state_bytes", Int8),
            ("watermark", Timestamp),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    let mut out = Vec::new();
    for (job, _) in &f.jobs {
        let sizes = f.state_sizes.get(&job.name);
        let last_fragment = job.topology.fragments.len().saturating_sub(1);
        for (fi, fragment) in job.topology.fragments.iter().enumerate() {
            let m = fragment_sample(f, &job.name, fragment);
            let last_op = fragment.operators.len().saturating_sub(1);
            for (pos, op) in fragment.operators.iter().enumerate() {
                let state: Option<u64> =
                    sizes.map(|s| op.state_uids.iter().filter_map(|u| s.get(u)).sum());
                let watermark = (fi == last_fragment && pos == last_op)
                    .then(|| f.watermarks.get(&job.name))
                    .flatten()
                    .map_or(V::Null, |w| ts(*w as i64));
                out.push(vec![
                    job.name.clone().into(),
                    V::I32(fragment.id as i32),
                    V::I32(pos as i32),
                    op.kind.clone().into(),
                    op.description.clone().into(),
                    op.uid.clone().into(),
                    V::I32(fragment.parallelism as i32),
                    int(m.records_in),
                    int(m.records_out),
                    V::I64(m.records_in_per_s),
                    V::I64(m.records_out_per_s),
                    V::I64(m.busy_ms_per_s),
                    V::I64(m.backpressured_ms_per_s),
                    V::I64(m.idle_ms_per_s),
                    backpressure_level(m.backpressured_ms_per_s).into(),
                    state
                        .filter(|_| !op.state_uids.is_empty())
                        .map_or(V::Null, int),
                    watermark,
                ]);
            }
        }
    }
    out
}

/// A fragment's figures: records summed over its actors, times averaged (ms per
/// second of one actor, as Flink shows a task's).
fn fragment_sample(f: &Facts, job: &str, fragment: &FragmentInfo) -> ActorSample {
    let mut sum = ActorSample::default();
    let mut n = 0;
    for id in &fragment.actors {
        let Some(a) = f.actors.get(&(job.to_string(), *id)) else {
            continue;
        };
        n += 1;
        sum.records_in += a.records_in;
        sum.records_out += a.records_out;
        sum.records_in_per_s += a.records_in_per_s;
        sum.records_out_per_s += a.records_out_per_s;
        sum.busy_ms_per_s += a.busy_ms_per_s;
        sum.backpressured_ms_per_s += a.backpressured_ms_per_s;
        sum.idle_ms_per_s += a.idle_ms_per_s;
    }
    if n > 0 {
        sum.busy_ms_per_s /= n;
        sum.backpressured_ms_per_s /= n;
        sum.idle_ms_per_s /= n;
    }
    sum
}

/// Flink's thresholds for a task's back-pressure status.
pub fn backpressure_level(ms_per_s: i64) -> &'static str {
    match ms_per_s {
        m if m > 500 => "HIGH",
        m if m > 100 => "LOW",
        _ => "OK",
    }
}
