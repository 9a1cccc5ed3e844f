//! `weir_catalog.savepoints`: every savepoint in the savepoint directory — what SHOW
//! SAVEPOINTS lists. A damaged one is listed by name with the reason in `location`.

use super::{int, ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};
use weir_storage::savepoint_meta::SavepointMetadata;

pub const SAVEPOINTS: Table = Table {
    spec: Spec {
        name: "savepoints",
        columns: &[
            ("name", Text),
            ("created", Timestamp),
            ("epoch", Int8),
            ("views", Text),
            ("tables", Text),
            ("size", Int8),
            ("location", Text),
            ("format_version", Int4),
        ],
    },
    rows,
};

fn names(m: &SavepointMetadata, tables: bool) -> String {
    m.views
        .iter()
        .filter(|v| v.table == tables)
        .map(|v| v.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.savepoints
        .iter()
        .map(|s| match s {
            Ok((m, location)) => vec![
                m.name.clone().into(),
                ts(m.created_ms),
                int(m.epoch),
                names(m, false).into(),
                names(m, true).into(),
                int(m.size()),
                location.clone().into(),
                V::I32(m.format_version as i32),
            ],
            Err(reason) => vec![
                reason.split(':').next().unwrap_or_default().into(),
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                format!("damaged: {reason}").into(),
                V::Null,
            ],
        })
        .collect()
}
