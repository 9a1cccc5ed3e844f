//! `ValueCounts`: the multiset an aggregate keeps (min / max, count(DISTINCT), ordered
//! aggregates): row-encoded values in byte order, each with its count.
//!
//! Most groups hold one value or a few: `min` / `max` over an append-only input keep
//! only the extreme, and most groups of `GROUP BY auction, day` see a handful of
//! prices. A `BTreeMap` allocates a whole leaf node (~380 bytes for 11 entries) for a
//! single value, and with millions of groups those nodes were most of an aggregation's
//! memory (q17: two per group). So a multiset starts as a sorted vector, one
//! allocation per value, and becomes a B-tree past [`SMALL_VALUES`], where inserting
//! into the vector would cost more than the node overhead saves. (`Partition` makes the
//! same choice for Top-N rows, whose keys are pairs.)

use std::collections::BTreeMap;

/// Values past which a multiset switches to a B-tree.
const SMALL_VALUES: usize = 32;

#[derive(Debug, Clone)]
pub enum ValueCounts {
    Small(Vec<(Box<[u8]>, i64)>),
    Large(BTreeMap<Box<[u8]>, i64>),
}

impl Default for ValueCounts {
    fn default() -> Self {
        ValueCounts::Small(Vec::new())
    }
}

/// Equal when they hold the same values with the same counts, whatever the layout.
impl PartialEq for ValueCounts {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl ValueCounts {
    /// Values held (whatever their count).
    pub fn len(&self) -> usize {
        match self {
            ValueCounts::Small(v) => v.len(),
            ValueCounts::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value with its count, in byte order (both ends).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], i64)> {
        let (small, large) = match self {
            ValueCounts::Small(v) => (Some(v.iter()), None),
            ValueCounts::Large(m) => (None, Some(m.iter())),
        };
        let small = small.into_iter().flatten().map(|(k, c)| (&k[..], *c));
        let large = large.into_iter().flatten().map(|(k, c)| (&k[..], *c));
        small.chain(large)
    }

    /// The smallest value.
    pub fn first(&self) -> Option<&[u8]> {
        self.iter().next().map(|(k, _)| k)
    }

    /// The largest value.
    pub fn last(&self) -> Option<&[u8]> {
        self.iter().next_back().map(|(k, _)| k)
    }

    /// Adds `count` to `value`'s count (negative: a retraction, which may arrive before
    /// its insert); a value whose count reaches zero is removed. The bytes are copied
    /// only for a value not held yet.
    pub fn add(&mut self, value: &[u8], count: i64) {
        match self {
            ValueCounts::Small(v) => {
                match v.binary_search_by(|(k, _)| (**k).cmp(value)) {
                    Ok(i) => {
                        v[i].1 += count;
                        if v[i].1 == 0 {
                            v.remove(i);
                        }
                    }
                    Err(i) => v.insert(i, (value.into(), count)),
                }
                if v.len() > SMALL_VALUES {
                    self.grow();
                }
            }
            ValueCounts::Large(m) => match m.get_mut(value) {
                Some(c) => {
                    *c += count;
                    if *c == 0 {
                        m.remove(value);
                    }
                }
                None => {
                    m.insert(value.into(), count);
                }
            },
        }
    }

    /// Adds every value of `other` with its count (two sessions merging: rare, so
    /// each value goes through [`Self::add`]).
    pub fn merge(&mut self, other: ValueCounts) {
        for (k, c) in other.iter() {
            self.add(k, c);
        }
    }

    /// Keeps only `value`, once.
    pub fn replace_with(&mut self, value: &[u8]) {
        *self = ValueCounts::Small(vec![(value.into(), 1)]);
    }

    /// Keeps only the smallest (`smallest`) or the largest value, with its count.
    pub fn keep_one_end(&mut self, smallest: bool) {
        let kept = match std::mem::take(self) {
            ValueCounts::Small(v) if smallest => v.into_iter().next(),
            ValueCounts::Small(mut v) => v.pop(),
            ValueCounts::Large(mut m) if smallest => m.pop_first(),
            ValueCounts::Large(mut m) => m.pop_last(),
        };
        *self = ValueCounts::Small(kept.into_iter().collect());
    }

    /// Appends a value known to sort after every value held (a decoded checkpoint's
    /// entries come in order); out of order it is added like any other.
    pub fn push_sorted(&mut self, value: Vec<u8>, count: i64) {
        match self {
            ValueCounts::Small(v) if v.last().is_none_or(|(k, _)| **k < *value) => {
                v.push((value.into_boxed_slice(), count));
                if v.len() > SMALL_VALUES {
                    self.grow();
                }
            }
            _ => self.add(&value, count),
        }
    }

    fn grow(&mut self) {
        if let ValueCounts::Small(v) = self {
            let m: BTreeMap<Box<[u8]>, i64> = std::mem::take(v).into_iter().collect();
            *self = ValueCounts::Large(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The multiset against a plain B-tree, through the switch to a B-tree and with
    /// counts going to zero and below.
    #[test]
    fn behaves_like_a_btree_through_the_switch() {
        let mut counts = ValueCounts::default();
        let mut model: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut x: u64 = 7;
        for step in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let value = [(x >> 58) as u8, (x >> 50) as u8 & 3];
            let count = if step % 3 == 0 { -1 } else { 1 };
            counts.add(&value, count);
            let c = model.entry(value.to_vec()).or_insert(0);
            *c += count;
            if *c == 0 {
                model.remove(&value[..]);
            }
            assert_eq!(counts.len(), model.len());
        }
        assert!(
            matches!(counts, ValueCounts::Large(_)),
            "switched to a B-tree"
        );
        let expected: Vec<(&[u8], i64)> = model.iter().map(|(k, c)| (&k[..], *c)).collect();
        assert_eq!(counts.iter().collect::<Vec<_>>(), expected);
        assert_eq!(counts.first(), model.keys().next().map(|k| &k[..]));
        assert_eq!(counts.last(), model.keys().next_back().map(|k| &k[..]));
    }

    #[test]
    fn merges_and_keeps_one_end() {
        let mut a = ValueCounts::default();
        let mut b = ValueCounts::default();
        for v in 0u8..40 {
            a.add(&[v], 1);
        }
        for v in 30u8..50 {
            b.add(&[v], if v < 35 { -1 } else { 2 });
        }
        a.merge(b);
        // 30..35 cancel out; 35..40 count 3; 40..50 count 2.
        assert_eq!(a.len(), 45);
        assert_eq!(a.iter().find(|(k, _)| k[0] == 36), Some((&[36u8][..], 3)));
        let mut low = a.clone();
        low.keep_one_end(true);
        assert_eq!(low.iter().collect::<Vec<_>>(), vec![(&[0u8][..], 1)]);
        a.keep_one_end(false);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![(&[49u8][..], 2)]);
    }

    #[test]
    fn equal_whatever_the_layout() {
        let mut small = ValueCounts::default();
        small.add(b"a", 1);
        let mut large = ValueCounts::Large(BTreeMap::new());
        large.add(b"a", 1);
        assert_eq!(small, large);
        large.add(b"b", 1);
        assert_ne!(small, large);
    }
}
