//! [`StreamSpec`]: everything the stream graph needs to know about one operator, said
//! once, beside the operator's code: how EXPLAIN shows it, the uid and layout of the
//! state it keeps, whether its output stays append-only, whether watermarks pass it,
//! whether a view's rows can be rebuilt from its state, and how to build it from one
//! [`BuildContext`].
//!
//! `graph.rs` lists the specs in `OperatorSpec` (one registration line each); nothing
//! else matches on the kind of operator. Adding an operator means its file (operator
//! and spec), its planner rule and that line.

use crate::barrier::Watermark;
use crate::error::Result;
use crate::operator::Operator;
use datafusion::common::ScalarValue;
use std::collections::BTreeSet;
use std::sync::Arc;
use weir_storage::{KeyGroupRange, StateBackend};

/// How a stateful operator starts: which key groups it owns and whether the backend
/// holds its state from a checkpoint or savepoint. Every stateful operator takes it.
#[derive(Debug, Clone, Copy)]
pub struct StateRestore {
    pub max_parallelism: u32,
    /// This actor's share of the key groups at the current parallelism.
    pub key_groups: KeyGroupRange,
    /// The backend holds this operator's state: load `key_groups` of it.
    pub restored: bool,
    /// The view's rows were not checkpointed (they are a function of this state): the
    /// first barrier emits every restored row again.
    pub reemit: bool,
    /// Record changed keys for incremental checkpoints.
    pub track_changes: bool,
}

impl StateRestore {
    /// A fresh operator owning every key group (tests).
    pub fn fresh(max_parallelism: u32) -> StateRestore {
        StateRestore {
            max_parallelism,
            key_groups: KeyGroupRange::for_actor(0, 1, max_parallelism),
            restored: false,
            reemit: false,
            track_changes: false,
        }
    }

    /// A fresh operator owning every key group that records its changed keys, as
    /// one whose checkpoints are incremental does (tests).
    pub fn tracked(max_parallelism: u32) -> StateRestore {
        StateRestore {
            track_changes: true,
            ..StateRestore::fresh(max_parallelism)
        }
    }
}

/// The output columns of `op` that carry a watermark when its input columns `input`
/// do: a watermark of each runs through the operator (the same code as at run time).
pub fn watermarks_through(op: &mut dyn Operator, input: &BTreeSet<usize>) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for &column in input {
        let w = Watermark {
            column,
            value: ScalarValue::TimestampMillisecond(Some(0), None),
        };
        let passed = op.process_watermark(w, &mut Vec::new()).unwrap_or_default();
        out.extend(passed.into_iter().map(|w| w.column));
    }
    out
}

/// What building an operator for one actor needs.
pub struct BuildContext {
    pub backend: Arc<dyn StateBackend>,
    pub restore: StateRestore,
}

/// Whether watermarks pass an operator in the plan (at run time each operator's
/// `Operator::process_watermark` says how).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkFlow {
    Passes,
    /// The operator may still change rows older than any watermark (joins, Top-N,
    /// OVER windows), so no window after it could ever close.
    Stops,
}

pub trait StreamSpec {
    /// The operator's name: the start of its EXPLAIN line, and what errors call it.
    fn kind(&self) -> &'static str;

    /// Its EXPLAIN line (stable: tests and users read it).
    fn describe(&self) -> String;

    /// The uid its state is kept under (pinned by `"uid.N"`), if it keeps state.
    fn uid(&self) -> Option<&str> {
        None
    }

    fn uid_mut(&mut self) -> Option<&mut String> {
        None
    }

    /// Every uid it writes state under, with what that state holds (savepoints store
    /// and compare these strings: they must not change for the same state).
    fn state_layouts(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Given whether its input is append-only, records what it needs to know about
    /// that and returns whether its output is.
    fn mark_append_only(&mut self, input_append_only: bool) -> bool;

    /// The first operator of a fragment, told about each input: by default
    /// [`Self::mark_append_only`] of whether all are. An operator that cannot run over
    /// inputs that retract refuses here (at deployment).
    fn mark_append_only_inputs(&mut self, inputs: &[bool]) -> Result<bool> {
        Ok(self.mark_append_only(inputs.iter().all(|a| *a)))
    }

    fn watermarks(&self) -> WatermarkFlow;

    /// The output columns that carry a watermark when the input columns `input` do.
    /// By default all of them when watermarks pass, none when they stop; operators
    /// that move columns answer by running a watermark through their own code.
    fn watermark_columns(&self, input: &BTreeSet<usize>) -> BTreeSet<usize> {
        match self.watermarks() {
            WatermarkFlow::Passes => input.clone(),
            WatermarkFlow::Stops => BTreeSet::new(),
        }
    }

    /// `EMIT ON WINDOW CLOSE`: a window aggregation whose windows carry a watermark
    /// (its input columns `watermarked` do) switches to emitting each window once,
    /// when the watermark closes it, and says so.
    fn close_windows(&mut self, _watermarked: &BTreeSet<usize>) -> bool {
        false
    }

    /// The rows it emits can be rebuilt from its state on restore (so a view ending in
    /// it, followed only by stateless operators, need not checkpoint its rows).
    fn rederives_rows(&self) -> bool {
        false
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>>;
}
