//! The crash workload shared by the kill -9 test and the soak command: a writer that
//! streams acknowledged INSERTs and UPDATEs into `t(id, g)`, and the check that after a
//! crash every acknowledged change is present, nothing unwritten appears, and every
//! view equals the answer computed from the recovered table.

use crate::query::rows;
use crate::WeirProcess;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The tables and views the workload writes and checks.
pub const SCHEMA: &str = "CREATE TABLE t (id bigint PRIMARY KEY, g bigint);
     CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n FROM t GROUP BY g;
     CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n FROM t;
     CREATE MATERIALIZED VIEW busy_groups AS SELECT g FROM per_group WHERE n > 3;
     CREATE MATERIALIZED VIEW neighbours AS SELECT t.id, t.g, u.g AS prev_g FROM t LEFT JOIN t AS u ON t.id = u.id + 1;
     CREATE MATERIALIZED VIEW latest_per_group AS SELECT * FROM (SELECT id, g, ROW_NUMBER() OVER (PARTITION BY g ORDER BY id DESC) AS rn FROM t) WHERE rn <= 3;";

/// Views of [`SCHEMA`] whose contents must equal their query run as a batch SELECT
/// over the recovered table (a join and a Top-N: state that must survive restores).
const QUERY_VIEWS: &[(&str, &str)] = &[
    ("neighbours", "SELECT t.id, t.g, u.g AS prev_g FROM t LEFT JOIN t AS u ON t.id = u.id + 1"),
    ("latest_per_group", "SELECT * FROM (SELECT id, g, ROW_NUMBER() OVER (PARTITION BY g ORDER BY id DESC) AS rn FROM t) WHERE rn <= 3"),
];

#[derive(Default)]
pub struct Acked {
    /// id → g for rows whose INSERT (or last UPDATE) was acknowledged.
    pub rows: BTreeMap<i64, i64>,
    /// The statements in flight (one per writer at most) when the server died.
    pub in_flight: std::collections::BTreeSet<(i64, i64)>,
}

impl Acked {
    /// A copy of what was acknowledged so far (to check while writers may go on).
    pub fn snapshot(acked: &Mutex<Acked>) -> Acked {
        let a = acked.lock().unwrap();
        Acked {
            rows: a.rows.clone(),
            in_flight: a.in_flight.clone(),
        }
    }
}

/// After a check: whatever landed (the in-flight statement included) is now the truth.
pub async fn settle(server: &WeirProcess, acked: &Mutex<Acked>) {
    let table = table_state(&server.connect().await).await;
    let mut a = acked.lock().unwrap();
    a.rows = table;
    a.in_flight.clear();
}

/// Streams writes from `start_id` on until the server goes away; returns how many were
/// acknowledged. A writer that cannot connect, or whose statement the server answers
/// with an error, panics: only a lost connection (the kill) ends a round.
pub async fn stream_writes(port: u16, start_id: i64, acked: Arc<Mutex<Acked>>) -> u64 {
    let client = crate::process::connect_port(port)
        .await
        .unwrap_or_else(|e| panic!("writer from {start_id} cannot connect: {e}"));
    let mut id = start_id;
    let mut acknowledged = 0;
    // The next statement is marked in flight under the same lock that records the
    // previous one's acknowledgement, so a kill never sees a running writer with
    // nothing in flight.
    acked.lock().unwrap().in_flight.insert((id, id % 7));
    loop {
        let g = id % 7;
        let sql = if id % 10 == 9 {
            // Move an earlier row to another group: an update that views must retract.
            format!("UPDATE t SET g = {} WHERE id = {}", (g + 1) % 7, id - 5)
        } else {
            format!("INSERT INTO t VALUES ({id}, {g})")
        };
        match client.batch_execute(&sql).await {
            Ok(()) => {}
            Err(e) if e.as_db_error().is_some() => panic!("{sql}: refused: {e}"),
            Err(_) => return acknowledged,
        }
        acknowledged += 1;
        let mut a = acked.lock().unwrap();
        if id % 10 == 9 {
            if let Some(v) = a.rows.get_mut(&(id - 5)) {
                *v = (g + 1) % 7;
            }
        } else {
            a.rows.insert(id, g);
        }
        a.in_flight.remove(&(id, g));
        id += 1;
        a.in_flight.insert((id, id % 7));
        drop(a);
    }
}

/// The recovered table as id → g.
pub async fn table_state(client: &tokio_postgres::Client) -> BTreeMap<i64, i64> {
    rows(client, "SELECT id, g FROM t")
        .await
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

pub async fn check(server: &WeirProcess, acked: &Acked) {
    let client = server.connect().await;
    let table = table_state(&client).await;
    for (id, g) in &acked.rows {
        match table.get(id) {
            Some(got) if got == g => {}
            Some(got) => {
                // Only the in-flight UPDATE may have landed without its acknowledgement.
                let in_flight_update = acked
                    .in_flight
                    .iter()
                    .any(|(f, _)| f % 10 == 9 && f - 5 == *id);
                assert!(
                    in_flight_update,
                    "row {id}: acknowledged g={g}, recovered g={got}"
                );
            }
            None => panic!("acknowledged row {id} lost after kill -9"),
        }
    }
    for id in table.keys() {
        let known = acked.rows.contains_key(id) || acked.in_flight.iter().any(|(f, _)| f == id);
        assert!(known, "row {id} appeared without being written");
    }
    // Views equal the answer computed from the recovered table.
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    for g in table.values() {
        *want.entry(*g).or_default() += 1;
    }
    let got: BTreeMap<i64, i64> = rows(&client, "SELECT g, n FROM per_group")
        .await
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect();
    assert_eq!(got, want, "per_group view differs from the recovered table");
    let total = rows(&client, "SELECT n FROM total").await;
    assert_eq!(total, vec![vec![table.len().to_string()]]);
    let busiest = rows(&client, "SELECT count(*) FROM busy_groups").await;
    let want_busy = want.values().filter(|n| **n > 3).count();
    assert_eq!(busiest, vec![vec![want_busy.to_string()]]);
    for (view, query) in QUERY_VIEWS {
        let mut got = rows(&client, &format!("SELECT * FROM {view}")).await;
        let mut want = rows(&client, query).await;
        got.sort();
        want.sort();
        assert_eq!(
            got.len(),
            want.len(),
            "{view}: row count differs from its query"
        );
        assert!(
            got == want,
            "{view} differs from its query over the recovered table"
        );
    }
}
