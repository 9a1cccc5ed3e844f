//! `EXPLAIN CREATE MATERIALIZED VIEW`: the operator graph as text: fragments, their
//! parallelism and exchanges, every operator and each stateful operator's uid and state.
//! Stateful operators are numbered in plan order (inputs first): `"uid.N" = 'name'` in
//! the view's `WITH (...)` pins the N-th one's uid.

use weir_executor::exchange::ExchangeKind;
use weir_executor::{FragmentInput, OperatorSpec, StreamGraph};

pub fn explain_graph(
    view: &str,
    graph: &StreamGraph,
    parallelism: u32,
    max_parallelism: u32,
) -> Vec<String> {
    let mut lines = vec![format!(
        "StreamingJob: {view} (max_parallelism={max_parallelism})"
    )];
    let last = graph.fragments.len().saturating_sub(1);
    let stateful: Vec<&str> = graph
        .fragments
        .iter()
        .flat_map(|f| &f.chain)
        .filter_map(OperatorSpec::uid)
        .collect();
    for (i, f) in graph.fragments.iter().enumerate().rev() {
        let p = if f.single { 1 } else { parallelism };
        let role = if i == last { " (output)" } else { "" };
        lines.push(format!("Fragment {}{role}: parallelism={p}", f.id));
        for input in &f.inputs {
            match input {
                FragmentInput::Relation(r) => {
                    lines.push(format!("  input: relation {r} (round-robin)"))
                }
                FragmentInput::Fragment { id, exchange } => {
                    let kind = match exchange {
                        ExchangeKind::Hash { keys } => {
                            format!("hash exchange on columns {keys:?} by key group")
                        }
                        ExchangeKind::RoundRobin => "round-robin exchange".to_string(),
                        ExchangeKind::Single => {
                            "single exchange (all rows to one actor)".to_string()
                        }
                    };
                    lines.push(format!("  input: fragment {id} ({kind})"));
                }
            }
        }
        for op in &f.chain {
            let number = op
                .uid()
                .and_then(|uid| stateful.iter().position(|u| *u == uid))
                .map(|n| format!("[uid.{}] ", n + 1))
                .unwrap_or_default();
            lines.push(format!("  {number}{}", op.describe()));
        }
        if i == last {
            lines.push(format!(
                "  Materialize: {view} uid={} (state: committed rows per epoch)",
                graph.output_uid
            ));
        }
    }
    lines
}
