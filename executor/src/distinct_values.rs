//! `DistinctValues`: the values a group's `count(DISTINCT x)` calls have seen: one set
//! per column `x`, shared by every such call over it (one per `FILTER`), with a count
//! per call.
//!
//! q15 counts distinct bidders and auctions in all and per price rank: eight calls over
//! two columns. A multiset per call held each value up to four times, every copy a
//! B-tree entry with its own key allocation (~130 bytes of memory per value and call),
//! and each row looked its value up eight times. Flink keeps one map per distinct
//! column with a count per filter; so does this. A count needs membership only, not
//! order, so the set is a hash table whose entries are one allocation each: a flag
//! byte, the calls' counts (or, over an input that only inserts, one bit per call),
//! then the value's row encoding. Each call's result is kept as a count that changes
//! when a value becomes present for it (its count rises above zero) or absent, so an
//! output costs no scan.
//!
//! A set is stored whole inside its group's value ([`DistinctValues::encode_into`]),
//! or, once large in an aggregation that checkpoints, **apart**: one stored entry per
//! value, like Flink's map state, so that a checkpoint carries only the values that
//! changed since the last one ([`DistinctValues::take_changes`];
//! `operators::distinct_entries` decides and stores). Stored whole, q15's one group
//! re-encoded every distinct bidder and auction at every checkpoint, and at 100M
//! events its encoded copies nearly doubled the memory. Apart, an entry whose counts
//! all fall to zero while the last checkpoint holds it stays as a tombstone (counts
//! zero, not present for any call) until the next checkpoint records its removal.

use crate::bytes::put_signed_varint;
use crate::packed_set::PackedSet;
use std::sync::OnceLock;

const COUNT: usize = std::mem::size_of::<i64>();
/// The flag byte that starts every entry.
const FLAGS: usize = 1;
/// Changed since the last checkpoint took the changes (its hash is in `changed`).
const CHANGED: u8 = 1;
/// The last checkpoint holds this value's entry: removing it needs a tombstone.
const IN_IMAGE: u8 = 2;
/// [`DistinctValues::take_changes`] scans the whole set when at least one entry in
/// this many changed.
const SCAN_WHEN_CHANGED: usize = 4;

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
    /// A flag byte, `members` little-endian i64 counts (or `marks`: a bit each), then
    /// the value's row encoding; packed in pages (q15's sets hold millions).
    entries: PackedSet,
    /// Stored apart, one entry per value: changes are tracked for checkpoints.
    apart: bool,
    /// Hashes of the entries flagged `CHANGED`, once each per checkpoint (an entry
    /// removed since leaves a hash that finds nothing).
    changed: Vec<u64>,
    /// Entries held only as tombstones (all counts zero).
    tombstones: usize,
    /// An entry keeps, per call, one bit (present or not) instead of a count: the
    /// set of an append-only input, where a value once present stays present (q15's
    /// two sets of millions of values are a third of the size). What a checkpoint
    /// stores is the same either way: a count per call (1 for a mark). Like `min` /
    /// `max` over such an input, it cannot take a retraction: one clears the mark.
    marks: bool,
}

impl PartialEq for DistinctValues {
    fn eq(&self, other: &Self) -> bool {
        // A mark holds presence only: against one, counts compare as present or not.
        let marks = self.marks || other.marks;
        let same = |a: &[u8], b: &[u8]| {
            (0..self.members).all(|m| {
                let (x, y) = (get(self.marks, a, m), get(other.marks, b, m));
                if marks {
                    (x > 0) == (y > 0)
                } else {
                    x == y
                }
            })
        };
        self.members == other.members
            && self.len() == other.len()
            && self
                .iter()
                .all(|(v, counts)| other.find(v).is_some_and(|c| same(counts, c)))
    }
}

impl DistinctValues {
    /// A set stored whole in its group's value.
    pub fn new(members: usize) -> Self {
        Self {
            members,
            entries: PackedSet::default(),
            apart: false,
            changed: Vec::new(),
            tombstones: 0,
            marks: false,
        }
    }

