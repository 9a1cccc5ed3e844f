//! The Nexmark event generator, deterministic by event index: the first published
//! version of the nexmark/nexmark repository's Flink generator (each event draws from
//! `java.util.Random` seeded with its event id), with its defaults: persons, auctions
//! and bids in proportions 1:3:46, first ids 1000, categories 10–14, hot auctions
//! (ratio 2), hot sellers and bidders (ratio 4), 1000 active people, 100 auctions in
//! flight, event time advancing by `1e6 / rate` µs per event from a base time.
//!
//! Bids of this model carry no `channel`/`url`: the revisions that added them draw
//! those from an unseeded random generator, so no reproducible reference exists. The
//! [`super::harness`] model (`nexmark.generator = 'splittable-random'`) has them, and
//! is the Flink Nexmark harness's event sequence.

use super::java_random::JavaRandom;
use std::borrow::Cow;

const PERSON_PROPORTION: i64 = 1;
const AUCTION_PROPORTION: i64 = 3;
const TOTAL_PROPORTION: i64 = 50;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: i32 = 5;
const HOT_AUCTION_RATIO: i32 = 2;
const HOT_BIDDER_RATIO: i32 = 4;
const HOT_SELLER_RATIO: i32 = 4;
const HOT_BATCH: i64 = 100;
const NUM_ACTIVE_PEOPLE: i64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: i64 = 100;
const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
const AVG_PERSON_BYTES: i64 = 200;
const AVG_AUCTION_BYTES: i64 = 500;
const AVG_BID_BYTES: i64 = 100;

pub(super) const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
pub(super) const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
pub(super) const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
pub(super) const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Person,
    Auction,
    Bid,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub id: i64,
    pub name: String,
    pub email_address: String,
    pub credit_card: String,
    pub city: String,
    pub state: String,
    /// ms since the epoch
    pub date_time: i64,
    pub extra: Cow<'static, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Auction {
    pub id: i64,
    pub item_name: String,
    pub description: String,
    pub initial_bid: i64,
    pub reserve: i64,
    pub date_time: i64,
    pub expires: i64,
    pub seller: i64,
    pub category: i64,
    pub extra: Cow<'static, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bid {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    pub channel: Cow<'static, str>,
    pub url: Cow<'static, str>,
    pub date_time: i64,
    pub extra: Cow<'static, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Person(Person),
    Auction(Auction),
    Bid(Bid),
}

/// Whose random streams make the events (`nexmark.generator`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// `java-random`: the nexmark/nexmark Java generator's (`java.util.Random` seeded
    /// with the event id); no channel or URL.
    JavaRandom,
    /// `splittable-random`: the Flink Nexmark harness's ([`super::harness`]).
    SplittableRandom { seed: i64 },
}

/// Where event time starts, how fast it advances, and which model makes the events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorConfig {
    pub base_time_ms: i64,
    /// Events per second of event time (Nexmark's `firstEventRate`, default 10,000).
    pub event_rate: f64,
    pub model: Model,
}

impl GeneratorConfig {
    fn inter_event_delay_us(&self) -> f64 {
        1_000_000.0 / self.event_rate
    }

    pub(super) fn timestamp(&self, event_number: i64) -> i64 {
        self.base_time_ms + ((event_number as f64 * self.inter_event_delay_us()) as i64) / 1000
    }
}

/// The kind of event `n` (its id is `n`: first event id 0, events in order).
pub fn kind(n: i64) -> Kind {
    let rem = n % TOTAL_PROPORTION;
    if rem < PERSON_PROPORTION {
        Kind::Person
    } else if rem < PERSON_PROPORTION + AUCTION_PROPORTION {
        Kind::Auction
    } else {
        Kind::Bid
    }
}

pub(super) fn last_base0_person_id(e: i64) -> i64 {
    let epoch = e / TOTAL_PROPORTION;
    let off = (e % TOTAL_PROPORTION).min(PERSON_PROPORTION - 1);
    epoch * PERSON_PROPORTION + off
}

