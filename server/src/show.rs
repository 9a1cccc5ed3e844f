//! SHOW statements and session variables.

use crate::catalog::RelationKind;
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
use crate::settings::Source;
use crate::weir_catalog::{self, Facts};
use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::{Expr, Set, Statement, Value};
use std::sync::Arc;
use weir_planner::{sqlstate, SqlError, SqlResult};

/// A result of text columns.
pub fn text_table(columns: &[&str], rows: Vec<Vec<String>>) -> SqlResult<Output> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(*c, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays = (0..columns.len())
        .map(|i| {
            Arc::new(StringArray::from(
                rows.iter().map(|r| r[i].clone()).collect::<Vec<_>>(),
            )) as _
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    Ok(Output::Rows {
        schema,
        batches: vec![batch],
    })
}

pub fn text_rows(column: &str, lines: Vec<String>) -> SqlResult<Output> {
    text_table(&[column], lines.into_iter().map(|l| vec![l]).collect())
}

pub fn show_relations(db: &Database, kind: RelationKind) -> SqlResult<Output> {
    let mut names: Vec<String> = db
        .catalog
        .read()
        .relations
        .iter()
        .filter(|r| r.kind == kind)
        .map(|r| r.name.clone())
        .collect();
    names.sort();
    text_rows("Name", names)
}

pub fn show_create(db: &Database, name: &str) -> SqlResult<Output> {
    let cat = db.catalog.read();
    match cat.get(name) {
        Some(e) if e.kind == RelationKind::MaterializedView => text_table(
            &["Name", "Create Sql"],
            vec![vec![e.name.clone(), e.sql.clone()]],
        ),
        Some(_) => Err(SqlError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a materialized view"),
        )),
        None => Err(SqlError::new(
            sqlstate::UNDEFINED_TABLE,
            format!("materialized view \"{name}\" does not exist"),
        )),
    }
}

/// `SHOW JOBS`: `weir_catalog.jobs`' name, status, parallelism, restarts, failure.
pub async fn show_jobs(db: &Database) -> SqlResult<Output> {
    let facts = Facts::gather(db, false).await;
    weir_catalog::text_table(
        "jobs",
        &facts,
        &[
            ("Name", "name"),
            ("Status", "status"),
            ("Parallelism", "parallelism"),
            ("Restarts", "restarts"),
            ("Last Failure", "last_failure"),
        ],
    )
}

/// `SHOW SAVEPOINTS`: name, time, epoch, views, size, location, format version. A
/// damaged savepoint is listed with the reason in `location`.
/// `SHOW SOURCE ERRORS`: records connectors skipped (policy `skip`), oldest first.
pub async fn show_source_errors(db: &Database) -> SqlResult<Output> {
    let facts = Facts::gather(db, false).await;
    weir_catalog::text_table(
        "source_errors",
        &facts,
        &[
            ("table", "table_name"),
            ("partition", "partition"),
            ("offset", "offset"),
            ("reason", "reason"),
            ("at", "at"),
        ],
    )
}

/// `SHOW SAVEPOINTS`: name, time, epoch, views, size, location, format version,
/// tables. A damaged savepoint is listed with the reason in `location`.
pub async fn show_savepoints(db: &Database) -> SqlResult<Output> {
    let facts = Facts::gather(db, true).await;
    weir_catalog::text_table(
        "savepoints",
        &facts,
        &[
            ("name", "name"),
            ("created", "created"),
            ("epoch", "epoch"),
            ("views", "views"),
            ("size", "size"),
            ("location", "location"),
            ("format_version", "format_version"),
            ("tables", "tables"),
        ],
    )
}

/// What `RESTORE ... FROM SAVEPOINT` did, one row per view.
/// The NOTICE of a restore: what was restored, what started empty, what was dropped.
/// `from` names the saved state: `savepoint "s"` or `retained checkpoint "<path>"`.
pub fn restore_notice(from: &str, r: &weir_executor::savepoint::RestoreReport) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    if !r.rebuilt_from.is_empty() {
        return format!(
            "\"{}\" rebuilt from the restored contents of {} ({from}): a view's own state is restored only when it reads tables",
            r.view,
            r.rebuilt_from.join(", ")
        );
    }
    format!(
        "\"{}\" restored from {from}: state restored for {}; started empty: {}; unclaimed state ignored: {}; replayed {} table-log rows",
        r.view,
        list(&r.restored_uids),
        list(&r.new_uids),
        list(&r.ignored_uids),
        r.replayed_rows
    )
}

