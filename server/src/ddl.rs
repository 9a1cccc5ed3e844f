//! CREATE / DROP of tables and materialized views, and their recovery at startup.

use crate::catalog::{ColumnInfo, RelationEntry, RelationKind};
use crate::database::{relation_name, Database};
use crate::output::Output;
use crate::query;
use crate::session::Session;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Constraint;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTableOptions, Expr as SqlExpr, SqlOption, Statement, Value,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use weir_executor::ViewSpec;
use weir_planner::{explain_graph, plan_view, sqlstate, SqlError, SqlResult};

/// The Postgres name of an Arrow type, for catalogs and `\d`.
pub fn pg_type_name(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int16 | DataType::Int8 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "bigint".into(),
        DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::Binary | DataType::LargeBinary => "bytea".into(),
        DataType::List(f) | DataType::LargeList(f) => format!("{}[]", pg_type_name(f.data_type())),
        other => other.to_string().to_ascii_lowercase(),
    }
}

fn columns_of(schema: &Schema) -> Vec<ColumnInfo> {
    schema
        .fields()
        .iter()
        .map(|f| ColumnInfo {
            name: f.name().clone(),
            pg_type: pg_type_name(f.data_type()),
            nullable: f.is_nullable(),
        })
        .collect()
}

pub(crate) fn duplicate_relation(name: &str) -> SqlError {
    SqlError::new(
        sqlstate::DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists"),
    )
}

/// Plans CREATE TABLE through DataFusion (types, NOT NULL, PRIMARY KEY).
async fn table_schema(db: &Database, stmt: &Statement) -> SqlResult<(SchemaRef, Vec<usize>)> {
    let Statement::CreateTable(ct) = stmt else {
        return Err(SqlError::internal("not a CREATE TABLE"));
    };
    if ct.query.is_some() {
        return Err(SqlError::unsupported(
            "CREATE TABLE ... AS is not supported yet",
        ));
    }
    for c in &ct.columns {
        for o in &c.options {
            match &o.option {
                ColumnOption::Default(_) => {
                    return Err(SqlError::unsupported(format!(
                        "DEFAULT values (column \"{}\") are not supported yet",
                        c.name.value
                    )))
                }
                ColumnOption::Unique(_) => {
                    return Err(SqlError::unsupported(
                        "UNIQUE constraints other than PRIMARY KEY are not supported yet",
                    ))
                }
                _ => {}
            }
        }
    }
    // Connector options are Weir's, not DataFusion's: planned without them.
    let stmt = &Statement::CreateTable(crate::connector::without_options(ct));
    let ctx = query::planning_context(db, stmt)?;
    let plan = query::plan_statement(&ctx.state(), stmt).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = plan else {
        return Err(SqlError::unsupported(
            "this form of CREATE TABLE is not supported",
        ));
    };
    let mut pk = Vec::new();
    for c in create.constraints.iter() {
        match c {
            Constraint::PrimaryKey(cols) => pk = cols.clone(),
            Constraint::Unique(_) => {
                return Err(SqlError::unsupported(
                    "UNIQUE constraints other than PRIMARY KEY are not supported yet",
                ))
            }
        }
    }
    let input_schema = create.input.schema().as_arrow().clone();
    let mut seen = HashSet::new();
    let fields: Vec<Field> = input_schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let nullable = f.is_nullable() && !pk.contains(&i);
            Field::new(f.name(), f.data_type().clone(), nullable)
        })
        .collect();
    for f in &fields {
        if !seen.insert(f.name().clone()) {
            return Err(SqlError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{}\" specified more than once", f.name()),
            ));
        }
    }
    Ok((Arc::new(Schema::new(fields)), pk))
}

