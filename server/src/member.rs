//! This process as a member of a high-availability cluster
//! (`high-availability.type = object-store`; settings in [`crate::cluster`]).
//!
//! Life of a member:
//! 1. **Standby**: accepts connections at once (read-only sessions, see
//!    [`crate::pg::standby`]), discards its local tables and catalog (a cache, which may
//!    hold a deposed leader's uncommitted writes) and follows the cluster log into them
//!    ([`Mirror`]), watching the leader lease.
//! 2. **Takeover** when the lease is won (none yet, expired, or our own from before a
//!    restart): renews from then on, reads the log to its end, writes the fence, and
//!    opens the database from the mirrored catalog and logs with the newest checkpoint
//!    of every job from the shared checkpoint directory, like a restart does.
//! 3. **Leader**: renews every `retry-period`; table writes and catalog changes are
//!    acknowledged once committed to the cluster log while the lease is current.
//! 4. **Deposed** (another member holds the lease, or the log was fenced): stops
//!    acknowledging at once (pending writes fail with 25006) and restarts itself as a
//!    standby (the process image is replaced: no state of the old term survives).
//!
//! Every member publishes `<cluster-id>/members/<member>` each `retry-period`, from
//! which `SHOW CLUSTER` lists the members, their roles and how far each has read.

use crate::cluster::HaConfig;
use crate::config::Config;
use crate::database::Database;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use weir_storage::cluster_log::{AckGate, ClusterLog, LogReader, Mirror, WriterConfig};
use weir_storage::leader_lease::{LeaderLease, Role};
use weir_storage::object_storage::ObjectStorage;

/// A member's role as it shows in `SHOW CLUSTER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberRole {
    Standby,
    /// Won the lease; catching up and opening the database.
    TakingOver,
    Leader,
    Deposed,
}

impl MemberRole {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Standby => "standby",
            MemberRole::TakingOver => "taking over",
            MemberRole::Leader => "leader",
            MemberRole::Deposed => "deposed",
        }
    }
}

/// What a member publishes about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberStatus {
    pub member: String,
    pub listen: String,
    pub role: MemberRole,
    /// The lease epoch it last knew.
    pub epoch: u64,
    /// The leader it last knew.
    pub leader: Option<String>,
    /// The leader's last renewal as the lease record says (ms since the Unix epoch).
    pub renewed_at_ms: i64,
    /// Segments of the cluster log it has read (standby) or committed (leader).
    pub log_position: u64,
    /// Its clock when it published this (ms since the Unix epoch).
    pub at_ms: i64,
}

/// The member's shared state: read by sessions (standby or leader), written by the
/// election loop.
pub struct Member {
    pub ha: HaConfig,
    storage: ObjectStorage,
    status: Mutex<MemberStatus>,
    db: OnceLock<Arc<Database>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `<host>:<port>`: one member id is one process (a restarted member may take its
/// own lease back at once).
fn member_id(cfg: &Config) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let port = cfg.listen.rsplit(':').next().unwrap_or("6543");
    format!("{host}:{port}")
}

impl Member {
    pub fn status(&self) -> MemberStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut MemberStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The database, once this member leads.
    pub fn database(&self) -> Option<Arc<Database>> {
        self.db.get().cloned()
    }

    pub fn role(&self) -> MemberRole {
        self.status().role
    }

    /// Every member's last published status (this one's as it is now).
    pub async fn members(&self) -> Vec<MemberStatus> {
        let me = self.status();
        let prefix = format!("{}/members", self.ha.cluster_id);
        let mut all = vec![me.clone()];
        if let Ok(keys) = self.storage.list(&prefix).await {
            for (key, _) in keys {
                let Ok(Some(bytes)) = self.storage.get(&key).await else {
                    continue;
                };
                match serde_json::from_slice::<MemberStatus>(&bytes) {
                    Ok(s) if s.member != me.member => all.push(s),
                    _ => {}
                }
            }
        }
        all.sort_by(|a, b| a.member.cmp(&b.member));
        all
    }

