//! Tools that read the system catalogs, run for real against a server holding tables
//! with primary keys, an index and materialized views:
//! - pgjdbc's `DatabaseMetaData` (getTables, getColumns, getPrimaryKeys, getIndexInfo,
//!   getSchemas, getTypeInfo) through `sql-tests/clients/Meta.java`;
//! - psycopg 3's type introspection (`TypeInfo.fetch`) and adaptation;
//! - sqlsmith: its start-up introspection, then generated queries, through a proxy that
//!   counts every error by SQLSTATE and every connection the server drops.
//!
//! These tools are installed by `scripts/` (Debian `libpostgresql-jdbc-java`, `sqlsmith`,
//! the psycopg venv); a missing tool fails the test with the install hint.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_sql_tests::clients::{self, output_of, python};
use weir_sql_tests::WeirProcess;

const SCHEMA: &str = "
    CREATE TABLE items (id int PRIMARY KEY, name varchar NOT NULL, price numeric(8,2), tags text);
    CREATE TABLE orders (order_id bigint, line int, item_id int, qty int, at timestamp,
                         PRIMARY KEY (order_id, line));
    CREATE INDEX orders_item ON orders (item_id);
    CREATE MATERIALIZED VIEW revenue AS
        SELECT o.item_id, sum(o.qty) AS qty FROM orders o GROUP BY o.item_id;
    CREATE MATERIALIZED VIEW named AS SELECT id, name FROM items WHERE price > 1;
    INSERT INTO items VALUES (1, 'a', 2.50, 'x'), (2, 'b', 10.00, NULL);
    INSERT INTO orders VALUES (1, 1, 1, 3, '2024-01-01 10:00:00'), (1, 2, 2, 1, NULL);
";

async fn server_with_schema(dir: &Path) -> WeirProcess {
    let server = WeirProcess::start(&dir.join("data"), 1).await;
    let client = server.connect().await;
    client.batch_execute(SCHEMA).await.unwrap();
    // Other sessions see the rows after the next barrier; FLUSH makes them visible now.
    client.batch_execute("FLUSH").await.unwrap();
    server
}

fn has_line(out: &str, line: &str) -> bool {
    out.lines().any(|l| l.trim() == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc_database_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_schema(dir.path()).await;
    let java = clients::java("Meta.java", &[server.port.to_string()]);
    let out = output_of(
        java,
        "Debian packages default-jre-headless, libpostgresql-jdbc-java",
    );
    for line in [
        "product PostgreSQL 15",
        "table items TABLE",
        "table orders TABLE",
        "table revenue MATERIALIZED VIEW",
        "table named MATERIALIZED VIEW",
        "table items_pkey INDEX",
        "table orders_item INDEX",
        "column items.id int4 jdbc=4 size=10 digits=0 nullable=NO pos=1",
        "column items.name text jdbc=12 size=2147483647 digits=0 nullable=NO pos=2",
        "column items.price numeric jdbc=2 size=8 digits=2 nullable=YES pos=3",
        "column orders.order_id int8 jdbc=-5 size=19 digits=0 nullable=NO pos=1",
        "column orders.at timestamp jdbc=93 size=29 digits=6 nullable=YES pos=5",
        "column revenue.item_id int4 jdbc=4 size=10 digits=0 nullable=YES pos=1",
        "pk items.id seq=1 name=items_pkey",
        "pk orders.order_id seq=1 name=orders_pkey",
        "pk orders.line seq=2 name=orders_pkey",
        "index items.items_pkey column=id pos=1 unique=true",
        "index orders.orders_pkey column=order_id pos=1 unique=true",
        "index orders.orders_pkey column=line pos=2 unique=true",
        "index orders.orders_item column=item_id pos=1 unique=false",
        "schema public",
        "schema pg_catalog",
        "schema information_schema",
        "type int4 jdbc=4",
        "type numeric jdbc=2",
        "type text jdbc=12",
        "type timestamptz jdbc=93",
        "done",
    ] {
        assert!(has_line(&out, line), "missing `{line}` in:\n{out}");
    }
    // Materialized views and plain columns have no primary key.
    assert!(!out.contains("pk revenue"), "{out}");
    assert!(!out.contains("pk items.name"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_type_introspection() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_schema(dir.path()).await;
    let script = r#"
import sys, decimal, psycopg
from psycopg.types import TypeInfo
with psycopg.connect(f"host=127.0.0.1 port={sys.argv[1]} user=weir dbname=weir") as conn:
    print("server_version", conn.info.server_version)
    for name in ["numeric", "int4", "integer", "text", "timestamptz", "bool", "int8[]"]:
        t = TypeInfo.fetch(conn, name)
        print("type", name, t.name, t.oid, t.array_oid, t.regtype)
    print("missing", TypeInfo.fetch(conn, "no_such_type"))
    row = conn.execute("SELECT price, name, id FROM items WHERE id = 1").fetchone()
    print("row", type(row[0]).__name__, row[0], type(row[1]).__name__, type(row[2]).__name__)
    cur = conn.execute("SELECT quote_ident(column_name), data_type FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position", ["items"])
    print("columns", cur.fetchall())
"#;
    let mut py = Command::new(python());
    py.arg("-c").arg(script).arg(server.port.to_string());
    let out = output_of(
        py,
        "pip install 'psycopg[binary]==3.2.*' into ~/.cache/weir-venv",
    );
    for line in [
        "server_version 150000",
        "type numeric numeric 1700 1231 numeric",
        "type int4 int4 23 1007 integer",
        "type integer int4 23 1007 integer",
        "type text text 25 1009 text",
        "type timestamptz timestamptz 1184 1185 timestamp with time zone",
        "type bool bool 16 1000 boolean",
        "type int8[] _int8 1016 0 bigint[]",
        "missing None",
        "row Decimal 2.50 str int",
        "columns [('id', 'integer'), ('name', 'text'), ('price', 'numeric'), ('tags', 'text')]",
    ] {
        assert!(has_line(&out, line), "missing `{line}` in:\n{out}");
    }
}

/// What the proxy saw of the wire.
#[derive(Default, Debug)]
struct WireStats {
    /// Simple-protocol queries sent by the client.
    queries: u64,
    /// ErrorResponses by SQLSTATE.
    errors: BTreeMap<String, u64>,
    /// Connections the server closed before the client said Terminate.
    dropped: u64,
}

/// Reads one message (`type`, body) of a framed stream; `None` at end of stream.
async fn read_message(
    r: &mut tokio::net::tcp::OwnedReadHalf,
    raw: &mut Vec<u8>,
) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0u8; len.checked_sub(4)?];
    r.read_exact(&mut body).await.ok()?;
    raw.clear();
    raw.extend_from_slice(&head);
    raw.extend_from_slice(&body);
    Some((head[0], body))
}

fn sqlstate_of(error_body: &[u8]) -> String {
    let mut fields = error_body.split(|b| *b == 0);
    for f in &mut fields {
        if f.first() == Some(&b'C') {
            return String::from_utf8_lossy(&f[1..]).to_string();
        }
    }
    "(none)".to_string()
}

/// Forwards one client connection to the server, counting queries, errors and drops.
async fn proxy_connection(client: TcpStream, server_port: u16, stats: Arc<Mutex<WireStats>>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
        stats.lock().unwrap().dropped += 1;
        return;
    };
    // Without NODELAY every small message waits for a delayed ACK (~40 ms each).
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let terminated = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = {
        let stats = stats.clone();
        let terminated = terminated.clone();
        tokio::spawn(async move {
            // The startup packet has no type byte.
            let mut len = [0u8; 4];
            if cr.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut rest = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
            if cr.read_exact(&mut rest).await.is_err() {
                return;
            }
            if sw.write_all(&len).await.is_err() || sw.write_all(&rest).await.is_err() {
                return;
            }
            let mut raw = Vec::new();
            while let Some((kind, _)) = read_message(&mut cr, &mut raw).await {
                match kind {
                    b'Q' => stats.lock().unwrap().queries += 1,
                    b'X' => terminated.store(true, std::sync::atomic::Ordering::SeqCst),
                    _ => {}
                }
                if sw.write_all(&raw).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut raw = Vec::new();
    while let Some((kind, body)) = read_message(&mut sr, &mut raw).await {
        if kind == b'E' {
            *stats
                .lock()
                .unwrap()
                .errors
                .entry(sqlstate_of(&body))
                .or_default() += 1;
        }
        if cw.write_all(&raw).await.is_err() {
            break;
        }
    }
    // The server's side ended: fine after the client's Terminate (or its own close).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    if !terminated.load(std::sync::atomic::Ordering::SeqCst) && !up.is_finished() {
        stats.lock().unwrap().dropped += 1;
    }
    up.abort();
}

async fn start_proxy(server_port: u16, stats: Arc<Mutex<WireStats>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(proxy_connection(client, server_port, stats.clone()));
        }
    });
    port
}