    /// The set keeps a mark per call instead of a count (see `marks`): for an input
    /// that only ever inserts. Only an empty set can switch; `false` otherwise.
    pub fn keep_marks(&mut self) -> bool {
        if self.entries.is_empty() {
            self.marks = true;
        }
        self.marks
    }

    /// A set stored apart, one entry per value, its changes tracked for checkpoints.
    pub fn stored_apart(members: usize) -> Self {
        Self {
            apart: true,
            ..Self::new(members)
        }
    }

    /// Whether entries keep a mark per call, not a count.
    pub fn keeps_marks(&self) -> bool {
        self.marks
    }

    pub fn is_stored_apart(&self) -> bool {
        self.apart
    }

    pub fn members(&self) -> usize {
        self.members
    }

    /// Values held (each with a non-zero count for at least one call).
    pub fn len(&self) -> usize {
        self.entries.len() - self.tombstones
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether values changed since the last [`Self::take_changes`].
    pub fn has_changes(&self) -> bool {
        !self.changed.is_empty()
    }

    /// Where the value starts in an entry.
    fn split(&self) -> usize {
        FLAGS
            + if self.marks {
                self.members.div_ceil(8)
            } else {
                self.members * COUNT
            }
    }

    /// A held value's counts.
    fn find(&self, value: &[u8]) -> Option<&[u8]> {
        let at = self.split();
        self.entries
            .find(hash_of(value), |e| &e[at..] == value)
            .map(|h| &self.entries.get(h)[FLAGS..at])
            .filter(|counts| !all_zero(counts))
    }

    /// Every value with its calls' counts (little-endian i64s), in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let at = self.split();
        self.entries
            .iter()
            .map(move |e| (&e[at..], &e[FLAGS..at]))
            .filter(|(_, counts)| !all_zero(counts))
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
        let (members, at, marks) = (self.members, self.split(), self.marks);
        if (0..members).all(|m| delta(m) == 0) {
            return;
        }
        let h = hash_of(value);
        let (handle, is_new) = match self.entries.find(h, |e| &e[at..] == value) {
            Some(handle) => (handle, false),
            None => {
                let fill = |e: &mut [u8]| e[at..].copy_from_slice(value);
                let handle = self
                    .entries
                    .insert_with(h, at + value.len(), fill, |e| hash_of(&e[at..]));
                (handle, true)
            }
        };
        let bytes = self.entries.get_mut(handle);
        if self.apart && bytes[0] & CHANGED == 0 {
            bytes[0] |= CHANGED;
            self.changed.push(h);
        }
        let counts = &mut bytes[FLAGS..at];
        let was_tombstone = !is_new && all_zero(counts);
        for m in 0..members {
            let before = get(marks, counts, m);
            let after = before + delta(m);
            put(marks, counts, m, after);
            if (before > 0) != (after > 0) {
                changed(m, if after > 0 { 1 } else { -1 });
            }
        }
        let is_tombstone = all_zero(counts);
        if is_tombstone && bytes[0] & IN_IMAGE == 0 {
            // Nothing stored has the value: it leaves no trace.
            self.entries.remove(h, handle);
            self.tombstones -= usize::from(was_tombstone);
            return;
        }
        match (was_tombstone, is_tombstone) {
            (false, true) => self.tombstones += 1,
            (true, false) => self.tombstones -= 1,
            _ => {}
        }
    }

    /// Adds every value of `other` with its counts (two sessions merging). The calls'
    /// results must then be counted again ([`Self::present`]).
    pub fn merge(&mut self, other: &DistinctValues) {
        for (value, counts) in other.iter() {
            self.add(value, |m| get(other.marks, counts, m), |_, _| {});
        }
    }

    /// Values present for call `member` (count above zero).
    pub fn present(&self, member: usize) -> i64 {
        let marks = self.marks;
        self.iter()
            .filter(|(_, c)| get(marks, c, member) > 0)
            .count() as i64
    }

    /// Sets `value`'s count for call `member` (a stored multiset being read into the
    /// set: no change is reported).
    pub fn set(&mut self, value: &[u8], member: usize, n: i64) {
        let before = self.find(value).map_or(0, |c| get(self.marks, c, member));
        let delta = |m| if m == member { n - before } else { 0 };
        self.add(value, delta, |_, _| {});
    }

