//! `weir_catalog.progress`: long work (backfills of new views, SAVEPOINT, RESTORE,
//! recovery), running and the latest finished, with done / total, rate and time
//! left — what the statements' progress NOTICEs say.

use super::{int, ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const PROGRESS: Table = Table {
    spec: Spec {
        name: "progress",
        columns: &[
            ("id", Int8),
            ("kind", Text),
            ("object", Text),
            ("status", Text),
            ("done", Int8),
            ("total", Int8),
            ("unit", Text),
            ("rate_per_s", Float8),
            ("eta_ms", Int8),
            ("started", Timestamp),
            ("updated", Timestamp),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.progress
        .iter()
        .map(|p| {
            vec![
                int(p.id),
                p.kind.into(),
                p.object.clone().into(),
                p.status.into(),
                int(p.done),
                p.total.map_or(V::Null, int),
                p.unit.as_str().into(),
                p.rate_per_s.map_or(V::Null, V::F64),
                p.eta_ms.into(),
                ts(p.started_ms),
                ts(p.updated_ms),
            ]
        })
        .collect()
}
