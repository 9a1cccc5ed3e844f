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
use weir_executor::exchange::ExchangeKind;
use weir_executor::sinks::blackhole::BlackholeSpec;
use weir_executor::sinks::file::FileSinkSpec;
use weir_executor::sinks::format::SinkFormat;
use weir_executor::sinks::kafka::{DeliveryGuarantee, KafkaSinkSpec};
use weir_executor::{FragmentInput, FragmentSpec, SinkSpec, StreamGraph, ViewSpec};
use weir_planner::connector_ddl::SinkInput;
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
    let connector = options
        .iter()
        .find(|(k, _)| k == "connector")
        .map(|(_, v)| v.to_ascii_lowercase());
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    let (schema, mut fragments) = sink_input(db, name, input).await?;
    let schema = schema.as_ref();
    let sink = match connector.as_deref() {
        Some("blackhole") => {
            // The blackhole takes no options of its own.
            if let Some((k, _)) = options
                .iter()
                .find(|(k, _)| !matches!(k.as_str(), "connector" | "type" | "format" | "encode"))
            {
                return Err(invalid(format!("unknown sink option \"{k}\"")));
            }
            SinkSpec::Blackhole(BlackholeSpec)
        }
        Some("kafka") => SinkSpec::Kafka(kafka_sink_spec(name, options, schema)?),
        Some("file") => SinkSpec::File(file_sink_spec(db, name, options, schema)?),
        Some(c) => {
            return Err(SqlError::unsupported(format!(
                "sink connector '{c}' is not supported yet (blackhole, kafka and file are)"
            )))
        }
        None => return Err(invalid("a sink needs connector = '...'".into())),
    };
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
/// is; a materialized view's query or the sink's own query runs in the sink's job.
async fn sink_input(
    db: &Database,
    name: &str,
    input: &SinkInput,
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
            let fragments = crate::ddl::plan_query(db, &cv.query, name)
                .await?
                .graph
                .fragments;
            return Ok((schema, fragments));
        }
        SinkInput::Query(q) => q,
    };
    let Ok(WeirStatement::Sql(stmt)) = weir_planner::parse_statement(query) else {
        return Err(SqlError::syntax("CREATE SINK ... AS needs a SELECT query"));
    };
    let Statement::Query(query) = *stmt else {
        return Err(SqlError::syntax("CREATE SINK ... AS needs a SELECT query"));
    };
    let planned = crate::ddl::plan_query(db, &query, name).await?;
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

