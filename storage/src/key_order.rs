//! The (key group, key) order of a keyed file's entries, found without chasing every
//! comparison into the key bytes.
//!
//! A checkpoint's delta arrives in its state table's hash order and is written in key
//! order. Sorting positions with a comparator that reads both keys made almost every
//! comparison two cache misses into the key column (q18's first real checkpoint at
//! p = 2: 14.7M keys, 265 MB of them), and the sort was most of a 28 s upload.
//!
//! Each entry is sorted instead as a 16-byte item: its key group, its index, and an
//! 8-byte digest of its key that orders like the key. The digest is the key's bytes
//! at the first eight positions (below the shortest key's length) where the file's
//! keys differ at all. Positions where every key holds the same byte cannot decide a
//! comparison, and fixed-width keys (row-encoded integers: a validity byte, then
//! mostly the same high bytes) put their differing bytes far apart, where a plain
//! 8-byte prefix would hold none of them. Keys whose digests are equal are compared
//! in full, so the order is exactly the bytewise one whatever the keys are.

use crate::keyed_entries::Columns;
use arrow::array::Array;

/// How far into the keys the digest looks for differing positions.
const SCANNED: usize = 64;

/// One entry to sort.
struct Item {
    digest: u64,
    key_group: u32,
    /// The entry's number, counting through the batches.
    index: u32,
}

