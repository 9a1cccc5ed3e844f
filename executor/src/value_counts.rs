//! `ValueCounts`: the multiset an aggregate keeps (min / max, count(DISTINCT), ordered
//! aggregates): row-encoded values in byte order, each with its count.
//!
//! Most groups hold one value or a few: `min` / `max` over an append-only input keep
//! only the extreme, and most groups of `GROUP BY auction, day` see a handful of
//! prices. So the layout follows the size, with millions of groups in mind (q17 keeps
//! two multisets per group):
//! - one value of at most [`INLINE_BYTES`] (a row-encoded number, date or short text)
//!   sits in the multiset itself, with no allocation: boxing it had cost two (the
//!   vector and the value), 64 bytes of heap per multiset;
//! - more values, or a longer one, go to a sorted vector behind one box (the box keeps
//!   the multiset, and so every accumulator, at 24 bytes), one allocation per value;
//! - past [`SMALL_VALUES`] they go to a B-tree, where inserting into the vector would
//!   cost more than the node overhead saves (a B-tree leaf is ~380 bytes, a waste for
//!   one value). `Partition` makes the same choice for Top-N rows, whose keys are pairs.

use std::collections::BTreeMap;

/// Values past which a multiset switches to a B-tree.
const SMALL_VALUES: usize = 32;

/// The longest value kept inline: what fits beside its count and the tags in 24 bytes
/// (a row-encoded bigint takes 9).
const INLINE_BYTES: usize = 14;

#[derive(Debug, Clone, Default)]
pub enum ValueCounts {
    #[default]
    Empty,
    /// One value of at most [`INLINE_BYTES`], in place.
    One {
        count: i64,
        len: u8,
        bytes: [u8; INLINE_BYTES],
    },
    Many(Box<Many>),
}

/// Two values or more, or one longer than [`INLINE_BYTES`].
#[derive(Debug, Clone)]
pub enum Many {
    Small(Vec<(Box<[u8]>, i64)>),
    Large(BTreeMap<Box<[u8]>, i64>),
}

/// Equal when they hold the same values with the same counts, whatever the layout.
impl PartialEq for ValueCounts {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl ValueCounts {
    /// `value` held `count` times, in the smallest layout.
    fn single(value: &[u8], count: i64) -> Self {
        if value.len() <= INLINE_BYTES {
            let mut bytes = [0; INLINE_BYTES];
            bytes[..value.len()].copy_from_slice(value);
            ValueCounts::One {
                count,
                len: value.len() as u8,
                bytes,
            }
        } else {
            ValueCounts::Many(Box::new(Many::Small(vec![(value.into(), count)])))
        }
    }