    /// `SHOW CLUSTER`: one row per member.
    pub async fn cluster_rows(&self) -> Vec<Vec<String>> {
        let members = self.members().await;
        let head = members
            .iter()
            .filter(|m| m.role == MemberRole::Leader)
            .map(|m| m.log_position)
            .max()
            .unwrap_or(0);
        let now = now_ms();
        let epoch = members.iter().map(|m| m.epoch).max().unwrap_or(0);
        members
            .into_iter()
            .map(|mut m| {
                // A leader of an older term that has not published since: it was
                // deposed (or died) and has not come back yet.
                if m.role == MemberRole::Leader && m.epoch < epoch {
                    m.role = MemberRole::Deposed;
                }
                let renewed = chrono::DateTime::from_timestamp_millis(m.renewed_at_ms)
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f+00").to_string())
                    .unwrap_or_default();
                vec![
                    m.member.clone(),
                    m.listen.clone(),
                    m.role.as_str().to_string(),
                    m.epoch.to_string(),
                    m.leader.clone().unwrap_or_default(),
                    renewed,
                    head.saturating_sub(m.log_position).to_string(),
                    format!("{:.1}", (now - m.at_ms).max(0) as f64 / 1000.0),
                ]
            })
            .collect()
    }

    async fn publish(&self) {
        self.publish_to(&self.storage).await
    }

