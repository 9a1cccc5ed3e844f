//! The Nexmark queries q0–q22 as Weir runs them (the benchmark and the tests share
//! these texts), with the semantics of the nexmark/nexmark repository's Flink queries
//! written over the `nexmark` connector's tables (q6 in a valid form: see its comment).
//! q12 windows bids by their processing time (`PROCTIME()`); q13 joins bids with a side
//! table of [`SIDE_INPUT_ROWS`] rows, read `FOR SYSTEM_TIME AS OF PROCTIME()` (a lookup
//! join). Both read relations that [`setup`] creates.
//!
//! Windows use Flink's TVF syntax (`TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time),
//! ...))`), which Weir rewrites into projections (see the planner's `window_tvf`).

/// Column lists of the three tables, with Nexmark's field names in snake case.
pub const PERSON_COLUMNS: &str = "id bigint, name text, email_address text, credit_card text, city text, state text, date_time timestamp, extra text";
pub const AUCTION_COLUMNS: &str = "id bigint, item_name text, description text, initial_bid bigint, reserve bigint, date_time timestamp, expires timestamp, seller bigint, category bigint, extra text";
pub const BID_COLUMNS: &str =
    "auction bigint, bidder bigint, price bigint, date_time timestamp, extra text";
/// The bid columns of the `splittable-random` generator (the Flink harness's), in the
/// order of Nexmark's Flink DDL.
pub const BID_HARNESS_COLUMNS: &str =
    "auction bigint, bidder bigint, price bigint, channel text, url text, date_time timestamp, extra text";

/// The tables of the one-source shape, each with its harness column list.
const KINDS: [(&str, &str); 3] = [
    ("person", PERSON_COLUMNS),
    ("auction", AUCTION_COLUMNS),
    ("bid", BID_HARNESS_COLUMNS),
];

/// (name, type) of each column in a column list.
fn split(columns: &str) -> impl Iterator<Item = (&str, &str)> {
    columns.split(", ").filter_map(|c| c.split_once(' '))
}

/// The column list of an `event` table (Flink's one source): `event_type`, the shared
/// `date_time`, and each kind's other columns prefixed with the kind.
pub fn event_columns() -> String {
    let mut cols = vec!["event_type int".to_string(), "date_time timestamp".into()];
    for (kind, columns) in KINDS {
        cols.extend(
            split(columns)
                .filter(|(name, _)| *name != "date_time")
                .map(|(name, ty)| format!("{kind}_{name} {ty}")),
        );
    }
    cols.join(", ")
}

/// `CREATE VIEW person|auction|bid AS ...` over the `event` table `source`: Flink's
/// split of the one source by kind, with the kind tables' column names.
pub fn kind_views(source: &str) -> Vec<String> {
    KINDS
        .iter()
        .enumerate()
        .map(|(event_type, (kind, columns))| {
            let select: Vec<String> = split(columns)
                .map(|(name, _)| match name {
                    "date_time" => name.to_string(),
                    _ => format!("{kind}_{name} AS {name}"),
                })
                .collect();
            format!(
                "CREATE VIEW {kind} AS SELECT {} FROM {source} WHERE event_type = {event_type}",
                select.join(", ")
            )
        })
        .collect()
}

/// q15's and q16's statistics: bids, bidders and auctions, in all and per price rank.
macro_rules! bid_statistics {
    () => {
        "count(*) AS total_bids, \
         count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
         count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
         count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
         count(DISTINCT bidder) AS total_bidders, \
         count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, \
         count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders, \
         count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders, \
         count(DISTINCT auction) AS total_auctions, \
         count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions, \
         count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions, \
         count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions"
    };
}

