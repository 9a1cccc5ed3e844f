//! The job registry: what outlives each deployment of a job. Its status (RUNNING,
//! RESTARTING, FAILED), restart count and strategy's tracker, last failure; which
//! tables a connector feeds and the records it skipped; rows each view replayed at its
//! last deployment. `SHOW JOBS` and `SHOW SOURCE ERRORS` read it; the supervisor
//! updates it on failures and restarts; the runtime adds and forgets jobs.
//!
//! The running parts of a job (actors, hub, store) live in the runtime's relations;
//! nothing here touches them.

use crate::checkpoint::restart::RestartTracker;
use crate::checkpoint::RestartStrategy;
use crate::error::{ExecError, Result};
use crate::source::{BadRecord, BAD_RECORDS_KEPT};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A job's life, for `SHOW JOBS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    Running,
    Restarting,
    /// Past its restart strategy's limit; serving its last consistent contents.
    Failed,
}

impl JobStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            JobStatus::Running => "RUNNING",
            JobStatus::Restarting => "RESTARTING",
            JobStatus::Failed => "FAILED",
        }
    }
}

/// One row of `SHOW JOBS`.
#[derive(Debug, Clone)]
pub struct JobInfo {
    pub name: String,
    pub status: JobStatus,
    pub parallelism: u32,
    pub restarts: u32,
    pub last_failure: Option<String>,
    /// Wall-clock ms of the last epoch its readable rows committed.
    pub committed_at_ms: i64,
    /// Its fragments, operators and actors as deployed.
    pub topology: crate::topology::JobTopology,
}

/// Restart bookkeeping of one job.
struct JobLife {
    status: JobStatus,
    tracker: RestartTracker,
    restarts: u32,
    last_failure: Option<String>,
}

/// A job's status, restarts and last failure, as `SHOW JOBS` shows them.
pub(crate) struct JobState {
    pub status: JobStatus,
    pub restarts: u32,
    pub last_failure: Option<String>,
}

#[derive(Default)]
pub struct JobRegistry {
    lives: Mutex<HashMap<String, JobLife>>,
    /// Tables fed by a connector: `SHOW JOBS` lists them with the views.
    connector_tables: Mutex<BTreeSet<String>>,
    /// The latest records connectors skipped as bad (`SHOW SOURCE ERRORS`).
    bad_records: Mutex<VecDeque<BadRecord>>,
    /// Table-log rows each view replayed when it was last deployed.
    last_replayed: Mutex<HashMap<String, usize>>,
    /// Where each connector partition's reading stands (`weir_catalog.sources`).
    source_partitions: Mutex<BTreeMap<(String, i32), SourcePartition>>,
}

/// How far a connector has read one partition, and how far the partition goes.
#[derive(Debug, Clone)]
pub struct SourcePartition {
    pub table: String,
    pub connector: &'static str,
    pub partition: i32,
    /// The next offset to read.
    pub position: i64,
    /// The offset after the partition's last record, when the broker told it.
    pub high_watermark: Option<i64>,
}

impl SourcePartition {
    /// Records not read yet.
    pub fn lag(&self) -> Option<i64> {
        self.high_watermark.map(|h| (h - self.position).max(0))
    }
}

impl JobRegistry {
    /// A job (re)created: RUNNING, with a fresh restart strategy.
    pub(crate) fn start(&self, name: &str, strategy: RestartStrategy) {
        self.lives.lock().insert(
            name.to_string(),
            JobLife {
                status: JobStatus::Running,
                tracker: RestartTracker::new(strategy),
                restarts: 0,
                last_failure: None,
            },
        );
    }

    /// The job is dropped.
    pub(crate) fn forget(&self, name: &str) {
        self.lives.lock().remove(name);
        self.connector_tables.lock().remove(name);
        self.source_partitions.lock().retain(|(t, _), _| t != name);
    }

    /// A connector's position in one partition (with the lag metric). A partition
    /// whose end the broker did not tell this time keeps the last end it told.
    pub(crate) fn note_source_partition(&self, mut p: SourcePartition) {
        let mut known = self.source_partitions.lock();
        let key = (p.table.clone(), p.partition);
        if p.high_watermark.is_none() {
            p.high_watermark = known.get(&key).and_then(|old| old.high_watermark);
        }
        if let Some(lag) = p.lag() {
            crate::metrics::metrics()
                .pending_records
                .with_label_values(&[p.table.as_str(), &p.partition.to_string()])
                .set(lag);
        }
        known.insert(key, p);
    }

    /// Every connector partition's position, by table and partition.
    pub fn source_partitions(&self) -> Vec<SourcePartition> {
        self.source_partitions.lock().values().cloned().collect()
    }