    async fn publish_to(&self, storage: &ObjectStorage) {
        let status = self.status();
        let key = format!("{}/members/{}", self.ha.cluster_id, status.member);
        if let Ok(bytes) = serde_json::to_vec(&status) {
            if let Err(e) = storage.put(&key, bytes).await {
                tracing::debug!(error = %e, "cannot publish member status");
            }
        }
    }
}

/// `SHOW CLUSTER`'s columns.
pub const CLUSTER_COLUMNS: [&str; 8] = [
    "member",
    "listen",
    "role",
    "epoch",
    "leader",
    "last_renewal",
    "lag_segments",
    "seen_seconds_ago",
];

/// `SHOW CLUSTER`; without high availability, this one process alone.
pub async fn show_cluster(
    member: Option<&Member>,
) -> weir_planner::SqlResult<crate::output::Output> {
    let rows = match member {
        Some(m) => m.cluster_rows().await,
        None => vec![vec![
            "-".into(),
            "-".into(),
            "single (high-availability.type = none)".into(),
            "0".into(),
            "-".into(),
            String::new(),
            "0".into(),
            "0.0".into(),
        ]],
    };
    crate::show::text_table(&CLUSTER_COLUMNS, rows)
}

/// With high availability, checkpoints and savepoints must be where every member
/// reads them: under the storage directory unless set to another `s3://` place.
fn shared_checkpoints(mut cfg: Config, ha: &HaConfig) -> Result<Config, String> {
    const KEY: &str = "execution.checkpointing.dir";
    match cfg.file_value(KEY) {
        None => {
            let dir = format!("{}/{}", ha.storage_dir.trim_end_matches('/'), ha.cluster_id);
            cfg.settings.insert(KEY.to_string(), dir);
        }
        Some(d) if !d.starts_with("s3://") => {
            return Err(format!(
                "with high-availability.type = object-store, {KEY} must be on the shared \
                 object store (s3://...) or unset, not {d}"
            ))
        }
        Some(_) => {}
    }
    Ok(cfg)
}

/// Runs this process as a cluster member: sessions are served from the start
/// (`serve`), the database once this member leads. Returns only on a fatal error.
pub async fn run<F, Fut>(cfg: Config, ha: HaConfig, serve: F) -> Result<(), String>
where
    F: FnOnce(Arc<Member>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let cfg = shared_checkpoints(cfg, &ha)?;
    let s3 = weir_storage::object_storage::S3Settings {
        request_timeout: Some(ha.timings.retry_period.max(Duration::from_secs(1))),
        ..cfg.s3()
    };
    let storage = ObjectStorage::open(&ha.storage_dir, &s3)
        .map_err(|e| format!("cannot open {}: {e}", ha.storage_dir))?;
    let id = member_id(&cfg);
    let member = Arc::new(Member {
        storage: storage.clone(),
        status: Mutex::new(MemberStatus {
            member: id.clone(),
            listen: cfg.listen.clone(),
            role: MemberRole::Standby,
            epoch: 0,
            leader: None,
            renewed_at_ms: 0,
            log_position: 0,
            at_ms: now_ms(),
        }),
        db: OnceLock::new(),
        ha: ha.clone(),
    });
    tokio::spawn(serve(member.clone()));
    tracing::info!(member = %id, cluster = %ha.cluster_id, "standby: following the cluster log and watching the leader lease");
    let mut lease = LeaderLease::new(storage.clone(), &ha.cluster_id, &id, ha.timings);
    claim_data_dir(&cfg, &ha)?;
    let mut mirror = Mirror::open_empty(&cfg.data_dir).map_err(|e| e.to_string())?;
    mark_data_dir(&cfg, &ha)?;
    let mut reader = open_reader(&storage, &ha).await;
    let epoch = stand_by(&member, &mut lease, &mut reader, &mut mirror).await;
    member.update(|s| {
        s.role = MemberRole::TakingOver;
        s.epoch = epoch;
        s.leader = Some(s.member.clone());
    });
    tracing::warn!(epoch, "won the leader lease: taking over");
    let started = std::time::Instant::now();
    let gate = Arc::new(AckGate::default());
    let (lost_tx, lost_rx) = tokio::sync::watch::channel(None::<String>);
    let renewer_storage = ObjectStorage::open(&ha.storage_dir, &s3).map_err(|e| e.to_string())?;
    spawn_renewals(
        member.clone(),
        lease,
        renewer_storage,
        gate.clone(),
        lost_tx,
    )?;
    fence(&member, &mut reader, &mut mirror, epoch, &id).await?;
    drop(mirror);
    let log = start_log(&ha, &s3, &id, epoch, reader.next_seq(), gate)?;
    watch_deposition(member.clone(), log.clone(), lost_rx);
    let db = Database::open_member(cfg, member.clone(), log.clone(), epoch).await?;
    let _ = member.db.set(db);
    member.update(|s| s.role = MemberRole::Leader);
    member.publish().await;
    tracing::warn!(
        epoch,
        takeover_ms = started.elapsed().as_millis() as u64,
        "leader: serving reads and writes"
    );
    std::future::pending::<()>().await;
    Ok(())
}

/// The file that marks a data directory as a member's cache of cluster `<id>`.
const MEMBER_MARK: &str = "ha-cluster";

/// A member discards its data directory's tables and catalog (they are a cache of the
/// cluster log). One that holds a single-process database, or another cluster's, is
/// refused instead: discarding it would lose that database.
fn claim_data_dir(cfg: &Config, ha: &HaConfig) -> Result<(), String> {
    let meta = cfg.data_dir.join("meta");
    let mark = std::fs::read_to_string(meta.join(MEMBER_MARK)).ok();
    let has_catalog = meta.join("catalog.json").exists();
    match mark {
        Some(id) if id.trim() == ha.cluster_id => {}
        Some(id) => {
            return Err(format!(
                "data directory {} belongs to cluster {}, not {}; use another directory",
                cfg.data_dir.display(),
                id.trim(),
                ha.cluster_id
            ))
        }
        None if has_catalog => {
            return Err(format!(
                "data directory {} holds a single-process database, which a cluster member \
                 would discard (its tables are not in the cluster log): start the member on \
                 an empty directory and move the data with a savepoint",
                cfg.data_dir.display()
            ))
        }
        None => {}
    }
    Ok(())
}

/// Marks the (emptied) data directory as this cluster's.
fn mark_data_dir(cfg: &Config, ha: &HaConfig) -> Result<(), String> {
    let meta = cfg.data_dir.join("meta");
    std::fs::create_dir_all(&meta)
        .and_then(|_| std::fs::write(meta.join(MEMBER_MARK), &ha.cluster_id))
        .map_err(|e| format!("cannot write {}: {e}", meta.display()))
}

async fn open_reader(storage: &ObjectStorage, ha: &HaConfig) -> LogReader {
    loop {
        match LogReader::open(storage.clone(), &ha.cluster_id).await {
            Ok(r) => return r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the cluster log; retrying");
                tokio::time::sleep(ha.timings.retry_period).await;
            }
        }
    }
}

/// Segments applied per round of the standby loop, so that a standby catching up on a
/// long log still watches the lease on time.
const FOLLOW_BATCH: usize = 512;

/// Applies the next segments (up to [`FOLLOW_BATCH`]); `true` once at the end of the
/// log. Errors are logged and retried by the caller.
async fn follow(
    member: &Member,
    reader: &mut LogReader,
    mirror: &mut Mirror,
) -> Result<bool, String> {
    let segments = reader
        .next_segments(FOLLOW_BATCH)
        .await
        .map_err(|e| e.to_string())?;
    let applied = segments
        .iter()
        .try_for_each(|s| mirror.apply(s))
        .and_then(|_| mirror.sync());
    if let Err(e) = applied {
        // The copy is now behind the reader (or holds half a segment): it must never
        // be opened as the database. Start over from an empty copy.
        tracing::error!(error = %e, "cannot apply the cluster log to the local copy; restarting");
        restart_as_standby();
    }
    if !segments.is_empty() {
        member.update(|s| s.log_position = reader.next_seq() - 1);
    }
    Ok(segments.len() < FOLLOW_BATCH)
}

