//! `connector = 'kafka'` options (Flink's and RisingWave's names):
//! - `topic`, `properties.bootstrap.server` (or `...servers`);
//! - `scan.startup.mode = 'earliest'` (default) `| 'latest' | 'timestamp' |
//!   'group-offsets'`, with `scan.startup.timestamp-millis` for `timestamp`;
//! - `FORMAT PLAIN | UPSERT` (UPSERT needs the table's PRIMARY KEY), `ENCODE JSON |
//!   CSV | AVRO (schema = '...' | schema.location = '...')`;
//! - `bad_records = 'skip'` (default: counted and listed by `SHOW SOURCE ERRORS`)
//!   `| 'fail' | 'dead-letter'` (with `dead-letter.topic`), `max.record.bytes`
//!   (default 1 MiB);
//! - `INCLUDE partition | offset | timestamp | key AS col` (carried as `include.col`);
//! - `scan.parallelism` (reader threads, 1 to 256);
//! - any other `properties.<key>` goes to librdkafka as `<key>`.

use super::{KafkaSpec, Metadata, StartupMode};
use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::source::decode::Encode;
use crate::source::{BadRecordPolicy, ConnectorTable, SourceSpec};
use std::sync::Arc;

const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

pub(crate) fn parse(o: &mut ConnectorOptions, table: &ConnectorTable<'_>) -> Result<SourceSpec> {
    let metadata = metadata_columns(o, table.columns)?;
    let topic = o.require("topic", "kafka connector", "...")?;
    let bootstrap_servers = o
        .take_any(&[
            "properties.bootstrap.server",
            "properties.bootstrap.servers",
        ])
        .ok_or_else(|| {
            invalid("the kafka connector needs properties.bootstrap.server = 'host:port'")
        })?;
    let upsert = upsert_format(o, table.has_primary_key)?;
    let encode = encode(o, upsert)?;
    let startup = startup_mode(o)?;
    let dead_letter = o.take("dead-letter.topic");
    let bad_records = match o.take("bad_records") {
        None => BadRecordPolicy::Skip,
        Some(p) => BadRecordPolicy::parse(&p, dead_letter).ok_or_else(|| {
            invalid(format!(
                "bad_records must be skip, fail or dead-letter (with dead-letter.topic = '...'), not {p}"
            ))
        })?,
    };
    let max_record_bytes = match o.take("max.record.bytes") {
        None => DEFAULT_MAX_RECORD_BYTES,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("invalid max.record.bytes: {v}")))?,
    };
    let readers = match o.take("scan.parallelism") {
        None => 1,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .ok_or_else(|| invalid(format!("invalid scan.parallelism: {v} (1 to 256)")))?,
    };
    let properties = o.take_prefixed("properties.").into_iter().collect();
    Ok(Arc::new(KafkaSpec {
        topic,
        bootstrap_servers,
        startup,
        encode,
        bad_records,
        max_record_bytes,
        properties,
        metadata,
        upsert,
        readers,
    }))
}

/// `INCLUDE <what> AS col`: columns filled from message metadata.
fn metadata_columns(
    o: &mut ConnectorOptions,
    columns: &[String],
) -> Result<Vec<(usize, Metadata)>> {
    o.take_prefixed("include.")
        .into_iter()
        .map(|(column, what)| {
            let m = Metadata::parse(&what).ok_or_else(|| {
                invalid(format!(
                    "INCLUDE {what}: a Kafka table can include partition, offset, timestamp or key"
                ))
            })?;
            let index = columns
                .iter()
                .position(|c| *c == column)
                .ok_or_else(|| invalid(format!("no column \"{column}\" for INCLUDE {what}")))?;
            Ok((index, m))
        })
        .collect()
}

/// `FORMAT PLAIN` (false) or `UPSERT` (true).
fn upsert_format(o: &mut ConnectorOptions, has_primary_key: bool) -> Result<bool> {
    let format = o.take("format").unwrap_or_else(|| "plain".into());
    match format.to_ascii_lowercase().as_str() {
        "plain" => Ok(false),
        "upsert" if has_primary_key => Ok(true),
        "upsert" => Err(ExecError::InvalidTableDefinition(
            "FORMAT UPSERT needs a PRIMARY KEY: records replace the row with their key".into(),
        )),
        _ => Err(ExecError::Unsupported(format!(
            "FORMAT {format} is not supported yet (PLAIN and UPSERT are)"
        ))),
    }
}

fn encode(o: &mut ConnectorOptions, upsert: bool) -> Result<Encode> {
    let text = o.take("encode").unwrap_or_else(|| "json".into());
    if text.eq_ignore_ascii_case("avro") {
        return avro_encode(o, upsert);
    }
    Encode::parse(&text).ok_or_else(|| {
        ExecError::Unsupported(format!(
            "ENCODE {text} is not supported yet (JSON, CSV and AVRO are)"
        ))
    })
}

fn startup_mode(o: &mut ConnectorOptions) -> Result<StartupMode> {
    let timestamp = o.take("scan.startup.timestamp-millis");
    let mode = o
        .take("scan.startup.mode")
        .unwrap_or_else(|| "earliest".into())
        .to_ascii_lowercase();
    Ok(match mode.as_str() {
        "earliest" | "earliest-offset" => StartupMode::Earliest,
        "latest" | "latest-offset" => StartupMode::Latest,
        "group-offsets" => StartupMode::GroupOffsets,
        "timestamp" => StartupMode::Timestamp(
            timestamp
                .as_deref()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| {
                    invalid("scan.startup.mode = 'timestamp' needs scan.startup.timestamp-millis = <ms>")
                })?,
        ),
        other => {
            return Err(invalid(format!(
                "scan.startup.mode must be earliest, latest, timestamp or group-offsets, not {other}"
            )))
        }
    })
}

/// `ENCODE AVRO (schema = '<schema JSON>')` or `(schema.location = 'file:///path' |
/// '/path')`: the writer's schema, given inline or in a file (no schema registry yet).
/// Records are single Avro binary datums.
fn avro_encode(o: &mut ConnectorOptions, upsert: bool) -> Result<Encode> {
    if upsert {
        return Err(ExecError::Unsupported(
            "FORMAT UPSERT ENCODE AVRO is not supported yet (keys need their own schema)".into(),
        ));
    }
    let text = match (o.take("schema"), o.take("schema.location")) {
        (Some(inline), None) => inline,
        (None, Some(location)) => {
            let path = location.strip_prefix("file://").unwrap_or(&location);
            std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("cannot read Avro schema {location}: {e}")))?
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "ENCODE AVRO takes schema or schema.location, not both",
            ))
        }
        (None, None) => {
            return Err(invalid(
                "ENCODE AVRO needs (schema = '<Avro schema JSON>') or (schema.location = 'file:///path')",
            ))
        }
    };
    Encode::avro(&text).map_err(invalid)
}