    /// Hands every value changed since the last call to `emit`, with its counts (as
    /// stored: a zigzag varint per call, a mark counting 1), or `None` when its entry
    /// is to be deleted, and marks what it handed as held by
    /// the checkpoint being taken. A set stored apart calls this at each checkpoint.
    pub fn take_changes(&mut self, mut emit: impl FnMut(&[u8], Option<&[u8]>)) {
        let (at, members, marks) = (self.split(), self.members, self.marks);
        let mut scratch = Vec::new();
        let mut take = |e: &mut [u8]| {
            take_change(e, at, |value, region| match region {
                Some(r) => {
                    scratch.clear();
                    for m in 0..members {
                        put_signed_varint(&mut scratch, get(marks, r, m));
                    }
                    emit(value, Some(&scratch))
                }
                None => emit(value, None),
            })
        };
        let changed = std::mem::take(&mut self.changed);
        // When a good part of the set changed, one pass over it costs less than a
        // lookup per change (each a hash and a miss in a table of millions).
        if changed.len() * SCAN_WHEN_CHANGED >= self.entries.len() {
            let mut gone = 0;
            self.entries.retain(|e| {
                if e[0] & CHANGED == 0 {
                    return true;
                }
                let kept = take(e);
                gone += usize::from(!kept);
                kept
            });
            self.tombstones -= gone;
            return;
        }
        for h in changed {
            let found = self
                .entries
                .find(h, |e| e[0] & CHANGED != 0 && hash_of(&e[at..]) == h);
            let Some(handle) = found else {
                continue; // removed since it changed
            };
            if !take(self.entries.get_mut(handle)) {
                self.entries.remove(h, handle);
                self.tombstones -= 1;
            }
        }
    }

    /// Every value whose entry the last checkpoint holds (its group is removed: each
    /// needs a tombstone).
    pub fn for_each_stored(&self, mut f: impl FnMut(&[u8])) {
        let at = self.split();
        for e in self.entries.iter().filter(|e| e[0] & IN_IMAGE != 0) {
            f(&e[at..]);
        }
    }

    /// Puts back a value's entry read from a checkpoint; `false` when the counts do
    /// not fit this set.
    pub fn load_stored(&mut self, value: &[u8], counts: &[u8]) -> bool {
        let at = self.split();
        let mut bytes = vec![0; at + value.len()];
        bytes[0] = IN_IMAGE;
        let mut stored = crate::bytes::Reader(counts);
        let mut any = false;
        for m in 0..self.members {
            let Some(n) = stored.signed_varint() else {
                return false;
            };
            any |= n != 0;
            put(self.marks, &mut bytes[FLAGS..at], m, n);
        }
        if !stored.is_empty() || !any {
            return false;
        }
        // Marks keep no count below zero (a retraction ahead of its insert, stored by
        // a set of counts): such a value is held as the stored tombstone it now is.
        let tombstone = all_zero(&bytes[FLAGS..at]);
        bytes[at..].copy_from_slice(value);
        let h = hash_of(value);
        if self.entries.find(h, |e| &e[at..] == value).is_some() {
            return false;
        }
        self.entries.insert(h, &bytes, |e| hash_of(&e[at..]));
        self.tombstones += usize::from(tombstone);
        true
    }

    /// Turns a set stored whole (read from an earlier version's checkpoint) into one
    /// stored apart whose every value is a change for the next checkpoint. Returns
    /// whether it was stored whole.
    pub fn store_apart(&mut self) -> bool {
        if self.apart {
            return false;
        }
        self.apart = true;
        let at = self.split();
        let changed = &mut self.changed;
        self.entries.for_each_mut(|e| {
            e[0] = CHANGED;
            changed.push(hash_of(&e[at..]));
        });
        true
    }

