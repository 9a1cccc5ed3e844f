//! Conformance report over `../shared/conformance/` (third-party sqllogictest files).
//!
//! Usage: `cargo run -p weir-sql-tests --bin conformance [-- <conformance dir> [filter]]`
//! (the runner is `weir_sql_tests::conformance`).

use std::path::PathBuf;
use weir_sql_tests::conformance;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(conformance::default_dir);
    let filter = args.get(2).cloned().unwrap_or_default();
    let results = conformance::run_suite(&dir, &filter).await;
    println!("{}", conformance::report(&results));
}
