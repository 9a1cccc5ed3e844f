//! From DataFusion's optimized logical plan to Weir's streaming plan.
//!
//! The logical plan (bound, type-coerced and optimized by DataFusion) is walked bottom
//! up. Stateless nodes (scan, filter, projection) are chained into the current fragment;
//! an aggregation closes the fragment with a hash exchange on its group keys (or a
//! single-actor exchange for a global aggregate) and starts a new one; a union feeds
//! every branch into one fragment. The last fragment ends in the view's Materialize.
//!
//! Stateful operators get uids from the view's name and what their state means (group
//! keys and aggregate calls), never from their position in the plan, so edits around
//! them (a projection, rename or filter after an aggregate, another branch) keep them.
//! The view's stored rows get `<view>.materialize.<fingerprint of the whole plan>`:
//! those rows mean the whole query, so any change to it must not reuse them.

use crate::error::{SqlError, SqlResult};
use crate::lookup_join::{marks, reads_lookup_table, strip_marker};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Distinct, Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use weir_executor::aggregate::{AggCall, AggKind};
use weir_executor::exchange::ExchangeKind;
use weir_executor::operators::expand::{ExpandShape, ExpandSpec, HopWindows};
use weir_executor::operators::filter::FilterSpec;
use weir_executor::operators::hash_agg::HashAggSpec;
use weir_executor::operators::project::ProjectSpec;
use weir_executor::{FragmentInput, FragmentSpec, OperatorSpec, StreamGraph};

/// A fragment under construction.
pub(crate) struct Partial {
    pub(crate) inputs: Vec<FragmentInput>,
    pub(crate) chain: Vec<OperatorSpec>,
    pub(crate) single: bool,
    /// Known to hold at most one row (a global aggregate, maybe filtered or
    /// projected): the one input a cross join may have.
    pub(crate) one_row: bool,
    pub(crate) schema: DFSchemaRef,
}

pub(crate) struct Builder<'a> {
    pub(crate) state: &'a SessionState,
    /// Whether a relation only ever inserts (an unstored generator source).
    pub(crate) append_only: &'a dyn Fn(&str) -> bool,
    pub(crate) view: String,
    pub(crate) fragments: Vec<FragmentSpec>,
    /// Aggregations that occur more than once in the query (Nexmark q5's two identical
    /// HOP counts): planned once, as a fragment every occurrence reads.
    repeated: Vec<LogicalPlan>,
    /// Those planned so far: (plan, fragment, single).
    shared: Vec<(LogicalPlan, usize, bool)>,
}

/// Aggregate subtrees that occur at least twice in `plan`.
fn repeated_aggregates(plan: &LogicalPlan) -> Vec<LogicalPlan> {
    let mut seen: Vec<LogicalPlan> = Vec::new();
    let mut repeated: Vec<LogicalPlan> = Vec::new();
    let mut stack = vec![plan];
    while let Some(p) = stack.pop() {
        if matches!(p, LogicalPlan::Aggregate(_)) {
            if seen.contains(p) {
                if !repeated.contains(p) {
                    repeated.push(p.clone());
                }
            } else {
                seen.push(p.clone());
            }
        }
        stack.extend(p.inputs());
    }
    repeated
}

/// All-nullable Arrow schema of a plan node: streaming operators never rely on
/// non-null declarations, and retractions can produce NULL (e.g. `min` of no rows).
pub fn nullable_schema(schema: &DFSchema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ))
}

pub struct PlannedView {
    pub graph: StreamGraph,
    /// Output schema with the names DataFusion gave the columns.
    pub schema: SchemaRef,
}

