//! What the savepoint tests share: the table `t` and its per-group view query, rows
//! inserted by id range, a view checked against its query, the NOTICE a restore
//! raised and the log rows it says were replayed, the uid EXPLAIN shows for an
//! aggregation.

use crate::query::{rows, sorted};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::Client;

pub const TABLE: &str = "CREATE TABLE t (id bigint PRIMARY KEY, g bigint, v bigint)";
pub const PER_GROUP: &str = "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g";

/// Rows `from..=to` of `t`: (id, id % 11, id * 3).
pub async fn insert_range(c: &Client, from: i64, to: i64) {
    c.batch_execute(&format!(
        "INSERT INTO t SELECT value, value % 11, value * 3 FROM generate_series({from}, {to})"
    ))
    .await
    .unwrap();
}

/// The view's rows equal those of `query`.
pub async fn assert_view(c: &Client, view: &str, query: &str) {
    assert_eq!(
        sorted(c, &format!("SELECT * FROM {view}")).await,
        sorted(c, query).await,
        "{view} differs from {query}"
    );
}

/// The notice the last statement raised (waiting briefly: notices travel on the
/// connection task; see `process::connect_with_notices`).
pub async fn last_notice(notices: &Arc<Mutex<Vec<String>>>) -> String {
    for _ in 0..50 {
        if let Some(n) = notices.lock().unwrap().pop() {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no notice");
}

/// "... replayed N table-log rows" of a restore notice.
pub fn replayed(notice: &str) -> u64 {
    notice
        .split("replayed ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no replay count in {notice}"))
}

/// The lines of an EXPLAIN of `sql`.
pub async fn explain(c: &Client, sql: &str) -> Vec<String> {
    rows(c, &format!("EXPLAIN {sql}"))
        .await
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

/// The uid of the (first and only) hash aggregation in an EXPLAIN of `create`.
pub async fn agg_uid(c: &Client, create: &str) -> String {
    let plan = explain(c, create).await;
    let line = plan
        .iter()
        .find(|l| l.contains("HashAgg"))
        .unwrap_or_else(|| panic!("no HashAgg in {plan:?}"));
    assert!(line.contains("[uid.1]"), "EXPLAIN numbers it: {line}");
    line.split("uid=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string()
}
