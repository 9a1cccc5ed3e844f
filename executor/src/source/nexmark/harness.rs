//! The event model of the Flink Nexmark harness (`../shared/bench/flink-nexmark`,
//! `NexmarkEvents.java`), bit-exact: every event draws from a `SplittableRandom` seeded
//! with `seed * φ + n`, bids carry a channel and a URL from fixed-seed caches, and the
//! "extra" padding is a slice of one fixed 1 MiB string. Weir and Flink then read the
//! same input, so their outputs can be compared row for row.
//!
//! It differs from [`super::generator`]'s java-random model in its random streams, in
//! `channel`/`url` and in the padding; ids, proportions, hot ratios and event time are
//! Nexmark's in both.

use super::generator::{
    last_base0_auction_id, last_base0_person_id, next_base0_auction_id as random_auction_id0,
    next_base0_person_id as random_person_id0, next_long as bounded_long, Auction, Bid, Draw,
    Event, GeneratorConfig, Kind, Person, FIRST_NAMES as FIRST, LAST_NAMES as LAST,
    US_CITIES as CITIES, US_STATES as STATES,
};
use super::splittable_random::SplittableRandom;
use std::borrow::Cow;
use std::sync::LazyLock;

const FIRST_PERSON: i64 = 1000;
const FIRST_AUCTION: i64 = 1000;
const FIRST_CATEGORY: i64 = 10;
const CATEGORIES: i32 = 5;
const IN_FLIGHT_AUCTIONS: i64 = 100;
const HOT_AUCTION_RATIO: i32 = 2;
const HOT_SELLERS_RATIO: i32 = 4;
const HOT_BIDDERS_RATIO: i32 = 4;
/// Hot ids are rounded down to multiples of this.
const HOT_GROUP: i64 = 100;
const AVG_PERSON: i32 = 200;
const AVG_AUCTION: i32 = 500;
const AVG_BID: i32 = 100;
const CHANNELS: usize = 10_000;
/// Events per auction slot: 100 auctions in flight × 50 / 3.
const EVENTS_FOR_AUCTIONS: i64 = IN_FLIGHT_AUCTIONS * 50 / 3;

const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];

impl Draw for SplittableRandom {
    fn next_int_bounded(&mut self, bound: i32) -> i32 {
        SplittableRandom::next_int_bounded(self, bound)
    }
    fn next_long(&mut self) -> i64 {
        SplittableRandom::next_long(self)
    }
}

/// The harness's static caches (fixed seeds): the padding text, and each channel's
/// name and URL (the four hot channels' first).
struct Caches {
    big_extra: String,
    hot_urls: Vec<String>,
    channel_names: Vec<String>,
    channel_urls: Vec<String>,
}

static CACHES: LazyLock<Caches> = LazyLock::new(|| {
    let mut r = SplittableRandom::new(0x5eed_0001);
    let mut big_extra = String::with_capacity(1 << 20);
    let (mut bits, mut left) = (0i32, 0);
    for _ in 0..1 << 20 {
        if left == 0 {
            bits = r.next_int();
            left = 6;
        }
        big_extra.push((b'a' + (bits % 26).unsigned_abs() as u8) as char);
        bits /= 26;
        left -= 1;
    }
    let mut u = SplittableRandom::new(0x5eed_0002);
    let hot_urls = (0..HOT_CHANNELS.len()).map(|_| base_url(&mut u)).collect();
    let mut channel_names = Vec::with_capacity(CHANNELS);
    let mut channel_urls = Vec::with_capacity(CHANNELS);
    for i in 0..CHANNELS {
        let mut url = base_url(&mut u);
        if u.next_int_bounded(10) > 0 {
            // Java's `Math.abs(Integer.reverse(i))`: abs of i32::MIN stays negative.
            url.push_str(&format!(
                "&channel_id={}",
                (i as i32).reverse_bits().wrapping_abs()
            ));
        }
        channel_names.push(format!("channel-{i}"));
        channel_urls.push(url);
    }
    Caches {
        big_extra,
        hot_urls,
        channel_names,
        channel_urls,
    }
});

fn price(r: &mut SplittableRandom) -> i64 {
    // Java's Math.round: floor(x + 0.5).
    (10f64.powf(r.next_double() * 6.0) * 100.0 + 0.5).floor() as i64
}

/// `3 + r(maxLen - 3)` letters, one in 13 `special`; then Java's `trim()`.
fn word(r: &mut SplittableRandom, max_len: i32, special: char) -> String {
    let n = 3 + r.next_int_bounded(max_len - 3);
    let s: String = (0..n)
        .map(|_| {
            if r.next_int_bounded(13) == 0 {
                special
            } else {
                (b'a' + r.next_int_bounded(26) as u8) as char
            }
        })
        .collect();
    s.trim_matches(|c: char| c <= ' ').to_string()
}