/// `EMIT ON WINDOW CLOSE`: every aggregation grouped by a column that carries a
/// watermark (a window bound of a table's watermarked column) emits each group once,
/// as an insert, when the watermark passes it, as Flink's window aggregations do. A
/// window aggregation over another one's windows (q5's maximum of counts), or a join
/// of two, then sees each window once. `relation_watermarks` gives the watermarked
/// columns of a table the query reads. Aggregations no watermark reaches (after a
/// join, a Top-N, an OVER window) stay incremental; at least one must close windows.
pub fn emit_on_window_close(
    graph: &mut StreamGraph,
    relation_watermarks: &dyn Fn(&str) -> BTreeSet<usize>,
) -> SqlResult<()> {
    // Fragments come after the fragments they read.
    let mut outputs: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut closing = 0;
    for f in &mut graph.fragments {
        let mut columns = f
            .inputs
            .iter()
            .map(|i| match i {
                FragmentInput::Relation(r) => relation_watermarks(r),
                FragmentInput::Fragment { id, .. } => outputs.get(id).cloned().unwrap_or_default(),
            })
            .reduce(|a, b| a.intersection(&b).copied().collect())
            .unwrap_or_default();
        for op in &mut f.chain {
            if op.spec_mut().close_windows(&columns) {
                closing += 1;
            }
            columns = op.spec().watermark_columns(&columns);
        }
        outputs.insert(f.id, columns);
    }
    if closing == 0 {
        return Err(SqlError::unsupported(
            "EMIT ON WINDOW CLOSE needs a GROUP BY over a window (window_start or \
             window_end of TUMBLE or HOP over a table with a WATERMARK, or of SESSION \
             over a generator source with one) that no join, Top-N or window function \
             comes before: those may still change older rows, so a window after them \
             would never close",
        ));
    }
    crate::hop_slicing::slice_hop_windows(graph);
    // The stored rows mean something else (final windows only).
    graph.output_uid.push_str(".eowc");
    Ok(())
}