/// sqlsmith's queries: `WEIR_SQLSMITH_QUERIES`, else 10,000 (about a minute on two
/// cores).
fn sqlsmith_queries() -> u64 {
    std::env::var("WEIR_SQLSMITH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlsmith_introspects_and_every_failure_is_a_postgres_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_schema(dir.path()).await;
    let stats = Arc::new(Mutex::new(WireStats::default()));
    let proxy = start_proxy(server.port, stats.clone()).await;
    let queries = sqlsmith_queries();
    let target = format!("host=127.0.0.1 port={proxy} user=weir dbname=weir sslmode=disable");
    let mut cmd = tokio::process::Command::new("sqlsmith");
    cmd.arg(format!("--target={target}"))
        .arg(format!("--max-queries={queries}"))
        .arg("--seed=16")
        .arg("--verbose");
    let started = std::time::Instant::now();
    let out = cmd
        .output()
        .await
        .expect("sqlsmith must be installed (Debian package sqlsmith)");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stats = std::mem::take(&mut *stats.lock().unwrap());
    let total_errors: u64 = stats.errors.values().sum();
    eprintln!(
        "sqlsmith: {queries} queries in {:?}; wire: {} queries, {total_errors} errors by SQLSTATE {:?}, {} dropped connections",
        started.elapsed(),
        stats.queries,
        stats.errors,
        stats.dropped
    );
    let tail: String = stderr.lines().rev().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        out.status.success(),
        "sqlsmith failed (its introspection or a lost connection):\n{tail}"
    );
    for step in [
        "Loading types...done.",
        "Loading tables...done.",
        "Loading routines...done.",
    ] {
        assert!(
            stderr.contains(step),
            "sqlsmith did not report {step}:\n{tail}"
        );
    }
    // Each generated query is sent as its own statement between ROLLBACK and BEGIN.
    assert!(
        stats.queries >= queries,
        "only {} queries reached the server",
        stats.queries
    );
    assert_eq!(stats.dropped, 0, "connections dropped: {stats:?}\n{tail}");
    assert!(
        !stats.errors.contains_key("(none)"),
        "an error without a SQLSTATE: {stats:?}"
    );
    let log = server.log();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
    let rows = server
        .connect()
        .await
        .query("SELECT 1", &[])
        .await
        .expect("the server answers after the run");
    assert_eq!(rows[0].get::<_, i64>(0), 1);
}