/// `EXPLAIN RESTORE`: one row per uid with what the restore would do to it.
pub fn explain_restore(
    matches: Vec<(String, weir_executor::savepoint::UidMatch)>,
) -> SqlResult<Output> {
    let mut rows = Vec::new();
    for (view, m) in matches {
        if !m.rebuilt_from.is_empty() {
            rows.push(vec![
                view.clone(),
                String::new(),
                format!("rebuilt from {}", m.rebuilt_from.join(", ")),
            ]);
        }
        for u in &m.matched {
            let action = match m.misfit.iter().find(|(uid, _, _)| uid == u) {
                Some((_, was, now)) => format!("error: does not fit (saved {was}, now {now})"),
                None => "restore".to_string(),
            };
            rows.push(vec![view.clone(), u.clone(), action]);
        }
        for u in &m.new {
            rows.push(vec![view.clone(), u.clone(), "start empty".to_string()]);
        }
        for u in &m.unclaimed {
            rows.push(vec![
                view.clone(),
                u.clone(),
                "unclaimed: error unless ignore_unclaimed_state = true".to_string(),
            ]);
        }
    }
    text_table(&["view", "uid", "action"], rows)
}

pub fn restore_report(reports: Vec<weir_executor::savepoint::RestoreReport>) -> SqlResult<Output> {
    let rows = reports
        .into_iter()
        .map(|r| {
            vec![
                r.view,
                r.restored_uids.join(", "),
                r.new_uids.join(", "),
                r.ignored_uids.join(", "),
                r.replayed_rows.to_string(),
                r.rebuilt_from.join(", "),
            ]
        })
        .collect();
    text_table(
        &[
            "view",
            "restored_uids",
            "started_empty_uids",
            "ignored_uids",
            "replayed_rows",
            "rebuilt_from",
        ],
        rows,
    )
}

/// `SHOW CHECKPOINTS`: `weir_catalog.checkpoints`.
pub async fn show_checkpoints(db: &Database) -> SqlResult<Output> {
    let facts = Facts::gather(db, false).await;
    let columns: Vec<(&str, &str)> = ["id", "job", "status", "trigger_time", "duration_ms"]
        .into_iter()
        .chain([
            "alignment_ms",
            "full_size",
            "incremental_size",
            "path",
            "failure",
            "upload_ms",
            "start_delay_ms",
            "sync_ms",
        ])
        .map(|c| (c, c))
        .collect();
    weir_catalog::text_table("checkpoints", &facts, &columns)
}

fn value_text(e: &Expr) -> String {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

pub fn set(session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Set(set) = stmt else {
        return Err(SqlError::internal("not SET"));
    };
    match set {
        Set::SingleAssignment {
            variable, values, ..
        } => {
            let key = variable.to_string().to_ascii_lowercase().replace('"', "");
            let value = values.iter().map(value_text).collect::<Vec<_>>().join(", ");
            return set_key(session, key, value);
        }
        Set::SetTimeZone { value, .. } => {
            session
                .settings
                .insert("timezone".into(), value_text(value));
        }
        // Other SET forms (roles, names, transaction characteristics) are accepted as
        // no-ops: drivers send them at connect time.
        _ => {}
    }
    Ok(Output::command("SET"))
}

/// `SET key = value`: validated for the keys Weir knows, stored in the session.
pub fn set_key(session: &mut Session, key: String, value: String) -> SqlResult<Output> {
    if let Some(name) = key.strip_prefix("failpoint.") {
        // Test-only failure injection; refused unless the server allows it.
        if !weir_storage::failpoint::enabled() {
            return Err(SqlError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                "failpoints are disabled (start the server with WEIR_FAILPOINTS=1)",
            ));
        }
        weir_storage::failpoint::set(name, &value);
        return Ok(Output::command("SET"));
    }
    if crate::settings::is_server_key(&key) {
        return Err(SqlError::new(
            sqlstate::CANT_CHANGE_RUNTIME_PARAM,
            format!("parameter \"{key}\" can only be set in weir.toml"),
        ));
    }
    if crate::settings::is_job_key(&key) {
        crate::settings::validate(&key, &value)
            .map_err(|e| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, e))?;
    }
    if key == crate::serving::visibility::READ_AFTER_WRITE
        && crate::serving::visibility::parse_bool(&value).is_none()
    {
        return Err(SqlError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("parameter \"{key}\" requires a Boolean value"),
        ));
    }
    let is_parallelism = key == "parallelism.default" || key == "streaming_parallelism";
    if is_parallelism && value.parse::<u32>().ok().filter(|p| *p >= 1).is_none() {
        return Err(SqlError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for {key}: {value}"),
        ));
    }
    session.settings.insert(key, value);
    Ok(Output::command("SET"))
}

