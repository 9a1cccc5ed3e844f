//! `CREATE TABLE t (...) WITH (connector = '...', ...)` (and `CREATE SOURCE`, the
//! same): the statement's side of a table's connector. The options are read from the
//! AST here and handed to `weir_executor::source`, where each connector parses and
//! checks its own (a bad option is a clear error before anything is created); the
//! table's `WATERMARK` and the `CREATE SOURCE` marker are the table's, read here.

use arrow::datatypes::{DataType, Schema};
use datafusion::sql::sqlparser::ast::{CreateTable, CreateTableOptions, SqlOption};
use std::collections::BTreeMap;
use weir_executor::connector_options::ConnectorOptions;
use weir_executor::source::{ConnectorTable, SourceSpec};
use weir_executor::watermark::WatermarkSpec;
use weir_planner::{sqlstate, SqlError, SqlResult};

/// The `WITH (...)` options of a CREATE TABLE as lower-case keys and text values.
fn options(ct: &CreateTable) -> SqlResult<BTreeMap<String, String>> {
    let list = match &ct.table_options {
        CreateTableOptions::With(l) | CreateTableOptions::Options(l) => l,
        CreateTableOptions::None => return Ok(BTreeMap::new()),
        _ => return Err(SqlError::unsupported("table options other than WITH (...)")),
    };
    let mut out = BTreeMap::new();
    for o in list {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(SqlError::syntax("expected key = value in WITH (...)"));
        };
        out.insert(
            key.value.to_ascii_lowercase(),
            crate::ddl::option_text(value),
        );
    }
    Ok(out)
}

/// The option the parser adds to `CREATE SOURCE`.
use weir_planner::connector_ddl::SOURCE_OPTION;

/// How an unstored source's rows are made again: `CREATE SOURCE` over a generator
/// (`nexmark`, `datagen`) keeps no rows. `None` for a table, and for a Kafka source,
/// whose records are kept (they could not be read again once the broker drops them).
pub fn unstored_rows(
    ct: &CreateTable,
    connector: Option<&SourceSpec>,
) -> SqlResult<Option<weir_executor::source::generated::GeneratedRows>> {
    if !declared_as_source(ct)? {
        return Ok(None);
    }
    Ok(connector.and_then(|c| c.generated_rows()))
}

/// Whether the statement was written `CREATE SOURCE`.
pub fn declared_as_source(ct: &CreateTable) -> SqlResult<bool> {
    Ok(options(ct)?.contains_key(SOURCE_OPTION))
}

/// The table's connector, or `None` for a table written by SQL only. `columns` are the
/// table's column names, for `INCLUDE ... AS name` metadata columns. Each connector
/// parses its own options (`weir_executor::source`).
pub fn source_spec(
    ct: &CreateTable,
    table: &str,
    columns: &[String],
    has_primary_key: bool,
) -> SqlResult<Option<SourceSpec>> {
    let mut o = options(ct)?;
    o.remove(SOURCE_OPTION);
    // The watermark is the table's own, with or without a connector.
    o.retain(|k, _| !k.starts_with("watermark."));
    let table = ConnectorTable {
        name: table,
        columns,
        has_primary_key,
    };
    Ok(weir_executor::source::from_options(
        ConnectorOptions::new(o),
        &table,
    )?)
}

/// The table's `WATERMARK FOR col AS col [- INTERVAL 'n' unit]` (carried here as the
/// options `watermark.column` / `watermark.expr` by the DDL rewrite).
pub fn watermark_spec(ct: &CreateTable, schema: &Schema) -> SqlResult<Option<WatermarkSpec>> {
    let o = options(ct)?;
    let Some(column) = o.get("watermark.column") else {
        return Ok(None);
    };
    let expr = o.get("watermark.expr").cloned().unwrap_or_default();
    let index = schema
        .fields()
        .iter()
        .position(|f| f.name().eq_ignore_ascii_case(column))
        .ok_or_else(|| {
            SqlError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("watermark column \"{column}\" does not exist"),
            )
        })?;
    if !matches!(schema.field(index).data_type(), DataType::Timestamp(..)) {
        return Err(SqlError::new(
            "42804",
            format!(
                "watermark column \"{column}\" must be a TIMESTAMP, not {}",
                crate::ddl::pg_type_name(schema.field(index).data_type())
            ),
        ));
    }
    let delay = watermark_delay(column, &expr).ok_or_else(|| {
        SqlError::unsupported(format!(
            "WATERMARK FOR {column} AS {expr}: supported are {column} and {column} - INTERVAL 'n' SECOND | MINUTE | HOUR | DAY | MILLISECOND"
        ))
    })?;
    Ok(Some(WatermarkSpec {
        column: index,
        delay,
    }))
}

/// The delay of `col` or `col - INTERVAL 'n' unit` (also `INTERVAL 'n unit'`).
fn watermark_delay(column: &str, expr: &str) -> Option<std::time::Duration> {
    let text = expr.replace('"', " ");
    let text = text.trim();
    let head = text
        .get(..column.len())
        .filter(|h| h.eq_ignore_ascii_case(column))?;
    let rest = text[head.len()..].trim();
    if rest.is_empty() {
        return Some(std::time::Duration::ZERO);
    }
    let ms = weir_planner::window_tvf::interval_millis(rest.strip_prefix('-')?)?;
    Some(std::time::Duration::from_millis(ms as u64))
}

/// The statement without its options, for DataFusion's planning of the columns.
pub fn without_options(ct: &CreateTable) -> CreateTable {
    let mut plain = ct.clone();
    plain.table_options = CreateTableOptions::None;
    plain
}
