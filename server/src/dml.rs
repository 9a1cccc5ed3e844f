//! INSERT, UPDATE and DELETE.
//!
//! Each statement computes its change chunk with DataFusion, then hands it to the
//! table's writer, which checks constraints and logs it (one log entry per statement,
//! so a statement is all-or-nothing across a crash); it is acknowledged once the entry
//! is on disk, waited for outside the write lock so that concurrent statements share
//! one fsync (group commit, see [`commit`]). UPDATE and DELETE evaluate against the table's latest contents under
//! the write lock, so concurrent statements see each other's effects.

use crate::catalog::RelationKind;
use crate::database::{relation_name, Database};
use crate::output::Output;
use crate::query;
use crate::session::Session;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Delete, FromTable, Insert, Statement, TableFactor, TableObject, Update,
};
use std::collections::HashMap;
use std::sync::Arc;
use weir_executor::{Op, StreamChunk};
use weir_planner::{sqlstate, SqlError, SqlResult};

pub(crate) fn check_target(db: &Database, name: &str, verb: &str) -> SqlResult<SchemaRef> {
    let cat = db.catalog.read();
    match cat.get(name) {
        None => Err(SqlError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )),
        Some(e) if e.kind == RelationKind::View => Err(SqlError::unsupported(format!(
            "cannot {verb} view \"{name}\": views are not updatable in Weir; write to its tables"
        ))),
        Some(e) if e.kind != RelationKind::Table => Err(SqlError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("cannot {verb} materialized view \"{name}\": it is maintained by Weir"),
        )),
        Some(_) => db
            .relation_schema(name)
            .ok_or_else(|| SqlError::internal(format!("no schema for {name}"))),
    }
}

/// Casts query output to the table's types, erroring (not truncating) on values that
/// do not fit, as Postgres does.
fn conform(batch: &RecordBatch, schema: &SchemaRef, offset: usize) -> SqlResult<Vec<ArrayRef>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| conform_column(batch.column(offset + i), f))
        .collect()
}

/// One column cast to its table column's type (an error, not truncation, when a
/// value does not fit).
pub(crate) fn conform_column(col: &ArrayRef, f: &arrow::datatypes::Field) -> SqlResult<ArrayRef> {
    if col.data_type() == f.data_type() {
        return Ok(col.clone());
    }
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(col, f.data_type(), &opts).map_err(|e| {
        SqlError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "column \"{}\" is of type {} but the value cannot be converted: {e}",
                f.name(),
                crate::ddl::pg_type_name(f.data_type())
            ),
        )
    })
}

fn concat_rows(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    offset: usize,
) -> SqlResult<RecordBatch> {
    // All-nullable here: NOT NULL is enforced once, by the table writer, with
    // Postgres's message naming the column and relation.
    let nullable = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let parts = batches
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| {
            RecordBatch::try_new(nullable.clone(), conform(b, schema, offset)?)
                .map_err(SqlError::from)
        })
        .collect::<SqlResult<Vec<_>>>()?;
    Ok(arrow::compute::concat_batches(&nullable, &parts)?)
}

pub(crate) async fn write(
    db: &Database,
    session: &mut Session,
    table: &str,
    chunk: StreamChunk,
) -> SqlResult<()> {
    let w = db.runtime().lock_writes_for(table, chunk.len()).await;
    commit(db, session, w, table, chunk).await
}

/// Writes one statement's change under the write lock `w`, releases the lock, and
/// returns once the change is durable (sharing the fsync with whatever else was
/// written meanwhile): only then is the statement acknowledged.
pub(crate) async fn commit(
    db: &Database,
    session: &mut Session,
    mut w: tokio::sync::MutexGuard<'_, weir_executor::WriteState>,
    table: &str,
    chunk: StreamChunk,
) -> SqlResult<()> {
    let writer = w
        .table(table)
        .ok_or_else(|| SqlError::internal(format!("table {table} has no writer")))?;
    let durable = writer
        .write_statement(chunk)
        .await
        .map_err(SqlError::from)?;
    let epoch = w.write_epoch();
    if session.reads_own_writes {
        db.runtime()
            .hasten_visibility(&mut w)
            .await
            .map_err(SqlError::from)?;
    }
    drop(w);
    durable.wait().await.map_err(SqlError::from)?;
    session.last_write_epoch = epoch;
    session.writes += 1;
    session.wrote_since_read = true;
    db.runtime().note_acknowledged(epoch);
    Ok(())
}