fn default_variable(db: &Database, key: &str) -> Option<String> {
    Some(match key {
        "server_version" => crate::pg_catalog::SERVER_VERSION.into(),
        "server_version_num" => crate::pg_catalog::SERVER_VERSION_NUM.into(),
        "server_encoding" | "client_encoding" => "UTF8".into(),
        "standard_conforming_strings" => "on".into(),
        "datestyle" => "ISO, MDY".into(),
        "timezone" => "UTC".into(),
        "transaction_isolation" | "default_transaction_isolation" => "serializable".into(),
        "search_path" => "public".into(),
        "max_identifier_length" => "63".into(),
        "integer_datetimes" => "on".into(),
        // A standby answers `on` (see `pg::standby`): only the leader gets here.
        "transaction_read_only" | "default_transaction_read_only" | "in_hot_standby" => {
            "off".into()
        }
        "parallelism.default" | "streaming_parallelism" => db.config.parallelism.to_string(),
        "pipeline.max-parallelism" => db.config.max_parallelism.to_string(),
        "barrier.interval" => format!("{}ms", db.config.barrier_interval.as_millis()),
        crate::serving::visibility::READ_AFTER_WRITE => if db.config.read_after_write {
            "on"
        } else {
            "off"
        }
        .into(),
        _ => return None,
    })
}

pub fn show_variable(db: &Database, session: &Session, name: &str) -> SqlResult<Output> {
    let key = name.to_ascii_lowercase();
    let key = match key.as_str() {
        "transaction isolation level" => "transaction_isolation".to_string(),
        "time zone" => "timezone".to_string(),
        _ => key,
    };
    if key == "all" {
        let mut rows: Vec<Vec<String>> = session
            .settings
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone(), "session".into()])
            .collect();
        rows.sort();
        return text_table(&["name", "setting", "source"], rows);
    }
    if crate::settings::is_job_key(&key) || crate::settings::is_server_key(&key) {
        // Checkpoint / restart keys: the effective value and where it came from.
        let (value, source) = if let Some(v) = session.settings.get(&key) {
            (v.clone(), Source::Session)
        } else if let Some(v) = db.config.settings.get(&key) {
            (v.clone(), Source::ConfigFile)
        } else if key == "execution.checkpointing.dir" {
            (db.config.checkpoint_dir(), Source::Default)
        } else if key == "execution.checkpointing.savepoint-dir" {
            (db.config.savepoint_dir(), Source::Default)
        } else if key == "metrics.reporter.prom.port" {
            (db.config.metrics_port.to_string(), Source::Default)
        } else {
            let d = crate::settings::default_of(&key).unwrap_or("");
            (d.to_string(), Source::Default)
        };
        return text_table(
            &[key.as_str(), "source"],
            vec![vec![value, source.as_str().to_string()]],
        );
    }
    let value = session
        .settings
        .get(&key)
        .cloned()
        .or_else(|| default_variable(db, &key))
        .ok_or_else(|| {
            SqlError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{key}\""),
            )
        })?;
    text_table(&[key.as_str()], vec![vec![value]])
}
