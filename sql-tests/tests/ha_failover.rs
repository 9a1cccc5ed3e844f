//! High availability with real processes on loopback and the S3 endpoint (moto):
//! two `weir` members with the same `high-availability.*` settings.
//!
//! - failover under load: SQL writers keep inserting and a Kafka-fed table ingests
//!   (with a view and an exactly-once sink) while the leader is `kill -9`ed; the
//!   standby takes over within lease-duration + 5 s; every acknowledged row is there
//!   once, every view equals its query, the sink holds every record once. `WEIR_HA_FAILOVERS` rounds (3 by default; the
//!   note's figures use 20), alternating the leader, seeded by `WEIR_KILL_SEED`.
//! - split brain: the leader `SIGSTOP`ped past its lease, the standby takes over and
//!   accepts writes, the old one `SIGCONT`ed: it acknowledges nothing more, becomes a
//!   standby, and no write of either term is lost or doubled.
//! - both members started at once: exactly one leader (`WEIR_HA_STARTS` runs, 5 by
//!   default).
//! - an object-store outage (the endpoint paused for 10 s): writes wait, then fail with
//!   57P03; nothing acknowledged is lost; service resumes when it is back.

use rand::Rng;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::Client;
use weir_sql_tests::process::{connect_port, kill_rng, kills_from_env, WeirProcess};
use weir_sql_tests::query::{rows, value};

const LEASE: &str = "[high-availability.leader-election]\nlease-duration = \"3s\"\n\
                     renew-deadline = \"2s\"\nretry-period = \"500ms\"\n";
const LEASE_DURATION: Duration = Duration::from_secs(3);

/// A bucket on `endpoint` and the settings of a cluster in it.
async fn cluster_config(endpoint: &str, bucket: &str) -> String {
    let created = weir_sql_tests::s3::http(endpoint, "PUT", &format!("/{bucket}")).await;
    assert!(
        created.starts_with("HTTP/1.1 200"),
        "create bucket: {created}"
    );
    format!(
        "[high-availability]\ntype = \"object-store\"\nstorageDir = \"s3://{bucket}/ha\"\n\
         cluster-id = \"c1\"\n{LEASE}\
         [execution.checkpointing]\ninterval = \"1s\"\n\
         [s3]\nendpoint = \"{endpoint}\"\nregion = \"us-east-1\"\n\
         access-key-id = \"testing\"\nsecret-access-key = \"testing\"\nallow-http = true\n"
    )
}

struct Cluster {
    members: Vec<WeirProcess>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(config: &str, at_once: bool) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let config_a = config.to_string();
        let config_b = config.to_string();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let members = if at_once {
            let (a, b) = tokio::join!(
                WeirProcess::start_with_config(&a, 1, &config_a),
                WeirProcess::start_with_config(&b, 1, &config_b)
            );
            vec![a, b]
        } else {
            let a = WeirProcess::start_with_config(&a, 1, &config_a).await;
            wait_for_leader(&[&a], Duration::from_secs(30)).await;
            let b = WeirProcess::start_with_config(&b, 1, &config_b).await;
            vec![a, b]
        };
        Cluster { members, _dir: dir }
    }

    fn ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.port).collect()
    }

    async fn leader(&self, within: Duration) -> usize {
        let refs: Vec<&WeirProcess> = self.members.iter().collect();
        wait_for_leader(&refs, within).await
    }
}

/// Whether the member on `port` leads: a leader answers a query, a standby refuses it
/// with 57P03.
async fn leads(port: u16) -> bool {
    let Ok(c) = connect_port(port).await else {
        return false;
    };
    c.simple_query("SELECT 1").await.is_ok()
}

async fn leaders(members: &[&WeirProcess]) -> Vec<usize> {
    let mut out = vec![];
    for (i, m) in members.iter().enumerate() {
        if leads(m.port).await {
            out.push(i);
        }
    }
    out
}