fn base_url(r: &mut SplittableRandom) -> String {
    let a = word(r, 5, '_');
    let b = word(r, 5, '_');
    let c = word(r, 5, '_');
    format!("https://www.nexmark.com/{a}/{b}/{c}/item.htm?query=1")
}

/// Padding that brings an event to about `avg` bytes: a slice of the fixed text.
fn extra(r: &mut SplittableRandom, current: i32, avg: i32) -> Cow<'static, str> {
    if current > avg {
        return Cow::Borrowed("");
    }
    let want = avg - current;
    let delta = (want as f64 * 0.2 + 0.5).floor() as i32;
    let size = want - delta
        + if delta == 0 {
            0
        } else {
            r.next_int_bounded(2 * delta)
        };
    let big = CACHES.big_extra.as_str();
    let off = r.next_int_bounded(big.len() as i32 - size) as usize;
    let end = off + size as usize;
    debug_assert!(end <= big.len() && big.is_char_boundary(off) && big.is_char_boundary(end));
    // SAFETY: `off + size` is within the string (`off < len - size`), and the string is
    // ASCII (`CACHES`), so every index is a char boundary. A checked slice reads the
    // bytes at both ends: two cache misses per event at random places of the 1 MiB
    // string, paid in line here, where the column-wise copy in `rows` overlaps them.
    Cow::Borrowed(unsafe { big.get_unchecked(off..end) })
}

/// Event `n` of the harness's sequence with generator seed `seed`.
pub fn event(cfg: &GeneratorConfig, seed: i64, n: i64) -> Event {
    let ts = cfg.timestamp(n);
    let mut r = SplittableRandom::new(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64)
            .wrapping_add(n),
    );
    match super::generator::kind(n) {
        Kind::Person => Event::Person(person(n, &mut r, ts)),
        Kind::Auction => Event::Auction(auction(cfg, n, &mut r, ts)),
        Kind::Bid => Event::Bid(bid(n, &mut r, ts)),
    }
}

fn person(n: i64, r: &mut SplittableRandom, ts: i64) -> Person {
    let id = last_base0_person_id(n) + FIRST_PERSON;
    let name = format!(
        "{} {}",
        FIRST[r.next_int_bounded(FIRST.len() as i32) as usize],
        LAST[r.next_int_bounded(LAST.len() as i32) as usize]
    );
    let user = word(r, 7, ' ');
    let host = word(r, 5, ' ');
    let email_address = format!("{user}@{host}.com");
    let credit_card = (0..4)
        .map(|_| format!("{:04}", r.next_int_bounded(10_000)))
        .collect::<Vec<_>>()
        .join(" ");
    let city = CITIES[r.next_int_bounded(CITIES.len() as i32) as usize];
    let state = STATES[r.next_int_bounded(STATES.len() as i32) as usize];
    let size = 8 + name.len() + email_address.len() + credit_card.len() + city.len() + state.len();
    let extra = extra(r, size as i32, AVG_PERSON);
    Person {
        id,
        name,
        email_address,
        credit_card,
        city: city.into(),
        state: state.into(),
        date_time: ts,
        extra,
    }
}

fn auction(cfg: &GeneratorConfig, n: i64, r: &mut SplittableRandom, ts: i64) -> Auction {
    let id = last_base0_auction_id(n) + FIRST_AUCTION;
    let seller = if r.next_int_bounded(HOT_SELLERS_RATIO) > 0 {
        (last_base0_person_id(n) / HOT_GROUP) * HOT_GROUP
    } else {
        random_person_id0(n, r)
    } + FIRST_PERSON;
    let category = FIRST_CATEGORY + r.next_int_bounded(CATEGORIES) as i64;
    let initial_bid = price(r);
    let horizon = cfg.timestamp(n + EVENTS_FOR_AUCTIONS) - ts;
    let expires = ts + 1 + bounded_long(r, (horizon * 2).max(1));
    let item_name = word(r, 20, ' ');
    let description = word(r, 100, ' ');
    let reserve = initial_bid + price(r);
    let size = 8 + item_name.len() + description.len() + 8 + 8 + 8 + 8 + 8;
    let extra = extra(r, size as i32, AVG_AUCTION);
    Auction {
        id,
        item_name,
        description,
        initial_bid,
        reserve,
        date_time: ts,
        expires,
        seller,
        category,
        extra,
    }
}

