//! `connector = 'nexmark'` options (RisingWave's names): `nexmark.table.type = 'person'
//! | 'auction' | 'bid'`, `nexmark.event.num` (events of all kinds; default unbounded),
//! `nexmark.event.rate` (event-time events per second, default 10,000, Nexmark's),
//! `nexmark.base.time` (ms since the epoch of event 0; default 2024-01-01 00:00:00 UTC,
//! fixed so that the events are the same after every restart),
//! `nexmark.max.events.per.second` (wall clock; default unthrottled),
//! `nexmark.split.num` (threads that generate in parallel, 1 to 64; default 1; the rows
//! and their order are the same).

use super::generator::{GeneratorConfig, Kind};
use super::{Field, NexmarkSpec};
use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::source::{ConnectorTable, SourceSpec};
use std::sync::Arc;

/// 2024-01-01 00:00:00 UTC.
const DEFAULT_BASE_TIME_MS: i64 = 1_704_067_200_000;

pub(crate) fn parse(o: &mut ConnectorOptions, table: &ConnectorTable<'_>) -> Result<SourceSpec> {
    let kind = match o.take("nexmark.table.type").map(|t| t.to_ascii_lowercase()) {
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
    let events = positive(o, "nexmark.event.num")?.map(|n| n as i64);
    let event_rate = positive(o, "nexmark.event.rate")?.unwrap_or(10_000.0);
    let base_time_ms = positive(o, "nexmark.base.time")?.map_or(DEFAULT_BASE_TIME_MS, |n| n as i64);
    let max_events_per_second = positive(o, "nexmark.max.events.per.second")?;
    let splits = match positive(o, "nexmark.split.num")? {
        None => 1,
        Some(n) if n.fract() == 0.0 && n <= 64.0 => n as usize,
        Some(n) => {
            return Err(invalid(format!(
                "nexmark.split.num must be a whole number from 1 to 64, not {n}"
            )))
        }
    };
    let fields = table
        .columns
        .iter()
        .map(|c| {
            Field::for_column(kind, c).ok_or_else(|| {
                ExecError::UndefinedColumn(format!(
                    "column \"{c}\" is not a field of the nexmark {kind:?} table"
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(NexmarkSpec {
        kind,
        events,
        config: GeneratorConfig {
            base_time_ms,
            event_rate,
        },
        max_events_per_second,
        fields,
        splits,
    }))
}

/// A number above zero, or an error naming the key.
fn positive(o: &mut ConnectorOptions, key: &str) -> Result<Option<f64>> {
    let Some(v) = o.get(key).map(str::to_string) else {
        return Ok(None);
    };
    match o.take_number(key)? {
        Some(n) if n > 0.0 => Ok(Some(n)),
        _ => Err(invalid(format!("invalid {key}: {v}"))),
    }
}
