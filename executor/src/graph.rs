//! The streaming plan handed from the planner to the runtime: fragments of chained
//! operators connected by exchanges.
//!
//! Fragments are listed inputs-first; the last fragment produces the view's rows. Each
//! fragment runs as `parallelism` actors, or as one actor when `single` (global
//! aggregates). A fragment has one output edge (to its consumer, or to the view's hub).

use crate::exchange::ExchangeKind;
use crate::operators::hash_agg::HashAggSpec;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum OperatorSpec {
    Filter {
        predicate: Arc<dyn PhysicalExpr>,
    },
    Project {
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
    HashAgg(HashAggSpec),
}

impl OperatorSpec {
    pub fn describe(&self) -> String {
        match self {
            OperatorSpec::Filter { predicate } => format!("Filter: {predicate}"),
            OperatorSpec::Project { exprs, .. } => format!(
                "Project: {}",
                exprs
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            OperatorSpec::HashAgg(spec) => format!(
                "HashAgg: groups={} aggs=[{}] uid={} state=StateTable(key_group, group key -> accumulators)",
                spec.group_types.len(),
                spec.calls
                    .iter()
                    .map(|c| c.kind.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.uid
            ),
        }
    }
}

#[derive(Debug, Clone)]
pub enum FragmentInput {
    /// Rows of a table or view, through its hub (round-robin over this fragment).
    Relation(String),
    /// Another fragment of the same job, through an exchange.
    Fragment { id: usize, exchange: ExchangeKind },
}

#[derive(Debug, Clone)]
pub struct FragmentSpec {
    pub id: usize,
    pub single: bool,
    pub inputs: Vec<FragmentInput>,
    pub chain: Vec<OperatorSpec>,
    pub output_schema: SchemaRef,
}

#[derive(Debug, Clone, Default)]
pub struct StreamGraph {
    pub fragments: Vec<FragmentSpec>,
}

impl StreamGraph {
    /// Relations this graph reads.
    pub fn upstream_relations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for f in &self.fragments {
            for i in &f.inputs {
                if let FragmentInput::Relation(r) = i {
                    if !v.contains(r) {
                        v.push(r.clone());
                    }
                }
            }
        }
        v
    }
}
