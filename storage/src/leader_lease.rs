//! A leader lease in the object store (`high-availability.type = object-store`): one
//! leader per cluster id, elected and renewed by conditional writes of one small
//! object, `<cluster-id>/leader-lease`, as Flink's and Kubernetes' leader election do
//! with a lease record.
//!
//! - **Acquire**: the first member creates the record (`If-None-Match: *`): epoch 1.
//! - **Renew**: the leader replaces its own record (`If-Match: <etag>`) every
//!   `retry-period`, counting renewals (so each renewal's bytes, and ETag, differ).
//!   A replace that conflicts means another member took over: it is deposed.
//! - **Expire**: a standby watches the record. Expiry is judged by the standby's own
//!   clock, never by the time written in the record (clocks of two machines need not
//!   agree): the lease has expired once the record has not changed for
//!   `lease-duration` since the standby first saw it. It then replaces that exact
//!   version with itself as holder and the epoch plus one; of two standbys only one
//!   replace can succeed.
//! - **Stop acknowledging in time**: a leader whose last successful renewal is older
//!   than `renew-deadline` must stop acknowledging writes ([`LeaderLease::may_acknowledge`]),
//!   since a standby may take over once `lease-duration` has passed without a renewal;
//!   `renew-deadline` ≤ `lease-duration` keeps the two apart.
//!
//! The epoch is the lease term: it tags what the leader writes, and fences the writes
//! of a deposed one.

use crate::object_storage::{Conditional, ObjectStorage, ObjectVersion};
use crate::{Result, StorageError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The record in the object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The member holding the lease.
    pub holder: String,
    /// The lease term: 1 for the first leader, one more at every takeover.
    pub epoch: u64,
    /// Renewals in this term (makes every renewal's bytes differ).
    pub renewals: u64,
    /// The holder's wall clock at the last renewal (ms since the epoch): for people
    /// and `SHOW CLUSTER`, not for deciding expiry.
    pub renewed_at_ms: i64,
}

/// `high-availability.leader-election.*`: Flink's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// `lease-duration` (15 s): how long a record may stay unchanged before a standby
    /// takes over.
    pub lease_duration: Duration,
    /// `renew-deadline` (15 s): how long the leader may go without renewing before it
    /// stops acknowledging writes. At most `lease_duration`.
    pub renew_deadline: Duration,
    /// `retry-period` (5 s): how often the leader renews and standbys look.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(15),
            retry_period: Duration::from_secs(5),
        }
    }
}

/// A member's role after one round of the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Leader {
        epoch: u64,
    },
    /// `leader`: the holder of the current record (`None`: no record yet).
    Standby {
        leader: Option<String>,
        epoch: u64,
    },
}

