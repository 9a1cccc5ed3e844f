//! The streaming plan handed from the planner to the runtime: fragments of chained
//! operators connected by exchanges.
//!
//! Fragments are listed inputs-first; the last fragment produces the view's rows. Each
//! fragment runs as `parallelism` actors, or as one actor when `single` (global
//! aggregates). A fragment's output goes to every fragment that lists it as an input
//! (usually one; several when the planner shares an aggregation between identical
//! subqueries), or to the view's hub.

use crate::exchange::ExchangeKind;
use crate::operators::hash_agg::HashAggSpec;
use crate::operators::hash_join::HashJoinSpec;
use crate::operators::over_window::OverWindowSpec;
use crate::operators::top_n::TopNSpec;
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
    /// Each input row once per projection (a UNION ALL of projections of one scan).
    Expand {
        projections: Vec<Vec<Arc<dyn PhysicalExpr>>>,
        schema: SchemaRef,
    },
    HashAgg(HashAggSpec),
    HashJoin(HashJoinSpec),
    TopN(TopNSpec),
    OverWindow(OverWindowSpec),
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
            OperatorSpec::Expand { projections, .. } => {
                format!("Expand: {} projections of each row", projections.len())
            }
            OperatorSpec::HashAgg(spec) => format!(
                "HashAgg: groups={} aggs=[{}] uid={} state=StateTable(key_group, group key -> accumulators){}",
                spec.group_types.len(),
                spec.calls
                    .iter()
                    .map(|c| c.kind.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.uid,
                if spec.emit_on_window_close {
                    " emits closed windows once"
                } else if spec.clean_by_watermark {
                    " cleaned behind watermarks on group keys"
                } else {
                    ""
                }
            ),
            OperatorSpec::HashJoin(spec) => format!(
                "HashJoin: {} keys={}{} uid={} state=StateTable(key_group, join key -> rows with match counts) per side, cleaned behind watermarks on keys{}",
                spec.kind.name(),
                spec.key_types.len(),
                spec.filter
                    .as_ref()
                    .map(|f| format!(" condition={f}"))
                    .unwrap_or_default(),
                spec.uid,
                if spec.interval_bounds.is_empty() {
                    String::new()
                } else {
                    format!(" and {} interval bounds", spec.interval_bounds.len())
                }
            ),
            OperatorSpec::TopN(spec) => format!(
                "TopN: partition keys={} order keys={} offset={} limit={}{} uid={} state=StateTable(key_group, partition -> every row in order)",
                spec.layout.partition_types.len(),
                spec.layout.sort_fields.len(),
                spec.offset,
                spec.limit,
                spec.ranking
                    .map(|r| format!(" with {r:?}"))
                    .unwrap_or_default(),
                spec.layout.uid
            ),
            OperatorSpec::OverWindow(spec) => format!(
                "OverWindow: partition keys={} order keys={} functions=[{}] uid={} state=StateTable(key_group, partition -> every row in order)",
                spec.layout.partition_types.len(),
                spec.layout.sort_fields.len(),
                spec.window_exprs
                    .iter()
                    .map(|e| e.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.layout.uid
            ),
        }
    }

    /// The uid a stateful operator keeps its state under (pinned by `"uid.N"`).
    pub fn uid_mut(&mut self) -> Option<&mut String> {
        match self {
            OperatorSpec::HashAgg(spec) => Some(&mut spec.uid),
            OperatorSpec::HashJoin(spec) => Some(&mut spec.uid),
            OperatorSpec::TopN(spec) => Some(&mut spec.layout.uid),
            OperatorSpec::OverWindow(spec) => Some(&mut spec.layout.uid),
            _ => None,
        }
    }

    pub fn uid(&self) -> Option<&str> {
        match self {
            OperatorSpec::HashAgg(spec) => Some(&spec.uid),
            OperatorSpec::HashJoin(spec) => Some(&spec.uid),
            OperatorSpec::TopN(spec) => Some(&spec.layout.uid),
            OperatorSpec::OverWindow(spec) => Some(&spec.layout.uid),
            _ => None,
        }
    }

    /// Every uid this operator writes state under, with what that state holds.
    pub fn state_layouts(&self) -> Vec<(String, String)> {
        match self {
            OperatorSpec::HashAgg(spec) => vec![(spec.uid.clone(), spec.state_schema())],
            OperatorSpec::HashJoin(spec) => (0..2)
                .map(|s| (spec.side_uid(s), spec.side_state_schema(s)))
                .collect(),
            OperatorSpec::TopN(spec) => vec![(spec.layout.uid.clone(), spec.state_schema())],
            OperatorSpec::OverWindow(spec) => {
                vec![(spec.layout.uid.clone(), spec.state_schema())]
            }
            _ => vec![],
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
    /// Uid of the view's stored rows: the view's name and a fingerprint of its whole
    /// query, because those rows mean the whole query (a changed filter changes them).
    pub output_uid: String,
    /// The job ends in a sink instead of stored rows.
    pub sink: Option<SinkSpec>,
}

/// The connector at the end of a `CREATE SINK` job.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    Blackhole,
    Kafka(crate::operators::kafka_sink::KafkaSinkSpec),
    File(crate::operators::file_sink::FileSinkSpec),
}

/// The layout of stored rows: their column types.
pub fn rows_layout(schema: &arrow::datatypes::Schema) -> String {
    let types = schema
        .fields()
        .iter()
        .map(|f| f.data_type().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    format!("rows({types})")
}

impl StreamGraph {
    /// The job ends in a sink instead of stored rows.
    pub fn is_sink(&self) -> bool {
        self.sink.is_some()
    }

    /// Every stateful operator, in plan order (inputs first): what EXPLAIN numbers and
    /// what `"uid.N"` pins.
    pub fn stateful_mut(&mut self) -> Vec<&mut String> {
        self.fragments
            .iter_mut()
            .flat_map(|f| f.chain.iter_mut())
            .filter_map(OperatorSpec::uid_mut)
            .collect()
    }

    /// Uid -> what its state holds (types), for every uid this graph keeps state
    /// under; a savepoint records it so that a restore can refuse state that does not
    /// fit.
    pub fn state_schemas(&self, output: &arrow::datatypes::Schema) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .fragments
            .iter()
            .flat_map(|f| &f.chain)
            .flat_map(OperatorSpec::state_layouts)
            .collect();
        out.push((self.output_uid.clone(), rows_layout(output)));
        out
    }

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
