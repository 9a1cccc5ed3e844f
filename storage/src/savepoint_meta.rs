//! Savepoint metadata (`savepoints/<name>/_metadata`): a user's named, portable copy of
//! views' state (DESIGN.md §6). Unlike a checkpoint's, every uid's state is one
//! canonical Arrow IPC file (no delta chain) with the key group on every row, so a
//! savepoint reads back on any server pointed at the same storage. Never deleted
//! automatically.

use crate::checkpoint_meta::{from_checksummed_json, to_checksummed_json, UidState};
use crate::{Result, StorageError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the savepoint format this build writes; it reads every version up to it.
///
/// - 1: views' state per uid.
/// - 2: adds each uid's state layout (`schemas`) and tables' rows (`table`). A version-1
///   savepoint reads as one without layouts (not checked) and without tables.
pub const SAVEPOINT_FORMAT_VERSION: u32 = 2;

/// One view's state in a savepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointView {
    pub name: String,
    /// Table-log positions the state corresponds to: a restore replays from here.
    pub positions: BTreeMap<String, u64>,
    pub parallelism: u32,
    pub max_parallelism: u32,
    /// Per uid, exactly one file.
    pub state: Vec<UidState>,
    /// Uid -> the layout of its state when saved (key and accumulator types, or row
    /// types); every uid the view's plan had, stored or not (the rows uid names the
    /// query). A restore refuses state whose layout differs from the new plan's.
    #[serde(default)]
    pub schemas: BTreeMap<String, String>,
    /// A table's rows rather than a view's state: restored only into a table that has
    /// never been written (a migration), never over acknowledged writes.
    #[serde(default)]
    pub table: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointMetadata {
    pub format_version: u32,
    pub name: String,
    pub created_ms: i64,
    /// The checkpoint (epoch) the savepoint was copied from.
    pub epoch: u64,
    pub views: Vec<SavepointView>,
}

impl SavepointView {
    /// This view's state as the state of view `to`: a branch (an A/B test started
    /// from one savepoint). Derived uids start with the view's name
    /// (`<view>.<kind>.<hash>`, `<view>.materialize.<hash>`), so `a.hashagg.x` reads
    /// as `b.hashagg.x` and the usual uid rules match it against `b`'s plan; pinned
    /// uids (`"uid.N" = 'name'`) carry no view name and keep theirs. The files are
    /// the same: both views read them.
    pub fn renamed(&self, to: &str) -> SavepointView {
        let prefix = format!("{}.", self.name);
        let rename = |uid: &str| match uid.strip_prefix(&prefix) {
            Some(rest) => format!("{to}.{rest}"),
            None => uid.to_string(),
        };
        SavepointView {
            name: to.to_string(),
            state: self
                .state
                .iter()
                .map(|u| UidState {
                    uid: rename(&u.uid),
                    ..u.clone()
                })
                .collect(),
            schemas: self
                .schemas
                .iter()
                .map(|(uid, layout)| (rename(uid), layout.clone()))
                .collect(),
            ..self.clone()
        }
    }
}

impl SavepointMetadata {
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        to_checksummed_json(self)
    }

    /// Refuses a damaged file and one written by a newer format version.
    pub fn from_bytes(bytes: &[u8]) -> Result<SavepointMetadata> {
        let mut meta: SavepointMetadata = from_checksummed_json(bytes)?;
        if meta.format_version < 2 {
            meta.rebase_version_1_paths();
        }
        if meta.format_version > SAVEPOINT_FORMAT_VERSION {
            return Err(StorageError::Corrupt(format!(
                "savepoint format version {} is newer than this Weir's {}",
                meta.format_version, SAVEPOINT_FORMAT_VERSION
            )));
        }
        Ok(meta)
    }

    /// Version 1 savepoints lived in the checkpoint storage's `savepoints/` folder
    /// (there was no savepoint-dir yet) and named their files from the checkpoint
    /// storage's root; that folder is the default savepoint-dir, whose root file paths
    /// are now relative to.
    fn rebase_version_1_paths(&mut self) {
        for f in self
            .views
            .iter_mut()
            .flat_map(|v| v.state.iter_mut())
            .flat_map(|u| u.files.iter_mut())
        {
            if let Some(rest) = f.path.strip_prefix("savepoints/") {
                f.path = rest.to_string();
            }
        }
    }

    /// Bytes of every state file.
    pub fn size(&self) -> u64 {
        self.views
            .iter()
            .flat_map(|v| &v.state)
            .flat_map(|u| &u.files)
            .map(|f| f.size)
            .sum()
    }

    pub fn view(&self, name: &str) -> Option<&SavepointView> {
        self.views.iter().find(|v| v.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let m = SavepointMetadata {
            format_version: SAVEPOINT_FORMAT_VERSION,
            name: "s1".into(),
            created_ms: 1,
            epoch: 7,
            views: vec![],
        };
        let bytes = m.to_bytes().unwrap();
        assert_eq!(SavepointMetadata::from_bytes(&bytes).unwrap(), m);
        let mut damaged = bytes.clone();
        let last = damaged.len() - 2;
        damaged[last] ^= 1;
        assert!(SavepointMetadata::from_bytes(&damaged).is_err());
        let newer = SavepointMetadata {
            format_version: SAVEPOINT_FORMAT_VERSION + 1,
            ..m
        };
        let err = SavepointMetadata::from_bytes(&newer.to_bytes().unwrap()).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    /// A version-1 document (no `schemas`, no `table`) still reads: a newer Weir reads
    /// older savepoints.
    #[test]
    fn reads_version_1() {
        let v1 = serde_json::json!({
            "format_version": 1,
            "name": "old",
            "created_ms": 5,
            "epoch": 3,
            "views": [{
                "name": "v",
                "positions": {"t": 42},
                "parallelism": 2,
                "max_parallelism": 128,
                "state": []
            }]
        });
        let bytes = to_checksummed_json(&v1).unwrap();
        let m = SavepointMetadata::from_bytes(&bytes).unwrap();
        assert_eq!(m.format_version, 1);
        let v = m.view("v").unwrap();
        assert_eq!(v.positions["t"], 42);
        assert!(v.schemas.is_empty() && !v.table);
    }
}