pub async fn create_table(db: &Database, stmt: &Statement, sql: &str) -> SqlResult<Output> {
    let Statement::CreateTable(ct) = stmt else {
        return Err(SqlError::internal("not a CREATE TABLE"));
    };
    let name = relation_name(&ct.name)?;
    let tag = if crate::connector::declared_as_source(ct)? {
        "CREATE SOURCE"
    } else {
        "CREATE TABLE"
    };
    let _ddl = db.ddl_lock.lock().await;
    if db.catalog.read().get(&name).is_some() {
        if ct.if_not_exists {
            return Ok(Output::command(tag));
        }
        return Err(duplicate_relation(&name));
    }
    let (schema, pk) = table_schema(db, stmt).await?;
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let connector = crate::connector::source_spec(ct, &name, &columns, !pk.is_empty())?;
    let watermark = crate::connector::watermark_spec(ct, &schema)?;
    let unstored = crate::connector::unstored_rows(ct, connector.as_ref())?;
    let id = db.catalog.write().allocate_id();
    let log_path = db.table_log_path(id);
    // A fresh table starts with a fresh log (ids are never reused).
    let _ = std::fs::remove_file(&log_path);
    let entry = RelationEntry {
        id,
        name: name.clone(),
        kind: RelationKind::Table,
        sql: sql.to_string(),
        columns: columns_of(&schema),
        depends_on: vec![],
        primary_key: pk.clone(),
        parallelism: 1,
        settings: Default::default(),
    };
    {
        let mut w = db.runtime().lock_writes().await;
        db.runtime()
            .create_table(
                &mut w,
                id,
                &name,
                schema.clone(),
                pk,
                &log_path,
                false,
                unstored,
            )
            .await
            .map_err(SqlError::from)?;
        set_watermark(&mut w, &name, watermark)?;
    }
    commit_entry(db, entry, schema)?;
    crate::serving::indexes::register(db, &name)?;
    if let Some(spec) = connector {
        weir_executor::source::spawn(db.runtime(), &name, &spec).map_err(SqlError::from)?;
    }
    Ok(Output::command(tag))
}

fn set_watermark(
    w: &mut weir_executor::WriteState,
    table: &str,
    spec: Option<weir_executor::watermark::WatermarkSpec>,
) -> SqlResult<()> {
    if let Some(spec) = spec {
        w.table(table)
            .ok_or_else(|| SqlError::internal("a created table has no writer"))?
            .set_watermark(spec)
            .map_err(SqlError::from)?;
    }
    Ok(())
}

pub(crate) fn commit_entry(
    db: &Database,
    entry: RelationEntry,
    schema: SchemaRef,
) -> SqlResult<()> {
    let mut cat = db.catalog.write();
    db.schemas.write().push((entry.name.clone(), schema));
    cat.relations.push(entry);
    cat.save(&db.meta)
}

/// Re-creates a table at startup from its latest checkpoint and replays the log after
/// it; returns the number of replayed rows.
///
/// The replay happens under the same write lock as the creation: a barrier between the
/// two would record the log's end as the table's position in a checkpoint whose state
/// lacks the not-yet-replayed entries, and a later restore would skip them.
pub async fn restore_table(db: &Database, entry: &RelationEntry) -> SqlResult<usize> {
    let stmt = match weir_planner::parse_statement(&entry.sql)? {
        weir_planner::WeirStatement::Sql(s) => s,
        _ => return Err(SqlError::internal("stored table DDL is not CREATE TABLE")),
    };
    let (schema, pk) = table_schema(db, &stmt).await?;
    let (connector, watermark, unstored) = match stmt.as_ref() {
        Statement::CreateTable(ct) => {
            let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
            let connector =
                crate::connector::source_spec(ct, &entry.name, &columns, !pk.is_empty())?;
            let unstored = crate::connector::unstored_rows(ct, connector.as_ref())?;
            (
                connector,
                crate::connector::watermark_spec(ct, &schema)?,
                unstored,
            )
        }
        _ => (None, None, None),
    };
    let rows = {
        let mut w = db.runtime().lock_writes().await;
        let chunks = db
            .runtime()
            .create_table(
                &mut w,
                entry.id,
                &entry.name,
                schema.clone(),
                pk,
                &db.table_log_path(entry.id),
                true,
                unstored,
            )
            .await
            .map_err(SqlError::from)?;
        set_watermark(&mut w, &entry.name, watermark)?;
        let writer = w
            .table(&entry.name)
            .ok_or_else(|| SqlError::internal("restored table has no writer"))?;
        let mut rows = 0;
        for c in chunks {
            rows += c.len();
            writer.write(c, true).await.map_err(SqlError::from)?;
        }
        rows
    };
    {
        let mut cat = db.catalog.write();
        db.schemas.write().push((entry.name.clone(), schema));
        cat.relations.push(entry.clone());
    }
    // The connector resumes after the table's last logged batch.
    if let Some(spec) = connector {
        weir_executor::source::spawn(db.runtime(), &entry.name, &spec).map_err(SqlError::from)?;
    }
    Ok(rows)
}

