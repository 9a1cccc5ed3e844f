//! `CREATE SINK k FROM relation WITH (connector = 'blackhole')`, `DROP SINK`,
//! `SHOW SINKS`.
//!
//! A sink is a job that reads a table or view — its current contents first, then every
//! change — and hands the changes to its connector; it is not itself readable.
//! Connectors: `blackhole` (takes everything, keeps nothing: measures a pipeline) and
//! `kafka` (at least once, or exactly once with transactions committed when a
//! checkpoint completes). A sink checkpoints like a view (its source positions), so
//! after a restart it resumes from its checkpoint.

use crate::catalog::{RelationEntry, RelationKind};
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::Statement;
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_executor::checkpoint::CheckpointMode;
use weir_executor::connector_options::ConnectorOptions;
use weir_executor::exchange::ExchangeKind;
use weir_executor::sinks::SinkTarget;
use weir_executor::{FragmentInput, FragmentSpec, SinkSpec, StreamGraph, ViewSpec};
use weir_planner::connector_ddl::SinkInput;
use weir_planner::connector_ddl::EMIT_ON_WINDOW_CLOSE;
use weir_planner::{sqlstate, SqlError, SqlResult, WeirStatement};

/// The job a sink runs. A sink of a table reads the table. A sink of a materialized
/// view runs the view's query itself, under the sink's own uids, reading the tables
/// the view reads: so the sink checkpoints table positions and resumes from its own
/// checkpoint after a crash instead of being rebuilt from the view's whole contents
/// (which would send every row again).
async fn sink_spec(
    db: &Database,
    name: &str,
    input: &SinkInput,
    options: &[(String, String)],
    parallelism: u32,
    settings: &BTreeMap<String, String>,
) -> SqlResult<(ViewSpec, Vec<String>)> {
    let mut options = ConnectorOptions::new(options.to_vec());
    // `emit_on_window_close` is the sink's, not its connector's.
    let eowc = options.take_bool(EMIT_ON_WINDOW_CLOSE)?.unwrap_or(false);
    let (schema, mut fragments) = sink_input(db, name, input, eowc).await?;
    let schema = schema.as_ref();
    let target = SinkTarget {
        name,
        schema,
        s3: &db.config.s3(),
    };
    let sink = weir_executor::sinks::from_options(options, &target)?;
    let config = crate::ddl::view_job_config(db, settings)?;
    let exactly_once = sink.connector().exactly_once();
    {
        if exactly_once {
            exactly_once_checks(db, &config, &fragments, &sink)?;
            // One transactional writer per sink: a last fragment of one actor.
            let last = fragments.last().expect("a planned query has fragments");
            if !last.single {
                let id = fragments.iter().map(|f| f.id).max().unwrap_or(0) + 1;
                let output_schema = last.output_schema.clone();
                fragments.push(FragmentSpec {
                    id,
                    single: true,
                    inputs: vec![FragmentInput::Fragment {
                        id: last.id,
                        exchange: ExchangeKind::Single,
                    }],
                    chain: vec![],
                    output_schema,
                });
            }
        }
    }
    let graph = StreamGraph {
        fragments,
        output_uid: format!("{name}.sink"),
        sink: Some(sink),
    };
    let mut reads: Vec<String> = Vec::new();
    for f in &graph.fragments {
        for i in &f.inputs {
            if let FragmentInput::Relation(r) = i {
                if !reads.contains(r) {
                    reads.push(r.clone());
                }
            }
        }
    }
    Ok((
        ViewSpec {
            graph,
            schema: Arc::new(schema.clone()),
            parallelism,
            config,
        },
        reads,
    ))
}

