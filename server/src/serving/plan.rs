//! Recognising the statements served without planning, from their shape's AST.
//!
//! - **Point / range read:** `SELECT cols | * FROM rel [alias] WHERE c op value AND ...`
//!   on a table or materialized view, where the conditions fix every column of one of
//!   the relation's indexes (`=`), or bound the column of a one-column index (`<`,
//!   `<=`, `>`, `>=`, `BETWEEN`). The index narrows the rows; every condition is then
//!   checked on them, so the answer is the full query's.
//! - **Point write:** `UPDATE t SET c = expr, ... WHERE pk = value [AND ...]` and
//!   `DELETE FROM t WHERE pk = value [AND ...]` on a table with a primary key, with
//!   plain expressions (columns, values, operators, casts) in SET.
//!
//! A value is a literal of the statement (a placeholder in its shape), optionally
//! negated. Anything else is [`Plan::Other`]: the statement takes the ordinary path.

use super::indexes;
use crate::catalog::RelationKind;
use crate::database::{relation_name, Database};
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::logical_expr::Expr as DfExpr;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Delete, Expr, FromTable, GroupByExpr, Ident, Query, Select,
    SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, UnaryOperator, Update, Value,
};
use std::sync::Arc;

pub enum Plan {
    Read(PointRead),
    Write(PointWrite),
    /// `EXPLAIN` of a served statement: how it is served.
    Explain(String),
    /// A SELECT's DataFusion plan, kept for reuse (see `cached_query`).
    Query(super::cached_query::CachedQuery),
    Other,
}

/// A literal of the statement, by position, possibly negated (`-$3`).
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub literal: usize,
    pub negated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

/// `column op value`.
#[derive(Debug, Clone)]
pub struct Condition {
    pub column: usize,
    pub op: CmpOp,
    pub value: Operand,
}

pub enum Lookup {
    /// `(column, value)` per index column, in index order.
    Point(Vec<(usize, Operand)>),
    /// Bounds on a one-column index: `(value, inclusive)`.
    Range {
        column: usize,
        lower: Option<(Operand, bool)>,
        upper: Option<(Operand, bool)>,
    },
}

pub struct PointRead {
    pub relation: String,
    /// The relation's schema when planned: a changed relation is planned again.
    pub schema: SchemaRef,
    pub index: String,
    pub lookup: Lookup,
    /// Every condition of the WHERE clause, checked on the looked-up rows.
    pub conditions: Vec<Condition>,
    pub projection: Vec<usize>,
    pub output: SchemaRef,
}

pub enum WriteAction {
    Delete,
    /// `(column, new value)`, the value a DataFusion expression over the old row
    /// whose placeholders are the statement's literals.
    Update(super::write::SetList),
}

pub struct PointWrite {
    pub table: String,
    pub schema: SchemaRef,
    /// `(column, value)` per primary-key column, in key order.
    pub key: Vec<(usize, Operand)>,
    pub conditions: Vec<Condition>,
    pub action: WriteAction,
}

/// Plans `stmt` (parsed from a shape) if it is one of the served forms.
pub fn plan(db: &Database, stmt: &Statement) -> Plan {
    let planned = match stmt {
        Statement::Query(q) => plan_read(db, q).map(Plan::Read),
        Statement::Update(u) => plan_update(db, u).map(Plan::Write),
        Statement::Delete(d) => plan_delete(db, d).map(Plan::Write),
        Statement::Explain {
            statement,
            analyze: false,
            verbose: false,
            query_plan: false,
            estimate: false,
            format: None,
            options: None,
            ..
        } => match plan(db, statement) {
            Plan::Read(r) => Some(Plan::Explain(r.describe())),
            Plan::Write(w) => Some(Plan::Explain(w.describe())),
            _ => None,
        },
        _ => None,
    };
    planned.unwrap_or(Plan::Other)
}

