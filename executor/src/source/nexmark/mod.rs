//! The `nexmark` connector: `CREATE TABLE bid (auction bigint, bidder bigint, price
//! bigint, date_time timestamp, extra text) WITH (connector = 'nexmark',
//! nexmark.table.type = 'bid', nexmark.event.num = '10000000')` (RisingWave's syntax).
//!
//! Each of the `person`, `auction` and `bid` tables runs the one event sequence of the
//! Nexmark generator ([`generator`]) and keeps the events of its kind, so ids agree
//! across the three tables. An `event` table keeps every event, one wide row each
//! (Flink's shape: one source, split into person/auction/bid by views; see
//! [`TableType::Event`]). Two models make the events: `java-random` (the
//! nexmark/nexmark Java generator, [`generator`]) and `splittable-random` (the Flink
//! Nexmark harness's, [`harness`], with bid channels and URLs). The position is the next event index, logged with each
//! batch of rows like a Kafka table's offsets: after a crash the table resumes at the
//! event after its last logged batch, and regenerates exactly the same events
//! (no duplicate, no gap). Columns are matched by name (case and `_` ignored:
//! `dateTime`, `date_time`); a table may declare any subset of its kind's fields.

pub mod generator;
mod harness;
mod java_random;
pub(crate) mod options;
pub mod queries;
mod splittable_random;

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
/// Events generated per table write (one log entry) unless `nexmark.batch.events`
/// says otherwise. Batches are what is in flight between the generator and the
/// queries (each channel holds up to 16): at 50,000 wide `event` rows (~15 MB) q0
/// peaked at 234 MiB of RSS at p = 2, at 16,384 at 151-155 MiB with the same speed
/// (docs/nexmark.md, 2026-12-04); at 8,192 q5 ran ~10% slower.
const BATCH_EVENTS: i64 = 16_384;

/// One generated field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// 0 person, 1 auction, 2 bid (Nexmark's Flink DDL).
    EventType,
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
    Channel,
    Url,
}

/// Lower case without `_`: `dateTime`, `date_time` and `DATETIME` are one name.
fn normalized(column: &str) -> String {
    column
        .chars()
        .filter(|c| *c != '_')
        .collect::<String>()
        .to_ascii_lowercase()
}

impl Field {
    /// The field of a `kind` event that a (normalized) column name means.
    fn of_kind(kind: Kind, name: &str) -> Option<Field> {
        use Field::*;
        let f = match (kind, name) {
            (_, "eventtype") => EventType,
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
            (Kind::Bid, "channel") => Channel,
            (Kind::Bid, "url") => Url,
            _ => return None,
        };
        Some(f)
    }

    fn is_text(self) -> bool {
        use Field::*;
        matches!(
            self,
            Name | EmailAddress
                | CreditCard
                | City
                | State
                | Extra
                | ItemName
                | Description
                | Channel
                | Url
        )
    }

    fn is_time(self) -> bool {
        matches!(self, Field::DateTime | Field::Expires)
    }

    /// About how many bytes a text field holds (Nexmark's event sizes).
    fn typical_len(self) -> usize {
        match self {
            Field::Extra => 110,
            Field::Url => 60,
            Field::Description => 50,
            _ => 16,
        }
    }
}

/// What a nexmark table holds (`nexmark.table.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableType {
    /// `person`, `auction` or `bid`: the events of one kind, one row each.
    Kind(Kind),
    /// `event`: every event, one row each (Flink's one-source shape): `event_type`,
    /// `date_time`, and each kind's fields prefixed by the kind (`person_name`,
    /// `auction_seller`, `bid_price`), null in the rows of other kinds.
    Event,
}

/// One column of a nexmark table: a field, of one kind's events only or of every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// `Some`: null in other kinds' rows (an `event` table's `bid_price`).
    pub kind: Option<Kind>,
    pub field: Field,
}