/// (name, tables read, query).
pub const QUERIES: &[(&str, &[&str], &str)] = &[
    (
        "q0",
        &["bid"],
        "SELECT auction, bidder, price, date_time, extra FROM bid",
    ),
    (
        "q1",
        &["bid"],
        "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
    ),
    (
        "q2",
        &["bid"],
        "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    ),
    (
        "q3",
        &["person", "auction"],
        "SELECT P.name, P.city, P.state, A.id \
         FROM auction AS A INNER JOIN person AS P ON A.seller = P.id \
         WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')",
    ),
    (
        "q4",
        &["auction", "bid"],
        "SELECT Q.category, AVG(Q.final) AS avg_final FROM ( \
           SELECT MAX(B.price) AS final, A.category \
           FROM auction A, bid B \
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
           GROUP BY A.id, A.category \
         ) Q GROUP BY Q.category",
    ),
    (
        "q5",
        &["bid"],
        "SELECT AuctionBids.auction, AuctionBids.num FROM ( \
           SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime \
           FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
           GROUP BY auction, window_start, window_end \
         ) AS AuctionBids JOIN ( \
           SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM ( \
             SELECT count(*) AS num, window_start AS starttime, window_end AS endtime \
             FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
             GROUP BY auction, window_start, window_end \
           ) AS CountBids GROUP BY CountBids.starttime, CountBids.endtime \
         ) AS MaxBids \
         ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime \
            AND AuctionBids.num >= MaxBids.maxn",
    ),
    // Average selling price per seller over their last 10 closed auctions (Nexmark's
    // q6): each auction's final price (its highest bid within its lifetime), the
    // seller's 10 latest by expiry as a Top-N, then their average. The nexmark/nexmark
    // Flink text (`AVG ... OVER (ROWS BETWEEN 10 PRECEDING ...)` over a GROUP BY that
    // selects an ungrouped column) is not valid SQL, and Flink does not run it.
    (
        "q6",
        &["auction", "bid"],
        "SELECT R.seller, AVG(R.final) AS avg_final FROM ( \
           SELECT Q.seller, Q.final, \
             ROW_NUMBER() OVER (PARTITION BY Q.seller ORDER BY Q.expires DESC, Q.id DESC) AS rn \
           FROM ( \
             SELECT A.id, A.seller, A.expires, MAX(B.price) AS final \
             FROM auction A, bid B \
             WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
             GROUP BY A.id, A.seller, A.expires \
           ) Q \
         ) R WHERE R.rn <= 10 GROUP BY R.seller",
    ),
    (
        "q7",
        &["bid"],
        "SELECT B.auction, B.price, B.bidder, B.date_time, B.extra FROM bid B JOIN ( \
           SELECT MAX(price) AS maxprice, window_end AS date_time \
           FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
           GROUP BY window_start, window_end \
         ) B1 ON B.price = B1.maxprice \
         WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
    ),
    (
        "q8",
        &["person", "auction"],
        "SELECT P.id, P.name, P.starttime FROM ( \
           SELECT id, name, window_start AS starttime, window_end AS endtime \
           FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
           GROUP BY id, name, window_start, window_end \
         ) P JOIN ( \
           SELECT seller, window_start AS starttime, window_end AS endtime \
           FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
           GROUP BY seller, window_start, window_end \
         ) A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    ),
    // q9-q22: the queries of Flink's Nexmark suite beyond q8, Postgres spellings of
    // Flink's functions (DATE_FORMAT: to_char, HOUR: extract, REGEXP_EXTRACT:
    // regexp_match, SPLIT_INDEX: split_part). Their Flink texts, and where both
    // deviate from nexmark/nexmark's (ties ordered, no UDF, no filesystem sink), are
    // in bench/flink-nexmark/. Not here: q12 (processing-time windows) and q13 (a
    // lookup join against a file at processing time).
    (
        "q9",
        &["auction", "bid"],
        "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra, \
           auction, bidder, price, bid_date_time, bid_extra FROM ( \
           SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, B.extra AS bid_extra, \
             ROW_NUMBER() OVER (PARTITION BY A.id \
               ORDER BY B.price DESC, B.date_time ASC, B.bidder ASC, B.extra ASC) AS rownum \
           FROM auction A, bid B \
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
         ) W WHERE rownum <= 1",
    ),
    (
        "q10",
        &["bid"],
        "SELECT auction, bidder, price, date_time, extra, \
           to_char(date_time, 'YYYY-MM-DD') AS dt, to_char(date_time, 'HH24:MI') AS hm FROM bid",
    ),
    (
        "q11",
        &["bid"],
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime \
         FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
         GROUP BY bidder, window_start, window_end",
    ),
    (
        "q12",
        &["bid"],
        "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime \
         FROM TABLE(TUMBLE(TABLE bid_proctime, DESCRIPTOR(p_time), INTERVAL '10' SECOND)) \
         GROUP BY bidder, window_start, window_end",
    ),
    (
        "q13",
        &["bid"],
        "SELECT B.auction, B.bidder, B.price, B.date_time, S.value \
         FROM bid AS B JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() AS S \
         ON mod(B.auction, 10000) = S.key",
    ),
    (
        "q14",
        &["bid"],
        "SELECT auction, bidder, 0.908 * price AS price, \
           CASE WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime' \
                WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN 'nightTime' \
                ELSE 'otherTime' END AS bid_time_type, \
           date_time, extra, char_length(extra) - char_length(replace(extra, 'c', '')) AS c_counts \
         FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
    ),
    (
        "q15",
        &["bid"],
        concat!(
            "SELECT to_char(date_time, 'YYYY-MM-DD') AS day, ",
            bid_statistics!(),
            " FROM bid GROUP BY to_char(date_time, 'YYYY-MM-DD')"
        ),
    ),
    (
        "q16",
        &["bid"],
        concat!(
            "SELECT channel, to_char(date_time, 'YYYY-MM-DD') AS day, \
               max(to_char(date_time, 'HH24:MI')) AS minute, ",
            bid_statistics!(),
            " FROM bid GROUP BY channel, to_char(date_time, 'YYYY-MM-DD')"
        ),
    ),
    (
        "q17",
        &["bid"],
        "SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, \
           count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
           min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price \
         FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
    ),
    (
        "q18",
        &["bid"],
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction \
             ORDER BY date_time DESC, price DESC, extra DESC) AS rank_number FROM bid \
         ) B WHERE rank_number <= 1",
    ),
    (
        "q19",
        &["bid"],
        "SELECT * FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction \
             ORDER BY price DESC, date_time ASC, bidder ASC, extra ASC) AS rank_number FROM bid \
         ) B WHERE rank_number <= 10",
    ),
    (
        "q20",
        &["auction", "bid"],
        "SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time, B.extra AS bid_extra, \
           item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, expires, \
           seller, category, A.extra AS auction_extra \
         FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10",
    ),
    (
        "q21",
        &["bid"],
        "SELECT auction, bidder, price, channel, \
           CASE WHEN lower(channel) = 'apple' THEN '0' \
                WHEN lower(channel) = 'google' THEN '1' \
                WHEN lower(channel) = 'facebook' THEN '2' \
                WHEN lower(channel) = 'baidu' THEN '3' \
                ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] END AS channel_id \
         FROM bid \
         WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] IS NOT NULL \
            OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
    ),
    (
        "q22",
        &["bid"],
        "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, \
           split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
    ),
];