struct ViewPlan {
    name: String,
    graph: weir_executor::StreamGraph,
    schema: SchemaRef,
    parallelism: u32,
    /// Checkpoint / restart keys set for this view (WITH, then session SETs).
    settings: BTreeMap<String, String>,
    /// `restore_from = 's'`: the savepoint whose state of this view it starts from.
    restore_from: Option<String>,
    /// `restore_from_checkpoint = '<path>'`: a dropped view's retained checkpoint.
    restore_from_checkpoint: Option<String>,
    /// `restore_from_view = 'a'`: start from view `a`'s state in it (a branch).
    restore_from_view: Option<String>,
    ignore_unclaimed: bool,
}

impl ViewPlan {
    fn saved_state(&self) -> Option<weir_executor::savepoint::SavedStateRef<'_>> {
        use weir_executor::savepoint::SavedSource;
        let source = match (&self.restore_from, &self.restore_from_checkpoint) {
            (Some(sp), _) => SavedSource::Savepoint(sp),
            (None, Some(path)) => SavedSource::Checkpoint(path),
            (None, None) => return None,
        };
        Some(weir_executor::savepoint::SavedStateRef {
            source,
            view: self.restore_from_view.as_deref(),
        })
    }

    /// How EXPLAIN (`q` empty) and the restore notice (`q` a double quote) name
    /// where the state comes from.
    fn saved_state_name(&self, q: &str) -> String {
        let of_view = |v: &String| format!(" (the state of view {v})");
        match (&self.restore_from, &self.restore_from_checkpoint) {
            (Some(sp), _) => format!(
                "savepoint {q}{sp}{q}{}",
                self.restore_from_view
                    .as_ref()
                    .map_or(String::new(), of_view)
            ),
            (None, Some(path)) => format!("retained checkpoint {q}{path}{q}"),
            (None, None) => String::new(),
        }
    }
}

/// An option's text, or 22023 with `missing` when it is empty.
fn non_empty(value: &SqlExpr, missing: &str) -> SqlResult<String> {
    let text = option_text(value);
    if text.is_empty() {
        return Err(SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, missing));
    }
    Ok(text)
}

/// What `WITH (...)` of a materialized view sets besides checkpoint / restart keys.
#[derive(Default)]
struct ViewOptions {
    parallelism: Option<u32>,
    restore_from: Option<String>,
    restore_from_checkpoint: Option<String>,
    restore_from_view: Option<String>,
    ignore_unclaimed: bool,
    /// `"uid.N" = 'name'`: the N-th stateful operator (as EXPLAIN numbers them) keeps
    /// state under `name` whatever its derived uid.
    pinned_uids: BTreeMap<usize, String>,
    /// `EMIT ON WINDOW CLOSE` (rewritten into this option by the parser).
    emit_on_window_close: bool,
}

impl ViewPlan {
    fn spec(&self, db: &Database) -> SqlResult<ViewSpec> {
        let config = view_job_config(db, &self.settings)?;
        Ok(ViewSpec {
            graph: self.graph.clone(),
            schema: self.schema.clone(),
            parallelism: self.parallelism,
            config,
        })
    }
}

/// A view's job configuration: its own settings over the config file's.
pub(crate) fn view_job_config(
    db: &Database,
    settings: &BTreeMap<String, String>,
) -> SqlResult<weir_executor::checkpoint::JobConfig> {
    let get = |k: &str| {
        settings
            .get(k)
            .cloned()
            .or_else(|| db.config.settings.get(k).cloned())
    };
    crate::settings::job_config(&get)
        .map_err(|e| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, e))
}

