//! Crash test: a real `weir` process is killed with SIGKILL while a client streams
//! acknowledged INSERTs (and some UPDATE/DELETEs); after a restart every acknowledged
//! change is present, nothing unacknowledged beyond the one in-flight statement
//! appears, and every view equals the answer computed from the recovered table.

use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_sql_tests::process::{kill_rng, kills_from_env};
use weir_sql_tests::workload::{check, settle, stream_writes, Acked, SCHEMA};
use weir_sql_tests::WeirProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_acknowledged_inserts_loses_nothing() {
    crash_rounds("").await;
}

/// The same with checkpoints every 300 ms: recovery restores views from checkpoints
/// taken while writes were streaming, and replays only the log after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_frequent_checkpoints_loses_nothing() {
    crash_rounds("[execution.checkpointing]\ninterval = \"300ms\"\n").await;
}

/// The same with unaligned checkpoints under backpressure (the aggregation slowed by a
/// failpoint): each kill lands once checkpoints hold overtaken in-flight data, which
/// recovery replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_unaligned_checkpoints_loses_nothing() {
    crash_rounds(
        "[execution.checkpointing]\ninterval = \"300ms\"\n\
         [execution.checkpointing.unaligned]\nenabled = true\n",
    )
    .await;
}

/// Group commit under load: 32 sessions write at once (their statements share fsyncs
/// of the table log); a kill -9 while they are in flight loses no acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_32_concurrent_writers_loses_nothing() {
    const WRITERS: i64 = 32;
    let dir = tempfile::tempdir().unwrap().keep();
    eprintln!("DATA DIR {}", dir.display());
    let mut server = WeirProcess::start_with_config(&dir.join("data"), 2, "").await;
    server.connect().await.batch_execute(SCHEMA).await.unwrap();
    let acked = Arc::new(Mutex::new(Acked::default()));
    for round in 0..2i64 {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let start = 1 + round * 10_000_000 + w * 100_000;
                tokio::spawn(stream_writes(server.port, start, acked.clone()))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let in_flight = acked.lock().unwrap().in_flight.len();
        server.kill9();
        let mut per_writer = Vec::new();
        for w in writers {
            per_writer.push(w.await.unwrap());
        }
        // Every writer got acknowledgements, and the kill hit statements in flight.
        assert!(
            per_writer.iter().all(|n| *n > 0),
            "round {round}: a writer had nothing acknowledged: {per_writer:?}"
        );
        assert!(
            in_flight > 0,
            "round {round}: no statement was in flight at the kill"
        );
        eprintln!(
            "round {round}: {} acknowledged writes, {in_flight} in flight at the kill",
            per_writer.iter().sum::<u64>()
        );
        server.restart().await;
        check(&server, &Acked::snapshot(&acked)).await;
        settle(&server, &acked).await;
    }
}

async fn crash_rounds(config: &str) {
    let dir = tempfile::tempdir().unwrap().keep();
    eprintln!("DATA DIR {}", dir.display());
    let mut server = WeirProcess::start_with_config(&dir.join("data"), 2, config).await;
    let c = server.connect().await;
    c.batch_execute(SCHEMA).await.unwrap();
    if config.contains("unaligned") {
        let show =
            weir_sql_tests::query::value(&c, "SHOW execution.checkpointing.unaligned.enabled");
        assert_eq!(show.await, "true");
    }
    drop(c);
    let acked = Arc::new(Mutex::new(Acked::default()));
    // Kill moments are random (seeded, the seed printed) so that kills land at
    // different points of the log, the barriers and the checkpoints.
    let mut rng = kill_rng();
    for round in 0..kills_from_env("WEIR_CRASH_KILLS", 4) as i64 {
        let writer = tokio::spawn(stream_writes(
            server.port,
            1 + round * 1_000_000,
            acked.clone(),
        ));
        let unaligned = config.contains("unaligned");
        if unaligned {
            // Backpressure: per_group takes 20 ms per chunk (a new process each round).
            let c = server.connect().await;
            c.batch_execute("SET failpoint.operator.slow.per_group = '20'")
                .await
                .unwrap();
        }
        let delay = rng.random_range(300..1500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        if unaligned {
            wait_for_inflight_data(&dir.join("data").join("checkpoints"), round).await;
        }
        let in_flight = acked.lock().unwrap().in_flight.len();
        server.kill9();
        // This round's own writes: a round whose writer wrote nothing must not pass.
        let n = writer.await.unwrap();
        assert!(
            n >= 5,
            "round {round}: only {n} writes were acknowledged in {delay} ms before the kill"
        );
        assert!(
            in_flight > 0,
            "round {round}: no write was in flight at the kill"
        );
        eprintln!("round {round}: killed after {delay} ms, {n} writes acknowledged");
        server.restart().await;
        check(&server, &Acked::snapshot(&acked)).await;
        settle(&server, &acked).await;
    }
}

/// Waits (at most 60 s) until a retained checkpoint holds per_group's overtaken
/// in-flight data (files under uids `<view>.inflight.f<fragment>a<actor>`).
async fn wait_for_inflight_data(checkpoints: &std::path::Path, round: i64) {
    fn any_inflight(dir: &std::path::Path) -> bool {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                p.to_string_lossy().contains("per_group.inflight.f")
                    || (p.is_dir() && any_inflight(&p))
            })
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !any_inflight(checkpoints) {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round}: no checkpoint stored in-flight data in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
