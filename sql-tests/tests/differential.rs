//! Differential test: seeded random INSERT/UPDATE/DELETE sequences on two tables, with
//! views covering aggregates with retraction, HAVING, DISTINCT, a global aggregate,
//! views on views, joins of every kind (inner, outer, non-equi conditions, self,
//! three-way, semi/anti from EXISTS, a scalar subquery), set operations, Top-N (ORDER
//! BY ... LIMIT ... OFFSET, ROW_NUMBER() <= n, RANK()), TUMBLE / HOP windows, ordered
//! aggregates (string_agg, first_value, last_value), DISTINCT ON and sum/avg(DISTINCT). After every batch of changes each view, read from a real `weir`
//! server, must equal DataFusion's batch answer for the same query over the test's own
//! copy of the tables (an oracle independent of Weir's storage and runtime).

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_postgres::{Client, SimpleQueryMessage};
use weir_sql_tests::WeirProcess;

/// (name, defining query). Views may read earlier views.
const VIEWS: &[(&str, &str)] = &[
    ("v_join_inner", "SELECT t1.id, t1.g, t2.id AS id2, t2.x FROM t1 JOIN t2 ON t1.s = t2.k"),
    ("v_join_full", "SELECT t1.id, t2.id AS id2, t1.v + t2.x AS w FROM t1 FULL JOIN t2 ON t1.g = t2.x AND t1.v > t2.x"),
    ("v_groups", "SELECT g, count(*) AS n, sum(v) AS total, min(v) AS lo, max(v) AS hi, count(s) AS ns FROM t1 GROUP BY g"),
    ("v_having", "SELECT g, sum(v) AS total FROM t1 GROUP BY g HAVING count(*) > 2"),
    ("v_distinct", "SELECT DISTINCT s FROM t1"),
    ("v_filtered", "SELECT s, count(*) AS n, max(g) AS top FROM t1 WHERE v % 3 = 0 GROUP BY s"),
    ("v_global", "SELECT count(*) AS n, sum(x) AS total, max(k) AS top, min(x) AS lo FROM t2"),
    ("v_avg", "SELECT k, avg(x) AS mean, count(x) AS n FROM t2 GROUP BY k"),
    ("v_proj", "SELECT id, v * 2 + g AS w, upper(s) AS us FROM t1 WHERE g < 3"),
    ("v_on_view", "SELECT n, count(*) AS groups, sum(total) AS total FROM v_groups GROUP BY n"),
    ("v_on_view2", "SELECT count(*) AS n FROM v_having WHERE total > 0"),
    ("v_count_distinct", "SELECT g, count(DISTINCT s) AS ds, count(*) FILTER (WHERE v > 50) AS big FROM t1 GROUP BY g"),
    ("v_distinct_shared", "SELECT g, count(DISTINCT s) AS ds, count(DISTINCT s) FILTER (WHERE v > 50) AS ds_big, count(DISTINCT s) FILTER (WHERE v % 2 = 0) AS ds_even, count(DISTINCT v % 7) FILTER (WHERE v < 120) AS dv FROM t1 GROUP BY g"),
    ("v_join_left", "SELECT t1.id, t1.s, t2.x FROM t1 LEFT JOIN t2 ON t1.s = t2.k AND t2.x > t1.g"),
    ("v_join_right", "SELECT t1.id, t2.id AS id2 FROM t1 RIGHT JOIN t2 ON t1.g = t2.x"),
    ("v_join_agg", "SELECT t2.k, count(*) AS n, sum(t1.v) AS total FROM t1 JOIN t2 ON t1.s = t2.k GROUP BY t2.k"),
    ("v_self_join", "SELECT a.id, b.id AS id2 FROM t1 a JOIN t1 b ON a.g = b.g AND a.id < b.id WHERE a.v > 150"),
    ("v_join_3way", "SELECT t1.id, t2.id AS id2, c.id AS id3 FROM t1 JOIN t2 ON t1.s = t2.k JOIN t2 c ON c.x = t1.g"),
    ("v_semi", "SELECT id, s FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.s AND t2.x > t1.g)"),
    ("v_anti", "SELECT id FROM t1 WHERE NOT EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.g)"),
    ("v_mark", "SELECT id, v FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.k = t1.s AND t2.x > t1.g) OR v > 150"),
    ("v_intersect", "SELECT s FROM t1 INTERSECT SELECT k FROM t2"),
    ("v_except", "SELECT k FROM t2 EXCEPT SELECT s FROM t1"),
    ("v_union", "SELECT s FROM t1 UNION SELECT k FROM t2"),
    ("v_scalar_subquery", "SELECT id, v FROM t1 WHERE v > (SELECT avg(x) FROM t2)"),
    ("v_topn", "SELECT id, v FROM t1 ORDER BY v DESC, id LIMIT 5 OFFSET 2"),
    ("v_rank", "SELECT * FROM (SELECT id, g, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC, id) AS rn FROM t1) WHERE rn <= 3"),
    ("v_rank_agg", "SELECT k, count(*) AS n, sum(x) AS total FROM (SELECT k, x, ROW_NUMBER() OVER (PARTITION BY k ORDER BY x NULLS FIRST, id DESC) AS rn FROM t2) WHERE rn < 3 GROUP BY k"),
    ("v_rank_ties", "SELECT * FROM (SELECT id, g, RANK() OVER (PARTITION BY g ORDER BY v DESC) AS r FROM t1) WHERE r <= 2"),
    ("v_rank_band", "SELECT * FROM (SELECT id, g, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v, id) AS rn FROM t1) WHERE rn > 1 AND rn <= 3"),
    ("v_ordered_aggs", "SELECT g, string_agg(s, ',' ORDER BY id) AS names, first_value(v ORDER BY id) AS first_v, last_value(v ORDER BY v, id) AS top_v, sum(DISTINCT v) AS sd, avg(DISTINCT v) AS ad FROM t1 GROUP BY g"),
    ("v_distinct_on", "SELECT DISTINCT ON (g) g, id, v FROM t1 ORDER BY g, v DESC, id"),
    ("v_ts", "SELECT id, g, v, CAST(to_timestamp(v * 37) AS TIMESTAMP) AS ts FROM t1"),
    ("v_tumble", "SELECT g, window_start, window_end, count(*) AS n, sum(v) AS total FROM TUMBLE(v_ts, ts, INTERVAL '5' MINUTE) GROUP BY g, window_start, window_end"),
    ("v_hop", "SELECT window_start, window_end, count(*) AS n, max(v) AS hi FROM TABLE(HOP(TABLE v_ts, DESCRIPTOR(ts), INTERVAL '2' MINUTE, INTERVAL '6' MINUTE)) GROUP BY window_start, window_end"),
    ("v_cumulate", "SELECT window_start, window_end, count(*) AS n, max(v) AS hi FROM TABLE(CUMULATE(TABLE v_ts, DESCRIPTOR(ts), INTERVAL '2' MINUTE, INTERVAL '6' MINUTE)) GROUP BY window_start, window_end"),
    ("v_session", "SELECT g, window_start, window_end, count(*) AS n, sum(v) AS total FROM TABLE(SESSION(TABLE v_ts PARTITION BY g, DESCRIPTOR(ts), INTERVAL '3' MINUTE)) GROUP BY g, window_start, window_end"),
    ("v_array_agg", "SELECT g, array_agg(v ORDER BY id) AS vs, array_agg(s ORDER BY v DESC, id) FILTER (WHERE v > 0) AS names FROM t1 GROUP BY g"),
    ("v_over", "SELECT id, g, v, lag(v) OVER (PARTITION BY g ORDER BY v, id) AS prev, sum(v) OVER (PARTITION BY g ORDER BY v, id) AS running, count(*) OVER (PARTITION BY g) AS n FROM t1"),
    ("v_over_global", "SELECT id, v, row_number() OVER (ORDER BY v DESC, id) AS pos, lead(s) OVER (ORDER BY v DESC, id) AS next_s FROM t1"),
];

