//! psycopg 3 (PyPI, in the venv `scripts/test.sh` prepares) against a real server:
//! prepared statements past its prepare_threshold and their DEALLOCATE, pipeline mode,
//! COPY both ways (a bad row applies nothing), type adaptation and close(). The
//! client program is `sql-tests/clients/psycopg_client.py`.

use std::process::Command;
use weir_sql_tests::clients::{client_program, python};
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_prepares_pipelines_copies_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 2).await;
    let script = client_program("psycopg_client.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(server.port.to_string())
        .output()
        .expect("python with psycopg (scripts/test.sh installs it into ~/.cache/weir-venv)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "psycopg client failed:\n{stdout}\n{stderr}\nserver log tail:\n{}",
        server
            .log()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let counts: Vec<i64> = (0..10).map(|k| 20 - k).collect();
    assert_eq!(v["counts"], serde_json::json!(counts));
    assert_eq!(v["after_deallocate"], 20);
    assert_eq!(
        v["types"],
        serde_json::json!(["int", "str", "Decimal", "bool", "date", "datetime", "float"])
    );
    assert_eq!(
        v["row"],
        serde_json::json!([
            "3",
            "n3",
            "3.75",
            "False",
            "2024-01-04",
            "2024-01-01 12:00:03",
            "0.75"
        ])
    );
    assert_eq!(
        v["pipeline_reads"],
        serde_json::json!(["p100", "p101", "p102", "p103", "p104"])
    );
    assert_eq!(v["pipeline_count"], 50);
    assert_eq!(v["copy_rowcount"], 100);
    assert_eq!(v["copy_out_first"], serde_json::json!(["200", "c\t200"]));
    assert_eq!(v["copy_out_count"], 100);
    assert_eq!(v["bad_copy"], "22P02");
    assert_eq!(v["after_bad_copy"], 0);
    assert_eq!(v["closed"], true);
    assert_eq!(v["tx_row"], "tx");
}