async fn wait_for_leader(members: &[&WeirProcess], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let found = leaders(members).await;
        assert!(found.len() <= 1, "two leaders at once: {found:?}");
        if let Some(&i) = found.first() {
            return i;
        }
        assert!(
            Instant::now() < deadline,
            "no leader within {within:?}; logs:\n{}",
            members
                .iter()
                .map(|m| m.log())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the standby on `port` has read the cluster log as far as the leader
/// published (`SHOW CLUSTER`, its own row: lag 0): a standby that starts cold replays
/// the whole log first. Returns how long that took.
async fn wait_caught_up(port: u16) -> Duration {
    let started = Instant::now();
    let me = format!("127.0.0.1:{port}");
    loop {
        if let Ok(c) = connect_port(port).await {
            if let Ok(rows) = weir_sql_tests::query::try_rows(&c, "SHOW CLUSTER").await {
                let own = rows.iter().find(|r| r[1] == me);
                let leader_known = rows.iter().any(|r| r[2] == "leader");
                if leader_known && own.is_some_and(|r| r[6] == "0") {
                    return started.elapsed();
                }
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the standby on {port} did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Inserts ids `first, first + stride, ...` into `t` on whichever member leads,
/// recording those acknowledged, until `stop`.
fn spawn_writer(
    ports: Vec<u16>,
    first: i64,
    stride: i64,
    acked: Arc<Mutex<BTreeSet<i64>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut id = first;
        let mut client: Option<Client> = None;
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = None;
                for &p in &ports {
                    if let Ok(c) = connect_port(p).await {
                        if c.simple_query("SELECT 1").await.is_ok() {
                            client = Some(c);
                            break;
                        }
                    }
                }
                if client.is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let c = client.as_ref().unwrap();
            let sql = format!("INSERT INTO t VALUES ({id}, {})", id % 7);
            match c.simple_query(&sql).await {
                Ok(_) => {
                    acked.lock().unwrap().insert(id);
                    id += stride;
                }
                // Unacknowledged: it may or may not be there; never retried with the
                // same id (a retry could not tell a duplicate from the first).
                Err(_) => {
                    id += stride;
                    client = None;
                }
            }
        }
    })
}

/// Every acknowledged id is in `t` (the primary key keeps each once), and the view
/// equals its query over the table.
async fn check_consistent(c: &Client, acked: &BTreeSet<i64>) {
    c.simple_query("FLUSH").await.unwrap();
    let ids: BTreeSet<i64> = rows(c, "SELECT id FROM t")
        .await
        .into_iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    let missing: Vec<_> = acked.difference(&ids).take(10).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged rows lost, e.g. {missing:?}",
        acked.difference(&ids).count()
    );
    let count: usize = value(c, "SELECT count(*) FROM t").await.parse().unwrap();
    assert_eq!(count, ids.len(), "a row is there twice");
    let view = rows(c, "SELECT w, n FROM v ORDER BY w").await;
    let query = rows(c, "SELECT w, count(*) FROM t GROUP BY w ORDER BY w").await;
    assert_eq!(view, query, "the view differs from its query");
}

async fn create_schema(port: u16) {
    let c = connect_port(port).await.unwrap();
    c.batch_execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, w BIGINT);
         CREATE MATERIALIZED VIEW v AS SELECT w, count(*) AS n FROM t GROUP BY w;",
    )
    .await
    .unwrap();
}

/// The Kafka side of the failover test: a table reading a topic, a view over it and an
/// exactly-once sink of the table's rows.
struct KafkaPipeline {
    input: String,
    out: String,
    group: String,
}

impl KafkaPipeline {
    async fn create(c: &Client) -> KafkaPipeline {
        use weir_sql_tests::kafka::{create_topic, json, produce, producer};
        let pid = std::process::id();
        let (input, out, prefix) = (
            format!("ha-in-{pid}"),
            format!("ha-rows-{pid}"),
            format!("ha-{pid}"),
        );
        create_topic(&input, 3).await;
        create_topic(&out, 1).await;
        let first: Vec<(i32, Vec<u8>)> = (0..1000).map(|i| ((i % 3) as i32, json(i))).collect();
        produce(&producer(), &input, &first);
        c.batch_execute(&weir_sql_tests::sinks::events_pipeline_sql(
            &input, &out, &prefix,
        ))
        .await
        .unwrap();
        KafkaPipeline {
            input,
            out,
            group: format!("{prefix}-sink-rows_out.sink"),
        }
    }

