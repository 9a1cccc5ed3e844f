//! The extended protocol as drivers use it, checked message by message: Describe
//! answering NoData for statements without rows, one CommandComplete per Execute
//! with its own count, pipelined messages before one Sync, row-limited portals
//! (PortalSuspended, then the rest), binary results, and Bind errors that leave the
//! session usable.

mod raw_wire;

use raw_wire::*;
use weir_sql_tests::WeirProcess;

async fn server_with_table() -> (tempfile::TempDir, WeirProcess) {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    server
        .connect()
        .await
        .batch_execute("CREATE TABLE t (a int, b text)")
        .await
        .unwrap();
    (dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_statement_without_rows_is_nodata() {
    let (_dir, server) = server_with_table().await;
    let mut s = connect(server.port).await;
    let mut m = Vec::new();
    m.extend(parse("ins", "INSERT INTO t VALUES ($1, $2)", &[]));
    m.extend(describe(b'S', "ins"));
    m.extend(parse("sel", "SELECT a, b FROM t WHERE a = $1", &[]));
    m.extend(describe(b'S', "sel"));
    m.extend(parse("ddl", "CREATE TABLE u (x int)", &[]));
    m.extend(describe(b'S', "ddl"));
    m.extend(parse("upd", "UPDATE t SET b = $1 WHERE a = $2", &[]));
    m.extend(describe(b'S', "upd"));
    m.extend(bind("p", "ins", &[Some(b"1"), Some(b"x")], &[]));
    m.extend(describe(b'P', "p"));
    m.extend(sync());
    let msgs = exchange(&mut s, &m, 1).await;
    // ParseComplete, ParameterDescription, NoData | RowDescription, ..., BindComplete,
    // NoData (portal), ReadyForQuery.
    assert_eq!(kinds(&msgs), "1tn1tT1tn1tn2nZ", "{msgs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_executes_complete_one_by_one() {
    let (_dir, server) = server_with_table().await;
    let mut s = connect(server.port).await;
    let mut m = parse("ins", "INSERT INTO t VALUES ($1, $2)", &[]);
    for i in 0..3 {
        let a = (10 + i).to_string();
        m.extend(bind("", "ins", &[Some(a.as_bytes()), Some(b"p")], &[]));
        m.extend(execute("", 0));
    }
    m.extend(parse(
        "",
        "INSERT INTO t SELECT a + 100, b FROM t WHERE a < 0",
        &[],
    ));
    m.extend(bind("", "", &[], &[]));
    m.extend(execute("", 0));
    m.extend(sync());
    m.extend(query("FLUSH"));
    m.extend(parse("cnt", "SELECT count(*) FROM t WHERE b = $1", &[]));
    m.extend(bind("", "cnt", &[Some(b"p")], &[]));
    m.extend(execute("", 0));
    m.extend(sync());
    let msgs = exchange(&mut s, &m, 3).await;
    let tags: Vec<String> = msgs
        .iter()
        .filter(|m| m.0 == b'C')
        .map(|m| tag(&m.1))
        .collect();
    assert_eq!(
        tags,
        [
            "INSERT 0 1",
            "INSERT 0 1",
            "INSERT 0 1",
            "INSERT 0 0",
            "FLUSH",
            "SELECT 1"
        ],
        "{msgs:?}"
    );
    let row = msgs.iter().find(|m| m.0 == b'D').expect("a data row");
    // One column, text "3".
    assert_eq!(&row.1[2..], &[0, 0, 0, 1, b'3'], "{msgs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statement_reused_many_times() {
    let (_dir, server) = server_with_table().await;
    let client = server.connect().await;
    let ins = client
        .prepare("INSERT INTO t VALUES ($1, $2)")
        .await
        .unwrap();
    for i in 0..50 {
        let n = client.execute(&ins, &[&i, &format!("r{i}")]).await.unwrap();
        assert_eq!(n, 1, "execution {i}");
    }
    client.batch_execute("FLUSH").await.unwrap();
    let sel = client
        .prepare("SELECT b FROM t WHERE a = $1")
        .await
        .unwrap();
    for i in 0..50 {
        let row = client.query_one(&sel, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), format!("r{i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_limited_portal_suspends_and_continues() {
    let (_dir, server) = server_with_table().await;
    let mut client = server.connect().await;
    client
        .batch_execute(
            "INSERT INTO t SELECT CAST(x AS int), 'v' FROM generate_series(1, 250) AS s(x); FLUSH",
        )
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT a FROM t ORDER BY a").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    loop {
        let rows = tx.query_portal(&portal, 100).await.unwrap();
        sizes.push(rows.len());
        seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        if rows.is_empty() {
            break;
        }
    }
    tx.commit().await.unwrap();
    assert_eq!(sizes, [100, 100, 50, 0]);
    assert_eq!(seen, (1..=250).collect::<Vec<i32>>());

    // On the wire: exactly max_rows DataRows, then PortalSuspended ('s'); the last
    // Execute ends with CommandComplete.
    let mut s = connect(server.port).await;
    let mut m = query("BEGIN");
    m.extend(parse("", "SELECT a FROM t ORDER BY a", &[]));
    m.extend(bind("c", "", &[], &[]));
    m.extend(execute("c", 200));
    m.extend(execute("c", 200));
    m.extend(execute("c", -1));
    m.extend(sync());
    m.extend(query("COMMIT"));
    let msgs = exchange(&mut s, &m, 3).await;
    let shape: String = kinds(&msgs)
        .replace(&"D".repeat(200), "<200>")
        .replace(&"D".repeat(50), "<50>");
    assert_eq!(shape, "CZ12<200>s<50>CCZCZ", "{}", kinds(&msgs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_errors_keep_the_session_usable() {
    let (_dir, server) = server_with_table().await;
    let mut s = connect(server.port).await;
    // Two result formats for a one-column query; then a wrong parameter count.
    let mut m = parse("one", "SELECT $1::int", &[]);
    m.extend(typed(
        b'B',
        &bind_body("", "one", &[], &[Some(b"5")], &[1, 1]),
    ));
    m.extend(execute("", 0));
    m.extend(sync());
    m.extend(bind("", "one", &[Some(b"5"), Some(b"6")], &[]));
    m.extend(execute("", 0));
    m.extend(sync());
    m.extend(bind("", "one", &[Some(b"5")], &[]));
    m.extend(execute("", 0));
    m.extend(sync());
    let msgs = exchange(&mut s, &m, 3).await;
    let errors: Vec<_> = msgs
        .iter()
        .filter(|m| m.0 == b'E')
        .map(|m| error_fields(&m.1))
        .collect();
    assert_eq!(errors.len(), 2, "{msgs:?}");
    for e in &errors {
        assert_eq!(e[&b'C'], "08P01", "{e:?}");
        assert_eq!(e[&b'S'], "ERROR", "{e:?}");
    }
    assert!(errors[0][&b'M'].contains("result formats"), "{errors:?}");
    assert!(
        errors[1][&b'M'].contains("supplies 2 parameters"),
        "{errors:?}"
    );
    assert!(kinds(&msgs).ends_with("2DCZ"), "{}", kinds(&msgs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_results_for_every_type() {
    let (_dir, server) = server_with_table().await;
    let client = server.connect().await;
    // tokio-postgres asks for every result column in binary.
    let row = client
        .query_one(
            "SELECT CAST(1 AS smallint), CAST(2 AS int), CAST(3 AS bigint), CAST(1.5 AS real),
                    CAST(2.25 AS double precision), CAST('12.34' AS numeric(6,2)), true, 'tëxt',
                    DATE '2024-01-02', TIMESTAMP '2024-01-02 03:04:05.678',
                    decode('01ff', 'hex'), make_array(1, 2, 3), make_array('a', 'b')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i16>(0), 1);
    assert_eq!(row.get::<_, i32>(1), 2);
    assert_eq!(row.get::<_, i64>(2), 3);
    assert_eq!(row.get::<_, f32>(3), 1.5);
    assert_eq!(row.get::<_, f64>(4), 2.25);
    assert_eq!(row.get::<_, rust_decimal::Decimal>(5).to_string(), "12.34");
    assert!(row.get::<_, bool>(6));
    assert_eq!(row.get::<_, String>(7), "tëxt");
    assert_eq!(row.get::<_, chrono::NaiveDate>(8).to_string(), "2024-01-02");
    assert_eq!(
        row.get::<_, chrono::NaiveDateTime>(9).to_string(),
        "2024-01-02 03:04:05.678"
    );
    assert_eq!(row.get::<_, Vec<u8>>(10), vec![1u8, 255]);
    assert_eq!(row.get::<_, Vec<i64>>(11), vec![1, 2, 3]);
    assert_eq!(row.get::<_, Vec<String>>(12), vec!["a", "b"]);
    let ts = client
        .query_one("SELECT CAST('2024-01-02 03:04:05+00' AS timestamptz)", &[])
        .await
        .unwrap();
    assert_eq!(
        ts.get::<_, chrono::DateTime<chrono::Utc>>(0).to_rfc3339(),
        "2024-01-02T03:04:05+00:00"
    );
}
