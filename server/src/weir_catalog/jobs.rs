//! `weir_catalog.jobs`: every job (materialized view, sink, connector-fed table) with
//! its status, restarts, last failure and freshness — what SHOW JOBS lists.

use super::{int, ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const JOBS: Table = Table {
    spec: Spec {
        name: "jobs",
        columns: &[
            ("name", Text),
            ("kind", Text),
            ("status", Text),
            ("parallelism", Int4),
            ("restarts", Int4),
            ("last_failure", Text),
            ("last_committed", Timestamp),
            // Now minus the last committed epoch: how stale its readable rows are.
            ("freshness_ms", Int8),
            ("fragments", Int4),
            ("actors", Int4),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.jobs
        .iter()
        .map(|(j, kind)| {
            let fragments = &j.topology.fragments;
            vec![
                j.name.clone().into(),
                (*kind).into(),
                j.status.as_str().into(),
                V::I32(j.parallelism as i32),
                V::I32(j.restarts as i32),
                j.last_failure.clone().into(),
                ts(j.committed_at_ms),
                int(f.now_ms.saturating_sub(j.committed_at_ms).max(0) as u64),
                V::I32(fragments.len() as i32),
                V::I32(fragments.iter().map(|fr| fr.actors.len()).sum::<usize>() as i32),
            ]
        })
        .collect()
}