/// The positions (`batch << 32 | row`) of the entries of `cols`, in (key group, key)
/// order, each key once: its last write (the highest position). The iterator owns
/// what it needs, so the caller's columns stay free to be moved.
pub(crate) fn last_writes_in_key_order(
    cols: &[Columns<'_>],
) -> Box<dyn Iterator<Item = u64> + Send> {
    let starts = batch_starts(cols);
    let total = *starts.last().unwrap_or(&0);
    if total > u32::MAX as usize {
        return Box::new(by_full_keys(cols).into_iter());
    }
    let positions = digest_positions(cols);
    let mut items: Vec<Item> = Vec::with_capacity(total);
    for (b, &(kg, keys, _)) in cols.iter().enumerate() {
        for row in 0..keys.len() {
            items.push(Item {
                digest: digest(keys.value(row), &positions),
                key_group: kg.value(row),
                index: (starts[b] + row) as u32,
            });
        }
    }
    let key = |index: u32| {
        let (b, row) = split(&starts, index);
        cols[b].1.value(row)
    };
    // Among equal keys the later write (the higher index) comes first and is kept.
    items.sort_unstable_by(|a, b| {
        (a.key_group, a.digest)
            .cmp(&(b.key_group, b.digest))
            .then_with(|| key(a.index).cmp(key(b.index)))
            .then(b.index.cmp(&a.index))
    });
    items.dedup_by(|later, first| {
        (later.key_group, later.digest) == (first.key_group, first.digest)
            && key(later.index) == key(first.index)
    });
    Box::new(items.into_iter().map(move |i| {
        let (b, row) = split(&starts, i.index);
        pack(b, row)
    }))
}

/// The position `batch << 32 | row` of an entry.
fn pack(batch: usize, row: usize) -> u64 {
    (batch as u64) << 32 | row as u64
}

/// (batch, row) of a position.
pub(crate) fn position(p: u64) -> (usize, usize) {
    ((p >> 32) as usize, p as u32 as usize)
}

/// (batch, row) of entry number `index`.
fn split(starts: &[usize], index: u32) -> (usize, usize) {
    let b = starts.partition_point(|&s| s <= index as usize) - 1;
    (b, index as usize - starts[b])
}

/// Where each batch's entries start in the count through all batches, and the total.
fn batch_starts(cols: &[Columns<'_>]) -> Vec<usize> {
    let mut starts = Vec::with_capacity(cols.len() + 1);
    let mut n = 0;
    for (_, keys, _) in cols {
        starts.push(n);
        n += keys.len();
    }
    starts.push(n);
    starts
}

/// The first eight positions, below the shortest key's length (and [`SCANNED`]), at
/// which some two keys differ.
fn digest_positions(cols: &[Columns<'_>]) -> Vec<usize> {
    digest_positions_of(cols.iter().flat_map(|(_, k, _)| k.iter().flatten()))
}

/// [`digest_positions`] of any keys (a frozen state table's).
pub(crate) fn digest_positions_of<'k>(mut keys: impl Iterator<Item = &'k [u8]>) -> Vec<usize> {
    let Some(first) = keys.next() else {
        return Vec::new();
    };
    let mut shortest = first.len().min(SCANNED);
    let mut differs = [false; SCANNED];
    for k in keys {
        shortest = shortest.min(k.len());
        for (i, (a, b)) in first.iter().zip(k).take(shortest).enumerate() {
            differs[i] |= a != b;
        }
    }
    (0..shortest).filter(|&i| differs[i]).take(8).collect()
}

/// The key's bytes at `positions`, big-endian: digests order like their keys, or are
/// equal.
pub(crate) fn digest(key: &[u8], positions: &[usize]) -> u64 {
    positions.iter().fold(0u64, |d, &i| d << 8 | key[i] as u64)
}

/// The same order with every comparison reading both keys: for a file of more
/// entries than an item can number.
fn by_full_keys(cols: &[Columns<'_>]) -> Vec<u64> {
    let key = |p: u64| {
        let (b, row) = position(p);
        let (kg, key, _) = cols[b];
        (kg.value(row), key.value(row))
    };
    let mut positions: Vec<u64> = cols
        .iter()
        .enumerate()
        .flat_map(|(b, c)| (0..c.1.len()).map(move |row| pack(b, row)))
        .collect();
    positions.sort_unstable_by(|&x, &y| key(x).cmp(&key(y)).then(y.cmp(&x)));
    positions.dedup_by(|later, first| key(*later) == key(*first));
    positions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed_entries::{columns, KeyedEntries, KeyedEntry};

    /// The oracle: positions sorted by full keys, each key's last write kept.
    fn check(files: &[Vec<KeyedEntry>]) {
        let files: Vec<KeyedEntries> = files
            .iter()
            .cloned()
            .map(KeyedEntries::from_entries)
            .collect();
        let batches: Vec<_> = files.iter().flat_map(|f| f.batches().iter()).collect();
        let cols: Vec<Columns<'_>> = batches.iter().map(|b| columns(b)).collect();
        let sorted: Vec<u64> = last_writes_in_key_order(&cols).collect();
        assert_eq!(sorted, by_full_keys(&cols));
    }

    #[test]
    fn digests_sort_like_full_keys() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        // Row-encoded pairs of integers: fixed width, differing bytes far apart.
        let pair = |a: u64, b: u64| {
            let mut k = vec![1u8];
            k.extend((a | 1 << 63).to_be_bytes());
            k.push(1);
            k.extend((b | 1 << 63).to_be_bytes());
            k
        };
        let pairs: Vec<KeyedEntry> = (0..40_000)
            .map(|i| {
                (
                    (next(4)) as u32,
                    pair(next(300), next(70_000)),
                    Some(vec![i as u8]),
                )
            })
            .collect();
        check(&[pairs[..25_000].to_vec(), pairs[25_000..].to_vec()]);
        // Keys of any length, some the prefix of others, many repeated.
        let strings: Vec<KeyedEntry> = (0..30_000)
            .map(|i| {
                let k = next(5_000);
                let mut key = format!("k{k}").into_bytes();
                key.truncate(1 + (k % 5) as usize);
                ((k % 3) as u32, key, (i % 7 != 0).then(|| vec![1]))
            })
            .collect();
        check(&[strings]);
        // More than eight differing positions, one key, no keys.
        let wide: Vec<KeyedEntry> = (0..5_000)
            .map(|_| (0, (0..20).map(|_| next(3) as u8).collect(), Some(vec![])))
            .collect();
        check(&[wide]);
        check(&[vec![(7, b"only".to_vec(), None)]]);
        check(&[]);
    }
}