pub(super) fn last_base0_auction_id(e: i64) -> i64 {
    let mut epoch = e / TOTAL_PROPORTION;
    let mut off = e % TOTAL_PROPORTION;
    if off < PERSON_PROPORTION {
        epoch -= 1;
        off = AUCTION_PROPORTION - 1;
    } else if off >= PERSON_PROPORTION + AUCTION_PROPORTION {
        off = AUCTION_PROPORTION - 1;
    } else {
        off -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION + off
}

/// What both models draw from: `java.util.Random` or `SplittableRandom`.
pub(super) trait Draw {
    /// Uniform in `0..bound` (`bound > 0`).
    fn next_int_bounded(&mut self, bound: i32) -> i32;
    fn next_long(&mut self) -> i64;
}

impl Draw for JavaRandom {
    fn next_int_bounded(&mut self, bound: i32) -> i32 {
        JavaRandom::next_int_bounded(self, bound)
    }
    fn next_long(&mut self) -> i64 {
        JavaRandom::next_long(self)
    }
}

/// Uniform in `0..n`, as Nexmark draws it.
pub(super) fn next_long(r: &mut impl Draw, n: i64) -> i64 {
    if n < i32::MAX as i64 {
        r.next_int_bounded(n as i32) as i64
    } else {
        (r.next_long() % n).abs()
    }
}

/// A person among the active ones (or a few not yet created), 0-based.
pub(super) fn next_base0_person_id(e: i64, r: &mut impl Draw) -> i64 {
    let num = last_base0_person_id(e) + 1;
    let active = num.min(NUM_ACTIVE_PEOPLE);
    num - active + next_long(r, active + PERSON_ID_LEAD)
}

/// An auction among those in flight (or a few not yet created), 0-based.
pub(super) fn next_base0_auction_id(e: i64, r: &mut impl Draw) -> i64 {
    let max = last_base0_auction_id(e);
    let min = (max - NUM_IN_FLIGHT_AUCTIONS).max(0);
    min + next_long(r, max - min + 1 + AUCTION_ID_LEAD)
}

/// Java's `String.trim()`: strips chars `<= ' '` at both ends.
fn java_trim(s: String) -> String {
    s.trim_matches(|c: char| c <= ' ').to_string()
}

fn next_string(r: &mut JavaRandom, max_length: i32) -> String {
    let len = 3 + r.next_int_bounded(max_length - 3);
    let mut s = String::with_capacity(len as usize);
    for _ in 0..len {
        if r.next_int_bounded(13) == 0 {
            s.push(' ');
        } else {
            s.push((b'a' + r.next_int_bounded(26) as u8) as char);
        }
    }
    java_trim(s)
}

fn next_exact_string(r: &mut JavaRandom, length: i64) -> String {
    let mut s = String::with_capacity(length.max(0) as usize);
    let mut rnd: i32 = 0;
    let mut n = 0;
    for _ in 0..length {
        if n == 0 {
            rnd = r.next_int();
            n = 6;
        }
        // Java's remainder keeps the dividend's sign: negative values give 'H'..'`'.
        s.push(((b'a' as i32) + rnd % 26) as u8 as char);
        rnd /= 26;
        n -= 1;
    }
    s
}

fn next_extra(r: &mut JavaRandom, current_size: i64, avg: i64) -> Cow<'static, str> {
    if current_size > avg {
        return Cow::Borrowed("");
    }
    let avg = avg - current_size;
    let delta = (avg as f64 * 0.2).round() as i64;
    let min_size = avg - delta;
    let size = min_size
        + if delta == 0 {
            0
        } else {
            r.next_int_bounded((2 * delta) as i32) as i64
        };
    Cow::Owned(next_exact_string(r, size))
}

fn next_price(r: &mut JavaRandom) -> i64 {
    (10f64.powf(r.next_double() * 6.0) * 100.0).round() as i64
}

/// Event `n` (0-based) of the configured model.
pub fn event(cfg: &GeneratorConfig, n: i64) -> Event {
    match cfg.model {
        Model::JavaRandom => java_event(cfg, n),
        Model::SplittableRandom { seed } => super::harness::event(cfg, seed, n),
    }
}

