//! `CREATE TABLE t (...) WITH (connector = 'kafka', ...) [FORMAT PLAIN | UPSERT ENCODE JSON | CSV]`
//! (and `CREATE SOURCE`, the same): the table's connector options, checked up front so
//! a bad option is a clear error before anything is created.
//!
//! Keys (Flink's and RisingWave's names):
//! - `connector = 'kafka'`, `topic`, `properties.bootstrap.server` (or `...servers`);
//! - `scan.startup.mode = 'earliest'` (default) `| 'latest' | 'timestamp' |
//!   'group-offsets'`, with `scan.startup.timestamp-millis` for `timestamp`;
//! - `bad_records = 'skip'` (default: counted and listed by `SHOW SOURCE ERRORS`)
//!   `| 'fail' | 'dead-letter'` (with `dead-letter.topic`), `max.record.bytes`
//!   (default 1 MiB);
//! - any other `properties.<key>` goes to librdkafka as `<key>`.

use arrow::datatypes::{DataType, Schema};
use datafusion::sql::sqlparser::ast::{CreateTable, CreateTableOptions, SqlOption};
use std::collections::BTreeMap;
use weir_executor::source::datagen::{DatagenSpec, FieldGen};
use weir_executor::source::decode::Encode;
use weir_executor::source::kafka::{KafkaSpec, Metadata, StartupMode};
use weir_executor::source::nexmark::generator::{GeneratorConfig, Kind};
use weir_executor::source::nexmark::{Field as NexmarkField, NexmarkSpec};
use weir_executor::source::BadRecordPolicy;
use weir_executor::source::SourceSpec;
use weir_executor::watermark::WatermarkSpec;
use weir_planner::{sqlstate, SqlError, SqlResult};

const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

fn invalid(msg: impl Into<String>) -> SqlError {
    SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, msg)
}

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

/// The option the parser adds to `CREATE SOURCE` (see the planner's `connector_ddl`).
const SOURCE_OPTION: &str = "weir.source";

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
    Ok(connector.and_then(SourceSpec::generated_rows))
}

/// Whether the statement was written `CREATE SOURCE`.
pub fn declared_as_source(ct: &CreateTable) -> SqlResult<bool> {
    Ok(options(ct)?.contains_key(SOURCE_OPTION))
}

/// The table's connector, or `None` for a table written by SQL only. `columns` are the
/// table's column names, for `INCLUDE ... AS name` metadata columns.
pub fn source_spec(
    ct: &CreateTable,
    table: &str,
    columns: &[String],
    has_primary_key: bool,
) -> SqlResult<Option<SourceSpec>> {
    let mut o = options(ct)?;
    o.remove(SOURCE_OPTION);
    if o.get("connector")
        .is_some_and(|c| c.eq_ignore_ascii_case("nexmark"))
    {
        o.retain(|k, _| !k.starts_with("watermark."));
        return nexmark_spec(o, table, columns).map(|n| Some(SourceSpec::Nexmark(n)));
    }
    if o.get("connector")
        .is_some_and(|c| c.eq_ignore_ascii_case("datagen"))
    {
        o.retain(|k, _| !k.starts_with("watermark."));
        return datagen_spec(o, table, columns).map(|d| Some(SourceSpec::Datagen(d)));
    }
    Ok(kafka_spec(o, table, columns, has_primary_key)?.map(SourceSpec::Kafka))
}

/// `connector = 'datagen'`: `rows-per-second` (default 10,000, Flink's; `0`: as fast as
/// possible), `number-of-rows`, and per column `fields.<col>.kind = 'random' |
/// 'sequence'` with `start` / `end` (sequence) or `min` / `max` / `length` (random;
/// defaults 0 / 1000 / 10). RisingWave's `datagen.rows.per.second` is accepted too.
fn datagen_spec(
    mut o: BTreeMap<String, String>,
    table: &str,
    columns: &[String],
) -> SqlResult<DatagenSpec> {
    o.remove("connector");
    let number = |o: &mut BTreeMap<String, String>, key: &str| -> SqlResult<Option<f64>> {
        o.remove(key)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| invalid(format!("invalid {key}: {v}")))
            })
            .transpose()
    };
    let rate =
        match number(&mut o, "rows-per-second")?.or(number(&mut o, "datagen.rows.per.second")?) {
            None => Some(10_000.0),
            Some(0.0) => None,
            Some(r) if r > 0.0 => Some(r),
            Some(r) => return Err(invalid(format!("invalid rows-per-second: {r}"))),
        };
    let rows = match number(&mut o, "number-of-rows")? {
        Some(n) if n >= 0.0 => Some(n as i64),
        Some(n) => return Err(invalid(format!("invalid number-of-rows: {n}"))),
        None => None,
    };
    let mut fields = Vec::new();
    for c in columns {
        let key = |k: &str| format!("fields.{c}.{k}");
        let kind = o.remove(&key("kind")).unwrap_or_else(|| "random".into());
        let field = match kind.to_ascii_lowercase().as_str() {
            "sequence" => {
                let start = number(&mut o, &key("start"))?;
                let end = number(&mut o, &key("end"))?;
                let (Some(start), Some(end)) = (start, end) else {
                    return Err(invalid(format!(
                        "a sequence column needs fields.{c}.start and fields.{c}.end"
                    )));
                };
                FieldGen::Sequence {
                    start: start as i64,
                    end: end as i64,
                }
            }
            "random" => FieldGen::Random {
                min: number(&mut o, &key("min"))?.unwrap_or(0.0),
                max: number(&mut o, &key("max"))?.unwrap_or(1000.0),
                length: number(&mut o, &key("length"))?.map_or(10, |n| n.max(0.0) as usize),
            },
            other => {
                return Err(invalid(format!(
                    "fields.{c}.kind must be random or sequence, not {other}"
                )))
            }
        };
        fields.push(field);
    }
    if let Some(k) = o.keys().next() {
        return Err(match k.strip_prefix("fields.") {
            Some(rest) => SqlError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "datagen option \"{k}\": no column \"{}\" or no such setting",
                    rest.split('.').next().unwrap_or_default()
                ),
            ),
            None => invalid(format!("unknown datagen connector option \"{k}\"")),
        });
    }
    Ok(DatagenSpec {
        table: table.to_string(),
        fields,
        rows,
        rows_per_second: rate,
    })
}

