//! The crash soak in the default run: 10 rounds (`WEIR_SOAK_ROUNDS` changes the count)
//! of `kill -9` at seeded random moments during continuous writes, with checkpoints
//! every 500 ms; every round must keep every acknowledged write and nothing else, and
//! every view must equal its query (see `src/bin/soak.rs`). Longer soaks: run the
//! binary itself (docs/testing.md).

#[test]
fn soak_rounds_keep_every_acknowledged_write() {
    let rounds = std::env::var("WEIR_SOAK_ROUNDS").unwrap_or_else(|_| "10".into());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["--rounds", &rounds, "--interval", "500ms"])
        .output()
        .expect("run the soak binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the soak failed:\n{stdout}\n{}",
        stderr.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    assert!(
        stdout.contains(&format!("{rounds} / {rounds} rounds passed")),
        "{stdout}"
    );
}
