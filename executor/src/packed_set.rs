//! `PackedSet`: a hash set of small byte strings kept end to end in pages, found
//! through a table of 8-byte handles.
//!
//! A set of millions of short entries (q15's distinct bidders and auctions: 11 bytes
//! each) held as one `Box<[u8]>` per entry costs a 16-byte fat pointer per table slot
//! and a 16-byte allocation per entry, ~45 bytes an entry at the table's usual load.
//! Packed, an entry costs its bytes and a length byte in a 64 KiB page, and a handle
//! (page, offset) in the table: ~25 bytes. Pages are only appended to: a removed
//! entry's bytes stay until more than half of the bytes are dead, when the live
//! entries are copied into fresh pages (their handles rewritten in place, no rehash).
//!
//! The set does not know its entries' keys: every lookup passes the hash and an
//! equality test, and growth passes the hash function, as with
//! [`hashbrown::HashTable`], which it wraps.

use hashbrown::HashTable;

/// Bytes per page; an entry longer than this gets a page of its own size.
const PAGE: usize = 64 << 10;

/// Where an entry is: its page in the high 32 bits, its offset in the low 32.
pub type Handle = u64;

#[derive(Clone, Default)]
pub struct PackedSet {
    table: HashTable<Handle>,
    /// Entries, each a varint length then its bytes. Only the last page takes new
    /// entries.
    pages: Vec<Vec<u8>>,
    /// Bytes (lengths included) of entries removed since the last compaction.
    dead: usize,
    /// Bytes (lengths included) of the entries held.
    live: usize,
}

impl std::fmt::Debug for PackedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedSet")
            .field("len", &self.len())
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl PackedSet {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The entry at `handle`.
    pub fn get(&self, handle: Handle) -> &[u8] {
        entry_in(&self.pages, handle)
    }

    /// The entry at `handle`, to change in place (its length stays).
    pub fn get_mut(&mut self, handle: Handle) -> &mut [u8] {
        entry_in_mut(&mut self.pages, handle)
    }

    /// The handle of the entry with hash `hash` for which `eq` holds.
    pub fn find(&self, hash: u64, eq: impl Fn(&[u8]) -> bool) -> Option<Handle> {
        let pages = &self.pages;
        self.table.find(hash, |&h| eq(entry_in(pages, h))).copied()
    }

    /// Adds `bytes` as a new entry (the caller knows no equal one is held).
    /// `hash_of` hashes an entry, for the table's growth.
    pub fn insert(&mut self, hash: u64, bytes: &[u8], hash_of: impl Fn(&[u8]) -> u64) -> Handle {
        self.insert_with(hash, bytes.len(), |e| e.copy_from_slice(bytes), hash_of)
    }

    /// Adds a new entry of `len` bytes, zeroed, then written by `fill`.
    pub fn insert_with(
        &mut self,
        hash: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        hash_of: impl Fn(&[u8]) -> u64,
    ) -> Handle {
        let handle = self.append(len);
        fill(self.get_mut(handle));
        let pages = &self.pages;
        self.table
            .insert_unique(hash, handle, |&h| hash_of(entry_in(pages, h)));
        handle
    }

    /// Makes room for `more` entries without growing the table.
    pub fn reserve(&mut self, more: usize, hash_of: impl Fn(&[u8]) -> u64) {
        let pages = &self.pages;
        self.table.reserve(more, |&h| hash_of(entry_in(pages, h)));
    }

    /// Removes the entry at `handle`, whose hash is `hash`.
    pub fn remove(&mut self, hash: u64, handle: Handle) {
        if let Ok(slot) = self.table.find_entry(hash, |&h| h == handle) {
            slot.remove();
            let size = stored_size(self.get(handle).len());
            self.live -= size;
            self.dead += size;
            if self.dead > self.live + PAGE {
                self.compact();
            }
        }
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.table.iter().map(|&h| entry_in(&self.pages, h))
    }

    /// Every entry, to change in place, in no order.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut [u8])) {
        for &h in self.table.iter() {
            f(entry_in_mut(&mut self.pages, h));
        }
    }

    /// Keeps the entries for which `keep` (which may change them in place) holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut [u8]) -> bool) {
        let pages = &mut self.pages;
        let mut gone = 0;
        self.table.retain(|&mut h| {
            let entry = entry_in_mut(pages, h);
            let size = stored_size(entry.len());
            let kept = keep(entry);
            if !kept {
                gone += size;
            }
            kept
        });
        self.live -= gone;
        self.dead += gone;
        if self.dead > self.live + PAGE {
            self.compact();
        }
    }

    /// Appends a zeroed entry of `len` bytes.
    fn append(&mut self, len: usize) -> Handle {
        self.live += stored_size(len);
        append_to(&mut self.pages, len)
    }

    /// Copies the live entries into fresh pages and points their handles there.
    fn compact(&mut self) {
        let old = std::mem::take(&mut self.pages);
        self.dead = 0;
        for slot in self.table.iter_mut() {
            let entry = entry_in(&old, *slot);
            *slot = append_to(&mut self.pages, entry.len());
            entry_in_mut(&mut self.pages, *slot).copy_from_slice(entry);
        }
    }
}

