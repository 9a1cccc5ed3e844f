//! Correlated subqueries DataFusion cannot decorrelate, run as Postgres runs them: as a
//! *SubPlan* evaluated again for each outer row.
//!
//! DataFusion turns a correlated scalar subquery into a join when the correlation is
//! an equality it can group by; `(SELECT count(*) FROM t1 AS x WHERE x.b < t1.b)` is
//! left as a `ScalarSubquery` its physical planner refuses. After optimization, Weir's
//! query planner replaces each Projection or Filter that still holds a correlated
//! subquery with a [`SubPlanNode`]. Its [`SubPlanExec`] reads the input, and for every
//! row substitutes the row's values for the subquery's outer references, plans and runs
//! the subquery (at most one row: more is SQLSTATE 21000, none is NULL), and evaluates
//! the expression with the result in place. The cost is one subquery run per row, as in
//! Postgres; it serves SELECTs (materialized views refuse such subqueries: the
//! inequality makes them cross joins).

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result, ScalarValue};
use datafusion::execution::context::{QueryPlanner, SessionState};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use futures::{StreamExt, TryStreamExt};
use std::fmt;
use std::sync::Arc;

/// Weir's query planner: DataFusion's, plus SubPlans.
#[derive(Debug, Default)]
pub struct WeirQueryPlanner;

#[async_trait]
impl QueryPlanner for WeirQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = with_subplans(logical_plan.clone())?;
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(SubPlanPlanner)])
            .create_physical_plan(&plan, session)
            .await
    }
}

fn has_correlated_subquery(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::ScalarSubquery(sq) if !sq.outer_ref_columns.is_empty())))
        .unwrap_or(false)
}

/// Projections and Filters holding correlated scalar subqueries become SubPlanNodes.
fn with_subplans(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        let (kind, exprs, input, schema) = match &node {
            LogicalPlan::Projection(p) if p.expr.iter().any(has_correlated_subquery) => (
                SubPlanKind::Project,
                p.expr.clone(),
                p.input.clone(),
                p.schema.clone(),
            ),
            LogicalPlan::Filter(f) if has_correlated_subquery(&f.predicate) => (
                SubPlanKind::Filter,
                vec![f.predicate.clone()],
                f.input.clone(),
                f.input.schema().clone(),
            ),
            _ => return Ok(Transformed::no(node)),
        };
        Ok(Transformed::yes(LogicalPlan::Extension(Extension {
            node: Arc::new(SubPlanNode {
                kind,
                exprs,
                input: input.as_ref().clone(),
                schema,
            }),
        })))
    })
    .map(|t| t.data)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
enum SubPlanKind {
    Project,
    Filter,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SubPlanNode {
    kind: SubPlanKind,
    exprs: Vec<Expr>,
    input: LogicalPlan,
    schema: DFSchemaRef,
}

impl PartialOrd for SubPlanNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.kind.partial_cmp(&other.kind)
    }
}

impl UserDefinedLogicalNodeCore for SubPlanNode {
    fn name(&self) -> &str {
        "SubPlan"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.exprs.clone()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SubPlan {:?}: per row of the input", self.kind)
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        Ok(Self {
            kind: self.kind,
            exprs,
            input: inputs.pop().unwrap_or_else(|| self.input.clone()),
            schema: self.schema.clone(),
        })
    }
}

struct SubPlanPlanner;

#[async_trait]
impl ExtensionPlanner for SubPlanPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn datafusion::catalog::Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<SubPlanNode>() else {
            return Ok(None);
        };
        let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
            return Err(DataFusionError::Internal(
                "a SubPlan needs a SessionState".into(),
            ));
        };
        let [input] = physical_inputs else {
            return Err(DataFusionError::Internal("a SubPlan has one input".into()));
        };
        let schema: SchemaRef = Arc::new(node.schema.as_arrow().clone());
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        let runner = RowRunner::new(
            node.kind,
            node.exprs.clone(),
            node.input.schema().clone(),
            schema.clone(),
            Arc::new(state.clone()),
        )?;
        Ok(Some(Arc::new(SubPlanExec {
            run: Arc::new(runner),
            input: input.clone(),
            schema,
            properties: Arc::new(properties),
        })))
    }
}

struct SubPlanExec {
    run: Arc<RowRunner>,
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for SubPlanExec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SubPlanExec({:?})", self.run.kind)
    }
}