/// The standby loop: follows the log, watches the lease; returns the won epoch.
async fn stand_by(
    member: &Member,
    lease: &mut LeaderLease,
    reader: &mut LogReader,
    mirror: &mut Mirror,
) -> u64 {
    let retry = lease.timings().retry_period;
    let poll = retry.min(Duration::from_millis(200));
    let mut next_tick = tokio::time::Instant::now();
    loop {
        let caught_up = match follow(member, reader, mirror).await {
            Ok(end) => end,
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow the cluster log; retrying");
                true
            }
        };
        if tokio::time::Instant::now() >= next_tick {
            next_tick += retry;
            match lease.tick().await {
                Ok(Role::Leader { epoch }) => return epoch,
                Ok(Role::Standby { leader, epoch }) => {
                    let renewed = lease.record().map_or(0, |r| r.renewed_at_ms);
                    member.update(|s| {
                        s.leader = leader;
                        s.epoch = epoch;
                        s.renewed_at_ms = renewed;
                        s.at_ms = now_ms();
                    });
                    member.publish().await;
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the leader lease"),
            }
        }
        if caught_up {
            tokio::time::sleep(poll).await;
        }
    }
}

/// Reads the log to its end and writes the fence after it (again if another segment
/// slips in first).
async fn fence(
    member: &Member,
    reader: &mut LogReader,
    mirror: &mut Mirror,
    epoch: u64,
    id: &str,
) -> Result<(), String> {
    loop {
        match follow(member, reader, mirror).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster log; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        match reader.fence(epoch, id).await {
            Ok(true) => {
                tracing::info!(slot = reader.next_seq() - 1, "cluster log fenced");
                return Ok(());
            }
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the fence; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn start_log(
    ha: &HaConfig,
    s3: &weir_storage::object_storage::S3Settings,
    id: &str,
    epoch: u64,
    next_seq: u64,
    gate: Arc<AckGate>,
) -> Result<ClusterLog, String> {
    let metrics = weir_executor::metrics::metrics();
    let upload = metrics.ha_log_upload_seconds.clone();
    let records = metrics.ha_log_records.clone();
    ClusterLog::start(WriterConfig {
        // A client of its own (the committer runs on its own thread and runtime), with
        // room for a segment of up to 8 MiB to upload.
        storage: ObjectStorage::open(
            &ha.storage_dir,
            &weir_storage::object_storage::S3Settings {
                request_timeout: Some(ha.timings.renew_deadline.max(Duration::from_secs(30))),
                ..s3.clone()
            },
        )
        .map_err(|e| e.to_string())?,
        cluster: ha.cluster_id.clone(),
        member: id.to_string(),
        epoch,
        next_seq,
        gate,
        ack_timeout: ha.timings.renew_deadline,
        on_commit: Box::new(move |took, n| {
            upload.observe(took.as_secs_f64());
            records.inc_by(n as u64);
        }),
    })
    .map_err(|e| format!("cannot start the cluster log writer: {e}"))
}

/// Renews the lease every `retry-period` from the moment it is won; moves the
/// acknowledgement gate with each renewal; reports a lost lease.
fn spawn_renewals(
    member: Arc<Member>,
    mut lease: LeaderLease,
    storage: ObjectStorage,
    gate: Arc<AckGate>,
    lost: tokio::sync::watch::Sender<Option<String>>,
) -> Result<(), String> {
    let metrics = weir_executor::metrics::metrics();
    if let Some(until) = lease.acknowledge_until() {
        gate.allow_until(until);
    }
    metrics.ha_is_leader.set(1);
    // Its own thread, runtime and client: renewals must go out on time even when
    // every worker of the main runtime is busy or blocked (a DDL waiting on the store).
    lease.use_storage(storage.clone());
    let renew = async move {
        let mut ticks = tokio::time::interval(lease.timings().retry_period);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            match lease.tick().await {
                Ok(Role::Leader { epoch }) => {
                    metrics.ha_lease_renewals.inc();
                    if let Some(until) = lease.acknowledge_until() {
                        gate.allow_until(until);
                    }
                    let renewed = lease.record().map_or(0, |r| r.renewed_at_ms);
                    member.update(|s| {
                        s.epoch = epoch;
                        s.renewed_at_ms = renewed;
                        s.at_ms = now_ms();
                    });
                    member.publish_to(&storage).await;
                }
                Ok(Role::Standby { .. }) => {
                    gate.revoke();
                    metrics.ha_is_leader.set(0);
                    let _ = lost.send(Some("another member holds the leader lease".into()));
                    return;
                }
                Err(e) => {
                    metrics.ha_lease_renewal_failures.inc();
                    tracing::warn!(error = %e, "cannot renew the leader lease");
                }
            }
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the lease renewer: {e}"))?;
    std::thread::Builder::new()
        .name("leader-lease".into())
        .spawn(move || rt.block_on(renew))
        .map_err(|e| format!("cannot start the lease renewer: {e}"))?;
    Ok(())
}

/// Deposes this member when the lease is lost or the log fenced: nothing more is
/// acknowledged, then the process restarts as a standby.
fn watch_deposition(
    member: Arc<Member>,
    log: ClusterLog,
    mut lost: tokio::sync::watch::Receiver<Option<String>>,
) {
    tokio::spawn(async move {
        let why = loop {
            if let Some(f) = log.failure() {
                break f;
            }
            member.update(|s| s.log_position = log.next_seq().saturating_sub(1));
            if let Some(why) = lost.borrow().clone() {
                break why;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), lost.changed()).await;
        };
        log.stop(&why);
        member.update(|s| s.role = MemberRole::Deposed);
        weir_executor::metrics::metrics().ha_is_leader.set(0);
        tracing::error!(reason = %why, "deposed: acknowledging nothing more; restarting as a standby");
        // Sessions see their pending writes fail (25006) before the process goes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        restart_as_standby();
    });
}

/// Replaces the process image with a fresh one (same binary and arguments): every
/// thread of the old term stops at once, and the new process starts as a standby.
fn restart_as_standby() {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "cannot find the weir binary; exiting");
            std::process::exit(75);
        }
    };
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec();
    tracing::error!(error = %err, "cannot restart; exiting");
    std::process::exit(75);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(dir: &std::path::Path) -> (Config, HaConfig) {
        let p = dir.join("weir.toml");
        std::fs::write(
            &p,
            "[high-availability]\ntype = \"object-store\"\nstorageDir = \"s3://b/ha\"\ncluster-id = \"c1\"\n",
        )
        .unwrap();
        let mut cfg = Config::load(Some(&p)).unwrap();
        cfg.data_dir = dir.join("data");
        let ha = crate::cluster::ha_config(&cfg).unwrap().unwrap();
        (cfg, ha)
    }

    #[test]
    fn a_member_never_discards_a_single_process_database_or_another_clusters() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, ha) = setup(dir.path());
        // Empty: claimed and marked.
        claim_data_dir(&cfg, &ha).unwrap();
        mark_data_dir(&cfg, &ha).unwrap();
        std::fs::write(cfg.data_dir.join("meta/catalog.json"), "{}").unwrap();
        // Its own cache: claimed again.
        claim_data_dir(&cfg, &ha).unwrap();
        // Another cluster's: refused.
        let other = HaConfig {
            cluster_id: "c2".into(),
            ..ha.clone()
        };
        assert!(claim_data_dir(&cfg, &other)
            .unwrap_err()
            .contains("belongs to cluster c1"));
        // A single-process database: refused.
        std::fs::remove_file(cfg.data_dir.join("meta").join(MEMBER_MARK)).unwrap();
        assert!(claim_data_dir(&cfg, &ha)
            .unwrap_err()
            .contains("single-process database"));
    }

    #[test]
    fn checkpoints_go_to_the_shared_store() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, ha) = setup(dir.path());
        let shared = shared_checkpoints(cfg.clone(), &ha).unwrap();
        assert_eq!(shared.checkpoint_dir(), "s3://b/ha/c1");
        let mut local = cfg;
        local
            .settings
            .insert("execution.checkpointing.dir".into(), "/tmp/x".into());
        assert!(shared_checkpoints(local, &ha)
            .unwrap_err()
            .contains("shared object store"));
    }
}
