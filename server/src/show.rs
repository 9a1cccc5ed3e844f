//! SHOW statements and session variables.

use crate::catalog::RelationKind;
use crate::database::Database;
use crate::output::Output;
use crate::session::Session;
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

pub fn show_jobs(db: &Database) -> SqlResult<Output> {
    let cat = db.catalog.read();
    let rows = cat
        .relations
        .iter()
        .filter(|r| r.kind == RelationKind::MaterializedView)
        .map(|r| {
            let failure = db.runtime().job_failure(&r.name);
            vec![
                r.name.clone(),
                if failure.is_some() {
                    "FAILED"
                } else {
                    "RUNNING"
                }
                .to_string(),
                db.runtime()
                    .view_parallelism(&r.name)
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                failure.unwrap_or_default(),
            ]
        })
        .collect();
    text_table(&["Name", "Status", "Parallelism", "Last Failure"], rows)
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
            let is_parallelism = key == "parallelism.default" || key == "streaming_parallelism";
            if is_parallelism && value.parse::<u32>().ok().filter(|p| *p >= 1).is_none() {
                return Err(SqlError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid value for {key}: {value}"),
                ));
            }
            session.settings.insert(key, value);
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

fn default_variable(db: &Database, key: &str) -> Option<String> {
    Some(match key {
        "server_version" => "16.6".into(),
        "server_version_num" => "160006".into(),
        "server_encoding" | "client_encoding" => "UTF8".into(),
        "standard_conforming_strings" => "on".into(),
        "datestyle" => "ISO, MDY".into(),
        "timezone" => "UTC".into(),
        "transaction_isolation" | "default_transaction_isolation" => "serializable".into(),
        "search_path" => "public".into(),
        "max_identifier_length" => "63".into(),
        "integer_datetimes" => "on".into(),
        "parallelism.default" | "streaming_parallelism" => db.config.parallelism.to_string(),
        "pipeline.max-parallelism" => db.config.max_parallelism.to_string(),
        "barrier.interval" => format!("{}ms", db.config.barrier_interval.as_millis()),
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