fn java_event(cfg: &GeneratorConfig, n: i64) -> Event {
    let mut r = JavaRandom::new(n);
    let t = cfg.timestamp(n);
    match kind(n) {
        Kind::Person => {
            let id = last_base0_person_id(n) + FIRST_PERSON_ID;
            let name = format!(
                "{} {}",
                FIRST_NAMES[r.next_int_bounded(11) as usize],
                LAST_NAMES[r.next_int_bounded(9) as usize]
            );
            let email_address =
                format!("{}@{}.com", next_string(&mut r, 7), next_string(&mut r, 5));
            let credit_card = (0..4)
                .map(|_| format!("{:04}", r.next_int_bounded(10000)))
                .collect::<Vec<_>>()
                .join(" ");
            let city = US_CITIES[r.next_int_bounded(10) as usize].to_string();
            let state = US_STATES[r.next_int_bounded(6) as usize].to_string();
            let size =
                8 + name.len() + email_address.len() + credit_card.len() + city.len() + state.len();
            let extra = next_extra(&mut r, size as i64, AVG_PERSON_BYTES);
            Event::Person(Person {
                id,
                name,
                email_address,
                credit_card,
                city,
                state,
                date_time: t,
                extra,
            })
        }
        Kind::Auction => {
            let id = last_base0_auction_id(n) + FIRST_AUCTION_ID;
            let seller = if r.next_int_bounded(HOT_SELLER_RATIO) > 0 {
                (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH
            } else {
                next_base0_person_id(n, &mut r)
            } + FIRST_PERSON_ID;
            let category = FIRST_CATEGORY_ID + r.next_int_bounded(NUM_CATEGORIES) as i64;
            let initial_bid = next_price(&mut r);
            let events_for_auctions =
                (NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION) / AUCTION_PROPORTION;
            let horizon = cfg.timestamp(n + events_for_auctions) - t;
            let expires = t + 1 + next_long(&mut r, (horizon * 2).max(1));
            let item_name = next_string(&mut r, 20);
            let description = next_string(&mut r, 100);
            let reserve = initial_bid + next_price(&mut r);
            let size = 8 + item_name.len() + description.len() + 8 + 8 + 8 + 8 + 8;
            let extra = next_extra(&mut r, size as i64, AVG_AUCTION_BYTES);
            Event::Auction(Auction {
                id,
                item_name,
                description,
                initial_bid,
                reserve,
                date_time: t,
                expires,
                seller,
                category,
                extra,
            })
        }
        Kind::Bid => {
            let auction = if r.next_int_bounded(HOT_AUCTION_RATIO) > 0 {
                (last_base0_auction_id(n) / HOT_BATCH) * HOT_BATCH
            } else {
                next_base0_auction_id(n, &mut r)
            } + FIRST_AUCTION_ID;
            let bidder = if r.next_int_bounded(HOT_BIDDER_RATIO) > 0 {
                (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH + 1
            } else {
                next_base0_person_id(n, &mut r)
            } + FIRST_PERSON_ID;
            let price = next_price(&mut r);
            let extra = next_extra(&mut r, 32, AVG_BID_BYTES);
            Event::Bid(Bid {
                auction,
                bidder,
                price,
                channel: Cow::Borrowed(""),
                url: Cow::Borrowed(""),
                date_time: t,
                extra,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from the Java generator (first event id and base time 0, defaults).
    #[test]
    fn matches_the_java_generator() {
        let cfg = GeneratorConfig {
            base_time_ms: 0,
            event_rate: 10_000.0,
            model: Model::JavaRandom,
        };
        let Event::Person(p) = event(&cfg, 0) else {
            panic!("event 0 is a person")
        };
        assert_eq!(
            (p.id, p.name.as_str(), p.email_address.as_str()),
            (1000, "Peter Jones", "nhd@xcat.com")
        );
        assert_eq!(p.credit_card, "7241 7320 9143 4888");
        assert_eq!((p.city.as_str(), p.state.as_str()), ("Portland", "WY"));
        assert_eq!(p.extra.len(), 156);
        assert!(p.extra.starts_with("WN_HS_bnpkki"), "{}", p.extra);
        let Event::Auction(a) = event(&cfg, 1) else {
            panic!("event 1 is an auction")
        };
        assert_eq!(
            (a.id, a.item_name.as_str(), a.initial_bid, a.reserve),
            (1000, "wkx mgee", 28873, 29448)
        );
        assert_eq!(a.description, "eszpqxtdxrvwmmywkmogoahf");
        assert_eq!(
            (a.expires, a.seller, a.category, a.extra.len()),
            (11, 1000, 13, 346)
        );
        let Event::Auction(a) = event(&cfg, 2) else {
            panic!("event 2 is an auction")
        };
        assert_eq!(
            (a.initial_bid, a.reserve, a.expires, a.category),
            (25626290, 28805847, 202, 12)
        );
        let Event::Bid(b) = event(&cfg, 4) else {
            panic!("event 4 is a bid")
        };
        assert_eq!(
            (b.auction, b.bidder, b.price, b.extra.len()),
            (1000, 1001, 32530001, 77)
        );
        assert!(b.extra.starts_with("fdiysaV^]NLV"), "{}", b.extra);
        let Event::Bid(b) = event(&cfg, 5) else {
            panic!("event 5 is a bid")
        };
        assert_eq!((b.bidder, b.price), (1009, 468715));
        let Event::Bid(b) = event(&cfg, 49) else {
            panic!("event 49 is a bid")
        };
        assert_eq!((b.price, b.date_time), (545, 4));
        let Event::Person(p) = event(&cfg, 50) else {
            panic!("event 50 is a person")
        };
        assert_eq!(
            (p.id, p.name.as_str(), p.email_address.as_str(), p.date_time),
            (1001, "Sarah Smith", "f  y@yumv.com", 5)
        );
        let Event::Person(p) = event(&cfg, 1000) else {
            panic!("event 1000 is a person")
        };
        assert_eq!(
            (
                p.id,
                p.name.as_str(),
                p.city.as_str(),
                p.state.as_str(),
                p.date_time
            ),
            (1020, "Walter Abrams", "San Francisco", "CA", 100)
        );
    }
}