/// `connector = 'kafka'` options: `topic`, `properties.bootstrap.server`, other
/// `properties.*`, `FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON` (UPSERT with
/// `primary_key = 'col, ...'`), and `sink.delivery-guarantee = 'at-least-once'` (the
/// default) or `'exactly-once'`.
fn kafka_sink_spec(
    name: &str,
    options: &[(String, String)],
    schema: &arrow::datatypes::Schema,
) -> SqlResult<KafkaSinkSpec> {
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    let mut topic = None;
    let mut bootstrap = None;
    let mut format = "plain".to_string();
    let mut primary_key = None;
    let mut guarantee = DeliveryGuarantee::AtLeastOnce;
    let mut properties = BTreeMap::new();
    let mut transactional_id_prefix = "weir".to_string();
    for (k, v) in options {
        match k.as_str() {
            "connector" | "type" => {}
            "topic" => topic = Some(v.clone()),
            "sink.transactional-id-prefix" if !v.is_empty() => {
                transactional_id_prefix = v.clone()
            }
            "sink.transactional-id-prefix" => {
                return Err(invalid("sink.transactional-id-prefix must not be empty".into()))
            }
            "properties.bootstrap.server" | "properties.bootstrap.servers" => {
                bootstrap = Some(v.clone())
            }
            "format" => format = v.to_ascii_lowercase(),
            "primary_key" => primary_key = Some(v.clone()),
            "encode" if v.eq_ignore_ascii_case("json") => {}
            "encode" => {
                return Err(SqlError::unsupported(format!(
                    "sink ENCODE {v} is not supported yet (JSON is)"
                )))
            }
            "sink.delivery-guarantee" => {
                guarantee = match v.to_ascii_lowercase().as_str() {
                    "at-least-once" => DeliveryGuarantee::AtLeastOnce,
                    "exactly-once" => DeliveryGuarantee::ExactlyOnce,
                    other => {
                        return Err(invalid(format!(
                        "invalid sink.delivery-guarantee: {other} (exactly-once or at-least-once)"
                    )))
                    }
                }
            }
            other => match other.strip_prefix("properties.") {
                Some("transactional.id") => return Err(invalid(
                    "properties.transactional.id is derived from the sink's uid; set sink.transactional-id-prefix instead"
                        .into(),
                )),
                Some(p) => {
                    properties.insert(p.to_string(), v.clone());
                }
                None => return Err(invalid(format!("unknown kafka sink option \"{other}\""))),
            },
        }
    }
    let format = match (format.as_str(), primary_key) {
        ("plain", None) => SinkFormat::Plain,
        ("debezium", None) => SinkFormat::Debezium,
        ("upsert", Some(pk)) => SinkFormat::Upsert(key_columns(&pk, schema)?),
        ("upsert", None) => {
            return Err(invalid(
                "FORMAT UPSERT needs primary_key = 'column, ...' (the message key)".into(),
            ))
        }
        ("plain" | "debezium", Some(_)) => {
            return Err(invalid("primary_key is only for FORMAT UPSERT".into()))
        }
        (other, _) => {
            return Err(SqlError::unsupported(format!(
                "sink FORMAT {other} is not supported yet (PLAIN, UPSERT and DEBEZIUM are)"
            )))
        }
    };
    Ok(KafkaSinkSpec {
        sink: name.to_string(),
        topic: topic.ok_or_else(|| invalid("the kafka sink needs topic = '...'".into()))?,
        bootstrap_servers: bootstrap.ok_or_else(|| {
            invalid("the kafka sink needs properties.bootstrap.server = 'host:port'".into())
        })?,
        format,
        guarantee,
        schema: Arc::new(schema.clone()),
        properties,
        transactional_id_prefix,
    })
}

/// `connector = 'file'` options: `path` (a folder, `file://` URL or `s3://bucket/prefix`;
/// S3 settings as for checkpoints) and `FORMAT PLAIN | DEBEZIUM ENCODE JSON` (JSON
/// lines; Parquet is not built yet).
fn file_sink_spec(
    db: &Database,
    name: &str,
    options: &[(String, String)],
    schema: &arrow::datatypes::Schema,
) -> SqlResult<FileSinkSpec> {
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    let mut path = None;
    let mut format = "plain".to_string();
    let mut encode = "json".to_string();
    for (k, v) in options {
        match k.as_str() {
            "connector" | "type" => {}
            "path" => path = Some(v.clone()),
            "format" => format = v.to_ascii_lowercase(),
            "encode" => encode = v.to_ascii_lowercase(),
            other => return Err(invalid(format!("unknown file sink option \"{other}\""))),
        }
    }
    let format = match (format.as_str(), encode.as_str()) {
        ("plain", "json") => SinkFormat::Plain,
        ("debezium", "json") => SinkFormat::Debezium,
        (f, e) => {
            return Err(SqlError::unsupported(format!(
                "file sink FORMAT {f} ENCODE {e} is not supported yet (PLAIN or DEBEZIUM ENCODE JSON is)"
            )))
        }
    };
    let path = path.ok_or_else(|| invalid("the file sink needs path = '...'".into()))?;
    let storage = weir_storage::object_storage::ObjectStorage::open(&path, &db.config.s3())
        .map_err(|e| invalid(format!("file sink path {path}: {e}")))?;
    Ok(FileSinkSpec {
        sink: name.to_string(),
        storage,
        format,
        schema: Arc::new(schema.clone()),
    })
}

/// Positions of the `primary_key` columns (comma-separated names) in `schema`.
fn key_columns(list: &str, schema: &arrow::datatypes::Schema) -> SqlResult<Vec<usize>> {
    list.split(',')
        .map(|c| {
            let c = c.trim().trim_matches('"');
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(c))
                .ok_or_else(|| {
                    SqlError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("primary_key column \"{c}\" does not exist"),
                    )
                })
        })
        .collect()
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
    cat.save(&db.meta).map_err(SqlError::internal)?;
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
    let mut cat = db.catalog.write();
    cat.remove(name);
    cat.save(&db.meta).map_err(SqlError::internal)?;
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
