//! Runs every `.slt` file in `sql-tests/slt/` against its own real `weir` server, at
//! parallelism 1 and 4.

use std::path::PathBuf;
use weir_sql_tests::WeirProcess;

async fn run_file(path: PathBuf, parallelism: u32) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let server = WeirProcess::start(&dir.path().join("data"), parallelism).await;
    let port = server.port;
    let mut runner = sqllogictest::Runner::new(move || weir_sql_tests::slt::connect(port));
    // Column type letters are compared, not ignored (the crate's default).
    runner.with_column_validator(sqllogictest::strict_column_validator);
    if std::env::var("WEIR_SLT_UPDATE").is_ok_and(|v| v == "1") && parallelism == 1 {
        // Rewrites the file with the answers the server gave (review the diff).
        return runner
            .update_test_file(
                &path,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::strict_column_validator,
            )
            .await
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    if let Err(e) = runner.run_file_async(&path).await {
        return Err(format!(
            "{} at parallelism {parallelism} failed:\n{}\nserver log tail:\n{}",
            path.display(),
            e.display(false),
            server
                .log()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(())
}

fn slt_files() -> Vec<PathBuf> {
    // The run-time variable (cargo sets it for `cargo test`), not the compile-time one:
    // clones that share a target folder (CI's fresh clone and this one) share test
    // binaries, and a baked-in path would point into whichever clone built them.
    let dir = weir_sql_tests::clients::manifest_dir().join("slt");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        // `WEIR_SLT_FILTER=dialect` runs only the files whose name contains it.
        .filter(|p| {
            std::env::var("WEIR_SLT_FILTER")
                .map_or(true, |f| p.to_string_lossy().contains(f.as_str()))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_files_at_parallelism_1_and_4() {
    let mut failures = Vec::new();
    for file in slt_files() {
        for p in [1, 4] {
            eprintln!("running {} at parallelism {p}", file.display());
            if let Err(e) = run_file(file.clone(), p).await {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
