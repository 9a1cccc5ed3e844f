//! A running job's dataflow as the dashboard and `weir_catalog.operators` /
//! `weir_catalog.exchanges` show it: its fragments (a chain of operators run by
//! `parallelism` actors), the operators of each chain with their uids, and what feeds
//! each fragment (a relation's hub, or another fragment through an exchange). Built
//! from the deployed [`ViewSpec`] and the ids of the actors deploying it made, so the
//! per-actor metrics (labelled by actor id) can be summed per fragment.

use crate::exchange::ExchangeKind;
use crate::graph::FragmentInput;
use crate::runtime::ViewSpec;

/// One operator of a fragment's chain.
#[derive(Debug, Clone)]
pub struct OperatorInfo {
    /// The operator's name (`HashAgg`, `HashJoin`, `Materialize`, `Sink`, ...).
    pub kind: String,
    /// Its EXPLAIN line.
    pub description: String,
    /// The uid its state is kept under; stateless operators have none.
    pub uid: Option<String>,
    /// Every uid its state is written under (a join writes one per side): what its
    /// state size in a checkpoint adds up.
    pub state_uids: Vec<String>,
}

/// What feeds a fragment.
#[derive(Debug, Clone)]
pub enum InputInfo {
    /// A table's or view's rows, through its hub (round-robin over the actors).
    Relation(String),
    /// Another fragment of the job, through an exchange.
    Fragment {
        id: usize,
        /// `hash`, `round_robin` or `single`.
        partitioning: &'static str,
        /// Hash partitioning's key columns (of the upstream fragment's output).
        keys: Vec<usize>,
    },
}

#[derive(Debug, Clone)]
pub struct FragmentInfo {
    pub id: usize,
    pub parallelism: usize,
    /// Ids of the actors running this fragment now (they change at a restart).
    pub actors: Vec<u64>,
    pub operators: Vec<OperatorInfo>,
    pub inputs: Vec<InputInfo>,
}

/// A job's fragments in plan order (inputs first).
#[derive(Debug, Clone, Default)]
pub struct JobTopology {
    pub fragments: Vec<FragmentInfo>,
}

impl JobTopology {
    /// The topology of a view or sink deployed from `spec`, whose actors (in
    /// deployment order: fragment by fragment) have the ids `actors`.
    pub fn of_view(spec: &ViewSpec, counts: &[usize], actors: &[u64]) -> Self {
        let graph = &spec.graph;
        let last = graph.fragments.len().saturating_sub(1);
        let mut next = 0;
        let fragments = graph
            .fragments
            .iter()
            .enumerate()
            .map(|(gi, f)| {
                let n = counts.get(gi).copied().unwrap_or(0);
                let ids = actors.get(next..next + n).unwrap_or_default().to_vec();
                next += n;
                let mut operators: Vec<OperatorInfo> = f
                    .chain
                    .iter()
                    .map(|op| OperatorInfo {
                        kind: op.spec().kind().to_string(),
                        description: op.describe(),
                        uid: op.uid().map(str::to_string),
                        state_uids: op.state_layouts().into_iter().map(|(u, _)| u).collect(),
                    })
                    .collect();
                if gi == last {
                    operators.push(output_operator(spec));
                }
                FragmentInfo {
                    id: f.id,
                    parallelism: n,
                    actors: ids,
                    operators,
                    inputs: f.inputs.iter().map(input_info).collect(),
                }
            })
            .collect();
        Self { fragments }
    }

    /// A table's one actor: its Materialize, fed by the table's writes.
    pub fn of_table(name: &str, actor: Option<u64>) -> Self {
        Self {
            fragments: vec![FragmentInfo {
                id: 0,
                parallelism: 1,
                actors: actor.into_iter().collect(),
                operators: vec![OperatorInfo {
                    kind: "Materialize".into(),
                    description: format!("Materialize: {name}"),
                    uid: None,
                    state_uids: Vec::new(),
                }],
                inputs: vec![InputInfo::Relation(format!("{name} (writes)"))],
            }],
        }
    }
}

/// The operator deployment appends to the last fragment: the view's Materialize or
/// the sink's writer.
fn output_operator(spec: &ViewSpec) -> OperatorInfo {
    let graph = &spec.graph;
    match &graph.sink {
        None => OperatorInfo {
            kind: "Materialize".into(),
            description: format!("Materialize: {}", graph.output_uid),
            uid: Some(graph.output_uid.clone()),
            state_uids: vec![graph.output_uid.clone()],
        },
        Some(sink) => OperatorInfo {
            kind: "Sink".into(),
            description: format!("Sink: connector={}", sink.connector().connector()),
            uid: Some(graph.output_uid.clone()),
            state_uids: vec![graph.output_uid.clone()],
        },
    }
}

fn input_info(input: &FragmentInput) -> InputInfo {
    match input {
        FragmentInput::Relation(name) => InputInfo::Relation(name.clone()),
        FragmentInput::Fragment { id, exchange } => {
            let (partitioning, keys) = match exchange {
                ExchangeKind::Hash { keys } => ("hash", keys.clone()),
                ExchangeKind::RoundRobin => ("round_robin", Vec::new()),
                ExchangeKind::Single => ("single", Vec::new()),
            };
            InputInfo::Fragment {
                id: *id,
                partitioning,
                keys,
            }
        }
    }
}