/// Marks the graph's window aggregations to emit each window once, at its close
/// (`EMIT ON WINDOW CLOSE` of a view, `emit_on_window_close` of a sink).
pub(crate) fn emit_on_window_close(
    db: &Database,
    graph: &mut weir_executor::StreamGraph,
) -> SqlResult<()> {
    weir_planner::stream_plan::emit_on_window_close(graph, &|r| watermark_columns(db, r))
}

/// The columns of table `name` that carry a watermark (its `WATERMARK FOR`).
fn watermark_columns(db: &Database, name: &str) -> std::collections::BTreeSet<usize> {
    let sql = db.catalog.read().get(name).map(|e| e.sql.clone());
    let (Some(sql), Some(schema)) = (sql, db.relation_schema(name)) else {
        return Default::default();
    };
    let Ok(weir_planner::WeirStatement::Sql(stmt)) = weir_planner::parse_statement(&sql) else {
        return Default::default();
    };
    match stmt.as_ref() {
        Statement::CreateTable(ct) => crate::connector::watermark_spec(ct, &schema)
            .ok()
            .flatten()
            .map(|w| w.column)
            .into_iter()
            .collect(),
        _ => Default::default(),
    }
}

/// Whether a stored view's DDL asks for `EMIT ON WINDOW CLOSE`.
pub(crate) fn emits_on_window_close(options: &CreateTableOptions) -> SqlResult<bool> {
    Ok(view_options(options, &mut BTreeMap::new())?.emit_on_window_close)
}

pub(crate) fn option_text(value: &SqlExpr) -> String {
    match value {
        SqlExpr::Value(v) => match &v.value {
            Value::Number(n, _) => n.clone(),
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Boolean(b) => b.to_string(),
            other => other.to_string(),
        },
        SqlExpr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

/// `WITH (...)` of a view: its parallelism, checkpoint / restart keys, the savepoint it
/// starts from, and pinned uids.
fn view_options(
    options: &CreateTableOptions,
    settings: &mut BTreeMap<String, String>,
) -> SqlResult<ViewOptions> {
    let mut opts = ViewOptions::default();
    let list = match options {
        CreateTableOptions::None => return Ok(opts),
        CreateTableOptions::With(l) => l,
        _ => return Err(SqlError::unsupported("view options other than WITH (...)")),
    };
    for o in list {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(SqlError::syntax("expected key = value in WITH (...)"));
        };
        let key_text = key.value.to_ascii_lowercase();
        if crate::settings::is_job_key(&key_text) {
            let text = option_text(value);
            crate::settings::validate(&key_text, &text)
                .map_err(|e| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, e))?;
            settings.insert(key_text, text);
            continue;
        }
        match key_text.as_str() {
            "parallelism" | "parallelism.default" => {
                let n = match value {
                    SqlExpr::Value(v) => match &v.value {
                        Value::Number(n, _) => n.parse::<u32>().ok(),
                        Value::SingleQuotedString(s) => s.parse::<u32>().ok(),
                        _ => None,
                    },
                    _ => None,
                };
                opts.parallelism = Some(n.filter(|n| *n >= 1).ok_or_else(|| {
                    SqlError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!("invalid parallelism: {value}"),
                    )
                })?);
            }
            weir_planner::connector_ddl::EMIT_ON_WINDOW_CLOSE => {
                opts.emit_on_window_close = option_text(value) == "true";
            }
            "restore_from" => {
                opts.restore_from = Some(non_empty(value, "restore_from needs a savepoint name")?);
            }
            "restore_from_checkpoint" => {
                opts.restore_from_checkpoint = Some(non_empty(
                    value,
                    "restore_from_checkpoint needs the path SHOW CHECKPOINTS lists for a RETAINED checkpoint",
                )?);
            }
            "restore_from_view" => {
                opts.restore_from_view = Some(non_empty(
                    value,
                    "restore_from_view needs the name of a view the savepoint holds",
                )?);
            }
            "ignore_unclaimed_state" => {
                opts.ignore_unclaimed = match option_text(value).to_ascii_lowercase().as_str() {
                    "true" | "on" => true,
                    "false" | "off" => false,
                    other => {
                        return Err(SqlError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("ignore_unclaimed_state must be true or false, not {other}"),
                        ))
                    }
                };
            }
            other if other.starts_with("uid.") => {
                let n = other["uid.".len()..]
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        SqlError::new(
                            sqlstate::INVALID_PARAMETER_VALUE,
                            format!("\"{other}\": pin a uid as \"uid.N\" = 'name', N numbering the stateful operators as EXPLAIN shows them"),
                        )
                    })?;
                let uid = option_text(value);
                if uid.is_empty() || uid.contains('/') {
                    return Err(SqlError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!("invalid uid for \"{other}\": {uid:?} (non-empty, no '/')"),
                    ));
                }
                opts.pinned_uids.insert(n, uid);
            }
            other => {
                return Err(SqlError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("unknown materialized view option \"{other}\""),
                ))
            }
        }
    }
    if opts.restore_from.is_some() && opts.restore_from_checkpoint.is_some() {
        return Err(SqlError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "restore_from and restore_from_checkpoint exclude each other",
        ));
    }
    if opts.restore_from.is_none() && opts.restore_from_checkpoint.is_none() {
        for (set, key) in [
            (opts.ignore_unclaimed, "ignore_unclaimed_state"),
            (opts.restore_from_view.is_some(), "restore_from_view"),
        ] {
            if set {
                return Err(SqlError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("{key} applies only with restore_from or restore_from_checkpoint"),
                ));
            }
        }
    }
    Ok(opts)
}

