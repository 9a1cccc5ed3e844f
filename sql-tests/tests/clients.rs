//! Real clients: psql's backslash commands, and tokio-postgres's extended protocol
//! (prepared statements, typed binary parameters and binary results).

use weir_sql_tests::clients::psql;
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_catalog_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    server
        .connect()
        .await
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name varchar, price numeric(8,2));
             CREATE MATERIALIZED VIEW by_name AS SELECT name, count(*) AS n FROM items GROUP BY name;",
        )
        .await
        .unwrap();
    let dt = psql(server.port, "\\dt");
    assert!(
        dt.contains("items") && dt.contains("table") && !dt.contains("by_name"),
        "{dt}"
    );
    let dm = psql(server.port, "\\dm");
    assert!(
        dm.contains("by_name") && dm.contains("materialized view"),
        "{dm}"
    );
    assert!(psql(server.port, "\\dv").contains("Did not find any relations"));
    assert!(psql(server.port, "\\l").contains("weir"));
    assert!(psql(server.port, "\\dn").contains("public"));
    let d = psql(server.port, "\\d items");
    assert!(d.contains("Table \"public.items\""), "{d}");
    assert!(
        d.contains("id") && d.contains("integer") && d.contains("not null"),
        "{d}"
    );
    assert!(d.contains("numeric(8,2)"), "{d}");
    let dmv = psql(server.port, "\\d by_name");
    assert!(
        dmv.contains("Materialized view \"public.by_name\"") && dmv.contains("bigint"),
        "{dmv}"
    );
    // psql's own printing of values.
    psql(
        server.port,
        "INSERT INTO items VALUES (1, 'a', 2.50), (2, 'a', NULL)",
    );
    // Another session sees the write after the next barrier; FLUSH makes it visible now.
    psql(server.port, "FLUSH");
    let sel = psql(server.port, "SELECT name, n FROM by_name");
    assert!(sel.contains(" a    | 2") || sel.contains("a    |"), "{sel}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_with_typed_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE m (id bigint PRIMARY KEY, name text, score double precision, ok boolean, d date, ts timestamp);
             CREATE MATERIALIZED VIEW s AS SELECT ok, count(*) AS n, sum(score) AS total FROM m GROUP BY ok;",
        )
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO m VALUES ($1, $2, $3, $4, $5, $6)")
        .await
        .unwrap();
    let day = chrono::NaiveDate::from_ymd_opt(2024, 3, 1).unwrap();
    let ts = day.and_hms_opt(12, 30, 0).unwrap();
    for i in 0..5i64 {
        let name = format!("it's {i}");
        let n = client
            .execute(
                &insert,
                &[&i, &name, &(i as f64 * 1.5), &(i % 2 == 0), &day, &ts],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    // Binary results with exact types, and a parameter in WHERE.
    let rows = client
        .query(
            "SELECT id, name, score, ok, d, ts FROM m WHERE id >= $1 ORDER BY id",
            &[&3i64],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let id: i64 = rows[0].get(0);
    let name: String = rows[0].get(1);
    let score: f64 = rows[0].get(2);
    let ok: bool = rows[0].get(3);
    let d: chrono::NaiveDate = rows[0].get(4);
    let t: chrono::NaiveDateTime = rows[0].get(5);
    assert_eq!(
        (id, name.as_str(), score, ok, d, t),
        (3, "it's 3", 4.5, false, day, ts)
    );
    let view = client
        .query("SELECT ok, n, total FROM s ORDER BY ok", &[])
        .await
        .unwrap();
    let summary: Vec<(bool, i64, f64)> = view
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(summary, vec![(false, 2, 6.0), (true, 3, 9.0)]);
    // An error in the extended protocol is a Postgres error, and the session goes on.
    let err = client
        .query("SELECT * FROM missing WHERE x = $1", &[&1i32])
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "42P01");
    let n: i64 = client
        .query_one("SELECT count(*) FROM m", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_is_enforced_with_scram_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start_with_config(
        &dir.path().join("data"),
        1,
        "[auth]\npassword = \"s3cret\"\n",
    )
    .await;
    let ok = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=alice dbname=any password=s3cret",
            server.port
        ),
        tokio_postgres::NoTls,
    )
    .await;
    assert!(ok.is_ok(), "correct password must be accepted");
    let bad = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=alice dbname=any password=wrong",
            server.port
        ),
        tokio_postgres::NoTls,
    )
    .await;
    assert!(bad.is_err(), "wrong password must be refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_see_writes_at_the_next_periodic_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let writer = server.connect().await;
    let reader = server.connect().await;
    writer
        .batch_execute(
            "CREATE TABLE e (x int); CREATE MATERIALIZED VIEW c AS SELECT count(*) AS n FROM e;",
        )
        .await
        .unwrap();
    writer
        .batch_execute("INSERT INTO e VALUES (1), (2)")
        .await
        .unwrap();
    // No FLUSH: the reader must see both rows once the periodic barrier (1 s by
    // default) has committed them, in the table and in the view at the same epoch.
    let start = std::time::Instant::now();
    loop {
        let t: i64 = reader
            .query_one("SELECT count(*) FROM e", &[])
            .await
            .unwrap()
            .get(0);
        let v: i64 = reader
            .query_one("SELECT n FROM c", &[])
            .await
            .unwrap()
            .get(0);
        let both: (i64, i64) = {
            let r = reader
                .query_one("SELECT (SELECT count(*) FROM e), (SELECT n FROM c)", &[])
                .await
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert_eq!(both.0, both.1, "table and view must be read at one epoch");
        if t == 2 && v == 2 {
            break;
        }
        assert!(
            start.elapsed().as_secs() < 5,
            "write not visible after 5 s (table {t}, view {v})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