fn bid(n: i64, r: &mut SplittableRandom, ts: i64) -> Bid {
    let auction = if r.next_int_bounded(HOT_AUCTION_RATIO) > 0 {
        (last_base0_auction_id(n) / HOT_GROUP) * HOT_GROUP
    } else {
        random_auction_id0(n, r)
    } + FIRST_AUCTION;
    let bidder = if r.next_int_bounded(HOT_BIDDERS_RATIO) > 0 {
        (last_base0_person_id(n) / HOT_GROUP) * HOT_GROUP + 1
    } else {
        random_person_id0(n, r)
    } + FIRST_PERSON;
    let price = price(r);
    let caches = &*CACHES;
    let (channel, url) = if r.next_int_bounded(2) > 0 {
        let i = r.next_int_bounded(HOT_CHANNELS.len() as i32) as usize;
        (HOT_CHANNELS[i], caches.hot_urls[i].as_str())
    } else {
        let c = r.next_int_bounded(CHANNELS as i32) as usize;
        (
            caches.channel_names[c].as_str(),
            caches.channel_urls[c].as_str(),
        )
    };
    // The upstream quirk of adding the first person id twice, kept as the harness does.
    let bidder = bidder + FIRST_PERSON;
    let extra = extra(r, 8 + 8 + 8 + 8, AVG_BID);
    Bid {
        auction,
        bidder,
        price,
        channel: channel.into(),
        url: url.into(),
        date_time: ts,
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::nexmark::generator::Model;

    fn cfg() -> GeneratorConfig {
        GeneratorConfig {
            base_time_ms: 1_700_000_000_000,
            event_rate: 10_000_000.0,
            model: Model::SplittableRandom { seed: 42 },
        }
    }

    /// One line per event in the format of the Java dump that made the vectors below.
    fn line(e: &Event) -> String {
        match e {
            Event::Person(p) => format!(
                "P|{}|{}|{}|{}|{}|{}|{}|{}",
                p.id, p.name, p.email_address, p.credit_card, p.city, p.state, p.date_time, p.extra
            ),
            Event::Auction(a) => format!(
                "A|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                a.id,
                a.item_name,
                a.description,
                a.initial_bid,
                a.reserve,
                a.date_time,
                a.expires,
                a.seller,
                a.category,
                a.extra
            ),
            Event::Bid(b) => format!(
                "B|{}|{}|{}|{}|{}|{}|{}",
                b.auction, b.bidder, b.price, b.channel, b.url, b.date_time, b.extra
            ),
        }
    }

    /// Java's `String.hashCode` over UTF-16 units (ASCII here).
    fn java_hash(s: &str) -> i32 {
        s.bytes()
            .fold(0i32, |h, b| h.wrapping_mul(31).wrapping_add(b as i32))
    }

    /// Vectors from the harness's `NexmarkEvents` (OpenJDK 17), base time 1.7e12, rate
    /// 10M/s, seed 42.
    #[test]
    fn matches_the_harness() {
        let c = cfg();
        let first = line(&event(&c, 42, 0));
        assert!(first.starts_with("P|1000|Paul Abrams|hmvadz@oyyj.com|7002 2214 9954 9342|Boise|ID|1700000000000|ksvpepynhwjbmobhukqjwwglqyashwwghmfkwhrrhmmnrxnoc"), "{first}");
        let a = line(&event(&c, 42, 1));
        assert!(a.starts_with("A|1000|eyyieoqrfaiuiocqn|kn  axif qrdvy ubjxadx xe|10863954|10866667|1700000000000|1700000000001|1009|13|voiawymzfb"), "{a}");
        assert_eq!(
            line(&event(&c, 42, 4)),
            "B|1000|2001|934|Baidu|https://www.nexmark.com/yfd/gxl/ka_n/item.htm?query=1|1700000000000|fslsfmbmyrgagtjgwfzwctxcwasdcopypildcxittulnbympjeugqfwqqjnlvkbhbqdfxrbpulwe"
        );
        // Every field of 400,000 events, against the Java dump's rolling hash.
        for (rate, from, to, want) in FINGERPRINTS {
            let c = GeneratorConfig {
                event_rate: *rate,
                ..cfg()
            };
            let mut h: i64 = 0;
            for n in *from..*to {
                h = h
                    .wrapping_mul(31)
                    .wrapping_add(java_hash(&line(&event(&c, 42, n))) as i64);
            }
            assert_eq!(h, *want, "events {from}..{to} at {rate}/s");
        }
    }

    /// (event rate, from, to, Java's `h = h * 31 + line.hashCode()` over those events).
    const FINGERPRINTS: &[(f64, i64, i64, i64)] = &[
        (10_000_000.0, 0, 200_000, -3124807707199602576),
        (10_000_000.0, 987_654_321, 987_754_321, 1047803034844343481),
        (10_000.0, 0, 100_000, -337240986510857235),
    ];
}
