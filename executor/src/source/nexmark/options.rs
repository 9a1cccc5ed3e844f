//! `connector = 'nexmark'` options (RisingWave's names): `nexmark.table.type = 'person'
//! | 'auction' | 'bid' | 'event'` (`event`: every event, Flink's shape),
//! `nexmark.event.num` (events of all kinds; default unbounded),
//! `nexmark.event.rate` (event-time events per second, default 10,000, Nexmark's),
//! `nexmark.generator = 'java-random' | 'splittable-random'` (the nexmark/nexmark Java
//! generator, the default; or the Flink Nexmark harness's, which has bid channels and
//! URLs), `nexmark.seed` (splittable-random only; default 42, the harness's),
//! `nexmark.base.time` (ms since the epoch of event 0; default 2024-01-01 00:00:00 UTC
//! for java-random and 1,700,000,000,000 for splittable-random (the harness's), fixed
//! so that the events are the same after every restart),
//! `nexmark.max.events.per.second` (wall clock; default unthrottled),
//! `nexmark.split.num` (threads that generate in parallel, 1 to 64; default 1; the rows
//! and their order are the same), `nexmark.batch.events` (events per generated batch,
//! one log entry; default [`super::BATCH_EVENTS`]).

use super::generator::{GeneratorConfig, Kind, Model};
use super::{Column, Field, NexmarkSpec, TableType};
use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::source::{ConnectorTable, SourceSpec};
use std::sync::Arc;

/// 2024-01-01 00:00:00 UTC.
const DEFAULT_BASE_TIME_MS: i64 = 1_704_067_200_000;
/// The Flink Nexmark harness's base time and seed.
const HARNESS_BASE_TIME_MS: i64 = 1_700_000_000_000;
const HARNESS_SEED: i64 = 42;

pub(crate) fn parse(o: &mut ConnectorOptions, table: &ConnectorTable<'_>) -> Result<SourceSpec> {
    let table_type = match o.take("nexmark.table.type").map(|t| t.to_ascii_lowercase()) {
        Some(t) if t == "person" => TableType::Kind(Kind::Person),
        Some(t) if t == "auction" => TableType::Kind(Kind::Auction),
        Some(t) if t == "bid" => TableType::Kind(Kind::Bid),
        Some(t) if t == "event" => TableType::Event,
        other => {
            return Err(invalid(format!(
                "nexmark.table.type must be person, auction, bid or event, not {}",
                other.unwrap_or_else(|| "missing".into())
            )))
        }
    };
    let events = positive(o, "nexmark.event.num")?.map(|n| n as i64);
    let event_rate = positive(o, "nexmark.event.rate")?.unwrap_or(10_000.0);
    let model = model(o)?;
    let default_base = match model {
        Model::JavaRandom => DEFAULT_BASE_TIME_MS,
        Model::SplittableRandom { .. } => HARNESS_BASE_TIME_MS,
    };
    let base_time_ms = positive(o, "nexmark.base.time")?.map_or(default_base, |n| n as i64);
    let max_events_per_second = positive(o, "nexmark.max.events.per.second")?;
    let splits = whole(o, "nexmark.split.num", 64)?.unwrap_or(1) as usize;
    let batch_events = whole(o, "nexmark.batch.events", 1_000_000)?.unwrap_or(super::BATCH_EVENTS);
    let columns = table
        .columns
        .iter()
        .map(|c| column(table_type, model, c))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(NexmarkSpec {
        table: table_type,
        events,
        config: GeneratorConfig {
            base_time_ms,
            event_rate,
            model,
        },
        max_events_per_second,
        columns,
        splits,
        batch_events,
    }))
}

/// `nexmark.generator` and, for splittable-random, `nexmark.seed`.
fn model(o: &mut ConnectorOptions) -> Result<Model> {
    let seed = match o.take("nexmark.seed") {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<i64>()
                .map_err(|_| invalid(format!("invalid nexmark.seed: {v} (a whole number)")))?,
        ),
    };
    let generator = o.take("nexmark.generator").map(|g| g.to_ascii_lowercase());
    match (generator.as_deref(), seed) {
        (None | Some("java-random"), None) => Ok(Model::JavaRandom),
        (None | Some("java-random"), Some(_)) => Err(invalid(
            "nexmark.seed needs nexmark.generator = 'splittable-random'",
        )),
        (Some("splittable-random"), seed) => Ok(Model::SplittableRandom {
            seed: seed.unwrap_or(HARNESS_SEED),
        }),
        (Some(g), _) => Err(invalid(format!(
            "nexmark.generator must be java-random or splittable-random, not {g}"
        ))),
    }
}

/// The field a table column means; channel and URL only where the model makes them.
fn column(table: TableType, model: Model, name: &str) -> Result<Column> {
    let c = Column::named(table, name).ok_or_else(|| {
        let what = match table {
            TableType::Kind(k) => format!("{k:?}").to_ascii_lowercase(),
            TableType::Event => "event".into(),
        };
        ExecError::UndefinedColumn(format!(
            "column \"{name}\" is not a field of the nexmark {what} table"
        ))
    })?;
    if model == Model::JavaRandom && matches!(c.field, Field::Channel | Field::Url) {
        return Err(invalid(format!(
            "column \"{name}\": the java-random generator makes no bid channel or url; \
             use nexmark.generator = 'splittable-random'"
        )));
    }
    Ok(c)
}

/// A number above zero, or an error naming the key.
/// A whole number from 1 to `max`, when given.
fn whole(o: &mut ConnectorOptions, key: &str, max: i64) -> Result<Option<i64>> {
    match positive(o, key)? {
        Some(n) if n.fract() != 0.0 || n > max as f64 => Err(invalid(format!(
            "{key} must be a whole number from 1 to {max}, not {n}"
        ))),
        n => Ok(n.map(|n| n as i64)),
    }
}

fn positive(o: &mut ConnectorOptions, key: &str) -> Result<Option<f64>> {
    let Some(v) = o.get(key).map(str::to_string) else {
        return Ok(None);
    };
    match o.take_number(key)? {
        Some(n) if n > 0.0 => Ok(Some(n)),
        _ => Err(invalid(format!("invalid {key}: {v}"))),
    }
}