/// The schema a sink writes and the fragments that compute it: a table is read as it
/// is; a materialized view's query or the sink's own query runs in the sink's job,
/// emitting each window once at its close when the view was so declared or `eowc`.
async fn sink_input(
    db: &Database,
    name: &str,
    input: &SinkInput,
    eowc: bool,
) -> SqlResult<(SchemaRef, Vec<FragmentSpec>)> {
    let query = match input {
        SinkInput::Relation(from) => {
            let schema = db.relation_schema(from).ok_or_else(|| {
                SqlError::new(
                    sqlstate::UNDEFINED_TABLE,
                    format!("relation \"{from}\" does not exist"),
                )
            })?;
            let view_sql = db
                .catalog
                .read()
                .get(from)
                .filter(|e| e.kind == RelationKind::MaterializedView)
                .map(|e| e.sql.clone());
            let Some(sql) = view_sql else {
                if eowc {
                    return Err(SqlError::unsupported(format!(
                        "emit_on_window_close: a sink of table \"{from}\" has no window \
                         aggregation to close; sink a query that groups by a window"
                    )));
                }
                let table = FragmentSpec {
                    id: 0,
                    single: false,
                    inputs: vec![FragmentInput::Relation(from.to_string())],
                    chain: vec![],
                    output_schema: schema.clone(),
                };
                return Ok((schema, vec![table]));
            };
            let Ok(WeirStatement::Sql(stmt)) = weir_planner::parse_statement(&sql) else {
                return Err(SqlError::internal("stored view DDL is not a statement"));
            };
            let Statement::CreateView(cv) = *stmt else {
                return Err(SqlError::internal(
                    "stored view DDL is not CREATE MATERIALIZED VIEW",
                ));
            };
            let mut graph = crate::ddl::plan_query(db, &cv.query, name).await?.graph;
            if eowc || crate::ddl::emits_on_window_close(&cv.options)? {
                crate::ddl::emit_on_window_close(db, &mut graph)?;
            }
            return Ok((schema, graph.fragments));
        }
        SinkInput::Query(q) => q,
    };
    let Ok(WeirStatement::Sql(stmt)) = weir_planner::parse_statement(query) else {
        return Err(SqlError::syntax("CREATE SINK ... AS needs a SELECT query"));
    };
    let Statement::Query(query) = *stmt else {
        return Err(SqlError::syntax("CREATE SINK ... AS needs a SELECT query"));
    };
    let mut planned = crate::ddl::plan_query(db, &query, name).await?;
    if eowc {
        crate::ddl::emit_on_window_close(db, &mut planned.graph)?;
    }
    let schema = Arc::new(arrow::datatypes::Schema::new(
        planned
            .schema
            .fields()
            .iter()
            .map(|f| {
                arrow::datatypes::Field::new(
                    weir_planner::naming::pg_column_name(f.name()),
                    f.data_type().clone(),
                    true,
                )
            })
            .collect::<Vec<_>>(),
    ));
    Ok((schema, planned.graph.fragments))
}

/// An exactly-once sink commits on checkpoint completion, so its job must checkpoint,
/// with aligned barriers, and read only tables (whose log positions it can resume from).
fn exactly_once_checks(
    db: &Database,
    config: &weir_executor::checkpoint::JobConfig,
    fragments: &[FragmentSpec],
    sink: &SinkSpec,
) -> SqlResult<()> {
    let what = sink.connector().exactly_once_setting();
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    if config.checkpoint.interval.is_none() {
        return Err(invalid(format!(
            "{what} commits at checkpoints: set execution.checkpointing.interval"
        )));
    }
    if config.checkpoint.mode != CheckpointMode::ExactlyOnce {
        return Err(invalid(format!(
            "{what} needs execution.checkpointing.mode = 'EXACTLY_ONCE'"
        )));
    }
    let catalog = db.catalog.read();
    for f in fragments {
        for input in &f.inputs {
            if let FragmentInput::Relation(r) = input {
                if catalog
                    .get(r)
                    .is_some_and(|e| e.kind != RelationKind::Table)
                {
                    return Err(SqlError::unsupported(format!(
                        "an exactly-once sink reads tables or a view over tables; \"{r}\" is a view read by the view"
                    )));
                }
            }
        }
    }
    Ok(())
}