/// The oracle's own formulation of views whose SQL plain DataFusion does not run
/// (window TVFs): windows computed from epoch seconds, HOP as a join with its copies,
/// sessions from their starts (a row no other row of its group precedes by at most the
/// gap) without window functions.
const ORACLE_SQL: &[(&str, &str)] = &[
    ("v_tumble", "SELECT g, CAST(to_timestamp(ws) AS TIMESTAMP) AS window_start, CAST(to_timestamp(ws + 300) AS TIMESTAMP) AS window_end, count(*) AS n, sum(v) AS total FROM (SELECT g, v, CAST(floor(v * 37 / 300.0) * 300 AS BIGINT) AS ws FROM t1) GROUP BY g, ws"),
    ("v_hop", "SELECT CAST(to_timestamp(ws) AS TIMESTAMP) AS window_start, CAST(to_timestamp(ws + 360) AS TIMESTAMP) AS window_end, count(*) AS n, max(v) AS hi FROM (SELECT v, CAST(floor(v * 37 / 120.0) * 120 AS BIGINT) - 120 * c.j AS ws FROM t1 CROSS JOIN (VALUES (0), (1), (2)) AS c(j)) GROUP BY ws"),
    ("v_cumulate", "SELECT CAST(to_timestamp(ws) AS TIMESTAMP) AS window_start, CAST(to_timestamp(ws + 120 * c.k) AS TIMESTAMP) AS window_end, count(*) AS n, max(v) AS hi FROM (SELECT v, CAST(floor(v * 37 / 360.0) * 360 AS BIGINT) AS ws FROM t1) CROSS JOIN (VALUES (1), (2), (3)) AS c(k) WHERE ws + 120 * c.k > v * 37 GROUP BY ws, c.k"),
    ("v_session", "SELECT g, ws AS window_start, max(ts) + INTERVAL '3' MINUTE AS window_end, count(*) AS n, sum(v) AS total FROM (SELECT r.id, r.g, r.v, r.ts, max(st.ts) AS ws FROM v_ts r JOIN (SELECT a.g, a.ts FROM v_ts a WHERE a.ts IS NOT NULL AND NOT EXISTS (SELECT 1 FROM v_ts b WHERE coalesce(b.g, -1) = coalesce(a.g, -1) AND b.ts < a.ts AND b.ts + INTERVAL '3' MINUTE >= a.ts)) st ON coalesce(st.g, -1) = coalesce(r.g, -1) AND st.ts <= r.ts GROUP BY r.id, r.g, r.v, r.ts) GROUP BY g, ws"),
];

