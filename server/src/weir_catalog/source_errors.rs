//! `weir_catalog.source_errors`: the latest records connectors skipped as bad (policy
//! `skip`), oldest first — what SHOW SOURCE ERRORS lists.

use super::{ts, Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const SOURCE_ERRORS: Table = Table {
    spec: Spec {
        name: "source_errors",
        columns: &[
            ("table_name", Text),
            ("partition", Int4),
            ("offset", Int8),
            ("reason", Text),
            ("at", Timestamp),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.bad_records
        .iter()
        .map(|r| {
            vec![
                r.table.clone().into(),
                V::I32(r.partition),
                V::I64(r.offset),
                r.reason.clone().into(),
                ts(r.at_ms),
            ]
        })
        .collect()
}