pub async fn create_sink(
    db: &Database,
    session: &Session,
    name: &str,
    input: &SinkInput,
    options: &[(String, String)],
    sql: &str,
) -> SqlResult<Output> {
    let _ddl = db.ddl_lock.lock().await;
    if db.catalog.read().get(name).is_some() {
        return Err(crate::ddl::duplicate_relation(name));
    }
    let parallelism = session.parallelism().unwrap_or(db.config.parallelism);
    // The session's job settings (checkpointing, restart strategy) apply, as for views.
    let settings: BTreeMap<String, String> = session
        .settings
        .iter()
        .filter(|(k, _)| crate::settings::is_job_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (spec, reads) = sink_spec(db, name, input, options, parallelism, &settings).await?;
    let id = db.catalog.write().allocate_id();
    crate::ddl::deploy(db, id, name, spec, weir_executor::Restore::Fresh).await?;
    let entry = RelationEntry {
        id,
        name: name.to_string(),
        kind: RelationKind::Sink,
        sql: sql.to_string(),
        columns: vec![],
        depends_on: match input {
            SinkInput::Relation(from) => vec![from.clone()],
            SinkInput::Query(_) => reads,
        },
        primary_key: vec![],
        parallelism,
        settings,
    };
    let mut cat = db.catalog.write();
    cat.relations.push(entry);
    cat.save(&db.meta)?;
    Ok(Output::command("CREATE_SINK"))
}

/// Re-creates a sink at startup from its latest checkpoint.
pub async fn restore_sink(db: &Database, entry: &RelationEntry) -> SqlResult<()> {
    let WeirStatement::CreateSink {
        name,
        input,
        options,
        ..
    } = weir_planner::parse_statement(&entry.sql)?
    else {
        return Err(SqlError::internal("stored sink DDL is not CREATE SINK"));
    };
    let (spec, _) = sink_spec(
        db,
        &name,
        &input,
        &options,
        entry.parallelism.max(1),
        &entry.settings,
    )
    .await?;
    crate::ddl::deploy(db, entry.id, &name, spec, weir_executor::Restore::Latest).await?;
    db.catalog.write().relations.push(entry.clone());
    Ok(())
}

pub async fn drop_sink(db: &Database, name: &str, if_exists: bool) -> SqlResult<Output> {
    let _ddl = db.ddl_lock.lock().await;
    let kind = db.catalog.read().get(name).map(|e| e.kind);
    match kind {
        None if if_exists => return Ok(Output::command("DROP SINK")),
        None => {
            return Err(SqlError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("sink \"{name}\" does not exist"),
            ))
        }
        Some(RelationKind::Sink) => {}
        Some(_) => {
            return Err(SqlError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a sink"),
            ))
        }
    }
    let rt = db.runtime();
    let mut w = rt.lock_writes().await;
    rt.flush_locked(&mut w).await.map_err(SqlError::from)?;
    rt.drop_view(&mut w, name);
    {
        let mut cat = db.catalog.write();
        cat.remove(name);
        cat.save(&db.meta)?;
    }
    drop(w);
    rt.settle_retained().await;
    Ok(Output::command("DROP SINK"))
}

/// `SHOW SINKS`: name, the relation it reads, connector, status; by name.
pub fn show_sinks(db: &Database) -> SqlResult<Output> {
    let jobs = db.runtime().jobs();
    let mut rows: Vec<Vec<String>> = db
        .catalog
        .read()
        .relations
        .iter()
        .filter(|r| r.kind == RelationKind::Sink)
        .map(|r| {
            vec![
                r.name.clone(),
                r.depends_on.join(", "),
                connector_of(&r.sql),
                jobs.iter()
                    .find(|j| j.name == r.name)
                    .map(|j| j.status.as_str().to_string())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    rows.sort();
    crate::show::text_table(&["name", "from", "connector", "status"], rows)
}

/// The connector a stored CREATE SINK names.
fn connector_of(sql: &str) -> String {
    match weir_planner::parse_statement(sql) {
        Ok(WeirStatement::CreateSink { options, .. }) => options
            .into_iter()
            .find(|(k, _)| k == "connector")
            .map(|(_, v)| v.to_ascii_lowercase())
            .unwrap_or_default(),
        _ => String::new(),
    }
}
