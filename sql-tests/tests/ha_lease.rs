//! The leader lease on a real S3 endpoint (moto, started by `scripts/test.sh`): one
//! leader per cluster id, renewals, takeover after the lease expires with the next
//! epoch, a paused leader that stops acknowledging and is deposed when it comes back,
//! and members that start at once.

use std::time::Duration;
use weir_sql_tests::s3;
use weir_storage::leader_lease::{LeaderLease, LeaseTimings, Role};
use weir_storage::object_storage::{ObjectStorage, S3Settings};

const TIMINGS: LeaseTimings = LeaseTimings {
    lease_duration: Duration::from_millis(800),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(100),
};

async fn storage(bucket: &str) -> ObjectStorage {
    let endpoint = s3::endpoint();
    let created = s3::http(&endpoint, "PUT", &format!("/{bucket}")).await;
    assert!(
        created.starts_with("HTTP/1.1 200") || created.contains("BucketAlreadyOwnedByYou"),
        "create bucket: {created}"
    );
    let settings = S3Settings {
        endpoint: Some(endpoint),
        region: Some("us-east-1".into()),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: true,
        ..Default::default()
    };
    ObjectStorage::open(&format!("s3://{bucket}/ha"), &settings).unwrap()
}

fn member(storage: &ObjectStorage, cluster: &str, name: &str) -> LeaderLease {
    LeaderLease::new(storage.clone(), cluster, name, TIMINGS)
}

fn is_leader(r: &Role) -> bool {
    matches!(r, Role::Leader { .. })
}

#[tokio::test]
async fn one_leader_renews_and_a_standby_takes_over_a_paused_one() {
    let s = storage(&format!("weir-ha-{}", std::process::id())).await;
    let mut a = member(&s, "c1", "a");
    let mut b = member(&s, "c1", "b");
    assert_eq!(a.tick().await.unwrap(), Role::Leader { epoch: 1 });
    assert!(a.may_acknowledge());
    // While a renews, b stays a standby however long it watches.
    for _ in 0..15 {
        assert_eq!(
            b.tick().await.unwrap(),
            Role::Standby {
                leader: Some("a".into()),
                epoch: 1
            }
        );
        assert_eq!(a.tick().await.unwrap(), Role::Leader { epoch: 1 });
        tokio::time::sleep(TIMINGS.retry_period).await;
    }
    // a pauses (no renewals): it stops acknowledging at its deadline, before b can
    // take over at the lease's expiry.
    let paused = std::time::Instant::now();
    let mut took_over = None;
    while took_over.is_none() {
        tokio::time::sleep(TIMINGS.retry_period).await;
        if is_leader(&b.tick().await.unwrap()) {
            took_over = Some(paused.elapsed());
        }
        if paused.elapsed() >= TIMINGS.renew_deadline {
            assert!(!a.may_acknowledge(), "a paused leader still acknowledges");
        }
        assert!(paused.elapsed() < Duration::from_secs(10), "no takeover");
    }
    let took_over = took_over.unwrap();
    assert!(
        took_over >= TIMINGS.lease_duration,
        "taken over after {took_over:?}, before the lease expired"
    );
    assert!(!a.may_acknowledge());
    assert_eq!(b.tick().await.unwrap(), Role::Leader { epoch: 2 });
    // a comes back: its renewal conflicts, it is a standby and sees b.
    assert!(!is_leader(&a.tick().await.unwrap()));
    assert!(!a.may_acknowledge());
    assert_eq!(
        a.tick().await.unwrap(),
        Role::Standby {
            leader: Some("b".into()),
            epoch: 2
        }
    );
    assert!(b.may_acknowledge());
}

#[tokio::test]
async fn members_that_start_at_once_elect_exactly_one_leader() {
    let s = storage(&format!("weir-ha-start-{}", std::process::id())).await;
    for run in 0..20 {
        let cluster = format!("start-{run}");
        let members: Vec<LeaderLease> = (0..3)
            .map(|m| member(&s, &cluster, &format!("m{m}")))
            .collect();
        let rounds = members.into_iter().map(|mut m| {
            tokio::spawn(async move {
                let role = m.tick().await.unwrap();
                (role, m)
            })
        });
        let mut leaders = 0;
        for r in rounds {
            let (role, m) = r.await.unwrap();
            if is_leader(&role) {
                leaders += 1;
                assert!(m.may_acknowledge());
            } else {
                assert!(!m.may_acknowledge());
            }
        }
        assert_eq!(leaders, 1, "run {run}: {leaders} leaders");
    }
}

/// Until the server runs the election, asking for HA is refused at startup with a
/// clear message instead of silently running one unprotected process.
#[test]
fn a_server_with_ha_on_local_storage_refuses_to_start_and_says_why() {
    let cases = [
        (
            "[high-availability]\ntype = \"object-store\"\nstorageDir = \"/tmp/ha\"\n",
            "conditional writes",
        ),
        (
            "[high-availability]\ntype = \"object-store\"\nstorageDir = \"s3://b/ha\"\n\
             [execution.checkpointing]\ndir = \"/tmp/checkpoints\"\n",
            "must be on the shared object store",
        ),
    ];
    for (lines, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("weir.toml");
        std::fs::write(&config, lines).unwrap();
        let out = std::process::Command::new(weir_sql_tests::process::weir_binary())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .output()
            .expect("run weir");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "weir started with {lines}");
        assert!(stderr.contains(why), "{stderr}");
    }
}