impl Column {
    /// The column of a `table` named `name` (case and `_` ignored), if it is one.
    pub fn named(table: TableType, name: &str) -> Option<Column> {
        let name = normalized(name);
        match table {
            TableType::Kind(kind) => {
                Field::of_kind(kind, &name).map(|field| Column { kind: None, field })
            }
            TableType::Event => {
                if let Some(field @ (Field::EventType | Field::DateTime)) =
                    Field::of_kind(Kind::Bid, &name)
                {
                    return Some(Column { kind: None, field });
                }
                [
                    ("person", Kind::Person),
                    ("auction", Kind::Auction),
                    ("bid", Kind::Bid),
                ]
                .into_iter()
                .find_map(|(prefix, kind)| {
                    let field = Field::of_kind(kind, name.strip_prefix(prefix)?)?;
                    (field != Field::EventType).then_some(Column {
                        kind: Some(kind),
                        field,
                    })
                })
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct NexmarkSpec {
    pub table: TableType,
    /// `nexmark.event.num`: events of all kinds to generate; `None`: unbounded.
    pub events: Option<i64>,
    pub config: GeneratorConfig,
    /// `nexmark.max.events.per.second` (wall clock); `None`: as fast as possible.
    pub max_events_per_second: Option<f64>,
    /// Each table column's field, in column order.
    pub columns: Vec<Column>,
    /// `nexmark.split.num`: threads generating in parallel (see `generated::Run`).
    pub splits: usize,
    /// `nexmark.batch.events`: events per generated batch.
    pub batch_events: i64,
}

/// One column's builder. Nulls are counted and appended as one run before the next
/// value (or at the end): in an `event` table a person column is null in 49 of 50
/// rows, and appending them one at a time was a large share of generating.
struct Builder {
    values: Values,
    nulls: usize,
}

enum Values {
    Int(Int64Builder),
    Text(StringBuilder),
    Time(TimestampMillisecondBuilder),
}

impl Builder {
    /// A builder sized for `rows` values up front, `filled` of them not null:
    /// growing one while appending copies it and faults in fresh pages, a large
    /// share of generating otherwise. Text bytes are sized by the values that are
    /// there: an `event` table's person columns are null in 49 of 50 rows, and
    /// reserving for all rows would have the kernel zero huge pages that are
    /// barely written.
    fn for_field(f: Field, rows: usize, filled: usize) -> Builder {
        let values = if f.is_text() {
            Values::Text(StringBuilder::with_capacity(rows, filled * f.typical_len()))
        } else if f.is_time() {
            Values::Time(TimestampMillisecondBuilder::with_capacity(rows))
        } else {
            Values::Int(Int64Builder::with_capacity(rows))
        };
        Builder { values, nulls: 0 }
    }

    fn append(&mut self, v: Option<Value<'_>>) {
        let Some(v) = v else {
            self.nulls += 1;
            return;
        };
        self.append_nulls();
        match (&mut self.values, v) {
            (Values::Int(b), Value::Int(v)) => b.append_value(v),
            (Values::Time(b), Value::Time(v)) => b.append_value(v),
            (Values::Text(b), Value::Text(v)) => b.append_value(v),
            // Not this column's type: `value` never gives one, and it reads as null.
            _ => self.nulls += 1,
        }
    }

    /// Appends `column`'s value of each event (null for another kind's event).
    fn append_column(&mut self, column: Column, events: &[Event]) {
        for e in events {
            let v = match column.kind {
                Some(k) if k != kind_of(e) => None,
                _ => value(column.field, e),
            };
            self.append(v);
        }
    }

    /// Appends the nulls counted since the last value.
    fn append_nulls(&mut self) {
        match (std::mem::take(&mut self.nulls), &mut self.values) {
            (0, _) => {}
            (n, Values::Int(b)) => b.append_nulls(n),
            (n, Values::Time(b)) => b.append_nulls(n),
            (n, Values::Text(b)) => b.append_nulls(n),
        }
    }

    fn finish(mut self) -> ArrayRef {
        self.append_nulls();
        match self.values {
            Values::Int(mut b) => Arc::new(b.finish()),
            Values::Text(mut b) => Arc::new(b.finish()),
            Values::Time(mut b) => Arc::new(b.finish()),
        }
    }
}

/// One field's value.
enum Value<'a> {
    Int(i64),
    Text(&'a str),
    Time(i64),
}

/// The value of `field` in event `e`; `None` when `e` has no such field.
fn value(field: Field, e: &Event) -> Option<Value<'_>> {
    use Field::*;
    use Value::{Int, Text, Time};
    Some(match (e, field) {
        (Event::Person(_), EventType) => Int(0),
        (Event::Auction(_), EventType) => Int(1),
        (Event::Bid(_), EventType) => Int(2),
        (Event::Person(p), Id) => Int(p.id),
        (Event::Person(p), Name) => Text(&p.name),
        (Event::Person(p), EmailAddress) => Text(&p.email_address),
        (Event::Person(p), CreditCard) => Text(&p.credit_card),
        (Event::Person(p), City) => Text(&p.city),
        (Event::Person(p), State) => Text(&p.state),
        (Event::Person(p), DateTime) => Time(p.date_time),
        (Event::Person(p), Extra) => Text(&p.extra),
        (Event::Auction(a), Id) => Int(a.id),
        (Event::Auction(a), ItemName) => Text(&a.item_name),
        (Event::Auction(a), Description) => Text(&a.description),
        (Event::Auction(a), InitialBid) => Int(a.initial_bid),
        (Event::Auction(a), Reserve) => Int(a.reserve),
        (Event::Auction(a), DateTime) => Time(a.date_time),
        (Event::Auction(a), Expires) => Time(a.expires),
        (Event::Auction(a), Seller) => Int(a.seller),
        (Event::Auction(a), Category) => Int(a.category),
        (Event::Auction(a), Extra) => Text(&a.extra),
        (Event::Bid(b), Auction) => Int(b.auction),
        (Event::Bid(b), Bidder) => Int(b.bidder),
        (Event::Bid(b), Price) => Int(b.price),
        (Event::Bid(b), Channel) => Text(&b.channel),
        (Event::Bid(b), Url) => Text(&b.url),
        (Event::Bid(b), DateTime) => Time(b.date_time),
        (Event::Bid(b), Extra) => Text(&b.extra),
        _ => return None,
    })
}

fn kind_of(e: &Event) -> Kind {
    match e {
        Event::Person(_) => Kind::Person,
        Event::Auction(_) => Kind::Auction,
        Event::Bid(_) => Kind::Bid,
    }
}

/// Events generated before they are appended, column by column: one column's
/// loop copies a block's strings back to back, and the copies of a bid's `extra`
/// (a random place in a 1 MiB string, a cache miss each) overlap instead of
/// stalling one event's row at a time. Small enough for the block's strings to
/// stay in cache until their column is appended.
const BLOCK_EVENTS: i64 = 256;

/// The rows of events `from..to` that the spec's table holds, in the table's schema.
pub fn rows(spec: &NexmarkSpec, schema: &SchemaRef, from: i64, to: i64) -> Result<RecordBatch> {
    // Rows per kind in one pass, not one per column.
    let mut counts = [0usize; 3];
    for n in from..to {
        counts[generator::kind(n) as usize] += 1;
    }
    let of_kind = |k: Kind| counts[k as usize];
    let rows = match spec.table {
        TableType::Kind(kind) => of_kind(kind),
        TableType::Event => (to - from).max(0) as usize,
    };
    let mut builders: Vec<Builder> = spec
        .columns
        .iter()
        .map(|c| Builder::for_field(c.field, rows, c.kind.map_or(rows, of_kind)))
        .collect();
    let mut block = Vec::with_capacity(BLOCK_EVENTS.min((to - from).max(0)) as usize);
    for start in (from..to).step_by(BLOCK_EVENTS as usize) {
        block.clear();
        block.extend(
            (start..(start + BLOCK_EVENTS).min(to))
                .filter(|&n| match spec.table {
                    TableType::Kind(kind) => generator::kind(n) == kind,
                    TableType::Event => true,
                })
                .map(|n| generator::event(&spec.config, n)),
        );
        for (b, c) in builders.iter_mut().zip(&spec.columns) {
            b.append_column(*c, &block);
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
            batch: self.batch_events,
            max_per_second: self.max_events_per_second,
            zero_due_ms: self.zero_due_ms(),
            splits: self.splits,
        };
        crate::source::generated::spawn(ctx, run, self.generated())
    }

    fn generated_rows(&self) -> Option<GeneratedRows> {
        Some(self.generated())
    }
}

impl NexmarkSpec {
    /// Paced at its event-time rate, event time is the wall clock: each event is due
    /// at its own `date_time`. Otherwise pacing starts when the generator does.
    fn zero_due_ms(&self) -> Option<i64> {
        (self.max_events_per_second? == self.config.event_rate).then(|| self.config.timestamp(0))
    }

    /// The spec's rows function, for generating and for regenerating an unstored source.
    fn generated(&self) -> GeneratedRows {
        let spec = self.clone();
        GeneratedRows {
            rows: Arc::new(move |schema, from, to| rows(&spec, schema, from, to)),
            position_key: POSITION_KEY,
        }
    }
}