pub async fn insert(db: &Database, session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Insert(Insert {
        table,
        returning,
        on,
        source,
        ..
    }) = stmt
    else {
        return Err(SqlError::internal("not INSERT"));
    };
    if returning.is_some() {
        return Err(SqlError::unsupported(
            "INSERT ... RETURNING is not supported yet",
        ));
    }
    if on.is_some() {
        return Err(SqlError::unsupported(
            "INSERT ... ON CONFLICT is not supported yet",
        ));
    }
    let TableObject::TableName(name) = table else {
        return Err(SqlError::unsupported("INSERT into a table function"));
    };
    let name = relation_name(name)?;
    let schema = check_target(db, &name, "insert into")?;
    // INSERT ... VALUES or from generate_series reads no relation: plan it against
    // empty tables, without copying the target's contents or waiting for an epoch
    // (continuous ingest would otherwise pay a barrier and a table scan per statement).
    let reads_relations = match source {
        Some(q) => {
            query::relations_read(&Statement::Query(q.clone()))?.is_none_or(|r| !r.is_empty())
        }
        None => false,
    };
    let ctx = if reads_relations {
        query::snapshot_context(db, session, stmt, HashMap::new()).await?
    } else {
        // The target as an empty, all-nullable table: NOT NULL is the table writer's
        // check (with Postgres's error), and nothing is read.
        let empty = arrow::array::RecordBatch::new_empty(schema.clone());
        query::snapshot_context_nowait(db, stmt, HashMap::from([(name.clone(), empty)]))?
    };
    let plan = query::plan_statement(&ctx.state(), stmt).await?;
    let LogicalPlan::Dml(dml) = plan else {
        return Err(SqlError::internal("INSERT did not plan as DML"));
    };
    let batches = ctx
        .execute_logical_plan(dml.input.as_ref().clone())
        .await?
        .collect()
        .await?;
    let rows = concat_rows(&schema, &batches, 0)?;
    let n = rows.num_rows();
    if n > 0 {
        write(db, session, &name, StreamChunk::inserts(rows)).await?;
    }
    Ok(Output::rows("INSERT", n))
}

/// `(name, alias)` of the single target table of UPDATE / DELETE.
fn target_table(factor: &TableFactor) -> SqlResult<(String, Option<String>)> {
    match factor {
        TableFactor::Table { name, alias, .. } => Ok((
            relation_name(name)?,
            alias.as_ref().map(|a| a.name.to_string()),
        )),
        _ => Err(SqlError::unsupported(
            "UPDATE/DELETE target must be a table",
        )),
    }
}

async fn latest_context<'a>(
    db: &'a Database,
    session: &Session,
    table: &str,
    stmt: &datafusion::sql::sqlparser::ast::Statement,
) -> SqlResult<(
    tokio::sync::MutexGuard<'a, weir_executor::WriteState>,
    datafusion::prelude::SessionContext,
)> {
    // This session's earlier writes to other tables become readable first (waiting for
    // a barrier needs the write lock, so it happens before taking it).
    db.runtime()
        .ensure_committed(session.last_write_epoch)
        .await
        .map_err(SqlError::from)?;
    // The change's size is known only under the lock: room for one piece is waited
    // for outside it.
    let mut w = db.runtime().lock_writes_for(table, 1).await;
    let latest = w
        .table(table)
        .ok_or_else(|| SqlError::internal(format!("table {table} has no writer")))?
        .latest_batch()
        .map_err(SqlError::from)?;
    let mut overrides = HashMap::new();
    overrides.insert(table.to_string(), latest);
    // Relations other than the target are read at the committed epoch (which includes
    // this session's writes); the target at its latest state.
    let ctx = query::snapshot_context_nowait(db, stmt, overrides)?;
    Ok((w, ctx))
}

/// Runs `sql` over the target table's latest contents under the write lock, builds
/// the change chunk from its result and writes it, all under the same lock so that no
/// other write can interleave. Returns the number of affected rows.
async fn rewrite_rows(
    db: &Database,
    session: &mut Session,
    table: &str,
    sql: &str,
    build: impl FnOnce(Vec<RecordBatch>) -> SqlResult<(usize, StreamChunk)>,
) -> SqlResult<usize> {
    let stmt = match weir_planner::parse_statement(sql)? {
        weir_planner::WeirStatement::Sql(s) => s,
        _ => return Err(SqlError::internal("rewritten DML is not a query")),
    };
    let (w, ctx) = latest_context(db, session, table, &stmt).await?;
    let plan = query::plan_statement(&ctx.state(), &stmt).await?;
    let batches: Vec<RecordBatch> = ctx.execute_logical_plan(plan).await?.collect().await?;
    let (n, chunk) = build(batches)?;
    if n > 0 {
        commit(db, session, w, table, chunk).await?;
    }
    Ok(n)
}

