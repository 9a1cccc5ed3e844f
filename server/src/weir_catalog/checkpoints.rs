//! `weir_catalog.checkpoints`: the checkpoint history of every job (the latest
//! records; older ones are only in object storage) — what SHOW CHECKPOINTS lists.

use super::{int, ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const CHECKPOINTS: Table = Table {
    spec: Spec {
        name: "checkpoints",
        columns: &[
            ("id", Int8),
            ("job", Text),
            ("status", Text),
            ("trigger_time", Timestamp),
            ("duration_ms", Int8),
            ("alignment_ms", Int8),
            ("full_size", Int8),
            ("incremental_size", Int8),
            ("path", Text),
            ("failure", Text),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.checkpoints
        .iter()
        .map(|r| {
            vec![
                int(r.id),
                r.job_name.clone().into(),
                r.status.as_str().into(),
                ts(r.trigger_time_ms),
                r.duration_ms.map_or(V::Null, int),
                int(r.alignment_ms),
                int(r.full_size),
                int(r.incremental_size),
                r.path.clone().into(),
                r.failure.clone().into(),
            ]
        })
        .collect()
}