    pub(crate) fn state(&self, name: &str) -> Option<JobState> {
        self.lives.lock().get(name).map(|l| JobState {
            status: l.status.clone(),
            restarts: l.restarts,
            last_failure: l.last_failure.clone(),
        })
    }

    /// A failure of `name`: the delay before its restart, or `None` when it is FAILED
    /// (its strategy is exhausted, or it cannot restart: a table). `None` also for a
    /// job no longer registered.
    pub(crate) fn on_failure(
        &self,
        name: &str,
        reason: &str,
        restartable: bool,
    ) -> Option<Duration> {
        let mut lives = self.lives.lock();
        let life = lives.get_mut(name)?;
        life.last_failure = Some(reason.to_string());
        let delay = restartable
            .then(|| {
                life.tracker
                    .on_failure(Instant::now(), rand::random::<f64>())
            })
            .flatten();
        life.status = match delay {
            Some(_) => {
                life.restarts += 1;
                JobStatus::Restarting
            }
            None => JobStatus::Failed,
        };
        delay
    }

    /// FAILED for `reason` (a restart that failed, a connector that stopped).
    pub(crate) fn fail(&self, name: &str, reason: &str) {
        if let Some(life) = self.lives.lock().get_mut(name) {
            life.status = JobStatus::Failed;
            life.last_failure = Some(reason.to_string());
        }
    }

    /// Restarted and caught up.
    pub(crate) fn running(&self, name: &str) {
        if let Some(life) = self.lives.lock().get_mut(name) {
            life.status = JobStatus::Running;
        }
    }

    /// `RESUME`: a fresh start for the job's restart strategy.
    pub(crate) fn resume(&self, name: &str) -> Result<()> {
        let mut lives = self.lives.lock();
        let life = lives
            .get_mut(name)
            .ok_or_else(|| ExecError::Internal(format!("no job named {name}")))?;
        life.tracker.reset();
        life.status = JobStatus::Restarting;
        Ok(())
    }

    pub(crate) fn note_connector(&self, table: &str) {
        self.connector_tables.lock().insert(table.to_string());
    }

    /// True when `name` is a table fed by a connector.
    pub fn has_connector(&self, name: &str) -> bool {
        self.connector_tables.lock().contains(name)
    }

    /// Records a record a connector skipped (oldest forgotten past a bound).
    pub(crate) fn note_bad_record(&self, r: BadRecord) {
        tracing::warn!(table = %r.table, partition = r.partition, offset = r.offset, reason = %r.reason, "bad record skipped");
        crate::metrics::metrics()
            .source_bad_records
            .with_label_values(&[r.table.as_str()])
            .inc();
        let mut q = self.bad_records.lock();
        if q.len() >= BAD_RECORDS_KEPT {
            q.pop_front();
        }
        q.push_back(r);
    }

    /// The latest skipped records, oldest first (`SHOW SOURCE ERRORS`).
    pub fn bad_records(&self) -> Vec<BadRecord> {
        self.bad_records.lock().iter().cloned().collect()
    }

    pub(crate) fn note_replayed(&self, view: &str, rows: usize) {
        self.last_replayed.lock().insert(view.to_string(), rows);
    }

    /// Table-log rows the view replayed when it was last deployed (from a checkpoint or
    /// a savepoint; a fresh view backfills instead and replays none).
    pub fn replayed_rows(&self, view: &str) -> usize {
        self.last_replayed.lock().get(view).copied().unwrap_or(0)
    }
}

/// Wall-clock ms since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_restart_until_the_strategy_is_exhausted() {
        let jobs = JobRegistry::default();
        jobs.start(
            "v",
            RestartStrategy::FixedDelay {
                attempts: 1,
                delay: Duration::from_millis(5),
            },
        );
        assert_eq!(
            jobs.on_failure("v", "boom", true),
            Some(Duration::from_millis(5))
        );
        assert_eq!(jobs.state("v").unwrap().status, JobStatus::Restarting);
        assert_eq!(jobs.on_failure("v", "again", true), None);
        let s = jobs.state("v").unwrap();
        assert_eq!((s.status, s.restarts), (JobStatus::Failed, 1));
        assert_eq!(s.last_failure.as_deref(), Some("again"));
        jobs.resume("v").unwrap();
        assert_eq!(jobs.state("v").unwrap().status, JobStatus::Restarting);
        // A table cannot restart: it fails at once.
        jobs.start("t", RestartStrategy::None);
        assert_eq!(jobs.on_failure("t", "x", false), None);
        assert_eq!(jobs.state("t").unwrap().status, JobStatus::Failed);
        jobs.forget("v");
        assert!(jobs.state("v").is_none() && jobs.resume("v").is_err());
    }
}
