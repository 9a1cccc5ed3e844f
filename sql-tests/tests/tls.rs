//! TLS and the safe listening default.
//!
//! With `[tls] cert-file` / `key-file` set (a self-signed certificate made by
//! `openssl req -x509` at test time), SSLRequest is answered `S` and psql, psycopg 3
//! and pgjdbc connect with `sslmode=require` (which fails unless the session is
//! encrypted); psql's `\conninfo` reports the SSL connection. Without TLS configured,
//! SSLRequest is answered `N` and `sslmode=require` fails.
//!
//! Without a password, `weir` refuses to listen on a non-loopback address unless
//! `--allow-unauthenticated-remote` (or `auth.allow-unauthenticated-remote`) says so.

use std::path::{Path, PathBuf};
use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_sql_tests::clients::{self, python};
use weir_sql_tests::{process::weir_binary, WeirProcess};

/// A self-signed certificate and key for `localhost` in `dir`.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl must be installed (scripts/prereqs.sh installs it)");
    assert!(out.status.success(), "openssl: {out:?}");
    (cert, key)
}

fn tls_config(cert: &Path, key: &Path) -> String {
    format!(
        "[tls]\ncert-file = {:?}\nkey-file = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    )
}

fn psql(port: u16, sslmode: &str, command: &str) -> (bool, String) {
    let out = Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={port} user=weir dbname=weir sslmode={sslmode}"
        ))
        .args(["-X", "-A", "-t", "-c", command])
        .output()
        .expect("psql must be installed (Debian package postgresql-client)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The one-byte answer to an SSLRequest.
async fn ssl_answer(port: u16) -> u8 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut req = 8i32.to_be_bytes().to_vec();
    req.extend_from_slice(&80877103i32.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).await.unwrap();
    answer[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_works_from_psql_psycopg_and_pgjdbc() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let server =
        WeirProcess::start_with_config(&dir.path().join("data"), 1, &tls_config(&cert, &key)).await;
    assert_eq!(ssl_answer(server.port).await, b'S');

    let (ok, out) = psql(server.port, "require", "SELECT 40 + 2");
    assert!(ok && out.trim() == "42", "{out}");
    let (ok, info) = psql(server.port, "require", "\\conninfo");
    assert!(
        ok && info.contains("SSL connection (protocol: TLS"),
        "{info}"
    );
    // Clients that do not ask for TLS still connect in plain text.
    let (ok, plain) = psql(server.port, "disable", "\\conninfo");
    assert!(ok && !plain.contains("SSL connection"), "{plain}");

    let py = python();
    assert!(
        py.exists(),
        "psycopg's venv missing at {} (run scripts/prereqs.sh or set WEIR_PYTHON)",
        py.display()
    );
    let script = format!(
        "import psycopg\n\
         with psycopg.connect('host=127.0.0.1 port={} user=weir dbname=weir sslmode=require') as c:\n\
         \x20   print('psycopg', c.execute('SELECT 6 * 7').fetchone()[0], c.pgconn.ssl_in_use)\n",
        server.port
    );
    let out = Command::new(&py).arg("-c").arg(&script).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("psycopg 42 True"),
        "{text}"
    );

    let java = jdbc_client(server.port, "tls");
    assert!(java.contains("tls-select: 42"), "{java}");
}

/// Runs sql-tests/clients/JdbcClient.java in `mode` against `port`.
fn jdbc_client(port: u16, mode: &str) -> String {
    let cmd = clients::java("JdbcClient.java", &[port.to_string(), mode.to_string()]);
    clients::output_of(
        cmd,
        "scripts/prereqs.sh: default-jdk-headless, libpostgresql-jdbc-java",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_ssl_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), 1).await;
    assert_eq!(ssl_answer(server.port).await, b'N');
    let (ok, out) = psql(server.port, "require", "SELECT 1");
    assert!(!ok && out.contains("does not support SSL"), "{out}");
    let (ok, out) = psql(server.port, "prefer", "SELECT 1");
    assert!(ok && out.trim() == "1", "{out}");
}

#[test]
fn tls_files_must_be_valid() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("missing.crt");
    let key = dir.path().join("missing.key");
    let out = Command::new(weir_binary())
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cannot read TLS certificate"), "{err}");
}

/// Starts `weir` with `args` listening on all interfaces; returns whether it was
/// still running after startup, and its stderr.
fn start_remote(dir: &Path, args: &[&str], config: &str) -> (bool, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config_path = dir.join("remote.toml");
    std::fs::write(&config_path, config).unwrap();
    let log = dir.join("remote.log");
    let mut child = Command::new(weir_binary())
        .args(["--listen", &format!("0.0.0.0:{port}"), "--data-dir"])
        .arg(dir.join("remote-data"))
        .arg("--config")
        .arg(&config_path)
        .args(["--metrics-port", "0"])
        .args(args)
        .env_remove("WEIR_PASSWORD")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Its own readiness line, not a connection: another test's server can take the
    // probed port between our probe and this start, and answer in its place.
    let running = loop {
        if let Some(_status) = child.try_wait().unwrap() {
            break false;
        }
        if std::fs::read_to_string(&log).is_ok_and(|l| l.contains("weir is ready")) {
            break true;
        }
        assert!(std::time::Instant::now() < deadline, "weir did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    (running, std::fs::read_to_string(&log).unwrap_or_default())
}

#[test]
fn remote_listening_needs_a_password_or_explicit_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let (running, log) = start_remote(dir.path(), &[], "");
    assert!(!running, "started without a password on 0.0.0.0: {log}");
    assert!(
        log.contains("auth.allow-unauthenticated-remote")
            && log.contains("--allow-unauthenticated-remote"),
        "{log}"
    );
    let (running, log) = start_remote(dir.path(), &["--allow-unauthenticated-remote"], "");
    assert!(running, "{log}");
    let (running, log) = start_remote(
        dir.path(),
        &[],
        "[auth]\nallow-unauthenticated-remote = true\n",
    );
    assert!(running, "{log}");
    let (running, log) = start_remote(dir.path(), &[], "[auth]\npassword = \"s3cret\"\n");
    assert!(running, "{log}");
}