impl DisplayAs for SubPlanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SubPlanExec: {:?}, subqueries run per row",
            self.run.kind
        )
    }
}

impl ExecutionPlan for SubPlanExec {
    fn name(&self) -> &str {
        "SubPlanExec"
    }

    /// Its expressions are logical (planned per row), none physical.
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("a SubPlan has one input".into()))?;
        Ok(Arc::new(SubPlanExec {
            run: self.run.clone(),
            input,
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let run = self.run.clone();
        let input = self.input.execute(partition, context)?;
        let stream = input.and_then(move |batch| {
            let run = run.clone();
            async move { run.batch(&batch).await }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream.boxed(),
        )))
    }
}

/// A subquery optimized once, with placeholders `$1, $2, ...` for the outer columns
/// it reads (`params[i]` is the input column of `$(i + 1)`).
struct Prepared {
    plan: LogicalPlan,
    params: Vec<usize>,
    /// An uncorrelated subquery's value, computed once.
    constant: tokio::sync::OnceCell<ScalarValue>,
}

/// One SubPlan expression: its scalar subqueries, and the expression planned once
/// with column `n` (after the input's) in place of subquery `n`.
struct PlannedExpr {
    subqueries: Vec<Prepared>,
    /// Type of each subquery's value.
    types: Vec<arrow::datatypes::DataType>,
    physical: Arc<dyn datafusion::physical_expr::PhysicalExpr>,
}

/// Evaluates a SubPlan's expressions: the subqueries row by row, then each expression
/// once per batch over the input plus one column per subquery.
struct RowRunner {
    kind: SubPlanKind,
    exprs: Vec<PlannedExpr>,
    schema: SchemaRef,
    state: Arc<SessionState>,
}

