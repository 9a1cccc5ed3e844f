//! `weir_catalog.checkpoints`: the checkpoint history of every job (the latest
//! records; older ones are only in object storage) and dropped views' retained
//! checkpoints (status `RETAINED`, restorable by path) — what SHOW CHECKPOINTS lists.

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
            ("upload_ms", Int8),
            ("start_delay_ms", Int8),
            ("sync_ms", Int8),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    let retained = |job: u64, id: u64| f.retained.iter().any(|r| r.job == job && r.epoch == id);
    let history = f
        .checkpoints
        .iter()
        .filter(|r| !retained(r.job, r.id))
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
                r.upload_ms.map_or(V::Null, int),
                int(r.start_delay_ms),
                int(r.sync_ms),
            ]
        });
    let kept = f.retained.iter().map(|r| {
        vec![
            int(r.epoch),
            r.view.clone().into(),
            "RETAINED".into(),
            ts(r.trigger_time_ms),
            V::Null,
            int(0),
            int(r.full_size),
            int(0),
            r.path().into(),
            V::Null,
            V::Null,
            V::Null,
            V::Null,
        ]
    });
    history.chain(kept).collect()
}