/// Applies `"uid.N"` pins to the planned graph's stateful operators.
fn pin_uids(
    graph: &mut weir_executor::StreamGraph,
    pins: &BTreeMap<usize, String>,
) -> SqlResult<()> {
    let mut stateful = graph.stateful_mut();
    let count = stateful.len();
    for (&n, uid) in pins {
        let spec = stateful.get_mut(n - 1).ok_or_else(|| {
            SqlError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "\"uid.{n}\": the view has {count} stateful operator(s) (EXPLAIN numbers them)"
                ),
            )
        })?;
        **spec = uid.clone();
    }
    let uids: Vec<&str> = stateful.iter().map(|s| s.as_str()).collect();
    for (i, u) in uids.iter().enumerate() {
        if uids[..i].contains(u) {
            return Err(SqlError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("two stateful operators would share uid \"{u}\""),
            ));
        }
    }
    Ok(())
}

/// A query as a streaming graph whose operators' uids are under `name`.
pub(crate) async fn plan_query(
    db: &Database,
    query: &datafusion::sql::sqlparser::ast::Query,
    name: &str,
) -> SqlResult<weir_planner::PlannedView> {
    let mut query = Statement::Query(Box::new(query.clone()));
    // Plain views and SQL functions (already expanded for CREATE MATERIALIZED VIEW;
    // sinks' queries get theirs here).
    crate::statements::expand(db, &mut query)?;
    let ctx = query::planning_context(db, &query)?;
    let mut state = ctx.state();
    // A streaming plan has no one-off subquery execution: every scalar subquery
    // becomes a join (with a one-row side, for an uncorrelated one).
    state
        .config_mut()
        .options_mut()
        .optimizer
        .enable_physical_uncorrelated_scalar_subquery = false;
    let plan = query::plan_statement(&state, &query).await?;
    let plan = state.optimize(&plan)?;
    plan_view(&state, &plan, name, &|r| db.runtime().is_append_only(r))
}

