//! `DistinctValues`: the values a group's `count(DISTINCT x)` calls have seen: one set
//! per column `x`, shared by every such call over it (one per `FILTER`), with a count
//! per call.
//!
//! q15 counts distinct bidders and auctions in all and per price rank: eight calls over
//! two columns. A multiset per call held each value up to four times, every copy a
//! B-tree entry with its own key allocation (~130 bytes of memory per value and call),
//! and each row looked its value up eight times. Flink keeps one map per distinct
//! column with a count per filter; so does this. A count needs membership only, not
//! order, so the set is a hash table whose entries are one allocation each: the
//! calls' counts, then the value's row encoding. Each call's result is kept as a count
//! that changes when a value becomes present for it (its count rises above zero) or
//! absent, so an output costs no scan.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use std::sync::OnceLock;

const COUNT: usize = std::mem::size_of::<i64>();

/// Entries hash their value bytes with one process-wide random state: the table keeps
/// no hashes and needs the same function whenever it grows.
fn hash_of(value: &[u8]) -> u64 {
    static STATE: OnceLock<ahash::RandomState> = OnceLock::new();
    STATE.get_or_init(ahash::RandomState::new).hash_one(value)
}

#[derive(Debug, Clone)]
pub struct DistinctValues {
    /// Calls sharing the set: the counts each entry starts with.
    members: usize,
    /// `members` little-endian i64 counts, then the value's row encoding.
    entries: HashTable<Box<[u8]>>,
}

impl PartialEq for DistinctValues {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
            && self.len() == other.len()
            && self
                .iter()
                .all(|(v, counts)| other.find(v).is_some_and(|e| &e[..counts.len()] == counts))
    }
}

impl DistinctValues {
    pub fn new(members: usize) -> Self {
        Self {
            members,
            entries: HashTable::new(),
        }
    }

    /// Values held (each with a non-zero count for at least one call).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn split(&self) -> usize {
        self.members * COUNT
    }

    fn find(&self, value: &[u8]) -> Option<&[u8]> {
        let at = self.split();
        self.entries
            .find(hash_of(value), |e| &e[at..] == value)
            .map(|e| &e[..])
    }

    /// Every value with its calls' counts (little-endian i64s), in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let at = self.split();
        self.entries.iter().map(move |e| (&e[at..], &e[..at]))
    }

    /// Adds `delta(m)` to `value`'s count for each call `m`, and reports to `changed`
    /// each call for which the value became present (+1) or absent (-1). A retraction
    /// may arrive before its insert (from another upstream actor): its count then
    /// stands below zero, and the value is not present, until the insert.
    pub fn add(
        &mut self,
        value: &[u8],
        delta: impl Fn(usize) -> i64,
        mut changed: impl FnMut(usize, i64),
    ) {
        let (members, at) = (self.members, self.split());
        if (0..members).all(|m| delta(m) == 0) {
            return;
        }
        let mut entry =
            match self
                .entries
                .entry(hash_of(value), |e| &e[at..] == value, |e| hash_of(&e[at..]))
            {
                Entry::Occupied(e) => e,
                Entry::Vacant(e) => {
                    let mut bytes = vec![0; at + value.len()].into_boxed_slice();
                    bytes[at..].copy_from_slice(value);
                    e.insert(bytes)
                }
            };
        let counts = &mut entry.get_mut()[..at];
        for m in 0..members {
            let before = count(counts, m);
            let after = before + delta(m);
            counts[m * COUNT..(m + 1) * COUNT].copy_from_slice(&after.to_le_bytes());
            if (before > 0) != (after > 0) {
                changed(m, if after > 0 { 1 } else { -1 });
            }
        }
        if counts.iter().all(|b| *b == 0) {
            entry.remove();
        }
    }

    /// Adds every value of `other` with its counts (two sessions merging). The calls'
    /// results must then be counted again ([`Self::present`]).
    pub fn merge(&mut self, other: &DistinctValues) {
        for (value, counts) in other.iter() {
            self.add(value, |m| count(counts, m), |_, _| {});
        }
    }

    /// Values present for call `member` (count above zero).
    pub fn present(&self, member: usize) -> i64 {
        self.iter().filter(|(_, c)| count(c, member) > 0).count() as i64
    }

    /// Sets `value`'s count for call `member` (a stored multiset being read into the
    /// set: no change is reported).
    pub fn set(&mut self, value: &[u8], member: usize, n: i64) {
        let before = self.find(value).map_or(0, |e| count(e, member));
        let delta = |m| if m == member { n - before } else { 0 };
        self.add(value, delta, |_, _| {});
    }

    /// Appends the encoding: members, entries, then each entry's bytes prefixed.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&(self.members as u32).to_le_bytes());
        buf.extend_from_slice(&(self.len() as u32).to_le_bytes());
        for e in &self.entries {
            buf.extend_from_slice(&(e.len() as u32).to_le_bytes());
            buf.extend_from_slice(e);
        }
    }

    pub fn decode(r: &mut crate::bytes::Reader) -> Option<Self> {
        let members = r.u32()? as usize;
        let len = r.u32()?;
        let mut set = DistinctValues::new(members);
        let at = set.split();
        set.entries.reserve(len as usize, |e| hash_of(&e[at..]));
        for _ in 0..len {
            let e = r.prefixed()?;
            if e.len() < at {
                return None;
            }
            set.entries
                .insert_unique(hash_of(&e[at..]), e.into(), |e| hash_of(&e[at..]));
        }
        Some(set)
    }
}