    /// Values held (whatever their count).
    pub fn len(&self) -> usize {
        match self {
            ValueCounts::Empty => 0,
            ValueCounts::One { .. } => 1,
            ValueCounts::Many(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value with its count, in byte order (both ends).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], i64)> {
        let (one, many) = match self {
            ValueCounts::Empty => (None, None),
            ValueCounts::One { count, len, bytes } => {
                (Some((&bytes[..*len as usize], *count)), None)
            }
            ValueCounts::Many(m) => (None, Some(m.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
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
        if count == 0 {
            return;
        }
        match self {
            ValueCounts::Empty => *self = Self::single(value, count),
            ValueCounts::One {
                count: held,
                len,
                bytes,
            } if bytes[..*len as usize] == *value => {
                *held += count;
                if *held == 0 {
                    *self = ValueCounts::Empty;
                }
            }
            ValueCounts::One {
                count: held,
                len,
                bytes,
            } => {
                let mut values = vec![(Box::from(&bytes[..*len as usize]), *held)];
                let at = usize::from(&*values[0].0 < value);
                values.insert(at, (value.into(), count));
                *self = ValueCounts::Many(Box::new(Many::Small(values)));
            }
            ValueCounts::Many(m) => {
                m.add(value, count);
                if m.len() == 0 {
                    *self = ValueCounts::Empty;
                }
            }
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
        *self = Self::single(value, 1);
    }

    /// Keeps only the smallest (`smallest`) or the largest value, with its count.
    pub fn keep_one_end(&mut self, smallest: bool) {
        let kept = {
            let mut ends = self.iter();
            let end = if smallest {
                ends.next()
            } else {
                ends.next_back()
            };
            end.map(|(value, count)| Self::single(value, count))
        };
        *self = kept.unwrap_or_default();
    }

    /// Appends a value known to sort after every value held (a decoded checkpoint's
    /// entries come in order); out of order it is added like any other.
    pub fn push_sorted(&mut self, value: Vec<u8>, count: i64) {
        match self {
            ValueCounts::Many(m) => m.push_sorted(value, count),
            _ => self.add(&value, count),
        }
    }
}

impl Many {
    fn len(&self) -> usize {
        match self {
            Many::Small(v) => v.len(),
            Many::Large(m) => m.len(),
        }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], i64)> {
        let (small, large) = match self {
            Many::Small(v) => (Some(v.iter()), None),
            Many::Large(m) => (None, Some(m.iter())),
        };
        let small = small.into_iter().flatten().map(|(k, c)| (&k[..], *c));
        let large = large.into_iter().flatten().map(|(k, c)| (&k[..], *c));
        small.chain(large)
    }

    fn add(&mut self, value: &[u8], count: i64) {
        match self {
            Many::Small(v) => {
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
            Many::Large(m) => match m.get_mut(value) {
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

    fn push_sorted(&mut self, value: Vec<u8>, count: i64) {
        match self {
            Many::Small(v) if v.last().is_none_or(|(k, _)| **k < *value) => {
                v.push((value.into_boxed_slice(), count));
                if v.len() > SMALL_VALUES {
                    self.grow();
                }
            }
            _ => self.add(&value, count),
        }
    }

    fn grow(&mut self) {
        if let Many::Small(v) = self {
            let m: BTreeMap<Box<[u8]>, i64> = std::mem::take(v).into_iter().collect();
            *self = Many::Large(m);
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
            matches!(&counts, ValueCounts::Many(m) if matches!(**m, Many::Large(_))),
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
        let mut large = ValueCounts::Many(Box::new(Many::Large(BTreeMap::new())));
        large.add(b"a", 1);
        assert_eq!(small, large);
        large.add(b"b", 1);
        assert_ne!(small, large);
    }

    /// A short value sits in place and a long one behind the box, whatever the way
    /// in; a multiset that loses its last value is empty again.
    #[test]
    fn one_short_value_is_kept_in_place() {
        assert_eq!(std::mem::size_of::<ValueCounts>(), 24);
        let short = [7u8; INLINE_BYTES];
        let long = [9u8; INLINE_BYTES + 1];
        let inline = |c: &ValueCounts| matches!(c, ValueCounts::One { .. });

        let mut counts = ValueCounts::default();
        counts.add(&short, 2);
        assert!(inline(&counts));
        assert_eq!(counts.iter().collect::<Vec<_>>(), vec![(&short[..], 2)]);
        counts.add(&short, -2);
        assert!(matches!(counts, ValueCounts::Empty));

        counts.replace_with(&long);
        assert!(!inline(&counts));
        assert_eq!(counts.first(), Some(&long[..]));
        counts.add(&short, 1);
        assert_eq!(counts.first(), Some(&short[..]));
        assert_eq!(counts.last(), Some(&long[..]));
        counts.keep_one_end(true);
        assert!(inline(&counts), "the short end is kept in place");
        assert_eq!(counts.iter().collect::<Vec<_>>(), vec![(&short[..], 1)]);

        let mut restored = ValueCounts::default();
        restored.push_sorted(short.to_vec(), 1);
        restored.push_sorted(long.to_vec(), 3);
        assert_eq!(
            restored.iter().collect::<Vec<_>>(),
            vec![(&short[..], 1), (&long[..], 3)]
        );
        restored.add(&short, -1);
        restored.add(&long, -3);
        assert!(restored.is_empty());
        counts.add(&[], 0);
        assert_eq!(counts.len(), 1, "adding nothing holds nothing new");
    }
}