    /// Every id in `0..total` once in the table, the view and the sink's committed output.
    async fn check(&self, c: &Client, total: i64) {
        use weir_sql_tests::sinks::{per_g_oracle, per_g_rows};
        weir_sql_tests::query::wait_until(c, "SELECT count(*) FROM events", 60, |r| {
            r[0][0] == total.to_string()
        })
        .await;
        let committed = weir_sql_tests::kafka_sink::wait_committed(&self.out, &self.group, |s| {
            s.records().count() >= total as usize
        })
        .await;
        let mut ids: Vec<i64> = committed
            .records()
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(&r).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        ids.sort();
        assert_eq!(
            ids,
            (0..total).collect::<Vec<_>>(),
            "a duplicate or a gap in the sink"
        );
        assert_eq!(per_g_rows(c).await, per_g_oracle(total), "per_g differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_under_load_keeps_every_acknowledged_write() {
    let endpoint = weir_sql_tests::s3::endpoint();
    let bucket = format!("weir-ha-failover-{}", std::process::id());
    let config = cluster_config(&endpoint, &bucket).await;
    let mut cluster = Cluster::start(&config, false).await;
    let first = cluster.leader(Duration::from_secs(30)).await;
    create_schema(cluster.members[first].port).await;
    let c = connect_port(cluster.members[first].port).await.unwrap();
    let kafka = KafkaPipeline::create(&c).await;
    let production =
        weir_sql_tests::kafka::Production::start(&kafka.input, 1000, 20, Duration::from_millis(20));
    let rounds = kills_from_env("WEIR_HA_FAILOVERS", 3);
    let mut rng = kill_rng();
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let mut takeovers = vec![];
    for round in 0..rounds {
        let leader = cluster.leader(Duration::from_secs(30)).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let first = (round as i64) * 1_000_000 + w;
                spawn_writer(cluster.ports(), first, 4, acked.clone(), stop.clone())
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
        cluster.members[leader].kill9();
        let killed_at = Instant::now();
        let standby = 1 - leader;
        let refs = [&cluster.members[standby]];
        wait_for_leader(&refs, LEASE_DURATION + Duration::from_secs(5)).await;
        let took = killed_at.elapsed();
        takeovers.push(took);
        eprintln!("round {round}: member {standby} took over in {took:?}");
        // Writes continue on the new leader for a moment, then the old one comes back
        // as a standby.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, std::sync::atomic::Ordering::Release);
        for w in writers {
            w.await.unwrap();
        }
        cluster.members[leader].restart().await;
        let caught_up = wait_caught_up(cluster.members[leader].port).await;
        eprintln!("round {round}: the restarted member caught up as a standby in {caught_up:?}");
        let c = connect_port(cluster.members[standby].port).await.unwrap();
        let so_far = acked.lock().unwrap().clone();
        check_consistent(&c, &so_far).await;
        assert!(
            !leads(cluster.members[leader].port).await,
            "the restarted member must be a standby"
        );
    }
    let total = production.stop();
    let leader = cluster.leader(Duration::from_secs(30)).await;
    let c = connect_port(cluster.members[leader].port).await.unwrap();
    kafka.check(&c, total).await;
    takeovers.sort();
    eprintln!(
        "takeover after kill -9 over {rounds} rounds: min {:?}, median {:?}, max {:?}; \
         {} rows acknowledged by SQL clients, {total} Kafka records once in table, view and sink",
        takeovers[0],
        takeovers[takeovers.len() / 2],
        takeovers[takeovers.len() - 1],
        acked.lock().unwrap().len()
    );
    assert!(
        acked.lock().unwrap().len() > 10,
        "the writers wrote almost nothing"
    );
}

fn signal(m: &WeirProcess, sig: &str) {
    let pid = m.pid().expect("running");
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_old_leader_acknowledges_nothing_more() {
    let endpoint = weir_sql_tests::s3::endpoint();
    let bucket = format!("weir-ha-split-{}", std::process::id());
    let config = cluster_config(&endpoint, &bucket).await;
    let cluster = Cluster::start(&config, false).await;
    let old = cluster.leader(Duration::from_secs(30)).await;
    let new = 1 - old;
    create_schema(cluster.members[old].port).await;
    let old_client = connect_port(cluster.members[old].port).await.unwrap();
    old_client
        .simple_query("INSERT INTO t VALUES (1, 1)")
        .await
        .unwrap();
    signal(&cluster.members[old], "STOP");
    // A write sent to the paused leader: it cannot be acknowledged in this term.
    let pending = {
        let c = connect_port(cluster.members[old].port);
        tokio::spawn(async move {
            match c.await {
                Ok(c) => c.simple_query("INSERT INTO t VALUES (2, 2)").await.is_ok(),
                Err(_) => false,
            }
        })
    };
    let refs = [&cluster.members[new]];
    wait_for_leader(&refs, LEASE_DURATION + Duration::from_secs(5)).await;
    let c = connect_port(cluster.members[new].port).await.unwrap();
    c.simple_query("INSERT INTO t VALUES (3, 3)").await.unwrap();
    signal(&cluster.members[old], "CONT");
    // The old leader's session: its next write fails (fenced or standby).
    let late = old_client.simple_query("INSERT INTO t VALUES (4, 4)").await;
    assert!(late.is_err(), "the deposed leader acknowledged a write");
    let pending_acked = pending.await.unwrap();
    assert!(
        !pending_acked,
        "a write sent to the paused leader was acknowledged"
    );
    // It comes back as a standby.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = connect_port(cluster.members[old].port).await {
            if let Err(e) = s.simple_query("SELECT 1").await {
                if e.code().map(|c| c.code()) == Some("57P03") {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the old leader did not become a standby"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut acked = BTreeSet::new();
    acked.extend([1, 3]);
    check_consistent(&c, &acked).await;
    let ids = rows(&c, "SELECT id FROM t ORDER BY id").await;
    assert_eq!(ids, vec![vec!["1".to_string()], vec!["3".to_string()]]);
    // SHOW CLUSTER: exactly one leader; the old one shows as a standby once it publishes.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let cluster_rows = rows(&c, "SHOW CLUSTER").await;
        let roles: Vec<&str> = cluster_rows.iter().map(|r| r[2].as_str()).collect();
        assert_eq!(
            roles.iter().filter(|r| **r == "leader").count(),
            1,
            "{cluster_rows:?}"
        );
        if roles.contains(&"standby") {
            break;
        }
        // Until then it is absent (it had not published yet) or shown as deposed.
        assert!(Instant::now() < deadline, "no standby in {cluster_rows:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_started_at_once_elect_one_leader() {
    let endpoint = weir_sql_tests::s3::endpoint();
    let runs = kills_from_env("WEIR_HA_STARTS", 5);
    for run in 0..runs {
        let bucket = format!("weir-ha-start-{}-{run}", std::process::id());
        let config = cluster_config(&endpoint, &bucket).await;
        let cluster = Cluster::start(&config, true).await;
        cluster.leader(Duration::from_secs(30)).await;
        // Still exactly one after a few renewals.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let refs: Vec<&WeirProcess> = cluster.members.iter().collect();
        let found = leaders(&refs).await;
        assert_eq!(found.len(), 1, "run {run}: leaders {found:?}");
        let standby = &cluster.members[1 - found[0]];
        let s = connect_port(standby.port).await.unwrap();
        assert_eq!(value(&s, "SHOW transaction_read_only").await, "on");
        let err = s
            .simple_query("CREATE TABLE x (a INT)")
            .await
            .expect_err("a standby refuses writes");
        assert_eq!(err.code().unwrap().code(), "25006");
        // libpq with both hosts, the standby first: read-write finds the leader.
        let leader = &cluster.members[found[0]];
        let conninfo = format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=weir dbname=weir \
             target_session_attrs=read-write",
            standby.port, leader.port
        );
        let out = std::process::Command::new("psql")
            .args([
                &conninfo,
                "-X",
                "-A",
                "-t",
                "-c",
                "SHOW transaction_read_only",
            ])
            .output()
            .expect("psql");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "off",
            "psql with target_session_attrs=read-write: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A moto endpoint of our own, which the test pauses (`SIGSTOP`: requests hang, as
/// in a network outage) without disturbing the shared one.
struct OwnEndpoint {
    child: std::process::Child,
    url: String,
}

impl OwnEndpoint {
    async fn start() -> OwnEndpoint {
        let moto = std::env::var("WEIR_TEST_MOTO_SERVER")
            .expect("WEIR_TEST_MOTO_SERVER is not set: run the suite with ./scripts/test.sh");
        let port = weir_sql_tests::process::free_port();
        let child = std::process::Command::new(moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto_server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "moto_server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        OwnEndpoint {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn signal(&self, sig: &str) {
        std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
    }
}

impl Drop for OwnEndpoint {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_outage_fails_writes_clearly_and_loses_nothing() {
    let endpoint = OwnEndpoint::start().await;
    let config = cluster_config(&endpoint.url, "weir-ha-outage").await;
    let cluster = Cluster::start(&config, false).await;
    let leader = cluster.leader(Duration::from_secs(30)).await;
    let port = cluster.members[leader].port;
    create_schema(port).await;
    let c = connect_port(port).await.unwrap();
    let mut acked = BTreeSet::new();
    for id in 0..20 {
        c.simple_query(&format!("INSERT INTO t VALUES ({id}, {id})"))
            .await
            .unwrap();
        acked.insert(id);
    }
    endpoint.signal("STOP");
    let stopped = Instant::now();
    let during = c.simple_query("INSERT INTO t VALUES (100, 100)").await;
    let waited = stopped.elapsed();
    let err = during.expect_err("a write during the outage cannot be acknowledged");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("57P03"),
        "unexpected error: {err:?}"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "the write should wait for the store first ({waited:?})"
    );
    let left = Duration::from_secs(10).saturating_sub(stopped.elapsed());
    tokio::time::sleep(left).await;
    endpoint.signal("CONT");
    // Service resumes (on this member or, had the lease lapsed, the other).
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        let leader = cluster.leader(Duration::from_secs(30)).await;
        let c = connect_port(cluster.members[leader].port).await.unwrap();
        match c.simple_query("INSERT INTO t VALUES (200, 200)").await {
            Ok(_) => {
                acked.insert(200);
                break c;
            }
            Err(e) => eprintln!("write after the outage: {e:?}"),
        }
        assert!(Instant::now() < deadline, "writes did not resume");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    check_consistent(&client, &acked).await;
}
