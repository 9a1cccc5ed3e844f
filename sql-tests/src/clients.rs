//! The real client programs tests run: psql, the pgjdbc programs in `clients/` (run by
//! the JDK's single-file launcher) and psycopg in the venv `scripts/prereqs.sh` makes.

use std::path::PathBuf;
use std::process::Command;

/// `sql-tests/`, from the run-time variable cargo sets for `cargo test` (the compile-time
/// one points into whichever clone built the shared test binaries).
pub fn manifest_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
}

/// A program in `sql-tests/clients/`.
pub fn client_program(name: &str) -> PathBuf {
    manifest_dir().join("clients").join(name)
}

/// The venv's Python with psycopg: `$WEIR_PYTHON`, or `~/.cache/weir-venv/bin/python`.
pub fn python() -> PathBuf {
    match std::env::var_os("WEIR_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/weir-venv/bin/python")
        }
    }
}

/// `java -cp <pgjdbc> clients/<program> args...`.
pub fn java(program: &str, args: &[String]) -> Command {
    let mut cmd = Command::new("java");
    cmd.args(["-cp", "/usr/share/java/postgresql.jar"])
        .arg(client_program(program))
        .args(args);
    cmd
}

/// Runs `cmd`, asserts it succeeded, and returns its stdout followed by its stderr.
/// `hint` says how to install the program when it cannot start.
pub fn output_of(mut cmd: Command, hint: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} ({hint}): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// psql's `-c command` against the server on `port`; fails the test on any ERROR.
pub fn psql(port: u16, command: &str) -> String {
    let mut cmd = Command::new("psql");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "weir",
        "-d",
        "weir",
    ])
    .args(["-X", "-v", "ON_ERROR_STOP=1", "-c", command]);
    let text = output_of(cmd, "Debian package postgresql-client");
    assert!(!text.contains("ERROR"), "psql {command}: {text}");
    text
}
