//! `weir_catalog.exchanges`: the edges of every job's graph — what feeds each
//! fragment: a relation's changes (through its hub, spread round-robin) or another
//! fragment's output through an exchange (`hash` on key columns, `round_robin`,
//! `single`).

use super::{Facts, Table};
use crate::pg_catalog::rows::{Col::*, Spec, V};
use weir_executor::topology::InputInfo;

pub const EXCHANGES: Table = Table {
    spec: Spec {
        name: "exchanges",
        columns: &[
            ("job", Text),
            ("from_relation", Text),
            ("from_fragment", Int4),
            ("to_fragment", Int4),
            ("partitioning", Text),
            // Hash partitioning's key columns (positions in the upstream output).
            ("keys", Text),
        ],
    },
    rows,
};

fn rows(f: &Facts) -> Vec<Vec<V>> {
    let mut out = Vec::new();
    for (job, _) in &f.jobs {
        for fragment in &job.topology.fragments {
            for input in &fragment.inputs {
                let (relation, from, partitioning, keys) = match input {
                    InputInfo::Relation(r) => (V::Text(r.clone()), V::Null, "round_robin", V::Null),
                    InputInfo::Fragment {
                        id,
                        partitioning,
                        keys,
                    } => (
                        V::Null,
                        V::I32(*id as i32),
                        *partitioning,
                        if keys.is_empty() {
                            V::Null
                        } else {
                            keys.iter()
                                .map(|k| k.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                                .into()
                        },
                    ),
                };
                out.push(vec![
                    job.name.clone().into(),
                    relation,
                    from,
                    V::I32(fragment.id as i32),
                    partitioning.into(),
                    keys,
                ]);
            }
        }
    }
    out
}
