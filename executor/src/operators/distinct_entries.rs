//! `DistinctEntries`: where an aggregation stores its groups' distinct sets apart from
//! the groups' values, one entry per value, under its own uid (`<agg uid>.distinct`).
//!
//! Flink keeps a `count(DISTINCT)`'s values as map state, one entry per value, so a
//! checkpoint writes what changed. Stored inside the group's value, q15's one group
//! re-encoded every distinct bidder and auction at every checkpoint, and at 100M
//! events the encoded copies nearly doubled its memory. Here a checkpoint writes the
//! values whose counts changed (see [`DistinctValues::take_changes`]) and a deletion
//! for each stored value of a group that went away.
//!
//! A set moves apart once it holds more than [`APART_AT`] values; a smaller one stays
//! inside its group's value. Apart, each stored value repeats the group key and a
//! checkpoint sorts and merges one entry per changed value: for q16's ten thousand
//! groups of a few hundred values each, that cost 20–30% of its speed and more
//! memory than writing each changed group whole, while q15's one set of millions of
//! values needed 45% less memory apart (docs/nexmark.md).
//!
//! An entry's key is the group's key (length-prefixed), the set's index and the
//! value's row encoding; its key group is the group's, so an actor that loads a group
//! loads its values too at any parallelism. Its value is the calls' counts, a zigzag
//! varint each (one byte for a mark).
//!
//! Only checkpoints carry these entries: a backend that keeps flushed state (RocksDB)
//! gets the groups' values at each flush but not their sets' entries. It is read only
//! after a restore, which first writes the checkpoint's entries of every uid into it.

use crate::aggregate::AccState;
use crate::bytes::{put_varint, Reader};
use crate::distinct_values::DistinctValues;
use crate::error::{ExecError, Result};
use crate::operators::hash_agg::GroupState;
use weir_storage::keyed_entries::{KeyedEntries, KeyedEntriesBuilder};
use weir_storage::{KeyGroup, StateBackend, StateTable};

/// A set holding more values than this is stored apart from its group.
pub const APART_AT: usize = 4096;

/// The uid suffix of an aggregation's distinct entries.
const SUFFIX: &str = ".distinct";

/// The uid under which aggregation `agg_uid` stores its distinct entries.
pub fn uid_of(agg_uid: &str) -> String {
    format!("{agg_uid}{SUFFIX}")
}

/// Whether `uid` holds the distinct entries of an aggregation among `uids`. A
/// checkpoint written before sets were stored apart holds its sets in its groups'
/// values and has no such uid: it still restores (the sets are stored apart from the
/// next checkpoint on).
pub fn is_entries_of_one_of(uid: &str, uids: &[String]) -> bool {
    uid.strip_suffix(SUFFIX)
        .is_some_and(|agg| uids.iter().any(|u| u == agg))
}

pub struct DistinctEntries {
    uid: String,
    max_parallelism: u32,
    /// Where a group's distinct sets start among its states.
    first_set: usize,
    /// Groups whose sets changed since the last checkpoint (a group removed and made
    /// again may appear twice; the second visit finds nothing left to take).
    changed_groups: Vec<Vec<u8>>,
    /// Deletions owed for the stored values of groups removed since the last
    /// checkpoint: (key group, entry key).
    retired: Vec<(u32, Vec<u8>)>,
    /// Sets larger than this move apart ([`APART_AT`]; tests set others).
    apart_at: usize,
}

impl DistinctEntries {
    pub fn new(agg_uid: &str, max_parallelism: u32, first_set: usize) -> Self {
        Self {
            uid: uid_of(agg_uid),
            max_parallelism,
            first_set,
            changed_groups: Vec::new(),
            retired: Vec::new(),
            apart_at: APART_AT,
        }
    }

    /// Sets move apart once they hold more than `n` values.
    pub fn set_apart_at(&mut self, n: usize) {
        self.apart_at = n;
    }

    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// Whether any of a group's sets holds changes not yet taken.
    pub fn has_changes(&self, accs: &[AccState]) -> bool {
        sets(self.first_set, accs).any(|(_, s)| s.has_changes())
    }

    /// After rows changed group `key` (marked dirty, so its value is written again):
    /// moves its sets that grew past the threshold apart, every value a change, and
    /// records a group whose sets had no changes before (`was_clean`) and now have:
    /// the next checkpoint visits it.
    pub fn note_changes(&mut self, key: &[u8], was_clean: bool, accs: &mut [AccState]) {
        let first = self.first_set.min(accs.len());
        for acc in &mut accs[first..] {
            if let AccState::Distinct(set) = acc {
                if !set.is_stored_apart() && set.len() > self.apart_at {
                    set.store_apart();
                }
            }
        }
        if was_clean && self.has_changes(accs) {
            self.changed_groups.push(key.to_vec());
        }
    }