/// One member's side of the election.
pub struct LeaderLease {
    storage: ObjectStorage,
    key: String,
    member: String,
    timings: LeaseTimings,
    /// The record this member last read, its version, and when (by this member's
    /// clock) it first saw that version.
    seen: Option<(LeaseRecord, ObjectVersion, Instant)>,
    /// While leader: our record's version and when we last renewed it.
    held: Option<(LeaseRecord, ObjectVersion, Instant)>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl LeaderLease {
    pub fn new(
        storage: ObjectStorage,
        cluster_id: &str,
        member: &str,
        timings: LeaseTimings,
    ) -> Self {
        LeaderLease {
            storage,
            key: format!("{cluster_id}/leader-lease"),
            member: member.to_string(),
            timings,
            seen: None,
            held: None,
        }
    }

    pub fn timings(&self) -> LeaseTimings {
        self.timings
    }

    /// Talks to the store through `storage` from now on (a client of another runtime).
    pub fn use_storage(&mut self, storage: ObjectStorage) {
        self.storage = storage;
    }

    /// The record as this member last knew it (its own while leader).
    pub fn record(&self) -> Option<&LeaseRecord> {
        self.held.as_ref().or(self.seen.as_ref()).map(|(r, _, _)| r)
    }

    /// Until when this member may acknowledge writes (`None`: not leader).
    pub fn acknowledge_until(&self) -> Option<Instant> {
        self.held
            .as_ref()
            .map(|(_, _, at)| *at + self.timings.renew_deadline)
    }

    /// Whether this member may acknowledge writes now: it holds the lease and renewed
    /// it within `renew-deadline`.
    pub fn may_acknowledge(&self) -> bool {
        self.held
            .as_ref()
            .is_some_and(|(_, _, at)| at.elapsed() < self.timings.renew_deadline)
    }

    /// One round: the leader renews; a standby takes the lease when there is none or
    /// it expired. Call every `retry-period`. An error (the store unreachable) leaves
    /// the role as it was; a leader that keeps failing loses `may_acknowledge` at its
    /// deadline.
    pub async fn tick(&mut self) -> Result<Role> {
        if let Some((record, version, _)) = self.held.clone() {
            return self.renew(record, version).await;
        }
        let observed = match self.storage.get_versioned(&self.key).await {
            Ok(o) => o,
            Err(e) => {
                // Expiry needs the record watched unchanged for a whole lease: a
                // store we cannot read starts that watch again.
                self.seen = None;
                return Err(e);
            }
        };
        let Some((bytes, version)) = observed else {
            return self.acquire_first().await;
        };
        let record: LeaseRecord = serde_json::from_slice(&bytes)?;
        if record.holder == self.member {
            // Our own record from before a restart: that process is gone (one member
            // id is one process), so there is no one to wait for.
            self.seen = None;
            return self.take_over(record, version).await;
        }
        let first_seen = match &self.seen {
            Some((_, v, at)) if *v == version => *at,
            _ => Instant::now(),
        };
        self.seen = Some((record.clone(), version.clone(), first_seen));
        if first_seen.elapsed() < self.timings.lease_duration {
            return Ok(Role::Standby {
                leader: Some(record.holder),
                epoch: record.epoch,
            });
        }
        self.take_over(record, version).await
    }

    async fn acquire_first(&mut self) -> Result<Role> {
        let record = LeaseRecord {
            holder: self.member.clone(),
            epoch: 1,
            renewals: 0,
            renewed_at_ms: now_ms(),
        };
        self.write(record, None).await
    }

    async fn take_over(&mut self, old: LeaseRecord, version: ObjectVersion) -> Result<Role> {
        let record = LeaseRecord {
            holder: self.member.clone(),
            epoch: old.epoch + 1,
            renewals: 0,
            renewed_at_ms: now_ms(),
        };
        tracing::warn!(old_leader = %old.holder, epoch = record.epoch, "leader lease expired: taking over");
        self.write(record, Some(version)).await
    }

    async fn renew(&mut self, held: LeaseRecord, version: ObjectVersion) -> Result<Role> {
        let record = LeaseRecord {
            renewals: held.renewals + 1,
            renewed_at_ms: now_ms(),
            ..held
        };
        let epoch = record.epoch;
        let role = self.write(record, Some(version)).await?;
        if !matches!(role, Role::Leader { .. }) {
            tracing::error!(epoch, "leader lease lost: another member holds it");
        }
        Ok(role)
    }

    /// Writes `record`: created when `expected` is `None`, else replacing that version.
    /// An error that leaves unknown whether the write landed is resolved by reading
    /// the record back: ours (it landed), another member's (it did not, and we lost),
    /// or the one we meant to replace (it did not: the error stands, retried next
    /// round).
    async fn write(
        &mut self,
        record: LeaseRecord,
        expected: Option<ObjectVersion>,
    ) -> Result<Role> {
        let bytes = to_bytes(&record)?;
        // The deadline counts from before the request: the record lands after this,
        // and a standby's watch starts no earlier than it lands.
        let sent = Instant::now();
        let result = match &expected {
            None => self.storage.create(&self.key, bytes).await,
            Some(v) => self.storage.replace(&self.key, bytes, v).await,
        };
        let error = match result {
            Ok(Conditional::Written(version)) => {
                return Ok(self.after_write(record, Conditional::Written(version), sent))
            }
            Ok(Conditional::Conflict) => None,
            Err(e) => Some(e),
        };
        // Lost answer or conflict: read back whose record is there.
        let Some((found, version)) = self.storage.get_versioned(&self.key).await? else {
            return Err(error.unwrap_or_else(|| {
                StorageError::Corrupt("the leader lease vanished during a write".into())
            }));
        };
        let found: LeaseRecord = serde_json::from_slice(&found)?;
        let written = if found == record {
            Conditional::Written(version)
        } else if found.holder == self.member && found.epoch == record.epoch {
            // An earlier renewal of ours whose answer was lost landed after all (a
            // store that came back applies queued requests). Still ours; its send time
            // is unknown, so the acknowledgement deadline does not move.
            return Ok(match self.held.take() {
                Some((_, _, at)) => {
                    self.held = Some((found, version, at));
                    Role::Leader {
                        epoch: record.epoch,
                    }
                }
                None => self.after_write(record, Conditional::Conflict, sent),
            });
        } else {
            match error {
                // Our own record of another term: the error stands, retried next round.
                Some(e) if found.holder == self.member => return Err(e),
                _ => Conditional::Conflict,
            }
        };
        Ok(self.after_write(record, written, sent))
    }

    fn after_write(&mut self, record: LeaseRecord, written: Conditional, sent: Instant) -> Role {
        match written {
            Conditional::Written(version) => {
                let epoch = record.epoch;
                self.held = Some((record, version, sent));
                self.seen = None;
                Role::Leader { epoch }
            }
            Conditional::Conflict => {
                self.held = None;
                // Read the winner's record next round.
                Role::Standby {
                    leader: None,
                    epoch: record.epoch,
                }
            }
        }
    }
}

fn to_bytes(record: &LeaseRecord) -> Result<Bytes> {
    Ok(Bytes::from(serde_json::to_vec(record)?))
}