    /// Appends the encoding of a set stored whole: members, entries, then each entry's
    /// counts and value, prefixed by their length.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&(self.members as u32).to_le_bytes());
        buf.extend_from_slice(&(self.len() as u32).to_le_bytes());
        let at = self.split();
        for e in self.entries.iter().filter(|e| !all_zero(&e[FLAGS..at])) {
            let value = &e[at..];
            let len = self.members * COUNT + value.len();
            buf.extend_from_slice(&(len as u32).to_le_bytes());
            for m in 0..self.members {
                buf.extend_from_slice(&get(self.marks, &e[FLAGS..at], m).to_le_bytes());
            }
            buf.extend_from_slice(value);
        }
    }

    /// Reads [`Self::encode_into`]'s encoding: a set stored whole.
    pub fn decode(r: &mut crate::bytes::Reader) -> Option<Self> {
        let members = r.u32()? as usize;
        let len = r.u32()?;
        let mut set = DistinctValues::new(members);
        let at = set.split();
        set.entries.reserve(len as usize, |e| hash_of(&e[at..]));
        let mut e = Vec::new();
        for _ in 0..len {
            let stored = r.prefixed()?;
            if stored.len() < at - FLAGS || all_zero(&stored[..at - FLAGS]) {
                return None;
            }
            e.clear();
            e.push(0);
            e.extend_from_slice(&stored);
            let h = hash_of(&e[at..]);
            set.entries.insert(h, &e, |e| hash_of(&e[at..]));
        }
        Some(set)
    }
}

/// A changed entry handed to a checkpoint's `emit`, its value with its counts or a
/// deletion, and marked as held by that checkpoint. `false`: a tombstone, whose
/// deletion is now recorded, to be dropped.
fn take_change(e: &mut [u8], at: usize, mut emit: impl FnMut(&[u8], Option<&[u8]>)) -> bool {
    e[0] = (e[0] & !CHANGED) | IN_IMAGE;
    if all_zero(&e[FLAGS..at]) {
        emit(&e[at..], None);
        false
    } else {
        emit(&e[at..], Some(&e[FLAGS..at]));
        true
    }
}

/// Call `member`'s count in an entry's counts (a mark counts 1).
fn get(marks: bool, counts: &[u8], member: usize) -> i64 {
    if marks {
        i64::from((counts[member / 8] >> (member % 8)) & 1)
    } else {
        count(counts, member)
    }
}

/// Sets call `member`'s count to `n` (a mark: set when `n` is above zero).
fn put(marks: bool, counts: &mut [u8], member: usize, n: i64) {
    if marks {
        let bit = 1 << (member % 8);
        if n > 0 {
            counts[member / 8] |= bit;
        } else {
            counts[member / 8] &= !bit;
        }
    } else {
        counts[member * COUNT..(member + 1) * COUNT].copy_from_slice(&n.to_le_bytes());
    }
}