fn where_clause(selection: &Option<datafusion::sql::sqlparser::ast::Expr>) -> String {
    selection
        .as_ref()
        .map(|s| format!(" WHERE {s}"))
        .unwrap_or_default()
}

pub async fn update(db: &Database, session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Update(Update {
        table,
        assignments,
        from,
        selection,
        returning,
        ..
    }) = stmt
    else {
        return Err(SqlError::internal("not UPDATE"));
    };
    if from.is_some() || !table.joins.is_empty() {
        return Err(SqlError::unsupported(
            "UPDATE ... FROM is not supported yet",
        ));
    }
    if returning.is_some() {
        return Err(SqlError::unsupported(
            "UPDATE ... RETURNING is not supported yet",
        ));
    }
    let (name, alias) = target_table(&table.relation)?;
    let schema = check_target(db, &name, "update")?;
    let mut new_values: HashMap<String, String> = HashMap::new();
    for a in assignments {
        let AssignmentTarget::ColumnName(col) = &a.target else {
            return Err(SqlError::unsupported("tuple assignments in UPDATE"));
        };
        let col = relation_name(&datafusion::sql::sqlparser::ast::ObjectName(
            col.0.last().cloned().into_iter().collect(),
        ))?;
        if schema.index_of(&col).is_err() {
            return Err(SqlError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{col}\" of relation \"{name}\" does not exist"),
            ));
        }
        if new_values
            .insert(col.clone(), a.value.to_string())
            .is_some()
        {
            return Err(SqlError::syntax(format!(
                "multiple assignments to same column \"{col}\""
            )));
        }
    }
    let from_clause = format!(
        "\"{}\"{}",
        name.replace('"', "\"\""),
        alias.map(|a| format!(" AS {a}")).unwrap_or_default()
    );
    let mut items: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("\"{}\"", f.name().replace('"', "\"\"")))
        .collect();
    for (i, f) in schema.fields().iter().enumerate() {
        let v = new_values
            .get(f.name())
            .cloned()
            .unwrap_or_else(|| format!("\"{}\"", f.name().replace('"', "\"\"")));
        items.push(format!("({v}) AS \"__weir_new_{i}\""));
    }
    let sql = format!(
        "SELECT {} FROM {from_clause}{}",
        items.join(", "),
        where_clause(selection)
    );
    let n = rewrite_rows(db, session, &name, &sql, |batches| {
        let old = concat_rows(&schema, &batches, 0)?;
        let new = concat_rows(&schema, &batches, schema.fields().len())?;
        let n = old.num_rows();
        let both = arrow::compute::concat_batches(&old.schema(), [&old, &new])?;
        let mut ops = vec![Op::Delete; n];
        ops.extend(vec![Op::Insert; n]);
        Ok((n, StreamChunk::new(ops, both)))
    })
    .await?;
    Ok(Output::rows("UPDATE", n))
}

pub async fn delete(db: &Database, session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Delete(Delete {
        from,
        using,
        selection,
        returning,
        tables,
        ..
    }) = stmt
    else {
        return Err(SqlError::internal("not DELETE"));
    };
    if using.is_some() || !tables.is_empty() {
        return Err(SqlError::unsupported(
            "DELETE ... USING is not supported yet",
        ));
    }
    if returning.is_some() {
        return Err(SqlError::unsupported(
            "DELETE ... RETURNING is not supported yet",
        ));
    }
    let list = match from {
        FromTable::WithFromKeyword(l) | FromTable::WithoutKeyword(l) => l,
    };
    if list.len() != 1 || !list[0].joins.is_empty() {
        return Err(SqlError::unsupported("DELETE from more than one table"));
    }
    let (name, alias) = target_table(&list[0].relation)?;
    let schema = check_target(db, &name, "delete from")?;
    let sql = format!(
        "SELECT * FROM \"{}\"{}{}",
        name.replace('"', "\"\""),
        alias.map(|a| format!(" AS {a}")).unwrap_or_default(),
        where_clause(selection)
    );
    let n = rewrite_rows(db, session, &name, &sql, |batches| {
        let old = concat_rows(&schema, &batches, 0)?;
        Ok((old.num_rows(), StreamChunk::deletes(old)))
    })
    .await?;
    Ok(Output::rows("DELETE", n))
}
