//! What the sink tests share: replaying DEBEZIUM change events into rows, and the
//! oracle of the `per_g` view over records made by [`crate::kafka::json`].

use std::collections::BTreeMap;

/// Replays DEBEZIUM events in order (insert `after`, delete `before`) into a multiset
/// of rows. A delete of a row that is not there panics: it means a duplicate or a gap.
pub fn replay_debezium(events: impl Iterator<Item = String>) -> BTreeMap<String, i64> {
    let mut contents: BTreeMap<String, i64> = BTreeMap::new();
    for e in events {
        let v: serde_json::Value = serde_json::from_str(&e).expect("debezium json");
        match v["op"].as_str() {
            Some("c") => *contents.entry(v["after"].to_string()).or_default() += 1,
            Some("d") => {
                let row = v["before"].to_string();
                let n = contents.get_mut(&row).unwrap_or_else(|| {
                    panic!("delete of a row the sink never inserted (or a duplicate delete): {row}")
                });
                *n -= 1;
                if *n == 0 {
                    contents.remove(&row);
                }
            }
            other => panic!("op {other:?} in {e}"),
        }
    }
    contents
}

/// `SELECT g, count(*) AS n, sum(v) AS s ... GROUP BY g` over ids `0..total` with
/// `g = id % 7` and `v = id * 10`, as JSON rows (each once).
pub fn per_g_oracle(total: i64) -> BTreeMap<String, i64> {
    (0..7)
        .map(|g| {
            let members: Vec<i64> = (0..total).filter(|i| i % 7 == g).collect();
            let s: i64 = members.iter().map(|i| i * 10).sum();
            (format!(r#"{{"g":{g},"n":{},"s":{s}}}"#, members.len()), 1)
        })
        .collect()
}

/// The rows of the view `per_g` in the same JSON form.
pub async fn per_g_rows(c: &tokio_postgres::Client) -> BTreeMap<String, i64> {
    crate::query::rows(c, "SELECT g, n, s FROM per_g")
        .await
        .into_iter()
        .map(|r| (format!(r#"{{"g":{},"n":{},"s":{}}}"#, r[0], r[1], r[2]), 1))
        .collect()
}

/// The sink tests' pipeline: table `events` reading JSON records from topic `input`,
/// the view `per_g` over it, and the exactly-once sink `rows_out` of the table's rows
/// into `rows_topic` (its transactional ids prefixed with `prefix`).
pub fn events_pipeline_sql(input: &str, rows_topic: &str, prefix: &str) -> String {
    format!(
        "CREATE TABLE events (id bigint, g bigint, v bigint) WITH (
           connector = 'kafka', topic = '{input}', properties.bootstrap.server = '{b}'
         ) FORMAT PLAIN ENCODE JSON;
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n, sum(v) AS s FROM events GROUP BY g;
         CREATE SINK rows_out FROM events WITH (connector = 'kafka', topic = '{rows_topic}',
           properties.bootstrap.server = '{b}', sink.delivery-guarantee = 'exactly-once',
           sink.transactional-id-prefix = '{prefix}') FORMAT PLAIN ENCODE JSON;",
        b = crate::kafka::broker()
    )
}