impl Lookup {
    fn describe(&self, schema: &SchemaRef) -> String {
        let name = |c: &usize| schema.field(*c).name().clone();
        match self {
            Lookup::Point(key) => key
                .iter()
                .map(|(c, o)| format!("{} = {}", name(c), o.describe()))
                .collect::<Vec<_>>()
                .join(" AND "),
            Lookup::Range {
                column,
                lower,
                upper,
            } => {
                let bound = |b: &Option<(Operand, bool)>, strict: &str, inclusive: &str| {
                    b.as_ref().map(|(o, incl)| {
                        let op = if *incl { inclusive } else { strict };
                        format!("{} {op} {}", name(column), o.describe())
                    })
                };
                [bound(lower, ">", ">="), bound(upper, "<", "<=")]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" AND ")
            }
        }
    }
}

impl Operand {
    fn describe(&self) -> String {
        format!(
            "{}${}",
            if self.negated { "-" } else { "" },
            self.literal + 1
        )
    }
}

impl PointRead {
    /// What `EXPLAIN` shows for a served read.
    pub fn describe(&self) -> String {
        format!(
            "Index lookup on {} using {} ({}), {} condition(s) rechecked, no planning",
            self.relation,
            self.index,
            self.lookup.describe(&self.schema),
            self.conditions.len()
        )
    }
}

impl PointWrite {
    /// What `EXPLAIN` shows for a served UPDATE / DELETE.
    pub fn describe(&self) -> String {
        let key = Lookup::Point(self.key.clone()).describe(&self.schema);
        let verb = match self.action {
            WriteAction::Delete => "Delete",
            WriteAction::Update(_) => "Update",
        };
        format!(
            "{verb} by primary key on {} ({key}), latest row, group commit, no planning",
            self.table
        )
    }
}