/// `connector = 'nexmark'`: `nexmark.table.type = 'person' | 'auction' | 'bid'`,
/// `nexmark.event.num` (events of all kinds; default unbounded), `nexmark.event.rate`
/// (event-time events per second, default 10,000, Nexmark's), `nexmark.base.time`
/// (ms since the epoch of event 0; default 2024-01-01 00:00:00 UTC, fixed so that the
/// events are the same after every restart), `nexmark.max.events.per.second` (wall
/// clock; default unthrottled), `nexmark.split.num` (RisingWave's: threads that
/// generate in parallel, 1 to 64; default 1; the rows and their order are the same).
fn nexmark_spec(
    mut o: BTreeMap<String, String>,
    table: &str,
    columns: &[String],
) -> SqlResult<NexmarkSpec> {
    o.remove("connector");
    let kind = match o
        .remove("nexmark.table.type")
        .map(|t| t.to_ascii_lowercase())
    {
        Some(t) if t == "person" => Kind::Person,
        Some(t) if t == "auction" => Kind::Auction,
        Some(t) if t == "bid" => Kind::Bid,
        other => {
            return Err(invalid(format!(
                "nexmark.table.type must be person, auction or bid, not {}",
                other.unwrap_or_else(|| "missing".into())
            )))
        }
    };
    let number = |o: &mut BTreeMap<String, String>, key: &str| -> SqlResult<Option<f64>> {
        o.remove(key)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| *n > 0.0 && n.is_finite())
                    .ok_or_else(|| invalid(format!("invalid {key}: {v}")))
            })
            .transpose()
    };
    let events = number(&mut o, "nexmark.event.num")?.map(|n| n as i64);
    let event_rate = number(&mut o, "nexmark.event.rate")?.unwrap_or(10_000.0);
    let base_time_ms = number(&mut o, "nexmark.base.time")?.map_or(1_704_067_200_000, |n| n as i64);
    let max_events_per_second = number(&mut o, "nexmark.max.events.per.second")?;
    let splits = match number(&mut o, "nexmark.split.num")? {
        None => 1,
        Some(n) if n.fract() == 0.0 && n <= 64.0 => n as usize,
        Some(n) => {
            return Err(invalid(format!(
                "nexmark.split.num must be a whole number from 1 to 64, not {n}"
            )))
        }
    };
    if let Some(k) = o.keys().next() {
        return Err(invalid(format!("unknown nexmark connector option \"{k}\"")));
    }
    let fields = columns
        .iter()
        .map(|c| {
            NexmarkField::for_column(kind, c).ok_or_else(|| {
                SqlError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{c}\" is not a field of the nexmark {kind:?} table"),
                )
            })
        })
        .collect::<SqlResult<Vec<_>>>()?;
    Ok(NexmarkSpec {
        table: table.to_string(),
        kind,
        events,
        config: GeneratorConfig {
            base_time_ms,
            event_rate,
        },
        max_events_per_second,
        fields,
        splits,
    })
}