async fn plan_create_view(
    db: &Database,
    session: Option<&Session>,
    stmt: &Statement,
) -> SqlResult<ViewPlan> {
    let Statement::CreateView(cv) = stmt else {
        return Err(SqlError::internal("not CREATE MATERIALIZED VIEW"));
    };
    let name = relation_name(&cv.name)?;
    // Session SETs first, then WITH (...) on top: the statement wins.
    let mut settings: BTreeMap<String, String> = session
        .map(|s| {
            s.settings
                .iter()
                .filter(|(k, _)| crate::settings::is_job_key(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let opts = view_options(&cv.options, &mut settings)?;
    let parallelism = opts
        .parallelism
        .or_else(|| session.and_then(|s| s.parallelism()))
        .unwrap_or(db.config.parallelism);
    view_job_config(db, &settings)?;
    if parallelism > db.config.max_parallelism {
        return Err(SqlError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "parallelism {parallelism} exceeds pipeline.max-parallelism {}",
                db.config.max_parallelism
            ),
        ));
    }
    let mut planned = plan_query(db, &cv.query, &name).await?;
    if opts.emit_on_window_close {
        emit_on_window_close(db, &mut planned.graph)?;
    }
    pin_uids(&mut planned.graph, &opts.pinned_uids)?;
    // Postgres names for the view's columns, or the names the user listed.
    let mut names: Vec<String> = planned
        .schema
        .fields()
        .iter()
        .map(|f| weir_planner::naming::pg_column_name(f.name()))
        .collect();
    if !cv.columns.is_empty() {
        if cv.columns.len() > names.len() {
            return Err(SqlError::syntax(
                "CREATE MATERIALIZED VIEW specifies more column names than columns",
            ));
        }
        for (i, c) in cv.columns.iter().enumerate() {
            names[i] = if c.name.quote_style.is_some() {
                c.name.value.clone()
            } else {
                c.name.value.to_ascii_lowercase()
            };
        }
    }
    let mut seen = HashSet::new();
    for n in &names {
        if !seen.insert(n.clone()) {
            return Err(SqlError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{n}\" specified more than once"),
            ));
        }
    }
    let schema = Arc::new(Schema::new(
        planned
            .schema
            .fields()
            .iter()
            .zip(names)
            .map(|(f, n)| Field::new(n, f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    Ok(ViewPlan {
        name,
        graph: planned.graph,
        schema,
        parallelism,
        settings,
        restore_from: opts.restore_from,
        restore_from_checkpoint: opts.restore_from_checkpoint,
        restore_from_view: opts.restore_from_view,
        ignore_unclaimed: opts.ignore_unclaimed,
    })
}

/// `CREATE MATERIALIZED VIEW`; `views` are the plain views its query read (already
/// expanded in `stmt`), which it then depends on.
pub async fn create_view(
    db: &Database,
    session: &mut Session,
    stmt: &Statement,
    sql: &str,
    views: Vec<String>,
) -> SqlResult<Output> {
    let Statement::CreateView(cv) = stmt else {
        return Err(SqlError::internal("not CREATE MATERIALIZED VIEW"));
    };
    let _ddl = db.ddl_lock.lock().await;
    let name = relation_name(&cv.name)?;
    let replacing = {
        let cat = db.catalog.read();
        match cat.get(&name) {
            None => false,
            Some(_) if cv.if_not_exists => return Ok(Output::command("CREATE_MATERIALIZED_VIEW")),
            Some(_) if !cv.or_replace => return Err(duplicate_relation(&name)),
            Some(e) if e.kind != RelationKind::MaterializedView => {
                return Err(SqlError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a materialized view"),
                ))
            }
            Some(_) => {
                let dependents = cat.dependents(&name);
                if !dependents.is_empty() {
                    return Err(SqlError::new(
                        sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                        format!(
                            "cannot replace materialized view {name}: materialized view {} reads it",
                            dependents.join(", ")
                        ),
                    ));
                }
                true
            }
        }
    };
    let plan = plan_create_view(db, Some(session), stmt).await?;
    let id = db.catalog.write().allocate_id();
    let spec = plan.spec(db)?;
    let rt = db.runtime();
    // Everything that can refuse the statement happens before the old view goes.
    let (from, report) = match plan.saved_state() {
        Some(saved) => {
            let (from, report) = weir_executor::savepoint::state_for_new_view(
                rt,
                saved,
                &name,
                &spec,
                id,
                plan.ignore_unclaimed,
            )
            .await
            .map_err(SqlError::from)?;
            (from, Some(report))
        }
        None => (weir_executor::Restore::Fresh, None),
    };
    {
        let mut w = rt.lock_writes().await;
        rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
        if replacing {
            rt.drop_view(&mut w, &name);
            let mut cat = db.catalog.write();
            cat.remove(&name);
            db.schemas.write().retain(|(n, _)| n != &name);
        }
        rt.create_view(&mut w, id, &plan.name, spec, from)
            .await
            .map_err(SqlError::from)?;
        rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
    }
    let entry = RelationEntry {
        id,
        name: plan.name.clone(),
        kind: RelationKind::MaterializedView,
        sql: sql.to_string(),
        columns: columns_of(&plan.schema),
        depends_on: {
            let mut deps = plan.graph.upstream_relations();
            let more: Vec<String> = views.into_iter().filter(|v| !deps.contains(v)).collect();
            deps.extend(more);
            deps
        },
        primary_key: vec![],
        parallelism: plan.parallelism,
        settings: plan.settings.clone(),
    };
    commit_entry(db, entry, plan.schema.clone())?;
    crate::serving::indexes::register(db, &name)?;
    if let Some(mut r) = report {
        r.replayed_rows = rt.registry.replayed_rows(&name);
        let from = plan.saved_state_name("\"");
        session.notices.push(crate::show::restore_notice(&from, &r));
        // Restored state is checkpointed at once, as after RESTORE.
        rt.checkpoint_now().await.map_err(SqlError::from)?;
    }
    Ok(Output::command("CREATE_MATERIALIZED_VIEW"))
}

/// Deploys under the write lock: flush (quiesce), deploy with backfill, flush again so
/// the view is readable with its backfilled contents when the statement returns.
pub(crate) async fn deploy(
    db: &Database,
    id: u64,
    name: &str,
    spec: ViewSpec,
    from: weir_executor::Restore,
) -> SqlResult<()> {
    let rt = db.runtime();
    let mut w = rt.lock_writes().await;
    rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
    rt.create_view(&mut w, id, name, spec, from)
        .await
        .map_err(SqlError::from)?;
    rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
    Ok(())
}

pub async fn restore_view(db: &Database, entry: &RelationEntry) -> SqlResult<()> {
    let mut stmt = match weir_planner::parse_statement(&entry.sql)? {
        weir_planner::WeirStatement::Sql(s) => s,
        _ => {
            return Err(SqlError::internal(
                "stored view DDL is not CREATE MATERIALIZED VIEW",
            ))
        }
    };
    crate::statements::expand(db, &mut stmt)?;
    let mut plan = plan_create_view(db, None, &stmt).await?;
    if entry.parallelism > 0 {
        plan.parallelism = entry.parallelism;
    }
    plan.settings = entry.settings.clone();
    let spec = plan.spec(db)?;
    deploy(
        db,
        entry.id,
        &plan.name,
        spec,
        weir_executor::Restore::Latest,
    )
    .await?;
    let mut cat = db.catalog.write();
    db.schemas
        .write()
        .push((entry.name.clone(), plan.schema.clone()));
    cat.relations.push(entry.clone());
    Ok(())
}

pub async fn explain_create_view(
    db: &Database,
    session: &Session,
    stmt: &Statement,
) -> SqlResult<Output> {
    let plan = plan_create_view(db, Some(session), stmt).await?;
    let mut lines = explain_graph(
        &plan.name,
        &plan.graph,
        plan.parallelism,
        db.config.max_parallelism,
    );
    if let Some(saved) = plan.saved_state() {
        let spec = plan.spec(db)?;
        let m = weir_executor::savepoint::preview_new_view(db.runtime(), saved, &plan.name, &spec)
            .await
            .map_err(SqlError::from)?;
        lines.push(format!("Restore from {}:", plan.saved_state_name("")));
        for u in &m.matched {
            match m.misfit.iter().find(|(uid, _, _)| uid == u) {
                Some((_, was, now)) => lines.push(format!(
                    "  {u}: error: does not fit (saved {was}, now {now})"
                )),
                None => lines.push(format!("  {u}: restore")),
            }
        }
        for u in &m.new {
            lines.push(format!("  {u}: start empty"));
        }
        for u in &m.unclaimed {
            lines.push(format!(
                "  {u}: unclaimed: error unless ignore_unclaimed_state = true"
            ));
        }
    }
    crate::show::text_rows("QUERY PLAN", lines)
}
