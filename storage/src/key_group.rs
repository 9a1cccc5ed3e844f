//! Key groups: the unit of keyed state distribution.
//!
//! A key's group is fixed by `max_parallelism` when a view is created and never by the
//! current parallelism, so that state written at one parallelism can be redistributed
//! to another by moving whole key-group ranges (Flink's scheme).

use serde::{Deserialize, Serialize};

/// Default `pipeline.max-parallelism`, as in Flink for small jobs.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyGroup(pub u32);

/// Stable 64-bit hash of a key's canonical bytes. xxh3 with a fixed seed: stable across
/// processes, machines and Weir versions (unlike std's randomly seeded hashers), which is
/// what lets a savepoint be restored elsewhere.
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5745_4952)
}

impl KeyGroup {
    pub fn of_key(key: &[u8], max_parallelism: u32) -> KeyGroup {
        Self::of_hash(key_hash(key), max_parallelism)
    }

    pub fn of_hash(hash: u64, max_parallelism: u32) -> KeyGroup {
        KeyGroup((hash % max_parallelism as u64) as u32)
    }

    /// The actor (0-based) that owns this key group at `parallelism`.
    pub fn actor(self, parallelism: u32, max_parallelism: u32) -> u32 {
        (self.0 as u64 * parallelism as u64 / max_parallelism as u64) as u32
    }
}

/// The contiguous key groups one actor owns: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupRange {
    pub start: u32,
    pub end: u32,
}

impl KeyGroupRange {
    /// The range assigned to `actor` out of `parallelism` (inverse of [`KeyGroup::actor`]).
    pub fn for_actor(actor: u32, parallelism: u32, max_parallelism: u32) -> KeyGroupRange {
        let start = (actor as u64 * max_parallelism as u64).div_ceil(parallelism as u64) as u32;
        let end = ((actor as u64 + 1) * max_parallelism as u64).div_ceil(parallelism as u64) as u32;
        KeyGroupRange { start, end }
    }

    pub fn contains(&self, kg: KeyGroup) -> bool {
        kg.0 >= self.start && kg.0 < self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_partition_all_key_groups_consistently_with_actor() {
        for max_p in [1u32, 7, 128, 1000] {
            for p in 1..=max_p.min(16) {
                let mut covered = 0;
                for a in 0..p {
                    let r = KeyGroupRange::for_actor(a, p, max_p);
                    for kg in r.start..r.end {
                        assert_eq!(KeyGroup(kg).actor(p, max_p), a, "kg {kg} p {p} max {max_p}");
                    }
                    covered += r.end - r.start;
                }
                assert_eq!(covered, max_p);
            }
        }
    }

    const PINNED_WEIR_HASH: u64 = 6675556692816533895;

    #[test]
    fn hash_is_stable() {
        // Pinned values: changing the hash (or its seed) would move keys to other key
        // groups and break restoring state written by an earlier Weir.
        assert_eq!(key_hash(b"weir"), PINNED_WEIR_HASH);
        assert_eq!(
            KeyGroup::of_key(b"weir", 128),
            KeyGroup((PINNED_WEIR_HASH % 128) as u32)
        );
        assert_ne!(key_hash(b"a"), key_hash(b"b"));
        assert!(KeyGroup::of_key(b"abc", 128).0 < 128);
    }
}
