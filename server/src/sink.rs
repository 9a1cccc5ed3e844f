//! `CREATE SINK k FROM relation WITH (connector = 'blackhole')`, `DROP SINK`,
//! `SHOW SINKS`.
//!
//! A sink is a job that reads a table or view — its current contents first, then every
//! change — and hands the changes to its connector; it is not itself readable.
//! Connectors: `blackhole` (takes everything, keeps nothing: measures a pipeline) and
//! `kafka` (at least once; the exactly-once version is designed in
//! `notes/kafka-sink-exactly-once.md`, not built). A sink checkpoints like a view (its
//! source positions), so after a restart it resumes from its checkpoint.

use crate::catalog::{RelationEntry, RelationKind};
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use std::collections::BTreeMap;
use weir_executor::operators::kafka_sink::{KafkaSinkSpec, SinkFormat};
use weir_executor::{FragmentInput, FragmentSpec, StreamGraph, ViewSpec};
use weir_planner::{sqlstate, SqlError, SqlResult, WeirStatement};

/// The job a sink runs: one fragment reading `from`, ending in the connector.
fn sink_spec(
    db: &Database,
    name: &str,
    from: &str,
    options: &[(String, String)],
    parallelism: u32,
) -> SqlResult<ViewSpec> {
    let connector = options
        .iter()
        .find(|(k, _)| k == "connector")
        .map(|(_, v)| v.to_ascii_lowercase());
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    let mut kafka = None;
    match connector.as_deref() {
        Some("blackhole") => {
            // The blackhole takes no options of its own.
            if let Some((k, _)) = options
                .iter()
                .find(|(k, _)| !matches!(k.as_str(), "connector" | "type" | "format" | "encode"))
            {
                return Err(invalid(format!("unknown sink option \"{k}\"")));
            }
        }
        Some("kafka") => kafka = Some(kafka_sink_spec(name, options)?),
        Some(c) => {
            return Err(SqlError::unsupported(format!(
                "sink connector '{c}' is not supported yet (blackhole and kafka are)"
            )))
        }
        None => return Err(invalid("a sink needs connector = '...'".into())),
    }
    let schema = db.relation_schema(from).ok_or_else(|| {
        SqlError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{from}\" does not exist"),
        )
    })?;
    let graph = StreamGraph {
        fragments: vec![FragmentSpec {
            id: 0,
            single: false,
            inputs: vec![FragmentInput::Relation(from.to_string())],
            chain: vec![],
            output_schema: schema.clone(),
        }],
        output_uid: format!("{name}.sink"),
        blackhole: kafka.is_none(),
        kafka_sink: kafka,
    };
    Ok(ViewSpec {
        graph,
        schema,
        parallelism,
        config: crate::ddl::view_job_config(db, &BTreeMap::new())?,
    })
}

/// `connector = 'kafka'` options: `topic`, `properties.bootstrap.server`, other
/// `properties.*`, `FORMAT PLAIN | DEBEZIUM ENCODE JSON`, and
/// `sink.delivery-guarantee = 'at-least-once'` (the default; `exactly-once` is not
/// built yet).
fn kafka_sink_spec(name: &str, options: &[(String, String)]) -> SqlResult<KafkaSinkSpec> {
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    let mut topic = None;
    let mut bootstrap = None;
    let mut format = SinkFormat::Plain;
    let mut properties = BTreeMap::new();
    for (k, v) in options {
        match k.as_str() {
            "connector" | "type" => {}
            "topic" => topic = Some(v.clone()),
            "properties.bootstrap.server" | "properties.bootstrap.servers" => {
                bootstrap = Some(v.clone())
            }
            "format" => {
                format = match v.to_ascii_lowercase().as_str() {
                    "plain" => SinkFormat::Plain,
                    "debezium" => SinkFormat::Debezium,
                    other => {
                        return Err(SqlError::unsupported(format!(
                            "sink FORMAT {other} is not supported yet (PLAIN and DEBEZIUM are)"
                        )))
                    }
                }
            }
            "encode" if v.eq_ignore_ascii_case("json") => {}
            "encode" => {
                return Err(SqlError::unsupported(format!(
                    "sink ENCODE {v} is not supported yet (JSON is)"
                )))
            }
            "sink.delivery-guarantee" => match v.to_ascii_lowercase().as_str() {
                "at-least-once" => {}
                "exactly-once" => {
                    return Err(SqlError::unsupported(
                        "sink.delivery-guarantee = 'exactly-once' is not built yet (see notes/kafka-sink-exactly-once.md); use 'at-least-once'",
                    ))
                }
                other => return Err(invalid(format!("invalid sink.delivery-guarantee: {other}"))),
            },
            other => match other.strip_prefix("properties.") {
                Some(p) => {
                    properties.insert(p.to_string(), v.clone());
                }
                None => return Err(invalid(format!("unknown kafka sink option \"{other}\""))),
            },
        }
    }
    Ok(KafkaSinkSpec {
        sink: name.to_string(),
        topic: topic.ok_or_else(|| invalid("the kafka sink needs topic = '...'".into()))?,
        bootstrap_servers: bootstrap.ok_or_else(|| {
            invalid("the kafka sink needs properties.bootstrap.server = 'host:port'".into())
        })?,
        format,
        properties,
    })
}

pub async fn create_sink(
    db: &Database,
    session: &Session,
    name: &str,
    from: &str,
    options: &[(String, String)],
    sql: &str,
) -> SqlResult<Output> {
    let _ddl = db.ddl_lock.lock().await;
    if db.catalog.read().get(name).is_some() {
        return Err(crate::ddl::duplicate_relation(name));
    }
    let parallelism = session.parallelism().unwrap_or(db.config.parallelism);
    let spec = sink_spec(db, name, from, options, parallelism)?;
    let id = db.catalog.write().allocate_id();
    crate::ddl::deploy(db, id, name, spec, weir_executor::Restore::Fresh).await?;
    let entry = RelationEntry {
        id,
        name: name.to_string(),
        kind: RelationKind::Sink,
        sql: sql.to_string(),
        columns: vec![],
        depends_on: vec![from.to_string()],
        primary_key: vec![],
        parallelism,
        settings: Default::default(),
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
        from,
        options,
        ..
    } = weir_planner::parse_statement(&entry.sql)?
    else {
        return Err(SqlError::internal("stored sink DDL is not CREATE SINK"));
    };
    let spec = sink_spec(db, &name, &from, &options, entry.parallelism.max(1))?;
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

/// `SHOW SINKS`: name, the relation it reads, connector, status.
pub fn show_sinks(db: &Database) -> SqlResult<Output> {
    let jobs = db.runtime().jobs();
    let rows = db
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