/// Whether a query reads the bids' channel or URL, which only the splittable-random
/// generator (the Flink harness's) makes.
pub fn reads_channel_or_url(name: &str) -> bool {
    query(name).is_some_and(|(_, sql)| sql.contains("channel") || sql.contains("url"))
}

/// Whether a query aggregates over TUMBLE, HOP or SESSION windows. Flink runs those as
/// window aggregations, which emit each window once, when the watermark closes it; the
/// benchmark runs them the same way (`emit_on_window_close`) so that the engines do
/// the same work (SESSION over the generator, which only inserts, runs as a session
/// window aggregation: q11).
pub fn closes_windows(name: &str) -> bool {
    query(name).is_some_and(|(_, sql)| {
        ["TABLE(TUMBLE(", "TABLE(HOP(", "TABLE(SESSION("]
            .iter()
            .any(|w| sql.contains(w))
    })
}

/// Rows of q13's side input: key `k` in `0..SIDE_INPUT_ROWS`, value `k` as text (the
/// table RisingWave's Nexmark q13 builds).
pub const SIDE_INPUT_ROWS: u32 = 10_000;

/// The statements that create the relations a query reads besides the generator's
/// tables, to run before it: q12's bids with their processing time (Flink's
/// `SELECT *, PROCTIME() AS p_time FROM bid`, as a view so that TUMBLE can name it),
/// q13's side input.
pub fn setup(name: &str) -> Vec<String> {
    match name {
        "q12" => vec!["CREATE VIEW bid_proctime AS SELECT *, PROCTIME() AS p_time FROM bid".into()],
        "q13" => {
            let rows: Vec<String> = (0..SIDE_INPUT_ROWS)
                .map(|k| format!("({k}, '{k}')"))
                .collect();
            vec![
                "CREATE TABLE side_input (key bigint PRIMARY KEY, value text)".into(),
                format!("INSERT INTO side_input VALUES {}", rows.join(", ")),
            ]
        }
        _ => vec![],
    }
}

/// For a query whose rows depend on processing time (q12: which window a bid falls
/// in), what every run must still agree on: a query over its rows (kept in the view
/// `<name>_rows`) and the same answer over the input. q12 counts each bid in exactly
/// one window of its bidder, so its counts summed per bidder are the bids per bidder.
pub fn processing_time_check(name: &str) -> Option<(String, &'static str)> {
    (name == "q12").then(|| {
        (
            format!(
                "SELECT bidder, CAST(sum(bid_count) AS bigint) FROM {name}_rows GROUP BY bidder"
            ),
            "SELECT bidder, count(*) FROM bid GROUP BY bidder",
        )
    })
}

/// The tables and query of a Nexmark query name.
pub fn query(name: &str) -> Option<(&'static [&'static str], &'static str)> {
    QUERIES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, t, q)| (*t, *q))
}

/// The column list of a Nexmark table (the java-random generator's).
pub fn columns(table: &str) -> Option<&'static str> {
    match table {
        "person" => Some(PERSON_COLUMNS),
        "auction" => Some(AUCTION_COLUMNS),
        "bid" => Some(BID_COLUMNS),
        _ => None,
    }
}

/// The column list of a Nexmark table of the splittable-random generator (the Flink
/// harness's; bids have a channel and a URL).
pub fn harness_columns(table: &str) -> Option<&'static str> {
    KINDS.iter().find(|(k, _)| *k == table).map(|(_, c)| *c)
}