fn kafka_spec(
    mut o: BTreeMap<String, String>,
    table: &str,
    columns: &[String],
    has_primary_key: bool,
) -> SqlResult<Option<KafkaSpec>> {
    // The watermark is the table's own, with or without a connector.
    o.retain(|k, _| !k.starts_with("watermark."));
    let mut metadata = Vec::new();
    for key in o
        .keys()
        .filter(|k| k.starts_with("include."))
        .cloned()
        .collect::<Vec<_>>()
    {
        let what = o.remove(&key).unwrap_or_default();
        let column = &key["include.".len()..];
        let m = Metadata::parse(&what).ok_or_else(|| {
            invalid(format!(
                "INCLUDE {what}: a Kafka table can include partition, offset, timestamp or key"
            ))
        })?;
        let index = columns
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| invalid(format!("no column \"{column}\" for INCLUDE {what}")))?;
        metadata.push((index, m));
    }
    let Some(connector) = o.remove("connector") else {
        if let Some(k) = o.keys().next() {
            return Err(invalid(format!(
                "unknown table option \"{k}\" (a table takes options only with a connector)"
            )));
        }
        return Ok(None);
    };
    if !connector.eq_ignore_ascii_case("kafka") {
        return Err(SqlError::unsupported(format!(
            "connector '{connector}' is not supported (kafka, nexmark and datagen are)"
        )));
    }
    let topic = o
        .remove("topic")
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("the kafka connector needs topic = '...'"))?;
    let bootstrap_servers = o
        .remove("properties.bootstrap.server")
        .or_else(|| o.remove("properties.bootstrap.servers"))
        .ok_or_else(|| {
            invalid("the kafka connector needs properties.bootstrap.server = 'host:port'")
        })?;
    let format = o.remove("format").unwrap_or_else(|| "plain".into());
    let upsert = match format.to_ascii_lowercase().as_str() {
        "plain" => false,
        "upsert" if has_primary_key => true,
        "upsert" => {
            return Err(SqlError::new(
                "42P16",
                "FORMAT UPSERT needs a PRIMARY KEY: records replace the row with their key",
            ))
        }
        _ => {
            return Err(SqlError::unsupported(format!(
                "FORMAT {format} is not supported yet (PLAIN and UPSERT are)"
            )))
        }
    };
    let encode_text = o.remove("encode").unwrap_or_else(|| "json".into());
    let encode = if encode_text.eq_ignore_ascii_case("avro") {
        avro_encode(&mut o, upsert)?
    } else {
        Encode::parse(&encode_text).ok_or_else(|| {
            SqlError::unsupported(format!(
                "ENCODE {encode_text} is not supported yet (JSON, CSV and AVRO are)"
            ))
        })?
    };
    let timestamp = o.remove("scan.startup.timestamp-millis");
    let startup = match o
        .remove("scan.startup.mode")
        .unwrap_or_else(|| "earliest".into())
        .to_ascii_lowercase()
        .as_str()
    {
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
    };
    let dead_letter = o.remove("dead-letter.topic");
    let bad_records = match o.remove("bad_records") {
        None => BadRecordPolicy::Skip,
        Some(p) => BadRecordPolicy::parse(&p, dead_letter).ok_or_else(|| {
            invalid(format!(
                "bad_records must be skip, fail or dead-letter (with dead-letter.topic = '...'), not {p}"
            ))
        })?,
    };
    let max_record_bytes = match o.remove("max.record.bytes") {
        None => DEFAULT_MAX_RECORD_BYTES,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("invalid max.record.bytes: {v}")))?,
    };
    let readers = match o.remove("scan.parallelism") {
        None => 1,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .ok_or_else(|| invalid(format!("invalid scan.parallelism: {v} (1 to 256)")))?,
    };
    let mut properties = BTreeMap::new();
    for (k, v) in o {
        match k.strip_prefix("properties.") {
            Some(p) => {
                properties.insert(p.to_string(), v);
            }
            None => return Err(invalid(format!("unknown kafka connector option \"{k}\""))),
        }
    }
    Ok(Some(KafkaSpec {
        table: table.to_string(),
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

/// `ENCODE AVRO (schema = '<schema JSON>')` or `(schema.location = 'file:///path' |
/// '/path')`: the writer's schema, given inline or in a file (no schema registry yet).
/// Records are single Avro binary datums.
fn avro_encode(o: &mut BTreeMap<String, String>, upsert: bool) -> SqlResult<Encode> {
    let invalid = |m: String| SqlError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
    if upsert {
        return Err(SqlError::unsupported(
            "FORMAT UPSERT ENCODE AVRO is not supported yet (keys need their own schema)",
        ));
    }
    let text = match (o.remove("schema"), o.remove("schema.location")) {
        (Some(inline), None) => inline,
        (None, Some(location)) => {
            let path = location.strip_prefix("file://").unwrap_or(&location);
            std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("cannot read Avro schema {location}: {e}")))?
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "ENCODE AVRO takes schema or schema.location, not both".into(),
            ))
        }
        (None, None) => {
            return Err(invalid(
                "ENCODE AVRO needs (schema = '<Avro schema JSON>') or (schema.location = 'file:///path')"
                    .into(),
            ))
        }
    };
    Encode::avro(&text).map_err(invalid)
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