fn plan_read(db: &Database, q: &Query) -> Option<PointRead> {
    let plain_query = q.with.is_none()
        && q.order_by.is_none()
        && q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.locks.is_empty()
        && q.for_clause.is_none()
        && q.settings.is_none()
        && q.format_clause.is_none()
        && q.pipe_operators.is_empty();
    let SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    if !plain_query || !plain_select(select) {
        return None;
    }
    let [from] = select.from.as_slice() else {
        return None;
    };
    let target = Target::of(
        db,
        from,
        &[RelationKind::Table, RelationKind::MaterializedView],
    )?;
    let conditions = target.conditions(select.selection.as_ref()?)?;
    let projection = target.projection(&select.projection)?;
    let (index, lookup) = choose_index(db, &target.name, &conditions)?;
    let output = Arc::new(Schema::new(
        projection
            .iter()
            .map(|(i, name)| Field::new(name, target.schema.field(*i).data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    Some(PointRead {
        relation: target.name,
        schema: target.schema,
        index,
        lookup,
        conditions,
        projection: projection.into_iter().map(|(i, _)| i).collect(),
        output,
    })
}

fn plain_select(s: &Select) -> bool {
    s.distinct.is_none()
        && s.select_modifiers.is_none()
        && s.top.is_none()
        && s.exclude.is_none()
        && s.into.is_none()
        && s.lateral_views.is_empty()
        && s.prewhere.is_none()
        && s.connect_by.is_empty()
        && matches!(&s.group_by, GroupByExpr::Expressions(g, m) if g.is_empty() && m.is_empty())
        && s.cluster_by.is_empty()
        && s.distribute_by.is_empty()
        && s.sort_by.is_empty()
        && s.having.is_none()
        && s.named_window.is_empty()
        && s.qualify.is_none()
        && s.value_table_mode.is_none()
}

/// An index whose columns the conditions fix (`=`), else a one-column index they bound.
fn choose_index(
    db: &Database,
    relation: &str,
    conditions: &[Condition],
) -> Option<(String, Lookup)> {
    let specs = indexes::specs(db, relation);
    let equal = |c: usize| {
        conditions
            .iter()
            .find(|k| k.column == c && k.op == CmpOp::Eq)
            .map(|k| (c, k.value))
    };
    for spec in &specs {
        if let Some(values) = spec.columns.iter().map(|&c| equal(c)).collect() {
            return Some((spec.name.clone(), Lookup::Point(values)));
        }
    }
    for spec in specs.iter().filter(|s| s.columns.len() == 1) {
        let on_column = |ops: &[CmpOp]| {
            conditions
                .iter()
                .find(|k| k.column == spec.columns[0] && ops.contains(&k.op))
                .map(|k| (k.value, matches!(k.op, CmpOp::GtEq | CmpOp::LtEq)))
        };
        let lower = on_column(&[CmpOp::Gt, CmpOp::GtEq]);
        let upper = on_column(&[CmpOp::Lt, CmpOp::LtEq]);
        if lower.is_some() || upper.is_some() {
            let column = spec.columns[0];
            return Some((
                spec.name.clone(),
                Lookup::Range {
                    column,
                    lower,
                    upper,
                },
            ));
        }
    }
    None
}

fn plan_update(db: &Database, u: &Update) -> Option<PointWrite> {
    let plain = u.from.is_none()
        && u.returning.is_none()
        && u.output.is_none()
        && u.or.is_none()
        && u.order_by.is_empty()
        && u.limit.is_none();
    if !plain {
        return None;
    }
    let target = Target::of(db, &u.table, &[RelationKind::Table])?;
    let ctx = super::expression_context();
    let df_schema = datafusion::common::DFSchema::try_from_qualified_schema(
        target.qualifier.as_str(),
        &target.schema,
    )
    .ok()?;
    let mut sets: Vec<(usize, DfExpr)> = Vec::new();
    for a in &u.assignments {
        let AssignmentTarget::ColumnName(name) = &a.target else {
            return None;
        };
        let column = target.column_index(name.0.last()?.as_ident()?)?;
        if sets.iter().any(|(c, _)| *c == column) || !plain_expression(&a.value) {
            // A repeated column is an error the ordinary path reports.
            return None;
        }
        let expr = ctx.parse_sql_expr(&a.value.to_string(), &df_schema).ok()?;
        sets.push((column, expr));
    }
    target.point_write(
        db,
        u.selection.as_ref()?,
        WriteAction::Update(super::write::SetList::new(sets)),
    )
}

fn plan_delete(db: &Database, d: &Delete) -> Option<PointWrite> {
    let plain = d.tables.is_empty()
        && d.using.is_none()
        && d.returning.is_none()
        && d.output.is_none()
        && d.order_by.is_empty()
        && d.limit.is_none();
    let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
    let [from] = from.as_slice() else {
        return None;
    };
    if !plain {
        return None;
    }
    let target = Target::of(db, from, &[RelationKind::Table])?;
    target.point_write(db, d.selection.as_ref()?, WriteAction::Delete)
}

/// Columns, values, arithmetic, comparisons and casts: no functions or subqueries
/// (SQL functions are inlined and subqueries planned only on the ordinary path).
fn plain_expression(e: &Expr) -> bool {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
        Expr::Value(_) => true,
        Expr::BinaryOp { left, right, .. } => plain_expression(left) && plain_expression(right),
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => plain_expression(expr),
        Expr::Cast { expr, .. } => plain_expression(expr),
        _ => false,
    }
}

/// The one relation a served statement reads or writes.
struct Target {
    name: String,
    /// What columns may be qualified with: the alias, else the name.
    qualifier: String,
    schema: SchemaRef,
}

impl Target {
    fn of(db: &Database, from: &TableWithJoins, kinds: &[RelationKind]) -> Option<Target> {
        if !from.joins.is_empty() {
            return None;
        }
        let TableFactor::Table {
            name,
            alias,
            args: None,
            with_hints,
            version: None,
            with_ordinality: false,
            partitions,
            json_path: None,
            sample: None,
            index_hints,
        } = &from.relation
        else {
            return None;
        };
        if !with_hints.is_empty() || !partitions.is_empty() || !index_hints.is_empty() {
            return None;
        }
        let relation = relation_name(name).ok()?;
        if crate::pg_catalog::is_catalog_table(&relation) {
            return None;
        }
        let kind = db.catalog.read().get(&relation).map(|e| e.kind)?;
        if !kinds.contains(&kind) {
            return None;
        }
        let qualifier = match alias {
            Some(a) if a.columns.is_empty() => ident_name(&a.name),
            Some(_) => return None,
            None => relation.clone(),
        };
        Some(Target {
            schema: db.relation_schema(&relation)?,
            name: relation,
            qualifier,
        })
    }

    fn column_index(&self, ident: &Ident) -> Option<usize> {
        self.schema.index_of(&ident_name(ident)).ok()
    }

    /// A column reference (`c` or `q.c` with this target's qualifier).
    fn column(&self, e: &Expr) -> Option<usize> {
        match e {
            Expr::Identifier(i) => self.column_index(i),
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [q, c] if ident_name(q) == self.qualifier => self.column_index(c),
                _ => None,
            },
            Expr::Nested(inner) => self.column(inner),
            _ => None,
        }
    }

    /// The WHERE clause as a conjunction of `column op value` on served types.
    fn conditions(&self, selection: &Expr) -> Option<Vec<Condition>> {
        let mut out = Vec::new();
        self.collect_conditions(selection, &mut out)?;
        out.iter()
            .all(|c| super::values::served_type(self.schema.field(c.column).data_type()))
            .then_some(out)
    }

    fn collect_conditions(&self, e: &Expr, out: &mut Vec<Condition>) -> Option<()> {
        match e {
            Expr::Nested(inner) => self.collect_conditions(inner, out),
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                self.collect_conditions(left, out)?;
                self.collect_conditions(right, out)
            }
            Expr::BinaryOp { left, op, right } => {
                let op = cmp_op(op)?;
                let (column, value, op) = match (self.column(left), operand(right)) {
                    (Some(c), Some(v)) => (c, v, op),
                    _ => (self.column(right)?, operand(left)?, flipped(op)),
                };
                out.push(Condition { column, op, value });
                Some(())
            }
            Expr::Between {
                expr,
                negated: false,
                low,
                high,
            } => {
                let column = self.column(expr)?;
                out.push(Condition {
                    column,
                    op: CmpOp::GtEq,
                    value: operand(low)?,
                });
                out.push(Condition {
                    column,
                    op: CmpOp::LtEq,
                    value: operand(high)?,
                });
                Some(())
            }
            _ => None,
        }
    }

    /// `(column, output name)` per select item.
    fn projection(&self, items: &[SelectItem]) -> Option<Vec<(usize, String)>> {
        let mut out = Vec::new();
        for item in items {
            match item {
                SelectItem::Wildcard(opts) if opts.to_string().is_empty() => out.extend(
                    self.schema
                        .fields()
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (i, f.name().clone())),
                ),
                SelectItem::UnnamedExpr(e) => {
                    let i = self.column(e)?;
                    out.push((i, self.schema.field(i).name().clone()));
                }
                SelectItem::ExprWithAlias { expr, alias } => {
                    out.push((self.column(expr)?, ident_name(alias)));
                }
                _ => return None,
            }
        }
        Some(out)
    }

    fn point_write(
        self,
        db: &Database,
        selection: &Expr,
        action: WriteAction,
    ) -> Option<PointWrite> {
        let conditions = self.conditions(selection)?;
        let pk = db.catalog.read().get(&self.name)?.primary_key.clone();
        if pk.is_empty() {
            return None;
        }
        let key = pk
            .iter()
            .map(|&c| {
                conditions
                    .iter()
                    .find(|k| k.column == c && k.op == CmpOp::Eq)
                    .map(|k| (c, k.value))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PointWrite {
            table: self.name,
            schema: self.schema,
            key,
            conditions,
            action,
        })
    }
}

fn cmp_op(op: &BinaryOperator) -> Option<CmpOp> {
    Some(match op {
        BinaryOperator::Eq => CmpOp::Eq,
        BinaryOperator::Lt => CmpOp::Lt,
        BinaryOperator::LtEq => CmpOp::LtEq,
        BinaryOperator::Gt => CmpOp::Gt,
        BinaryOperator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// `value op column` is `column flipped(op) value`.
fn flipped(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::LtEq => CmpOp::GtEq,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::GtEq => CmpOp::LtEq,
    }
}

/// `$n` or `-$n`.
fn operand(e: &Expr) -> Option<Operand> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => Some(Operand {
                literal: p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)?,
                negated: false,
            }),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => {
            let inner = operand(expr)?;
            Some(Operand {
                negated: !inner.negated,
                ..inner
            })
        }
        Expr::Nested(inner) => operand(inner),
        _ => None,
    }
}

fn ident_name(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}
