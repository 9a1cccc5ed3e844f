//! `weir_catalog.sources`: each connector partition's position, end and lag (Kafka:
//! the next offset to read, the partition's high watermark from the last fetch, and
//! the records between them), with the bad records skipped in that partition.

use super::{Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};

pub const SOURCES: Table = Table {
    spec: Spec {
        name: "sources",
        columns: &[
            ("table_name", Text),
            ("connector", Text),
            ("partition", Int4),
            ("position", Int8),
            ("high_watermark", Int8),
            ("lag", Int8),
            // Among the latest skipped records kept (SHOW SOURCE ERRORS).
            ("bad_records", Int8),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    f.sources
        .iter()
        .map(|p| {
            let bad = f
                .bad_records
                .iter()
                .filter(|b| b.table == p.table && b.partition == p.partition)
                .count();
            vec![
                p.table.clone().into(),
                p.connector.into(),
                V::I32(p.partition),
                V::I64(p.position),
                p.high_watermark.into(),
                p.lag().into(),
                V::I64(bad as i64),
            ]
        })
        .collect()
}