/// Appends a zeroed entry of `len` bytes to the last page (a new one when it does
/// not fit).
fn append_to(pages: &mut Vec<Vec<u8>>, len: usize) -> Handle {
    let size = stored_size(len);
    let fits = pages.last().is_some_and(|p| p.capacity() - p.len() >= size);
    if !fits {
        pages.push(Vec::with_capacity(PAGE.max(size)));
    }
    let page_no = pages.len() - 1;
    let page = pages.last_mut().expect("a page was just made");
    let handle = (page_no as u64) << 32 | page.len() as u64;
    crate::bytes::put_varint(page, len as u64);
    page.resize(page.len() + len, 0);
    handle
}

fn split(handle: Handle) -> (usize, usize) {
    ((handle >> 32) as usize, handle as u32 as usize)
}

fn entry_in(pages: &[Vec<u8>], handle: Handle) -> &[u8] {
    let (page, at) = split(handle);
    let (len, n) = read_len(&pages[page][at..]);
    &pages[page][at + n..at + n + len]
}

fn entry_in_mut(pages: &mut [Vec<u8>], handle: Handle) -> &mut [u8] {
    let (page, at) = split(handle);
    let (len, n) = read_len(&pages[page][at..]);
    &mut pages[page][at + n..at + n + len]
}

/// An entry's length and the bytes its varint took.
fn read_len(at: &[u8]) -> (usize, usize) {
    let mut r = crate::bytes::Reader(at);
    let len = r.varint().expect("a page holds whole entries") as usize;
    (len, at.len() - r.0.len())
}

/// What an entry of `len` bytes takes in a page, its length included.
fn stored_size(len: usize) -> usize {
    let mut n = 1;
    while len >> (7 * n) != 0 {
        n += 1;
    }
    n + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hash(b: &[u8]) -> u64 {
        // Few distinct hashes: lookups must tell entries apart by `eq`.
        b.iter()
            .fold(7u64, |h, x| h.wrapping_mul(31).wrapping_add(*x as u64))
            % 61
    }

    /// Against a map: inserts (some long enough for a page of their own), changes in
    /// place, removals that trigger compactions, and a retain.
    #[test]
    fn agrees_with_a_map_through_compactions() {
        let mut set = PackedSet::default();
        let mut oracle: HashMap<Vec<u8>, u8> = HashMap::new();
        let mut below = weir_storage::test_rng::xorshift(5);
        let key = |i: u64| {
            let long = if i.is_multiple_of(97) {
                70_000
            } else {
                (i % 13) as usize
            };
            let mut k = i.to_le_bytes().to_vec();
            k.resize(8 + long, (i % 251) as u8);
            k
        };
        let find = |set: &PackedSet, k: &[u8]| set.find(hash(k), |e| &e[1..] == k);
        for round in 0..20_000u64 {
            let k = key(below(3_000));
            match (find(&set, &k), below(3)) {
                (Some(h), 0) => {
                    set.remove(hash(&k), h);
                    oracle.remove(&k);
                }
                (Some(h), _) => {
                    set.get_mut(h)[0] = round as u8;
                    oracle.insert(k, round as u8);
                }
                (None, _) => {
                    let mut e = vec![round as u8];
                    e.extend_from_slice(&k);
                    set.insert(hash(&k), &e, |e| hash(&e[1..]));
                    oracle.insert(k, round as u8);
                }
            }
            if round == 15_000 {
                set.retain(|e| e[0] % 2 == 0);
                oracle.retain(|_, v| *v % 2 == 0);
            }
        }
        assert_eq!(set.len(), oracle.len());
        for (k, v) in &oracle {
            let h = find(&set, k).expect("held");
            assert!(set.get(h)[0] == *v, "the entry's byte as last set");
        }
        let held: HashMap<Vec<u8>, u8> = set.iter().map(|e| (e[1..].to_vec(), e[0])).collect();
        assert!(held == oracle, "iter yields what the map holds");
        assert!(set.dead <= set.live + PAGE, "compacted");
    }

    #[test]
    fn stored_sizes_count_the_length_varint() {
        assert_eq!(stored_size(0), 1);
        assert_eq!(stored_size(127), 128);
        assert_eq!(stored_size(128), 130);
        assert_eq!(stored_size(70_000), 70_003);
    }
}
