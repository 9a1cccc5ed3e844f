//! COPY over the wire: tokio-postgres's COPY FROM STDIN / TO STDOUT in text and CSV,
//! psql's `\copy` to and from files, and a bad row that names its line and applies
//! nothing of its COPY.

use futures::{SinkExt, TryStreamExt};
use weir_sql_tests::clients::psql;
use weir_sql_tests::WeirProcess;

async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in(sql).await?;
    futures::pin_mut!(sink);
    sink.send(bytes_of(data)).await?;
    sink.finish().await
}

fn bytes_of(s: &str) -> std::io::Cursor<Vec<u8>> {
    std::io::Cursor::new(s.as_bytes().to_vec())
}

async fn copy_out(client: &tokio_postgres::Client, sql: &str) -> String {
    let stream = client.copy_out(sql).await.unwrap();
    let chunks: Vec<_> = stream.try_collect().await.unwrap();
    chunks
        .iter()
        .map(|c| String::from_utf8_lossy(c).to_string())
        .collect()
}

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_and_to_stdout_in_text_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(8,2), ok boolean, at timestamp);
             CREATE MATERIALIZED VIEW priced AS SELECT count(*) AS n, sum(price) AS total FROM items;",
        )
        .await
        .unwrap();
    let n = copy_in(
        &client,
        "COPY items FROM STDIN",
        "1\ttab\\there\t1.50\tt\t2024-01-02 03:04:05\n2\t\\N\t2.25\tf\t\\N\n",
    )
    .await
    .unwrap();
    assert_eq!(n, 2);
    let n = copy_in(
        &client,
        "COPY items (id, name, price) FROM STDIN WITH (FORMAT csv, HEADER true)",
        "id,name,price\n3,\"comma, \"\"quoted\"\"\",3.00\n4,,0.25\n",
    )
    .await
    .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        rows(
            &client,
            "SELECT id, name, price, ok, at FROM items ORDER BY id"
        )
        .await,
        vec![
            "1|tab\there|1.50|t|2024-01-02 03:04:05",
            "2|NULL|2.25|f|NULL",
            "3|comma, \"quoted\"|3.00|NULL|NULL",
            "4|NULL|0.25|NULL|NULL",
        ]
    );
    assert_eq!(
        rows(&client, "SELECT n, total FROM priced").await,
        vec!["4|7.00"]
    );

    // A bad value names its line and column; nothing of that COPY is applied.
    let err = copy_in(
        &client,
        "COPY items FROM STDIN",
        "5\tok\t1\tt\t\\N\nsix\tbad\t1\tt\t\\N\n",
    )
    .await
    .unwrap_err();
    let db = err.as_db_error().expect("a Postgres error");
    assert_eq!(db.code().code(), "22P02", "{}", db.message());
    assert!(
        db.message().contains("line 2, column id"),
        "{}",
        db.message()
    );
    let err = copy_in(&client, "COPY items (id, name) FROM STDIN", "7\ta\textra\n")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "22P04");
    assert_eq!(rows(&client, "SELECT count(*) FROM items").await, vec!["4"]);
    // The session goes on after a failed COPY.
    assert_eq!(rows(&client, "SELECT 1").await, vec!["1"]);

    let text = copy_out(
        &client,
        "COPY (SELECT id, name, ok FROM items ORDER BY id) TO STDOUT",
    )
    .await;
    assert_eq!(
        text,
        "1\ttab\\there\tt\n2\t\\N\tf\n3\tcomma, \"quoted\"\t\\N\n4\t\\N\t\\N\n"
    );
    let csv = copy_out(
        &client,
        "COPY items (id, name) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await;
    let mut lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.remove(0), "id,name");
    lines.sort();
    assert_eq!(
        lines,
        vec!["1,tab\there", "2,", "3,\"comma, \"\"quoted\"\"\"", "4,"]
    );
    let err = client
        .batch_execute("COPY items FROM '/etc/passwd'")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "0A000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_backslash_copy_to_and_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE src (id int, label text); CREATE TABLE dst (id int, label text);",
        )
        .await
        .unwrap();
    let input = dir.path().join("in.csv");
    let rows_in: String = (1..=1000).map(|i| format!("{i},label {i}\n")).collect();
    std::fs::write(&input, rows_in).unwrap();
    let out = psql(
        server.port,
        &format!("\\copy src FROM '{}' WITH (FORMAT csv)", input.display()),
    );
    assert!(out.contains("COPY 1000"), "{out}");
    // Another session's writes are visible at the next barrier; FLUSH makes them so now.
    psql(server.port, "FLUSH");
    let output = dir.path().join("out.txt");
    let out = psql(
        server.port,
        &format!("\\copy src TO '{}'", output.display()),
    );
    assert!(out.contains("COPY 1000"), "{out}");
    let written = std::fs::read_to_string(&output).unwrap();
    assert_eq!(written.lines().count(), 1000);
    assert!(written.contains("17\tlabel 17\n"), "{written}");
    let out = psql(
        server.port,
        &format!("\\copy dst FROM '{}'", output.display()),
    );
    assert!(out.contains("COPY 1000"), "{out}");
    psql(server.port, "FLUSH");
    assert_eq!(
        rows(
            &client,
            "SELECT count(*), sum(id), count(DISTINCT label) FROM dst"
        )
        .await,
        vec!["1000|500500|1000"]
    );
}
