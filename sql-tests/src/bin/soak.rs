//! Crash soak: N rounds of `kill -9` at random moments during continuous ingest into
//! several views, each round checked against the oracle (every acknowledged write
//! present, nothing unwritten, every view equal to the answer from the recovered
//! table). Not part of the default test run.
//!
//! `cargo run --release -p weir-sql-tests --bin soak -- --rounds 50 [--interval 500ms] [--unaligned true]`
//! (uses `$WEIR_BIN` or the `weir` next to this binary). Prints `rounds passed / N`.

use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_sql_tests::workload::{check, settle, stream_writes, Acked, SCHEMA};
use weir_sql_tests::WeirProcess;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: u32 = arg("--rounds").and_then(|r| r.parse().ok()).unwrap_or(50);
    let interval = arg("--interval").unwrap_or_else(|| "500ms".into());
    let parallelism: u32 = arg("--parallelism")
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let unaligned = arg("--unaligned").is_some_and(|v| v == "true");
    let config = format!(
        "[execution.checkpointing]\ninterval = \"{interval}\"\n\
         [execution.checkpointing.unaligned]\nenabled = {unaligned}\n"
    );
    let mut server =
        WeirProcess::start_with_config(&dir.path().join("data"), parallelism, &config).await;
    server
        .connect()
        .await
        .batch_execute(SCHEMA)
        .await
        .expect("schema");
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut passed = 0;
    let started = Instant::now();
    // Seeded kill moments: the seed is printed, `WEIR_KILL_SEED` repeats a run.
    let mut rng = weir_sql_tests::process::kill_rng();
    for round in 0..rounds {
        let writer = tokio::spawn(stream_writes(
            server.port,
            1 + round as i64 * 1_000_000,
            acked.clone(),
        ));
        let wait = rng.random_range(200..2500);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        server.kill9();
        // A round whose writer wrote nothing (or whose statement was refused) fails.
        let written = writer.await.unwrap_or(0);
        if written == 0 {
            println!(
                "round {}: FAILED: no write acknowledged before the kill",
                round + 1
            );
            settle(&server, &acked).await;
            continue;
        }
        let restart = Instant::now();
        server.restart().await;
        // Serving again: the first query answered (recovery runs before it is).
        server
            .connect()
            .await
            .simple_query("SELECT 1")
            .await
            .expect("first query after restart");
        let serving_ms = restart.elapsed().as_millis();
        let snapshot = Acked::snapshot(&acked);
        let outcome = tokio::spawn({
            let port = server.port;
            let data = server.data_dir.clone();
            async move {
                let probe = WeirProcess::attach(port, data);
                check(&probe, &snapshot).await;
            }
        })
        .await;
        let rows = acked.lock().unwrap().rows.len();
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("round {}: ok (killed after {wait} ms, {rows} rows, serving again after {serving_ms} ms)", round + 1);
            }
            Err(e) => println!("round {}: FAILED: {e}", round + 1),
        }
        settle(&server, &acked).await;
    }
    println!(
        "{passed} / {rounds} rounds passed ({:.0} s, checkpoint interval {interval}, parallelism {parallelism}, unaligned {unaligned})",
        started.elapsed().as_secs_f64()
    );
    if passed != rounds {
        std::process::exit(1);
    }
}