fn oracle_sql<'a>(name: &str, sql: &'a str) -> &'a str {
    ORACLE_SQL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or(sql)
}

/// A row of t1 without its id: (g, v, s), each possibly NULL.
type T1Row = (Option<i32>, Option<i64>, Option<String>);

#[derive(Default)]
struct Oracle {
    t1: BTreeMap<i32, T1Row>,
    t2: BTreeMap<i32, (String, Option<i32>)>,
}

impl Oracle {
    async fn context(&self) -> SessionContext {
        let ctx = SessionContext::new();
        let s1 = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("g", DataType::Int32, true),
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let b1 = RecordBatch::try_new(
            s1.clone(),
            vec![
                Arc::new(Int32Array::from(
                    self.t1.keys().copied().collect::<Vec<_>>(),
                )) as ArrayRef,
                Arc::new(Int32Array::from(
                    self.t1.values().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    self.t1.values().map(|r| r.1).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    self.t1.values().map(|r| r.2.clone()).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        let s2 = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("k", DataType::Utf8, true),
            Field::new("x", DataType::Int32, true),
        ]));
        let b2 = RecordBatch::try_new(
            s2.clone(),
            vec![
                Arc::new(Int32Array::from(
                    self.t2.keys().copied().collect::<Vec<_>>(),
                )) as ArrayRef,
                Arc::new(StringArray::from(
                    self.t2.values().map(|r| r.0.clone()).collect::<Vec<_>>(),
                )),
                Arc::new(Int32Array::from(
                    self.t2.values().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        ctx.register_table(
            "t1",
            Arc::new(MemTable::try_new(s1, vec![vec![b1]]).unwrap()),
        )
        .unwrap();
        ctx.register_table(
            "t2",
            Arc::new(MemTable::try_new(s2, vec![vec![b2]]).unwrap()),
        )
        .unwrap();
        for (name, sql) in VIEWS {
            let sql = oracle_sql(name, sql);
            ctx.sql(&format!("CREATE VIEW {name} AS {sql}"))
                .await
                .unwrap();
        }
        ctx
    }
}

/// How a column's values are compared: integers exactly as text (so an integer
/// column that comes back as `105.0` differs), floating point and numeric values at 6
/// decimals (so `105`, `105.0` and `105.0000000000000000` of a float or numeric column
/// agree), the rest as text. The kind is the oracle's column type.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Integer,
    Real,
    Other,
}

fn kind_of(t: &DataType) -> Kind {
    if t.is_integer() {
        Kind::Integer
    } else if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) {
        Kind::Real
    } else {
        Kind::Other
    }
}

/// A value as compared: see [`Kind`]; Arrow's timestamps (`1970-01-01T00:05:00`) are
/// written as Postgres writes them.
fn normalize(v: &str, kind: Kind) -> String {
    match (kind, v.parse::<f64>()) {
        (Kind::Real, Ok(f)) if v != "NaN" => format!("{:.6}", f),
        _ if v.len() >= 19 && v.as_bytes()[10] == b'T' && v.as_bytes()[4] == b'-' => {
            format!("{} {}", &v[..10], &v[11..])
        }
        _ => v.to_string(),
    }
}

async fn weir_rows(client: &Client, sql: &str, kinds: &[Kind]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| {
                        let kind = kinds.get(i).copied().unwrap_or(Kind::Other);
                        normalize(r.get(i).unwrap_or("NULL"), kind)
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

/// The oracle's rows (as [`weir_rows`]) and its column kinds.
async fn oracle_rows(ctx: &SessionContext, sql: &str) -> (Vec<Vec<String>>, Vec<Kind>) {
    let frame = ctx.sql(sql).await.unwrap();
    let kinds: Vec<Kind> = frame
        .schema()
        .fields()
        .iter()
        .map(|f| kind_of(f.data_type()))
        .collect();
    let batches = frame.collect().await.unwrap();
    let mut rows = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            rows.push(
                b.columns()
                    .iter()
                    .zip(&kinds)
                    .map(|(c, kind)| {
                        if c.is_null(r) {
                            "NULL".to_string()
                        } else if let DataType::List(_) = c.data_type() {
                            postgres_array(&c.as_list::<i32>().value(r))
                        } else {
                            normalize(&array_value_to_string(c, r).unwrap(), *kind)
                        }
                    })
                    .collect(),
            );
        }
    }
    rows.sort();
    (rows, kinds)
}

/// An array as Postgres writes it (`{1,NULL,3}`), for elements that need no quotes.
fn postgres_array(values: &ArrayRef) -> String {
    let items: Vec<String> = (0..values.len())
        .map(|i| {
            if values.is_null(i) {
                "NULL".to_string()
            } else {
                array_value_to_string(values, i).unwrap()
            }
        })
        .collect();
    format!("{{{}}}", items.join(","))
}

fn sql_value<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "NULL".into())
}

fn sql_text(s: &Option<String>) -> String {
    s.as_ref()
        .map(|s| format!("'{s}'"))
        .unwrap_or_else(|| "NULL".into())
}

async fn run(seed: u64, parallelism: u32, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), parallelism).await;
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t1 (id int PRIMARY KEY, g int, v bigint, s text);
             CREATE TABLE t2 (id int PRIMARY KEY, k text, x int);",
        )
        .await
        .unwrap();
    // Some views exist before any data, some are created midway (backfill).
    let (early, late) = VIEWS.split_at(5);
    for (name, sql) in early {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {sql}"))
            .await
            .unwrap();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut oracle = Oracle::default();
    let mut next_id = 0;
    let words = ["ant", "bee", "cat", "dog"];
    let mut created_late = false;
    for step in 0..steps {
        let op = rng.random_range(0..10);
        let sql = if op < 4 || oracle.t1.len() < 3 {
            // Multi-row insert into t1.
            let n = rng.random_range(1..6);
            let mut vals = Vec::new();
            for _ in 0..n {
                next_id += 1;
                // NULL group keys and values too: one in eight and one in ten.
                let g = (rng.random_range(0..8) > 0).then(|| rng.random_range(0..6));
                let v = (rng.random_range(0..10) > 0).then(|| rng.random_range(-50..200i64));
                let s =
                    (rng.random_range(0..5) > 0).then(|| words[rng.random_range(0..4)].to_string());
                vals.push(format!(
                    "({next_id}, {}, {}, {})",
                    sql_value(g),
                    sql_value(v),
                    sql_text(&s)
                ));
                oracle.t1.insert(next_id, (g, v, s));
            }
            format!("INSERT INTO t1 VALUES {}", vals.join(", "))
        } else if op < 6 {
            let keys: Vec<i32> = oracle.t1.keys().copied().collect();
            let id = keys[rng.random_range(0..keys.len())];
            let g = (rng.random_range(0..8) > 0).then(|| rng.random_range(0..6));
            let dv = rng.random_range(-20..20i64);
            let row = oracle.t1.get_mut(&id).unwrap();
            row.0 = g;
            row.1 = row.1.map(|v| v + dv);
            format!(
                "UPDATE t1 SET g = {}, v = v + {dv} WHERE id = {id}",
                sql_value(g)
            )
        } else if op < 7 {
            let keys: Vec<i32> = oracle.t1.keys().copied().collect();
            let lo = keys[rng.random_range(0..keys.len())];
            let hi = lo + rng.random_range(0..3);
            oracle.t1.retain(|k, _| *k < lo || *k > hi);
            format!("DELETE FROM t1 WHERE id BETWEEN {lo} AND {hi}")
        } else if op < 9 || oracle.t2.is_empty() {
            next_id += 1;
            let k = words[rng.random_range(0..4)].to_string();
            let x = (rng.random_range(0..6) > 0).then(|| rng.random_range(-10..100));
            oracle.t2.insert(next_id, (k.clone(), x));
            format!(
                "INSERT INTO t2 VALUES ({next_id}, '{k}', {})",
                x.map(|x| x.to_string()).unwrap_or("NULL".into())
            )
        } else {
            let keys: Vec<i32> = oracle.t2.keys().copied().collect();
            let id = keys[rng.random_range(0..keys.len())];
            oracle.t2.remove(&id);
            format!("DELETE FROM t2 WHERE id = {id}")
        };
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("step {step}: {sql}: {e:?}"));
        if !created_late && step == steps / 3 {
            for (name, sql) in late {
                client
                    .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {sql}"))
                    .await
                    .unwrap();
            }
            created_late = true;
        }
        if step % 20 == 19 || step + 1 == steps {
            let ctx = oracle.context().await;
            let live: &[(&str, &str)] = if created_late { VIEWS } else { early };
            for (name, sql) in live {
                let (want, kinds) = oracle_rows(&ctx, oracle_sql(name, sql)).await;
                let got = weir_rows(&client, &format!("SELECT * FROM {name}"), &kinds).await;
                assert_eq!(
                    got, want,
                    "view {name} differs from the batch answer (seed {seed}, parallelism {parallelism}, step {step})"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_batch_answers_at_parallelism_1() {
    for seed in [1, 2, 5] {
        run(seed, 1, 200).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_batch_answers_at_parallelism_4() {
    for seed in [3, 4, 6] {
        run(seed, 4, 200).await;
    }
}