/// Call `member`'s count in counts as stored: little-endian i64s.
fn count(counts: &[u8], member: usize) -> i64 {
    let b = &counts[member * COUNT..(member + 1) * COUNT];
    i64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// Every count zero: the value is held for no call.
fn all_zero(counts: &[u8]) -> bool {
    counts.iter().all(|b| *b == 0)
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

    /// A set stored apart under random changes, checkpointed every `every` of them
    /// into a store: the entries its changes leave there, read back into a new set,
    /// give the same set each time. Returns the set and the deletions seen.
    fn checkpointed_every(every: usize, marks: bool) -> (DistinctValues, usize) {
        let mut set = DistinctValues::stored_apart(2);
        if marks {
            set.keep_marks();
        }
        let mut stored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut state = 11u64;
        let mut deletes = 0;
        for step in 0..30_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let value = ((state >> 33) % 200).to_le_bytes().to_vec();
            let sign = if (state >> 20) % 5 < 2 { -1 } else { 1 };
            let mask = 1 + (state >> 40) % 3;
            set.add(
                &value,
                |m| if mask & (1 << m) != 0 { sign } else { 0 },
                |_, _| {},
            );
            if step % every != 0 {
                continue;
            }
            let mut handed = Vec::new();
            set.take_changes(|v, counts| handed.push((v.to_vec(), counts.map(<[u8]>::to_vec))));
            for (v, counts) in handed {
                match counts {
                    Some(c) => {
                        stored.insert(v, c);
                    }
                    None => {
                        deletes += 1;
                        assert!(
                            stored.remove(&v).is_some(),
                            "a tombstone for a stored value"
                        );
                    }
                }
            }
            assert!(!set.has_changes());
            let mut back = DistinctValues::stored_apart(2);
            if marks {
                back.keep_marks();
            }
            for (v, c) in &stored {
                assert!(back.load_stored(v, c));
            }
            assert_eq!(back, set, "every {every}, step {step}");
            assert_eq!(
                (back.present(0), back.present(1)),
                (set.present(0), set.present(1))
            );
            let mut held = Vec::new();
            set.for_each_stored(|v| held.push(v.to_vec()));
            held.sort();
            assert_eq!(held, stored.keys().cloned().collect::<Vec<_>>());
        }
        (set, deletes)
    }

    /// Checkpoints of a few changes (each looked up) and of many (the set scanned)
    /// rebuild the set; a value born and gone between two checkpoints leaves nothing;
    /// a set stored whole and turned apart hands over every value.
    #[test]
    fn changes_taken_at_checkpoints_rebuild_the_set() {
        // 200 values: 7 changes are looked up one by one, 700 make a scan.
        for (every, marks) in [(7, false), (700, false), (7, true), (700, true)] {
            let (_, deletes) = checkpointed_every(every, marks);
            assert!(deletes > 0, "values left and came back");
        }
        let (mut set, _) = checkpointed_every(700, false);
        // Born and gone between two checkpoints: no entry, no tombstone.
        set.take_changes(|_, _| {});
        set.add(b"fresh", |_| 1, |_, _| {});
        set.add(b"fresh", |_| -1, |_, _| {});
        let mut handed = 0;
        set.take_changes(|_, _| handed += 1);
        assert_eq!(handed, 0);
        let mut whole = DistinctValues::new(2);
        whole.add(b"a", |_| 1, |_, _| {});
        whole.add(b"b", |m| m as i64, |_, _| {});
        assert!(whole.store_apart() && !whole.store_apart());
        let mut handed = Vec::new();
        whole.take_changes(|v, c| handed.push((v.to_vec(), c.is_some())));
        handed.sort();
        assert_eq!(handed, vec![(b"a".to_vec(), true), (b"b".to_vec(), true)]);
    }

    /// Over inserts only, a set of marks reports what one of counts does, stores the
    /// same counts (1 for each mark) and reads them back; a non-empty set of counts
    /// does not switch.
    #[test]
    fn marks_agree_with_counts_over_inserts() {
        let (mut counts, mut marks) = (DistinctValues::new(3), DistinctValues::new(3));
        assert!(marks.keep_marks());
        let (mut present_c, mut present_m) = ([0i64; 3], [0i64; 3]);
        let mut state = 5u64;
        for _ in 0..5_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let value = ((state >> 33) % 500).to_le_bytes();
            let mask = (state >> 40) % 8;
            let delta = |m: usize| i64::from(mask & (1 << m) != 0);
            counts.add(&value, delta, |m, d| present_c[m] += d);
            marks.add(&value, delta, |m, d| present_m[m] += d);
        }
        assert_eq!(present_c, present_m);
        assert!(marks == counts, "the same values present for each call");
        for m in 0..3 {
            assert_eq!(marks.present(m), counts.present(m));
        }
        let mut whole = Vec::new();
        marks.encode_into(&mut whole);
        let back = DistinctValues::decode(&mut crate::bytes::Reader(&whole)).unwrap();
        assert!(back == marks, "stored whole as counts");
        assert!(!counts.keep_marks(), "a set with values keeps its counts");
        // A count below zero, stored by a set of counts, is a stored tombstone here.
        let mut read = DistinctValues::stored_apart(2);
        read.keep_marks();
        let mut stored = Vec::new();
        put_signed_varint(&mut stored, -1);
        put_signed_varint(&mut stored, 0);
        assert!(read.load_stored(b"x", &stored));
        assert_eq!((read.len(), read.present(0)), (0, 0));
        read.add(b"x", |m| i64::from(m == 0), |_, _| {});
        assert_eq!((read.len(), read.present(0)), (1, 1));
        let mut stored_back = Vec::new();
        read.for_each_stored(|v| stored_back.push(v.to_vec()));
        assert_eq!(stored_back, vec![b"x".to_vec()]);
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
