//! The `nexmark` connector: `CREATE TABLE bid (auction bigint, bidder bigint, price
//! bigint, date_time timestamp, extra text) WITH (connector = 'nexmark',
//! nexmark.table.type = 'bid', nexmark.event.num = '10000000')` (RisingWave's syntax).
//!
//! Each of the `person`, `auction` and `bid` tables runs the one event sequence of the
//! Nexmark generator ([`generator`]) and keeps the events of its kind, so ids agree
//! across the three tables. The position is the next event index, logged with each
//! batch of rows like a Kafka table's offsets: after a crash the table resumes at the
//! event after its last logged batch, and regenerates exactly the same events
//! (no duplicate, no gap). Columns are matched by name (case and `_` ignored:
//! `dateTime`, `date_time`); a table may declare any subset of its kind's fields.

pub mod generator;
mod java_random;
pub(crate) mod options;
pub mod queries;

use crate::error::Result;
use crate::source::generated::GeneratedRows;
use crate::source::{SourceConnector, SourceContext};
use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMillisecondBuilder,
};
use arrow::datatypes::SchemaRef;
use generator::{Event, GeneratorConfig, Kind};
use std::sync::Arc;

/// The position key in the table's logged source positions.
const POSITION_KEY: &str = "nexmark:next_event";
/// Events generated per table write (one log entry).
const BATCH_EVENTS: i64 = 50_000;

/// One generated field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Id,
    Name,
    EmailAddress,
    CreditCard,
    City,
    State,
    DateTime,
    Extra,
    ItemName,
    Description,
    InitialBid,
    Reserve,
    Expires,
    Seller,
    Category,
    Auction,
    Bidder,
    Price,
}

impl Field {
    /// The field a column of a `kind` table means, by name.
    pub fn for_column(kind: Kind, column: &str) -> Option<Field> {
        let name: String = column
            .chars()
            .filter(|c| *c != '_')
            .collect::<String>()
            .to_ascii_lowercase();
        use Field::*;
        let f = match (kind, name.as_str()) {
            (_, "datetime") => DateTime,
            (_, "extra") => Extra,
            (Kind::Person, "id") => Id,
            (Kind::Person, "name") => Name,
            (Kind::Person, "emailaddress") => EmailAddress,
            (Kind::Person, "creditcard") => CreditCard,
            (Kind::Person, "city") => City,
            (Kind::Person, "state") => State,
            (Kind::Auction, "id") => Id,
            (Kind::Auction, "itemname") => ItemName,
            (Kind::Auction, "description") => Description,
            (Kind::Auction, "initialbid") => InitialBid,
            (Kind::Auction, "reserve") => Reserve,
            (Kind::Auction, "expires") => Expires,
            (Kind::Auction, "seller") => Seller,
            (Kind::Auction, "category") => Category,
            (Kind::Bid, "auction") => Auction,
            (Kind::Bid, "bidder") => Bidder,
            (Kind::Bid, "price") => Price,
            _ => return None,
        };
        Some(f)
    }

    fn is_text(self) -> bool {
        use Field::*;
        matches!(
            self,
            Name | EmailAddress | CreditCard | City | State | Extra | ItemName | Description
        )
    }

    fn is_time(self) -> bool {
        matches!(self, Field::DateTime | Field::Expires)
    }
}

#[derive(Debug, Clone)]
pub struct NexmarkSpec {
    pub kind: Kind,
    /// `nexmark.event.num`: events of all kinds to generate; `None`: unbounded.
    pub events: Option<i64>,
    pub config: GeneratorConfig,
    /// `nexmark.max.events.per.second` (wall clock); `None`: as fast as possible.
    pub max_events_per_second: Option<f64>,
    /// The field of each table column, in column order.
    pub fields: Vec<Field>,
    /// `nexmark.split.num`: threads generating in parallel (see `generated::Run`).
    pub splits: usize,
}

enum Builder {
    Int(Int64Builder),
    Text(StringBuilder),
    Time(TimestampMillisecondBuilder),
}

impl Builder {
    fn finish(self) -> ArrayRef {
        match self {
            Builder::Int(mut b) => Arc::new(b.finish()),
            Builder::Text(mut b) => Arc::new(b.finish()),
            Builder::Time(mut b) => Arc::new(b.finish()),
        }
    }
}

fn append(b: &mut Builder, field: Field, e: &Event) {
    use Field::*;
    let int = |v: i64| v;
    match (b, e) {
        (Builder::Int(b), Event::Person(p)) if field == Id => b.append_value(int(p.id)),
        (Builder::Int(b), Event::Auction(a)) => b.append_value(match field {
            Id => a.id,
            InitialBid => a.initial_bid,
            Reserve => a.reserve,
            Seller => a.seller,
            _ => a.category,
        }),
        (Builder::Int(b), Event::Bid(x)) => b.append_value(match field {
            Auction => x.auction,
            Bidder => x.bidder,
            _ => x.price,
        }),
        (Builder::Time(b), Event::Person(p)) => b.append_value(p.date_time),
        (Builder::Time(b), Event::Auction(a)) => b.append_value(if field == Expires {
            a.expires
        } else {
            a.date_time
        }),
        (Builder::Time(b), Event::Bid(x)) => b.append_value(x.date_time),
        (Builder::Text(b), Event::Person(p)) => b.append_value(match field {
            Name => &p.name,
            EmailAddress => &p.email_address,
            CreditCard => &p.credit_card,
            City => &p.city,
            State => &p.state,
            _ => &p.extra,
        }),
        (Builder::Text(b), Event::Auction(a)) => b.append_value(match field {
            ItemName => &a.item_name,
            Description => &a.description,
            _ => &a.extra,
        }),
        (Builder::Text(b), Event::Bid(x)) => b.append_value(&x.extra),
        (Builder::Int(b), _) => b.append_null(),
    }
}

/// The rows of events `from..to` of the spec's kind, in the table's schema.
pub fn rows(spec: &NexmarkSpec, schema: &SchemaRef, from: i64, to: i64) -> Result<RecordBatch> {
    let mut builders: Vec<Builder> = spec
        .fields
        .iter()
        .map(|f| {
            if f.is_text() {
                Builder::Text(StringBuilder::new())
            } else if f.is_time() {
                Builder::Time(TimestampMillisecondBuilder::new())
            } else {
                Builder::Int(Int64Builder::new())
            }
        })
        .collect();
    for n in from..to {
        if generator::kind(n) != spec.kind {
            continue;
        }
        let e = generator::event(&spec.config, n);
        for (b, f) in builders.iter_mut().zip(&spec.fields) {
            append(b, *f, &e);
        }
    }
    let columns = builders
        .into_iter()
        .zip(schema.fields())
        .map(|(b, field)| arrow::compute::cast(&b.finish(), field.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

impl SourceConnector for NexmarkSpec {
    /// Generates into the context's table (see [`crate::source::generated`]).
    fn start(&self, ctx: SourceContext) -> Result<()> {
        let run = crate::source::generated::Run {
            total: self.events,
            batch: BATCH_EVENTS,
            max_per_second: self.max_events_per_second,
            splits: self.splits,
        };
        crate::source::generated::spawn(ctx, run, self.generated())
    }

    fn generated_rows(&self) -> Option<GeneratedRows> {
        Some(self.generated())
    }
}

impl NexmarkSpec {
    /// The spec's rows function, for generating and for regenerating an unstored source.
    fn generated(&self) -> GeneratedRows {
        let spec = self.clone();
        GeneratedRows {
            rows: Arc::new(move |schema, from, to| rows(&spec, schema, from, to)),
            position_key: POSITION_KEY,
        }
    }
}
