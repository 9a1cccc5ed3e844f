//! The history behind `SHOW CHECKPOINTS`: one record per job and checkpoint.

use crate::barrier::Epoch;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Failed,
}

impl CheckpointStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            CheckpointStatus::InProgress => "IN_PROGRESS",
            CheckpointStatus::Completed => "COMPLETED",
            CheckpointStatus::Failed => "FAILED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub id: Epoch,
    pub job: u64,
    pub job_name: String,
    pub status: CheckpointStatus,
    pub trigger_time_ms: i64,
    pub duration_ms: Option<u64>,
    pub alignment_ms: u64,
    /// From the trigger until the barrier reached the last actor (Flink's checkpoint
    /// start delay): the data queued ahead of the barrier.
    pub start_delay_ms: u64,
    /// The longest synchronous part of an actor: its barrier work and state snapshot
    /// while its inputs waited (Flink's sync duration).
    pub sync_ms: u64,
    /// From the last actor's acknowledgement to completion: writing the state files
    /// (Flink's asynchronous part). The rest of `duration_ms` is barriers reaching
    /// the actors and their snapshots.
    pub upload_ms: Option<u64>,
    pub full_size: u64,
    pub incremental_size: u64,
    pub path: String,
    pub failure: Option<String>,
}

/// Keeps the most recent records (older ones are only in object storage).
#[derive(Default)]
pub struct CheckpointHistory {
    records: VecDeque<CheckpointRecord>,
}

const KEEP: usize = 1000;

impl CheckpointHistory {
    /// A new checkpoint of a job (ids are epochs: never reused for one job).
    pub fn push(&mut self, r: CheckpointRecord) {
        self.records.push_back(r);
        while self.records.len() > KEEP {
            self.records.pop_front();
        }
    }

    pub fn update(&mut self, job: u64, id: Epoch, f: impl FnOnce(&mut CheckpointRecord)) {
        // Newest first: updates concern checkpoints in progress.
        if let Some(r) = self
            .records
            .iter_mut()
            .rev()
            .find(|x| x.id == id && x.job == job)
        {
            f(r);
        }
    }

    pub fn all(&self) -> Vec<CheckpointRecord> {
        self.records.iter().cloned().collect()
    }
}
