//! Append-only streams: which fragments of a graph can only ever emit inserts, so that
//! their aggregations may keep less state.
//!
//! A relation is append-only when nothing can delete from it: an unstored generator
//! source (it refuses DML). Filters, projections and expansions keep the property; an
//! inner join of two append-only inputs keeps it (a new row only ever adds matches,
//! and cleaning by watermark drops state without retracting output); an `EMIT ON
//! WINDOW CLOSE` aggregation emits each window once, as an insert. Anything else (an
//! updating aggregation, an outer or anti join, Top-N, OVER windows) may retract.
//!
//! What it buys: `min` / `max` over an append-only input keep one value per group
//! instead of the multiset of every value (Nexmark q4's and q7's `max(price)`).

use crate::error::Result;
use crate::graph::{FragmentInput, StreamGraph};
use std::collections::HashMap;

/// Marks the aggregate calls whose input is append-only (`AggCall::append_only`).
/// `append_only_relation` says which relations the graph reads are.
/// Fails when an operator cannot take a retracting input (a lookup join's left side).
pub fn mark(graph: &mut StreamGraph, append_only_relation: impl Fn(&str) -> bool) -> Result<()> {
    let mut output: HashMap<usize, bool> = HashMap::new();
    for frag in &mut graph.fragments {
        let inputs: Vec<bool> = frag
            .inputs
            .iter()
            .map(|input| match input {
                FragmentInput::Relation(name) => append_only_relation(name),
                FragmentInput::Fragment { id, .. } => output.get(id).copied().unwrap_or(false),
            })
            .collect();
        let mut current = inputs.iter().all(|a| *a);
        for (i, op) in frag.chain.iter_mut().enumerate() {
            current = if i == 0 {
                op.spec_mut().mark_append_only_inputs(&inputs)?
            } else {
                op.spec_mut().mark_append_only(current)
            };
        }
        output.insert(frag.id, current);
    }
    Ok(())
}
