//! pgjdbc (Debian's libpostgresql-jdbc-java) against Weir: sql-tests/clients/JdbcClient.java
//! run with the JDK's single-file launcher. It checks PreparedStatement reuse past
//! `prepareThreshold` (named statements after the 5th execution), `executeBatch`
//! counts per entry, `setFetchSize` with autocommit off (row-limited portals) and
//! binary transfer of int, bigint, numeric, timestamp, date, bool, text, bytea,
//! float8, float4 and smallint. The program prints `key: value` lines; this test
//! asserts on them.

use std::collections::BTreeMap;
use std::path::Path;
use weir_sql_tests::clients::{self, output_of};
use weir_sql_tests::WeirProcess;

fn run_client(port: u16, mode: &str) -> String {
    let cmd = clients::java("JdbcClient.java", &[port.to_string(), mode.to_string()]);
    output_of(
        cmd,
        "scripts/prereqs.sh: default-jdk-headless, libpostgresql-jdbc-java",
    )
}

/// Each `key: value` line; a key printed several times keeps every value.
fn results(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(": ") {
            map.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    map
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgjdbc_prepared_statements_batches_fetch_size_and_binary() {
    assert!(
        Path::new("/usr/share/java/postgresql.jar").exists(),
        "pgjdbc missing: apt-get install libpostgresql-jdbc-java (scripts/prereqs.sh)"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    let text = run_client(server.port, "protocol");
    let r = results(&text);
    let one = |k: &str| -> &str {
        let v = r
            .get(k)
            .unwrap_or_else(|| panic!("no {k} in output:\n{text}"));
        &v[0]
    };

    assert_eq!(one("insert-counts"), vec!["1"; 20].join(","), "{text}");
    let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    assert_eq!(one("select-names"), names.join(","), "{text}");
    // 10 inserts of ids 500..509 (1 each); the UPDATE runs in the same session
    // right after them, so its count depends on seeing its own writes: at least 0.
    let dml: Vec<u32> = one("single-parameter-dml")
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(dml.len(), 3, "{text}");
    assert_eq!(dml[0], 10, "{text}");
    assert_eq!(one("batch-insert"), "entries=1000 ones=1000", "{text}");
    assert_eq!(one("batch-delete"), "3,0,7", "{text}");
    assert_eq!(one("batch-statements"), "1,10", "{text}");
    assert_eq!(one("fetch"), "rows=1000 sum=500500 ordered=true", "{text}");

    let expected = [
        ("binary-int", "-42"),
        ("binary-bigint", "9000000000"),
        ("binary-numeric", "12345.678"),
        ("binary-timestamp", "2024-02-29 13:14:15.123456"),
        ("binary-date", "2023-12-31"),
        ("binary-bool", "true"),
        ("binary-text", "héllo"),
        ("binary-bytea", "[1, 2, -1]"),
        ("binary-float8", "2.5"),
        ("binary-float4", "0.25"),
        ("binary-int2", "7"),
    ];
    for (key, value) in expected {
        let got = r.get(key).unwrap_or_else(|| panic!("no {key}:\n{text}"));
        assert_eq!(got.len(), 3, "{key}: {got:?}");
        assert!(
            got.iter().all(|g| g == value),
            "{key}: {got:?} != {value}\n{text}"
        );
    }
}