    /// Group `key` is gone: every value of its sets that the last checkpoint holds
    /// is deleted at the next one.
    pub fn retire(&mut self, key: &[u8], accs: &[AccState]) {
        let kg = self.key_group(key);
        for (i, set) in sets(self.first_set, accs) {
            set.for_each_stored(|value| self.retired.push((kg, entry_key(key, i, value))));
        }
    }

    /// The entries changed since the last checkpoint: deletions for removed groups'
    /// values, then each changed group's values (a group made again after its removal
    /// writes its values after their deletions: the last write of a key wins).
    pub fn take_delta(&mut self, state: &mut StateTable<GroupState>) -> KeyedEntries {
        let mut out = KeyedEntriesBuilder::default();
        for (kg, key) in self.retired.drain(..) {
            out.push(kg, &key, None);
        }
        let first = self.first_set;
        for group in std::mem::take(&mut self.changed_groups) {
            let Some(g) = state.get_mut_unstored(&group) else {
                continue; // removed since: retired above
            };
            let kg = KeyGroup::of_key(&group, self.max_parallelism).0;
            let mut key = Vec::new();
            for (i, acc) in g.accs[first..].iter_mut().enumerate() {
                if let AccState::Distinct(set) = acc {
                    set.take_changes(|value, counts| {
                        write_entry_key(&mut key, &group, i, value);
                        out.push(kg, &key, counts);
                    });
                }
            }
        }
        out.finish()
    }

    /// Puts the stored values of the key groups `[kg_start, kg_end)` back into their
    /// groups' sets (after the groups are loaded). A set stored whole (small, or
    /// written by an earlier version) came back with its group, and moves apart
    /// when rows make it large ([`Self::note_changes`]).
    pub fn load(
        &mut self,
        backend: &dyn StateBackend,
        kg: (u32, u32),
        state: &mut StateTable<GroupState>,
    ) -> Result<()> {
        let corrupt = |what: &str| ExecError::Internal(format!("{}: {what}", self.uid));
        for (k, counts) in backend.scan(&self.uid, kg.0, kg.1)? {
            let (group, i, value) = parse_entry_key(&k.key).ok_or_else(|| corrupt("bad key"))?;
            let g = state
                .get_mut_unstored(group)
                .ok_or_else(|| corrupt("a value without its group"))?;
            let fits = match g.accs.get_mut(self.first_set + i) {
                Some(AccState::Distinct(set)) => {
                    set.is_stored_apart() && set.load_stored(value, &counts)
                }
                _ => false,
            };
            if !fits {
                return Err(corrupt("a value that does not fit its group's set"));
            }
        }
        Ok(())
    }

    fn key_group(&self, key: &[u8]) -> u32 {
        KeyGroup::of_key(key, self.max_parallelism).0
    }
}

/// A group's distinct sets, each with its index.
fn sets(first: usize, accs: &[AccState]) -> impl Iterator<Item = (usize, &DistinctValues)> {
    accs[first.min(accs.len())..]
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            AccState::Distinct(set) => Some((i, &**set)),
            _ => None,
        })
}

/// An entry's key: the group key's length (a varint), the group key, the set's index
/// (a varint) and the value. Every stored value repeats it, so it is kept short.
fn entry_key(group: &[u8], set: usize, value: &[u8]) -> Vec<u8> {
    let mut key = Vec::new();
    write_entry_key(&mut key, group, set, value);
    key
}

fn write_entry_key(out: &mut Vec<u8>, group: &[u8], set: usize, value: &[u8]) {
    out.clear();
    put_varint(out, group.len() as u64);
    out.extend_from_slice(group);
    put_varint(out, set as u64);
    out.extend_from_slice(value);
}

/// (group key, set index, value) of an entry's key.
fn parse_entry_key(key: &[u8]) -> Option<(&[u8], usize, &[u8])> {
    let mut r = Reader(key);
    let len = usize::try_from(r.varint()?).ok()?;
    let group = r.take(len)?;
    let set = usize::try_from(r.varint()?).ok()?;
    Some((group, set, r.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_keys_read_back() {
        for (group, set, value) in [
            (&b""[..], 0, &b"v"[..]),
            (b"group", 3, b""),
            (b"g", 1, b"xyz"),
        ] {
            let key = entry_key(group, set, value);
            assert_eq!(parse_entry_key(&key), Some((group, set, value)));
        }
        assert_eq!(parse_entry_key(&[9, 0, 0, 0, 1]), None, "a short key");
        let long = vec![7u8; 300];
        let key = entry_key(&long, 2, b"v");
        assert_eq!(key.len(), 2 + 300 + 1 + 1, "varint lengths");
        assert_eq!(parse_entry_key(&key), Some((&long[..], 2, &b"v"[..])));
        let uids = vec!["v.hashagg.1".to_string()];
        assert!(is_entries_of_one_of(&uid_of("v.hashagg.1"), &uids));
        assert!(!is_entries_of_one_of(&uid_of("v.hashagg.2"), &uids));
        assert!(!is_entries_of_one_of("v.hashagg.1", &uids));
    }
}