impl RowRunner {
    fn new(
        kind: SubPlanKind,
        exprs: Vec<Expr>,
        input_schema: DFSchemaRef,
        schema: SchemaRef,
        state: Arc<SessionState>,
    ) -> Result<Self> {
        let mut planned = Vec::with_capacity(exprs.len());
        for e in exprs {
            let found = scalar_subqueries(&e)?;
            let mut subqueries = Vec::with_capacity(found.len());
            let mut types = Vec::with_capacity(found.len());
            let mut fields = Vec::with_capacity(found.len());
            for (n, sq) in found.iter().enumerate() {
                let t = sq.subquery.schema().field(0).data_type().clone();
                fields.push(arrow::datatypes::Field::new(
                    format!("__weir_subquery_{n}"),
                    t.clone(),
                    true,
                ));
                types.push(t);
                subqueries.push(prepare(
                    &state,
                    &input_schema,
                    sq.subquery.as_ref().clone(),
                )?);
            }
            let mut n = 0usize;
            let with_columns = e
                .transform_down(|e| match e {
                    Expr::ScalarSubquery(_) => {
                        n += 1;
                        Ok(Transformed::new(
                            Expr::Column(datafusion::common::Column::from_name(format!(
                                "__weir_subquery_{}",
                                n - 1
                            ))),
                            true,
                            TreeNodeRecursion::Jump,
                        ))
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .data;
            let extended = input_schema.join(&DFSchema::from_unqualified_fields(
                fields.into(),
                Default::default(),
            )?)?;
            let physical = state.create_physical_expr(with_columns, &extended)?;
            planned.push(PlannedExpr {
                subqueries,
                types,
                physical,
            });
        }
        Ok(Self {
            kind,
            exprs: planned,
            schema,
            state,
        })
    }

    async fn batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mut outputs = Vec::with_capacity(self.exprs.len());
        for e in &self.exprs {
            outputs.push(self.eval(e, batch).await?);
        }
        match self.kind {
            SubPlanKind::Filter => {
                let keep = outputs[0]
                    .as_boolean_opt()
                    .ok_or_else(|| DataFusionError::Plan("WHERE must be boolean".into()))?;
                // NULL is not true: the row goes.
                let keep = arrow::array::BooleanArray::from_iter(
                    keep.iter().map(|b| Some(b == Some(true))),
                );
                Ok(arrow::compute::filter_record_batch(batch, &keep)?)
            }
            SubPlanKind::Project => {
                let columns = outputs
                    .into_iter()
                    .zip(self.schema.fields())
                    .map(|(c, f)| {
                        Ok(if c.data_type() == f.data_type() {
                            c
                        } else {
                            arrow::compute::cast(&c, f.data_type())?
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(RecordBatch::try_new_with_options(
                    self.schema.clone(),
                    columns,
                    &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
                )?)
            }
        }
    }

    /// `e` over a batch: each subquery run once per row with the row's values in place
    /// of its outer references (an uncorrelated one once), then the expression once.
    async fn eval(&self, e: &PlannedExpr, batch: &RecordBatch) -> Result<ArrayRef> {
        let mut columns = batch.columns().to_vec();
        for (p, t) in e.subqueries.iter().zip(&e.types) {
            let mut values = Vec::with_capacity(batch.num_rows());
            for r in 0..batch.num_rows() {
                let v = if p.params.is_empty() {
                    p.constant
                        .get_or_try_init(|| self.run_scalar(&p.plan))
                        .await?
                        .clone()
                } else {
                    let params = p
                        .params
                        .iter()
                        .map(|&i| ScalarValue::try_from_array(batch.column(i), r))
                        .collect::<Result<Vec<_>>>()?;
                    let plan = p.plan.clone().with_param_values(params)?;
                    self.run_scalar(&plan).await?
                };
                values.push(v.cast_to(t)?);
            }
            columns.push(if values.is_empty() {
                arrow::array::new_empty_array(t)
            } else {
                ScalarValue::iter_to_array(values)?
            });
        }
        let mut fields: Vec<arrow::datatypes::FieldRef> =
            batch.schema().fields().iter().cloned().collect();
        fields.extend(e.types.iter().enumerate().map(|(n, t)| {
            Arc::new(arrow::datatypes::Field::new(
                format!("__weir_subquery_{n}"),
                t.clone(),
                true,
            ))
        }));
        let extended = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::new(fields)),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?;
        e.physical.evaluate(&extended)?.into_array(batch.num_rows())
    }

    /// Runs an optimized subquery plan: at most one row, its first column.
    async fn run_scalar(&self, plan: &LogicalPlan) -> Result<ScalarValue> {
        let physical = self
            .state
            .query_planner()
            .create_physical_plan(plan, self.state.as_ref())
            .await?;
        let batches = datafusion::physical_plan::collect(physical, self.state.task_ctx()).await?;
        let mut found: Option<ScalarValue> = None;
        for b in &batches {
            for r in 0..b.num_rows() {
                if found.is_some() {
                    return Err(DataFusionError::Execution(
                        "more than one row returned by a subquery used as an expression".into(),
                    ));
                }
                found = Some(ScalarValue::try_from_array(b.column(0), r)?);
            }
        }
        match found {
            Some(v) => Ok(v),
            None => {
                let t = plan.schema().field(0).data_type().clone();
                ScalarValue::try_from(&t)
            }
        }
    }
}

/// The scalar subqueries of `e`, outermost first, in visiting order.
fn scalar_subqueries(e: &Expr) -> Result<Vec<datafusion::logical_expr::Subquery>> {
    let mut found = Vec::new();
    e.apply(|e| {
        if let Expr::ScalarSubquery(sq) = e {
            found.push(sq.clone());
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// The subquery with placeholders for the outer columns of `input` it reads (outer
/// columns of queries further out stay for their own SubPlan), optimized once.
fn prepare(state: &SessionState, input: &DFSchema, plan: LogicalPlan) -> Result<Prepared> {
    let mut params: Vec<usize> = Vec::new();
    let plan = plan
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| match &e {
                    Expr::OuterReferenceColumn(field, c) => match input.maybe_index_of_column(c) {
                        Some(i) => {
                            let n = match params.iter().position(|p| *p == i) {
                                Some(n) => n,
                                None => {
                                    params.push(i);
                                    params.len() - 1
                                }
                            };
                            Ok(Transformed::yes(Expr::Placeholder(
                                datafusion::logical_expr::expr::Placeholder::new_with_field(
                                    format!("${}", n + 1),
                                    Some(field.clone()),
                                ),
                            )))
                        }
                        None => Ok(Transformed::no(e)),
                    },
                    _ => Ok(Transformed::no(e)),
                })
            })
        })?
        .data;
    Ok(Prepared {
        plan: state.optimize(&plan)?,
        params,
        constant: tokio::sync::OnceCell::new(),
    })
}