/// A correlated subquery DataFusion could not turn into a join (its correlation is
/// not an equality) would compare every row with every other: a cross join, refused.
fn refuse_correlated_subqueries(plan: &LogicalPlan) -> SqlResult<()> {
    use datafusion::common::tree_node::TreeNode;
    let mut found = false;
    plan.apply(|node| {
        for e in node.expressions() {
            e.apply(|e| {
                if matches!(e, Expr::ScalarSubquery(sq) if !sq.outer_ref_columns.is_empty()) {
                    found = true;
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })?;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    if found {
        return Err(SqlError::unsupported(
            "a correlated subquery whose correlation is not an equality (such as \
             x.b < t.b) is refused in a materialized view: like a cross join, it compares \
             every row with every other. Correlate on equal columns",
        ));
    }
    Ok(())
}

/// Plans a view's (optimized) logical plan as a streaming graph.
/// `append_only` says which relations only ever insert (unstored generator sources):
/// some operators need that of their input (SESSION window aggregation).
pub fn plan_view(
    state: &SessionState,
    plan: &LogicalPlan,
    view: &str,
    append_only: &dyn Fn(&str) -> bool,
) -> SqlResult<PlannedView> {
    // Batch-only plan shapes first become shapes the streaming operators keep.
    let plan = crate::not_in::rewrite_not_in(plan.clone())?;
    let plan = &crate::grouping_sets::expand_grouping_sets(plan)?;
    refuse_correlated_subqueries(plan)?;
    refuse_misplaced_lookup_tables(plan)?;
    let mut b = Builder {
        state,
        append_only,
        view: view.to_string(),
        fragments: Vec::new(),
        repeated: repeated_aggregates(plan),
        shared: Vec::new(),
    };
    // ORDER BY without LIMIT does not change a view's contents: Sort is skipped.
    let top = b.visit(plan)?;
    let schema = nullable_schema(&top.schema);
    b.finish(top, schema.clone());
    let fingerprint =
        weir_storage::key_group::key_hash(plan.display_indent().to_string().as_bytes());
    let mut graph = StreamGraph {
        fragments: b.fragments,
        output_uid: format!("{view}.materialize.{fingerprint:016x}"),
        sink: None,
    };
    // Two aggregations with the same meaning in one view (a self-union) keep apart:
    // the second is `<uid>.2`, in plan order.
    let mut seen: Vec<String> = Vec::new();
    for uid in graph.stateful_mut() {
        let base = uid.clone();
        let mut n = 1;
        while seen.contains(uid) {
            n += 1;
            *uid = format!("{base}.{n}");
        }
        seen.push(uid.clone());
    }
    // Aggregations whose output a later fragment keeps drop groups behind watermarks
    // (the last fragment's rows are rebuilt from its aggregation's state on restore,
    // so that one keeps every group).
    let last = graph.fragments.len().saturating_sub(1);
    for f in &mut graph.fragments[..last] {
        for op in &mut f.chain {
            if let OperatorSpec::HashAgg(spec) = op {
                spec.clean_by_watermark = true;
            }
        }
    }
    Ok(PlannedView { graph, schema })
}

/// Every table read `FOR SYSTEM_TIME AS OF PROCTIME()` must be a join's right side.
fn refuse_misplaced_lookup_tables(plan: &LogicalPlan) -> SqlResult<()> {
    let mut lookups = 0;
    plan.apply(|node| {
        if let LogicalPlan::Join(j) = node {
            lookups += usize::from(reads_lookup_table(&j.right));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if marks(plan) > lookups {
        return Err(SqlError::unsupported(
            "a table read FOR SYSTEM_TIME AS OF PROCTIME() in a materialized view must be \
             the right side of a JOIN or LEFT JOIN (a lookup join)",
        ));
    }
    Ok(())
}

/// The exchange into a keyed operator whose key is `keys` of its input: by hash of
/// the key, or to one actor when there is no key.
pub(crate) fn keyed_exchange(keys: std::ops::Range<usize>) -> ExchangeKind {
    if keys.is_empty() {
        ExchangeKind::Single
    } else {
        ExchangeKind::Hash {
            keys: keys.collect(),
        }
    }
}

impl Builder<'_> {
    /// The uid of a stateful operator of `kind` whose state means `canonical` (its
    /// keys and calls, never its place in the plan): `<view>.<kind>.<hash>`.
    pub(crate) fn uid(&self, kind: &str, canonical: &str) -> String {
        format!(
            "{}.{kind}.{:016x}",
            self.view,
            weir_storage::key_group::key_hash(canonical.as_bytes())
        )
    }

    pub(crate) fn physical(
        &self,
        expr: &Expr,
        schema: &DFSchema,
    ) -> SqlResult<Arc<dyn PhysicalExpr>> {
        let expr = crate::regex_match_test::rewrite_match_tests(expr);
        Ok(self.state.create_physical_expr(expr, schema)?)
    }

    pub(crate) fn finish(&mut self, p: Partial, output_schema: SchemaRef) -> usize {
        let id = self.fragments.len();
        self.fragments.push(FragmentSpec {
            id,
            single: p.single,
            inputs: p.inputs,
            chain: p.chain,
            output_schema,
        });
        id
    }

    pub(crate) fn visit(&mut self, plan: &LogicalPlan) -> SqlResult<Partial> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                if scan.fetch.is_some() {
                    return Err(SqlError::unsupported(
                        "LIMIT in a materialized view is not supported yet",
                    ));
                }
                let source_schema = scan.source.schema();
                let full = Arc::new(DFSchema::try_from_qualified_schema(
                    scan.table_name.clone(),
                    &source_schema,
                )?);
                let mut p = Partial {
                    inputs: vec![FragmentInput::Relation(scan.table_name.table().to_string())],
                    chain: vec![],
                    single: false,
                    one_row: false,
                    schema: full.clone(),
                };
                let filters = scan.filters.iter().filter_map(|f| strip_marker(f).0);
                if let Some(pred) = filters.reduce(|a, b| a.and(b)) {
                    let predicate = self.physical(&pred, &full)?;
                    p.chain.push(OperatorSpec::Filter(FilterSpec { predicate }));
                }
                if let Some(proj) = &scan.projection {
                    let exprs = proj
                        .iter()
                        .map(|&i| {
                            Ok(
                                Arc::new(datafusion::physical_expr::expressions::Column::new(
                                    source_schema.field(i).name(),
                                    i,
                                )) as Arc<dyn PhysicalExpr>,
                            )
                        })
                        .collect::<SqlResult<Vec<_>>>()?;
                    p.chain.push(OperatorSpec::Project(ProjectSpec {
                        exprs,
                        schema: nullable_schema(&scan.projected_schema),
                    }));
                    p.schema = scan.projected_schema.clone();
                }
                Ok(p)
            }
            LogicalPlan::Projection(proj) => {
                let mut p = self.visit(&proj.input)?;
                let exprs = proj
                    .expr
                    .iter()
                    .map(|e| self.physical(e, &p.schema))
                    .collect::<SqlResult<Vec<_>>>()?;
                p.chain.push(OperatorSpec::Project(ProjectSpec {
                    exprs,
                    schema: nullable_schema(&proj.schema),
                }));
                p.schema = proj.schema.clone();
                Ok(p)
            }
            LogicalPlan::Filter(f) => {
                if let Some(top) = self.row_number_filter(f)? {
                    return Ok(top);
                }
                let mut p = self.visit(&f.input)?;
                // A lookup table's mark is no condition (`stream_join` reads it).
                if let Some(pred) = strip_marker(&f.predicate).0 {
                    let predicate = self.physical(&pred, &p.schema)?;
                    p.chain.push(OperatorSpec::Filter(FilterSpec { predicate }));
                }
                Ok(p)
            }
            LogicalPlan::SubqueryAlias(a) => {
                let mut p = self.visit(&a.input)?;
                p.schema = a.schema.clone();
                Ok(p)
            }
            LogicalPlan::Sort(s) if s.fetch.is_none() => self.visit(&s.input),
            LogicalPlan::Aggregate(agg) => {
                if let Some(&(_, id, single)) = self.shared.iter().find(|(s, _, _)| s == plan) {
                    return Ok(Self::reading_shared(id, single, &agg.schema));
                }
                let p = match self.session_aggregate(agg)? {
                    Some(p) => p,
                    None => {
                        let p = self.visit(&agg.input)?;
                        self.aggregate(p, &agg.group_expr, &agg.aggr_expr, &agg.schema)?
                    }
                };
                if !self.repeated.contains(plan) {
                    return Ok(p);
                }
                let single = p.single;
                let id = self.finish(p, nullable_schema(&agg.schema));
                self.shared.push((plan.clone(), id, single));
                Ok(Self::reading_shared(id, single, &agg.schema))
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let p = self.visit(input)?;
                let schema = input.schema().clone();
                let group: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
                self.aggregate(p, &group, &[], &schema)
            }
            LogicalPlan::Union(u) => {
                if let Some(p) = self.union_of_projections(u)? {
                    return Ok(p);
                }
                let mut inputs = Vec::new();
                for child in &u.inputs {
                    let p = self.visit(child)?;
                    if p.chain.is_empty() && !p.single {
                        inputs.extend(p.inputs);
                    } else {
                        let schema = nullable_schema(&p.schema);
                        let id = self.finish(p, schema);
                        inputs.push(FragmentInput::Fragment {
                            id,
                            exchange: ExchangeKind::RoundRobin,
                        });
                    }
                }
                Ok(Partial {
                    inputs,
                    chain: vec![],
                    single: false,
                    one_row: false,
                    schema: u.schema.clone(),
                })
            }
            LogicalPlan::Join(join) => self.join(join),
            LogicalPlan::Limit(l) => self.limit(l),
            LogicalPlan::Sort(s) => {
                let p = self.visit(&s.input)?;
                self.top_n(
                    p,
                    crate::stream_top_n::TopNQuery {
                        partition: &[],
                        order: &s.expr,
                        offset: 0,
                        limit: s.fetch.unwrap_or(usize::MAX),
                        ranking: None,
                        out_schema: s.input.schema().clone(),
                    },
                )
            }
            LogicalPlan::Window(w) => self.over_window(w),
            LogicalPlan::Distinct(Distinct::On(_)) => Err(SqlError::unsupported(
                "DISTINCT ON in materialized views is not supported yet",
            )),
            LogicalPlan::EmptyRelation(_) | LogicalPlan::Values(_) => Err(SqlError::unsupported(
                "a materialized view must read at least one table or view",
            )),
            other => Err(SqlError::unsupported(format!(
                "{} in materialized views is not supported yet",
                other
                    .display()
                    .to_string()
                    .split(':')
                    .next()
                    .unwrap_or("this plan node")
            ))),
        }
    }

    /// A fragment that reads a shared aggregation's fragment.
    fn reading_shared(id: usize, single: bool, schema: &DFSchemaRef) -> Partial {
        Partial {
            inputs: vec![FragmentInput::Fragment {
                id,
                exchange: if single {
                    ExchangeKind::Single
                } else {
                    ExchangeKind::RoundRobin
                },
            }],
            chain: vec![],
            single,
            one_row: single,
            schema: schema.clone(),
        }
    }

    /// A UNION ALL whose branches all project one and the same input (HOP windows,
    /// over a table or a view): the input is planned and read once, and an Expand
    /// applies every projection to each of its rows.
    fn union_of_projections(
        &mut self,
        u: &datafusion::logical_expr::Union,
    ) -> SqlResult<Option<Partial>> {
        let projections: Vec<&datafusion::logical_expr::Projection> = u
            .inputs
            .iter()
            .filter_map(|c| match c.as_ref() {
                LogicalPlan::Projection(p) => Some(p),
                _ => None,
            })
            .collect();
        if projections.len() < 2
            || projections.len() != u.inputs.len()
            || projections.iter().any(|p| p.input != projections[0].input)
        {
            return Ok(None);
        }
        let mut p = self.visit(&projections[0].input)?;
        let mut all = Vec::new();
        for proj in &projections {
            all.push(
                proj.expr
                    .iter()
                    .map(|e| self.physical(e, &p.schema))
                    .collect::<SqlResult<Vec<_>>>()?,
            );
        }
        p.chain.push(OperatorSpec::Expand(ExpandSpec {
            shape: HopWindows::of(&all).map_or(ExpandShape::Projections, ExpandShape::Hop),
            projections: all,
            schema: nullable_schema(&u.schema),
        }));
        p.schema = u.schema.clone();
        Ok(Some(p))
    }

    fn aggregate(
        &mut self,
        mut p: Partial,
        group_expr: &[Expr],
        aggr_expr: &[Expr],
        out_schema: &DFSchemaRef,
    ) -> SqlResult<Partial> {
        let input = self.aggregate_input(
            &p.schema,
            group_expr,
            aggr_expr,
            out_schema,
            group_expr.len(),
        )?;
        let AggregateInput {
            exprs: pre_exprs,
            schema: pre_schema,
            group_types,
            calls,
            canonical,
        } = input;
        p.chain.push(OperatorSpec::Project(ProjectSpec {
            exprs: pre_exprs,
            schema: pre_schema.clone(),
        }));
        let single = group_expr.is_empty();
        let upstream = self.finish(p, pre_schema);
        let uid = self.uid("hashagg", &canonical);
        let spec = HashAggSpec {
            uid,
            group_types,
            calls,
            output_schema: nullable_schema(out_schema),
            emit_on_window_close: false,
            clean_by_watermark: false,
        };
        Ok(Partial {
            inputs: vec![FragmentInput::Fragment {
                id: upstream,
                exchange: keyed_exchange(0..group_expr.len()),
            }],
            chain: vec![OperatorSpec::HashAgg(spec)],
            single,
            one_row: single,
            schema: out_schema.clone(),
        })
    }

    /// What an aggregation reads: the projection before its exchange (`[group keys...,
    /// per call: argument, filter, ...]` over `in_schema`), the group key types, the
    /// calls, and the canonical text its uid hashes. Call `j`'s output type is field
    /// `first_call + j` of `out_schema`.
    pub(crate) fn aggregate_input(
        &self,
        in_schema: &DFSchemaRef,
        group_expr: &[Expr],
        aggr_expr: &[Expr],
        out_schema: &DFSchemaRef,
        first_call: usize,
    ) -> SqlResult<AggregateInput> {
        let in_schema = in_schema.clone();
        // Pre-aggregation projection: [group keys..., per call: argument, filter].
        let mut pre_exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut pre_fields: Vec<Field> = Vec::new();
        let mut push = |b: &Self, e: &Expr, name: String| -> SqlResult<(usize, DataType)> {
            let t = e.get_type(&in_schema)?;
            pre_exprs.push(b.physical(e, &in_schema)?);
            pre_fields.push(Field::new(name, t.clone(), true));
            Ok((pre_exprs.len() - 1, t))
        };
        let mut group_types = Vec::new();
        for (i, g) in group_expr.iter().enumerate() {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(SqlError::unsupported(
                    "GROUPING SETS, CUBE and ROLLUP in materialized views are not supported yet",
                ));
            }
            let (_, t) = push(self, g, format!("_group{i}"))?;
            group_types.push(t);
        }
        let mut calls = Vec::new();
        let mut canonical = format!(
            "groups[{}]",
            group_expr
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        // count(DISTINCT) arguments pushed so far: (expression, column, type).
        let mut distinct_args: Vec<(Expr, usize, DataType)> = Vec::new();
        let mut shares_sets = false;
        for (j, a) in aggr_expr.iter().enumerate() {
            let a = a.clone().unalias();
            let Expr::AggregateFunction(AggregateFunction { func, params }) = &a else {
                return Err(SqlError::unsupported(format!(
                    "aggregate expression {a} is not supported in materialized views"
                )));
            };
            let name = func.name().to_ascii_lowercase();
            // min(DISTINCT x) is min(x); likewise max.
            let distinct = params.distinct && name != "min" && name != "max";
            if distinct && !matches!(name.as_str(), "count" | "sum" | "avg") {
                return Err(SqlError::unsupported(format!(
                    "{a}: DISTINCT aggregates other than count, sum and avg (DISTINCT ...) are not supported in materialized views yet"
                )));
            }
            let ordered_kind = matches!(
                name.as_str(),
                "string_agg" | "array_agg" | "first_value" | "last_value"
            );
            if !params.order_by.is_empty() && !ordered_kind {
                return Err(SqlError::unsupported(format!(
                    "{a}: ORDER BY inside {name}() is not supported in materialized views yet"
                )));
            }
            let is_star = !distinct
                && name == "count"
                && params.args.len() == 1
                && matches!(&params.args[0], Expr::Literal(v, _) if !v.is_null());
            let kind = match name.as_str() {
                "count" if distinct => AggKind::CountDistinct,
                "count" if is_star => AggKind::CountStar,
                "count" => AggKind::Count,
                "sum" if distinct => AggKind::SumDistinct,
                "avg" | "mean" if distinct => AggKind::AvgDistinct,
                "sum" => AggKind::Sum,
                "avg" | "mean" => AggKind::Avg,
                "min" => AggKind::Min,
                "max" => AggKind::Max,
                "bool_and" => AggKind::BoolAnd,
                "bool_or" => AggKind::BoolOr,
                "string_agg" => AggKind::StringAgg,
                "array_agg" => AggKind::ArrayAgg,
                "first_value" => AggKind::FirstValue,
                "last_value" => AggKind::LastValue,
                other => {
                    return Err(SqlError::unsupported(format!(
                        "aggregate function {other} is not supported in materialized views yet"
                    )))
                }
            };
            let arity = if kind == AggKind::StringAgg { 2 } else { 1 };
            if params.args.len() != arity {
                return Err(SqlError::unsupported(format!(
                    "{a}: aggregates with {} arguments are not supported",
                    params.args.len()
                )));
            }
            let shared = (kind == AggKind::CountDistinct)
                .then(|| distinct_args.iter().find(|(e, _, _)| *e == params.args[0]))
                .flatten();
            let (arg, arg_type) = if kind == AggKind::CountStar {
                (None, None)
            } else if let Some((_, i, t)) = shared {
                // The executor keeps one set of values per argument column, shared by
                // every count(DISTINCT) over it (q15's eight calls over two columns).
                shares_sets = true;
                (Some(*i), Some(t.clone()))
            } else {
                let (i, t) = push(self, &params.args[0], format!("_arg{j}"))?;
                if kind == AggKind::CountDistinct {
                    distinct_args.push((params.args[0].clone(), i, t.clone()));
                }
                (Some(i), Some(t))
            };
            let filter = match &params.filter {
                Some(f) => Some(push(self, f, format!("_filter{j}"))?.0),
                None => None,
            };
            let delimiter = if kind == AggKind::StringAgg {
                Some(push(self, &params.args[1], format!("_delim{j}"))?.0)
            } else {
                None
            };
            let mut order = Vec::new();
            for (k, o) in params.order_by.iter().enumerate() {
                let (col, t) = push(self, &o.expr, format!("_order{j}_{k}"))?;
                order.push((
                    col,
                    t,
                    arrow::compute::SortOptions {
                        descending: !o.asc,
                        nulls_first: o.nulls_first,
                    },
                ));
            }
            let output_type = out_schema.field(first_call + j).data_type().clone();
            calls.push(AggCall {
                kind,
                arg,
                arg_type,
                filter,
                output_type,
                order,
                delimiter,
                // Set at deployment, which knows the inputs (executor `append_only`).
                append_only: false,
            });
            canonical.push_str(&format!(";{a}"));
        }
        if shares_sets {
            // Before calls shared their sets, each kept its own; that state does not
            // fit this layout, so such an aggregation has a uid of its own: an older
            // checkpoint of it is not restored (the view rebuilds once) and a
            // savepoint's state of it is not claimed (docs/savepoints.md).
            canonical.push_str(";distinct sets shared");
        }
        Ok(AggregateInput {
            exprs: pre_exprs,
            schema: Arc::new(Schema::new(pre_fields)),
            group_types,
            calls,
            canonical,
        })
    }
}

/// See [`Builder::aggregate_input`].
pub(crate) struct AggregateInput {
    pub(crate) exprs: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) schema: SchemaRef,
    pub(crate) group_types: Vec<DataType>,
    pub(crate) calls: Vec<AggCall>,
    pub(crate) canonical: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::functions_aggregate::expr_fn::count_distinct;
    use datafusion::logical_expr::{col, lit, table_scan};

    /// The planned aggregation of `calls` over `bid(bidder, auction, price)`.
    fn planned_aggregation(calls: Vec<Expr>) -> weir_executor::operators::hash_agg::HashAggSpec {
        let schema = Schema::new(vec![
            Field::new("bidder", DataType::Int64, true),
            Field::new("auction", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
        ]);
        let plan = table_scan(Some("bid"), &schema, None)
            .and_then(|b| {
                let named = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| c.alias(format!("c{i}")));
                b.aggregate(Vec::<Expr>::new(), named)
            })
            .and_then(|b| b.build())
            .expect("a plan");
        let state = SessionStateBuilder::new().with_default_features().build();
        let planned = plan_view(&state, &plan, "v", &|_| true).expect("planned");
        planned
            .graph
            .fragments
            .iter()
            .flat_map(|f| &f.chain)
            .find_map(|op| match op {
                OperatorSpec::HashAgg(spec) => Some(spec.clone()),
                _ => None,
            })
            .expect("an aggregation")
    }

    /// q15's shape: count(DISTINCT) calls over one column, with and without FILTER,
    /// read one input column, so the executor keeps one set of values for them; and
    /// such an aggregation's uid is not the one it had when each call kept its own set.
    #[test]
    fn count_distinct_calls_over_one_argument_share_its_column() {
        let cheap = col("price").lt(lit(10_000i64));
        // count(DISTINCT bidder) FILTER (WHERE price < 10000)
        let mut ranked = count_distinct(col("bidder"));
        if let Expr::AggregateFunction(f) = &mut ranked {
            f.params.filter = Some(Box::new(cheap));
        }
        let shared = planned_aggregation(vec![
            count_distinct(col("bidder")),
            ranked,
            count_distinct(col("auction")),
        ]);
        let args: Vec<Option<usize>> = shared.calls.iter().map(|c| c.arg).collect();
        assert!(
            args[0] == args[1],
            "bidder's calls share a column: {args:?}"
        );
        assert!(args[0] != args[2], "auction has its own: {args:?}");
        assert!(shared.calls[1].filter.is_some() && shared.calls[0].filter.is_none());

        let alone = planned_aggregation(vec![count_distinct(col("bidder"))]);
        let alone_again = planned_aggregation(vec![count_distinct(col("bidder"))]);
        assert!(alone.uid == alone_again.uid, "uids are stable");
        let two = planned_aggregation(vec![
            count_distinct(col("bidder")),
            count_distinct(col("bidder")),
        ]);
        assert!(two.calls[0].arg == two.calls[1].arg);
        assert!(two.uid.contains(".hashagg.") && two.uid != alone.uid);
    }
}
