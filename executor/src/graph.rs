//! The streaming plan handed from the planner to the runtime: fragments of chained
//! operators connected by exchanges.
//!
//! Fragments are listed inputs-first; the last fragment produces the view's rows. Each
//! fragment runs as `parallelism` actors, or as one actor when `single` (global
//! aggregates). A fragment's output goes to every fragment that lists it as an input
//! (usually one; several when the planner shares an aggregation between identical
//! subqueries), or to the view's hub.

use crate::exchange::ExchangeKind;
use crate::operators::expand::ExpandSpec;
use crate::operators::filter::FilterSpec;
use crate::operators::hash_agg::HashAggSpec;
use crate::operators::hash_join::HashJoinSpec;
use crate::operators::over_window::OverWindowSpec;
use crate::operators::project::ProjectSpec;
use crate::operators::session_agg::SessionAggSpec;
use crate::operators::slide_windows::SlideWindowsSpec;
use crate::operators::spec::StreamSpec;
use crate::operators::top_n::TopNSpec;
use arrow::datatypes::SchemaRef;

/// Declares [`OperatorSpec`]: one variant per operator, each holding that operator's
/// spec (its [`StreamSpec`] implementation lives beside the operator).
macro_rules! operator_specs {
    ($($variant:ident($spec:ty)),* $(,)?) => {
        #[derive(Debug, Clone)]
        pub enum OperatorSpec {
            $($variant($spec)),*
        }

        impl OperatorSpec {
            /// What the graph knows about this operator.
            pub fn spec(&self) -> &dyn StreamSpec {
                match self {
                    $(OperatorSpec::$variant(s) => s),*
                }
            }

            pub fn spec_mut(&mut self) -> &mut dyn StreamSpec {
                match self {
                    $(OperatorSpec::$variant(s) => s),*
                }
            }
        }

        $(impl From<$spec> for OperatorSpec {
            fn from(s: $spec) -> Self {
                OperatorSpec::$variant(s)
            }
        })*
    };
}

// The operators a plan can hold: one registration line each.
operator_specs! {
    Filter(FilterSpec),
    Project(ProjectSpec),
    Expand(ExpandSpec),
    HashAgg(HashAggSpec),
    SessionAgg(SessionAggSpec),
    SlideWindows(SlideWindowsSpec),
    HashJoin(HashJoinSpec),
    TopN(TopNSpec),
    OverWindow(OverWindowSpec),
}

impl OperatorSpec {
    pub fn describe(&self) -> String {
        self.spec().describe()
    }

    /// The uid a stateful operator keeps its state under (pinned by `"uid.N"`).
    pub fn uid_mut(&mut self) -> Option<&mut String> {
        self.spec_mut().uid_mut()
    }

    pub fn uid(&self) -> Option<&str> {
        self.spec().uid()
    }

    /// Every uid this operator writes state under, with what that state holds.
    pub fn state_layouts(&self) -> Vec<(String, String)> {
        self.spec().state_layouts()
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

pub use crate::sinks::SinkSpec;

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