/// Call `member`'s count in an entry's counts.
fn count(counts: &[u8], member: usize) -> i64 {
    let b = &counts[member * COUNT..(member + 1) * COUNT];
    i64::from_le_bytes(b.try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Against one map per call: the same counts, presence changes and results, with
    /// retractions before inserts and values that leave and come back.
    #[test]
    fn agrees_with_a_map_per_call() {
        let mut set = DistinctValues::new(3);
        let mut maps: Vec<BTreeMap<Vec<u8>, i64>> = vec![BTreeMap::new(); 3];
        let mut present = [0i64; 3];
        let mut state = 7u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let value = ((state >> 33) % 300).to_le_bytes().to_vec();
            let sign = if (state >> 20).is_multiple_of(3) {
                -1
            } else {
                1
            };
            let mask = (state >> 40) % 8;
            let delta = |m: usize| if mask & (1 << m) != 0 { sign } else { 0 };
            set.add(&value, delta, |m, d| present[m] += d);
            for (m, map) in maps.iter_mut().enumerate() {
                if mask & (1 << m) != 0 {
                    *map.entry(value.clone()).or_default() += sign;
                }
            }
        }
        for (m, map) in maps.iter().enumerate() {
            let want = map.values().filter(|c| **c > 0).count() as i64;
            assert_eq!(present[m], want, "call {m}");
            assert_eq!(set.present(m), want, "call {m}");
        }
        let held = (0..300u64)
            .filter(|v| {
                maps.iter()
                    .any(|m| m.get(&v.to_le_bytes()[..]).is_some_and(|c| *c != 0))
            })
            .count();
        assert_eq!(set.len(), held, "values at zero for every call are dropped");
        let mut buf = Vec::new();
        set.encode_into(&mut buf);
        let back = DistinctValues::decode(&mut crate::bytes::Reader(&buf)).unwrap();
        assert_eq!(back, set);
        let mut merged = DistinctValues::new(3);
        merged.merge(&set);
        merged.merge(&set);
        for (m, map) in maps.iter().enumerate() {
            let want = map.values().filter(|c| **c > 0).count() as i64;
            assert_eq!(merged.present(m), want, "doubled counts keep their sign");
        }
    }

    #[test]
    fn set_reads_a_stored_multiset() {
        let mut set = DistinctValues::new(2);
        set.set(b"a", 1, 2);
        set.set(b"b", 0, -1);
        set.set(b"a", 1, 1);
        assert_eq!((set.present(0), set.present(1), set.len()), (0, 1, 2));
        set.set(b"b", 0, 0);
        assert_eq!(set.len(), 1);
    }
}
